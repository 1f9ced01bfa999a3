#include "npy.h"

#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <optional>
#include <sstream>
#include <system_error>

#include "common/dtype_convert.h"

namespace flashattn::npy {
namespace {

constexpr char kMagic[] = "\x93NUMPY";
constexpr std::size_t kMagicBytes = 6;
// Data starts at a multiple of this many bytes in files we write (NumPy's choice since 1.14).
constexpr std::size_t kHeaderAlignment = 64;

std::uint32_t read_le(const unsigned char* p, int bytes) {
  std::uint32_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

// Shows a header fragment in messages: printable ASCII kept, the rest escaped, long text cut.
std::string quoted(std::string_view text, std::size_t limit = 40) {
  std::string s = "\"";
  for (std::size_t i = 0; i < text.size() && i < limit; ++i) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    if (c >= 0x20 && c < 0x7f && c != '"' && c != '\\') {
      s += static_cast<char>(c);
    } else {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\x%02x", c);
      s += buf;
    }
  }
  if (text.size() > limit) s += "...";
  return s + "\"";
}

// The header dict's values: a string, a bool, or a tuple of non-negative integers.
struct Value {
  enum Kind { kString, kBool, kTuple } kind = kString;
  std::string str;
  bool boolean = false;
  std::vector<std::int64_t> tuple;
};

// A recursive-descent parser for the subset of Python literal syntax NumPy writes in headers.
class HeaderParser {
 public:
  explicit HeaderParser(std::string_view text) : text_(text) {}

  // Parses the dict into its three keys; returns an error message or "".
  std::string parse(std::optional<std::string>* descr, std::optional<bool>* fortran_order,
                    std::optional<std::vector<std::int64_t>>* shape) {
    skip_space();
    if (!consume('{')) return expected("'{' opening the header dict");
    skip_space();
    while (!peek('}')) {
      std::string key;
      if (!parse_string(&key)) return expected("a quoted key");
      if (key != "descr" && key != "fortran_order" && key != "shape") {
        return "unexpected key '" + key + "' (expected exactly 'descr', 'fortran_order', 'shape')";
      }
      skip_space();
      if (!consume(':')) return expected("':' after key '" + key + "'");
      skip_space();
      Value value;
      std::string err = parse_value(&value);
      if (!err.empty()) return err + " (value of '" + key + "')";
      if (key == "descr") {
        if (descr->has_value()) return "key 'descr' appears twice";
        if (value.kind != Value::kString) return "'descr' must be a string such as '<f4'";
        *descr = value.str;
      } else if (key == "fortran_order") {
        if (fortran_order->has_value()) return "key 'fortran_order' appears twice";
        if (value.kind != Value::kBool) return "'fortran_order' must be True or False";
        *fortran_order = value.boolean;
      } else {  // "shape"
        if (shape->has_value()) return "key 'shape' appears twice";
        if (value.kind != Value::kTuple) return "'shape' must be a tuple of integers";
        *shape = value.tuple;
      }
      skip_space();
      if (consume(',')) {
        skip_space();
        continue;
      }
      if (!peek('}')) return expected("',' or '}' after the value of '" + key + "'");
    }
    consume('}');
    skip_space();
    if (pos_ != text_.size()) {
      return "unexpected text after the header dict: " + quoted(text_.substr(pos_));
    }
    if (!descr->has_value()) return "key 'descr' is missing";
    if (!fortran_order->has_value()) return "key 'fortran_order' is missing";
    if (!shape->has_value()) return "key 'shape' is missing";
    return "";
  }

 private:
  bool at_end() const { return pos_ >= text_.size(); }
  bool peek(char c) const { return !at_end() && text_[pos_] == c; }
  bool consume(char c) {
    if (!peek(c)) return false;
    ++pos_;
    return true;
  }
  void skip_space() {
    while (!at_end() && (text_[pos_] == ' ' || text_[pos_] == '\t' || text_[pos_] == '\n' ||
                         text_[pos_] == '\r')) {
      ++pos_;
    }
  }
  std::string expected(const std::string& what) const {
    return "expected " + what + " at header offset " + std::to_string(pos_) + ", found " +
           (at_end() ? std::string("the end of the header") : quoted(text_.substr(pos_), 16));
  }

