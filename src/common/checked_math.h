// Overflow-checked size arithmetic. Every product of sizes (element counts, byte counts,
// multiply-adds) on the host goes through these, so a huge --batch is an error that names it
// instead of a wrapped number (2^45 * 512 * 4 * 64 * 4 bytes wraps to 0 in 64 bits; a signed
// product that overflows is undefined behaviour).
#pragma once

#include <initializer_list>

namespace flashattn {

// *out = a * b; false (and *out unspecified) when the product does not fit T.
template <typename T>
[[nodiscard]] inline bool checked_mul(T a, T b, T* out) {
  return !__builtin_mul_overflow(a, b, out);
}

// *out = a + b; false when the sum does not fit T.
template <typename T>
[[nodiscard]] inline bool checked_add(T a, T b, T* out) {
  return !__builtin_add_overflow(a, b, out);
}

// *out = the product of `factors` (1 for none); false when it does not fit T. A zero factor makes
// the product 0 whatever the others are (an empty tensor of a huge batch holds no bytes).
template <typename T, typename Range>
[[nodiscard]] inline bool checked_product(const Range& factors, T* out) {
  for (T f : factors) {
    if (f == 0) {
      *out = 0;
      return true;
    }
  }
  T p = 1;
  for (T f : factors) {
    if (!checked_mul(p, f, &p)) return false;
  }
  *out = p;
  return true;
}

template <typename T>
[[nodiscard]] inline bool checked_product(std::initializer_list<T> factors, T* out) {
  return checked_product<T, std::initializer_list<T>>(factors, out);
}

}  // namespace flashattn
