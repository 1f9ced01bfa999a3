// Division by a divisor fixed on the host, as a multiply-high, an add and a shift: the device's
// 32-bit division is ~20 dependent instructions (MUFU.RCP and its corrections), and flash-decode
// needs several of them before a block can issue its first load. For divisors 1 .. 2^31 - 1 and
// dividends 0 .. 2^31 - 1 (the round-up method: mul = ceil(2^(32 + shift) / d) - 2^32, shift =
// ceil(log2 d); q = (umulhi(n, mul) + n) >> shift, which cannot overflow 32 bits there).
#pragma once

#include <cstdint>

#include "common/host_device.h"

namespace flashattn {

struct FastDivmod {
  std::uint32_t d = 1, mul = 1, shift = 0;

  // Host side; d >= 1 (a divisor < 1 is taken as 1).
  static FastDivmod make(std::int64_t divisor) {
    FastDivmod f;
    f.d = static_cast<std::uint32_t>(divisor < 1 ? 1 : divisor);
    while ((std::uint64_t{1} << f.shift) < f.d) ++f.shift;
    f.mul = static_cast<std::uint32_t>(((std::uint64_t{1} << 32) * ((std::uint64_t{1} << f.shift) - f.d)) / f.d + 1);
    return f;
  }
  FA_HOST_DEVICE std::uint32_t div(std::uint32_t n) const {
#if defined(__CUDA_ARCH__)
    const std::uint32_t hi = __umulhi(n, mul);
#else
    const std::uint32_t hi = static_cast<std::uint32_t>((std::uint64_t{n} * mul) >> 32);
#endif
    return (hi + n) >> shift;
  }
  // n / d and n % d.
  FA_HOST_DEVICE void divmod(std::uint32_t n, std::uint32_t* q, std::uint32_t* r) const {
    *q = div(n);
    *r = n - *q * d;
  }
};

}  // namespace flashattn