  // A '...' or "..." literal without escapes (NumPy's keys and dtype strings have none).
  bool parse_string(std::string* out) {
    if (at_end() || (text_[pos_] != '\'' && text_[pos_] != '"')) return false;
    const char quote = text_[pos_];
    const std::size_t end = text_.find(quote, pos_ + 1);
    if (end == std::string_view::npos) return false;
    const std::string_view body = text_.substr(pos_ + 1, end - pos_ - 1);
    if (body.find('\\') != std::string_view::npos || body.find('\n') != std::string_view::npos) {
      return false;
    }
    *out = std::string(body);
    pos_ = end + 1;
    return true;
  }

  bool parse_word(std::string_view word) {
    if (text_.substr(pos_, word.size()) != word) return false;
    const std::size_t after = pos_ + word.size();
    if (after < text_.size() &&
        (std::isalnum(static_cast<unsigned char>(text_[after])) || text_[after] == '_')) {
      return false;
    }
    pos_ = after;
    return true;
  }

  std::string parse_int(std::int64_t* out) {
    if (at_end() || !std::isdigit(static_cast<unsigned char>(text_[pos_]))) {
      if (peek('-')) return "negative dimension at header offset " + std::to_string(pos_);
      return expected("a non-negative integer");
    }
    std::int64_t v = 0;
    while (!at_end() && std::isdigit(static_cast<unsigned char>(text_[pos_]))) {
      const int digit = text_[pos_] - '0';
      if (v > (std::numeric_limits<std::int64_t>::max() - digit) / 10) {
        return "dimension at header offset " + std::to_string(pos_) + " overflows int64";
      }
      v = v * 10 + digit;
      ++pos_;
    }
    *out = v;
    return "";
  }

  std::string parse_value(Value* v) {
    if (peek('\'') || peek('"')) {
      v->kind = Value::kString;
      return parse_string(&v->str) ? "" : expected("a closed string literal");
    }
    if (parse_word("True")) {
      v->kind = Value::kBool;
      v->boolean = true;
      return "";
    }
    if (parse_word("False")) {
      v->kind = Value::kBool;
      v->boolean = false;
      return "";
    }
    if (consume('(')) {
      v->kind = Value::kTuple;
      skip_space();
      bool need_comma_for_single = true;
      while (!peek(')')) {
        std::int64_t dim = 0;
        std::string err = parse_int(&dim);
        if (!err.empty()) return err;
        v->tuple.push_back(dim);
        skip_space();
        if (consume(',')) {
          need_comma_for_single = false;
          skip_space();
          continue;
        }
        if (!peek(')')) return expected("',' or ')' in the shape tuple");
        // "(5)" is an int in Python, not a tuple: only valid with more elements before it.
        if (v->tuple.size() == 1 && need_comma_for_single) {
          return "'shape' (" + std::to_string(dim) + ") is not a tuple; expected (" +
                 std::to_string(dim) + ",)";
        }
      }
      consume(')');
      return "";
    }
    return expected("a string, True, False or a tuple");
  }

