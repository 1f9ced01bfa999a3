// A small, strict reader and writer for NumPy .npy files (format versions 1.0 and 2.0), enough for
// `flashattn run`: little-endian float32 ('<f4') and float16 ('<f2') arrays in C order, and for
// index files (cu_seqlens) int32 ('<i4') and int64 ('<i8', NumPy's default integer).
//
// File layout: the magic "\x93NUMPY", a major and a minor version byte, the header length
// (uint16 for v1.0, uint32 for v2.0, little-endian), an ASCII header holding a Python dict literal
//   {'descr': '<f4', 'fortran_order': False, 'shape': (2, 1024, 8, 128), }
// padded with spaces and a final newline, then the raw elements. Every deviation (bad magic,
// unknown version, truncated header or data, trailing bytes, a missing, repeated or unknown key,
// a dtype other than '<f4'/'<f2' (or '<i4'/'<i8' where integers are read), Fortran order, a negative or overflowing dimension) is rejected
// with a one-line message that starts with the file's name.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace flashattn::npy {

enum class ElemType { kFloat32, kFloat16, kInt32, kInt64 };

// "'<f4' (float32)" / "'<f2' (float16)" / "'<i4' (int32)" / "'<i8' (int64)".
std::string_view elem_type_name(ElemType type);

// What a reader accepts: float arrays (q, k, v, ALiBi slopes, sinks) or integer arrays (offsets).
enum class Content { kFloat, kInteger };

struct Array {
  ElemType type = ElemType::kFloat32;  // the element type in the file
  std::vector<std::int64_t> shape;     // () for a scalar
  std::vector<float> values;           // float types: row-major (C order), float16 widened exactly
  std::vector<std::int64_t> ints;      // integer types: row-major, exact (values stays empty)

  bool is_integer() const { return type == ElemType::kInt32 || type == ElemType::kInt64; }
  std::int64_t numel() const;
};

// "(2, 1024, 8, 128)", "(5,)", "()": the shape as NumPy prints it.
std::string shape_string(const std::vector<std::int64_t>& shape);

// Parses the bytes of a whole .npy file. `name` (a path) prefixes every error message.
// Returns false and sets *error on any malformed input; *out is then unspecified.
// `content` says which element types are accepted (the others are an unsupported dtype).
bool parse(std::string_view bytes, const std::string& name, Array* out, std::string* error,
           Content content = Content::kFloat);

// Reads and parses the file at `path`.
bool read(const std::string& path, Array* out, std::string* error,
          Content content = Content::kFloat);

// The bytes of a .npy v1.0 file holding `array` (values rounded to float16 for kFloat16; ints
// for the integer types, kInt32 truncated to 32 bits); the header is padded so the data starts
// at a multiple of 64 bytes, as NumPy writes it. array.values.size() (array.ints.size() for the
// integer types) must equal array.numel().
std::string encode(const Array& array);

// Writes encode(array) to `path` (created or truncated). Returns false and sets *error on failure.
bool write(const std::string& path, const Array& array, std::string* error);

}  // namespace flashattn::npy