  std::string_view text_;
  std::size_t pos_ = 0;
};

}  // namespace

std::string_view elem_type_name(ElemType type) {
  switch (type) {
    case ElemType::kFloat32: return "'<f4' (float32)";
    case ElemType::kFloat16: return "'<f2' (float16)";
    case ElemType::kInt32: return "'<i4' (int32)";
    case ElemType::kInt64: return "'<i8' (int64)";
  }
  return "?";
}

namespace {

std::uint64_t elem_bytes_of(ElemType type) {
  switch (type) {
    case ElemType::kFloat16: return 2;
    case ElemType::kInt64: return 8;
    case ElemType::kFloat32:
    case ElemType::kInt32: return 4;
  }
  return 4;
}

std::uint64_t read_le64(const unsigned char* p) {
  std::uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

}  // namespace

std::int64_t Array::numel() const {
  std::int64_t n = 1;
  for (std::int64_t d : shape) n *= d;
  return n;
}

std::string shape_string(const std::vector<std::int64_t>& shape) {
  std::string s = "(";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (i > 0) s += ", ";
    s += std::to_string(shape[i]);
  }
  if (shape.size() == 1) s += ",";
  return s + ")";
}

bool parse(std::string_view bytes, const std::string& name, Array* out, std::string* error,
           Content content) {
  auto fail = [&](const std::string& msg) {
    *error = name + ": " + msg;
    return false;
  };
  const auto* data = reinterpret_cast<const unsigned char*>(bytes.data());
  if (bytes.size() < kMagicBytes || std::memcmp(data, kMagic, kMagicBytes) != 0) {
    return fail("not a .npy file: expected the magic bytes \"\\x93NUMPY\", found " +
                quoted(bytes.substr(0, kMagicBytes)) +
                (bytes.size() < kMagicBytes
                     ? " (file has " + std::to_string(bytes.size()) + " bytes)"
                     : ""));
  }
  if (bytes.size() < kMagicBytes + 2) return fail("truncated .npy file: no format version");
  const int major = data[6], minor = data[7];
  if ((major != 1 && major != 2) || minor != 0) {
    return fail("unsupported .npy format version " + std::to_string(major) + "." +
                std::to_string(minor) + " (expected 1.0 or 2.0)");
  }
  const std::size_t len_bytes = major == 1 ? 2 : 4;
  const std::size_t prefix = kMagicBytes + 2 + len_bytes;
  if (bytes.size() < prefix) return fail("truncated .npy file: no header length");
  const std::uint64_t header_len = read_le(data + 8, static_cast<int>(len_bytes));
  if (bytes.size() - prefix < header_len) {
    return fail("truncated .npy header: the header length says " + std::to_string(header_len) +
                " bytes but the file has " + std::to_string(bytes.size() - prefix) +
                " after the prefix");
  }
  const std::string_view header = bytes.substr(prefix, header_len);
  for (char c : header) {
    if (static_cast<unsigned char>(c) >= 0x80 || c == '\0') {
      return fail("bad .npy header: non-ASCII byte in the header");
    }
  }

  std::optional<std::string> descr;
  std::optional<bool> fortran_order;
  std::optional<std::vector<std::int64_t>> shape;
  const std::string err = HeaderParser(header).parse(&descr, &fortran_order, &shape);
  if (!err.empty()) return fail("bad .npy header: " + err);

  if (content == Content::kInteger) {
    if (*descr == "<i4") {
      out->type = ElemType::kInt32;
    } else if (*descr == "<i8") {
      out->type = ElemType::kInt64;
    } else {
      std::string why;
      if (descr->size() == 3 && (*descr)[0] == '>' && ((*descr)[1] == 'i')) {
        why = " (big-endian; save with a.astype('<" + descr->substr(1) + "'))";
      } else if (!descr->empty() && descr->find('f') != std::string::npos) {
        why = " (floating point; offsets are integers: save numpy.asarray(a, dtype=numpy.int32))";
      }
      return fail("unsupported dtype '" + *descr + "'" + why +
                  "; expected '<i4' (int32) or '<i8' (int64)");
    }
  } else if (*descr == "<f4") {
    out->type = ElemType::kFloat32;
  } else if (*descr == "<f2") {
    out->type = ElemType::kFloat16;
  } else {
    std::string why;
    if (descr->size() == 3 && (*descr)[0] == '>' &&
        (descr->substr(1) == "f4" || descr->substr(1) == "f2")) {
      why = " (big-endian; save with a.astype('<" + descr->substr(1) + "'))";
    } else if (*descr == "<f8" || *descr == "f8") {
      why = " (float64; convert with a.astype(numpy.float32))";
    }
    return fail("unsupported dtype '" + *descr + "'" + why +
                "; expected '<f4' (float32) or '<f2' (float16)");
  }
  if (*fortran_order) {
    return fail(
        "Fortran-order (column-major) arrays are not supported; save a C-order array "
        "(numpy.ascontiguousarray(a))");
  }

  const std::uint64_t elem_bytes = elem_bytes_of(out->type);
  std::uint64_t numel = 1;
  for (std::int64_t d : *shape) {
    const auto ud = static_cast<std::uint64_t>(d);
    if (ud != 0 && numel > std::numeric_limits<std::uint64_t>::max() / elem_bytes / ud) {
      return fail("shape " + shape_string(*shape) + " is too large (more than 2^64 bytes)");
    }
    numel *= ud;
  }
  const std::uint64_t data_bytes = numel * elem_bytes;
  const std::uint64_t available = bytes.size() - prefix - header_len;
  if (available < data_bytes) {
    return fail("truncated .npy data: shape " + shape_string(*shape) + " of " +
                std::string(elem_type_name(out->type)) + " needs " + std::to_string(data_bytes) +
                " bytes, the file has " + std::to_string(available));
  }
  if (available > data_bytes) {
    return fail("unexpected " + std::to_string(available - data_bytes) +
                " trailing bytes after the data of shape " + shape_string(*shape));
  }

  out->shape = *shape;
  out->values.clear();
  out->ints.clear();
  const unsigned char* p = data + prefix + header_len;
  if (out->is_integer()) {
    out->ints.resize(numel);
    for (std::uint64_t i = 0; i < numel; ++i) {
      out->ints[i] = out->type == ElemType::kInt32
                         ? static_cast<std::int32_t>(read_le(p + 4 * i, 4))
                         : static_cast<std::int64_t>(read_le64(p + 8 * i));
    }
    return true;
  }
  out->values.resize(numel);
  if (out->type == ElemType::kFloat32) {
    for (std::uint64_t i = 0; i < numel; ++i) out->values[i] = bits_float(read_le(p + 4 * i, 4));
  } else {
    for (std::uint64_t i = 0; i < numel; ++i) {
      out->values[i] = fp16_bits_to_float(static_cast<std::uint16_t>(read_le(p + 2 * i, 2)));
    }
  }
  return true;
}

bool read(const std::string& path, Array* out, std::string* error, Content content) {
  // An ifstream opens a directory and reads 0 bytes from it ("not a .npy file ... 0 bytes").
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    *error = path + ": is a directory, expected a .npy file";
    return false;
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    *error = path + ": cannot open: " + std::strerror(errno);
    return false;
  }
  std::ostringstream contents;
  contents << in.rdbuf();
  if (in.bad()) {
    *error = path + ": read error";
    return false;
  }
  const std::string bytes = contents.str();
  return parse(bytes, path, out, error, content);
}

std::string encode(const Array& array) {
  const std::string descr(elem_type_name(array.type).substr(1, 3));  // "<f4", "<i8", ...
  std::string header = "{'descr': '" + descr +
                       "', 'fortran_order': False, 'shape': " + shape_string(array.shape) + ", }";
  const std::size_t prefix = kMagicBytes + 2 + 2;
  std::size_t total = prefix + header.size() + 1;  // + the final newline
  total = (total + kHeaderAlignment - 1) / kHeaderAlignment * kHeaderAlignment;
  header.append(total - prefix - header.size() - 1, ' ');
  header += '\n';

  const std::size_t elem_bytes = elem_bytes_of(array.type);
  std::string bytes;
  bytes.reserve(total + static_cast<std::size_t>(array.numel()) * elem_bytes);
  bytes.append(kMagic, kMagicBytes);
  bytes += static_cast<char>(1);
  bytes += static_cast<char>(0);
  bytes += static_cast<char>(header.size() & 0xff);
  bytes += static_cast<char>((header.size() >> 8) & 0xff);
  bytes += header;
  for (std::int64_t v : array.ints) {
    if (!array.is_integer()) break;
    const auto bits = static_cast<std::uint64_t>(v);
    for (std::size_t b = 0; b < elem_bytes; ++b) {
      bytes += static_cast<char>((bits >> (8 * b)) & 0xff);
    }
  }
  for (float v : array.values) {
    if (array.is_integer()) break;
    const std::uint32_t bits =
        array.type == ElemType::kFloat32 ? float_bits(v) : float_to_fp16_bits(v);
    for (std::size_t b = 0; b < elem_bytes; ++b) {
      bytes += static_cast<char>((bits >> (8 * b)) & 0xff);
    }
  }
  return bytes;
}

bool write(const std::string& path, const Array& array, std::string* error) {
  const std::size_t count = array.is_integer() ? array.ints.size() : array.values.size();
  if (static_cast<std::int64_t>(count) != array.numel()) {
    *error = path + ": internal error: " + std::to_string(count) + " values for shape " +
             shape_string(array.shape);
    return false;
  }
  const std::string bytes = encode(array);
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) {
    *error = path + ": cannot open for writing: " + std::strerror(errno);
    return false;
  }
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  out.close();
  if (!out) {
    *error = path + ": write failed (disk full?)";
    return false;
  }
  return true;
}

}  // namespace flashattn::npy
