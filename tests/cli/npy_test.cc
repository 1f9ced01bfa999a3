// The .npy reader/writer of the flashattn tool: round trips and every malformed case.
// (tests/CMakeLists.txt compiles the tool's npy.cc into the cli test executables.)
#include "npy.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "common/dtype_convert.h"
#include "test_util.h"

namespace flashattn::npy {
namespace {

// A deterministic, non-trivial value for element i.
float value_at(std::int64_t i) { return std::sin(0.37f * static_cast<float>(i) + 0.1f) * 3.0f; }

Array make_array(ElemType type, std::vector<std::int64_t> shape) {
  Array a;
  a.type = type;
  a.shape = std::move(shape);
  a.values.resize(static_cast<std::size_t>(a.numel()));
  for (std::size_t i = 0; i < a.values.size(); ++i) {
    a.values[i] = value_at(static_cast<std::int64_t>(i));
  }
  return a;
}

// A .npy file from a header dict text and raw data bytes, padded the way NumPy pads it.
std::string make_file(const std::string& dict, const std::string& data, int major = 1,
                      int minor = 0) {
  const std::size_t len_bytes = major == 1 ? 2 : 4;
  std::string header = dict;
  const std::size_t prefix = 8 + len_bytes;
  while ((prefix + header.size() + 1) % 64 != 0) header += ' ';
  header += '\n';
  std::string bytes = "\x93NUMPY";
  bytes += static_cast<char>(major);
  bytes += static_cast<char>(minor);
  for (std::size_t b = 0; b < len_bytes; ++b) {
    bytes += static_cast<char>((header.size() >> (8 * b)) & 0xff);
  }
  return bytes + header + data;
}

std::string f4_bytes(std::int64_t count) {
  return std::string(static_cast<std::size_t>(count) * 4, '\0');
}

std::string parse_error(const std::string& bytes) {
  Array a;
  std::string error;
  EXPECT_FALSE(parse(bytes, "x.npy", &a, &error)) << "accepted a malformed file";
  return error;
}

TEST(Npy, RoundTripFloat32IsExact) {
  const Array a = make_array(ElemType::kFloat32, {2, 3, 4, 8});
  Array b;
  std::string error;
  ASSERT_TRUE(parse(encode(a), "mem", &b, &error)) << error;
  EXPECT_EQ(b.type, ElemType::kFloat32);
  EXPECT_EQ(b.shape, a.shape);
  ASSERT_EQ(b.values.size(), a.values.size());
  for (std::size_t i = 0; i < a.values.size(); ++i) {
    ASSERT_EQ(float_bits(a.values[i]), float_bits(b.values[i])) << "element " << i;
  }
}

TEST(Npy, RoundTripFloat16RoundsToNearest) {
  const Array a = make_array(ElemType::kFloat16, {3, 5, 2, 16});
  Array b;
  std::string error;
  ASSERT_TRUE(parse(encode(a), "mem", &b, &error)) << error;
  EXPECT_EQ(b.type, ElemType::kFloat16);
  EXPECT_EQ(b.shape, a.shape);
  ASSERT_EQ(b.values.size(), a.values.size());
  for (std::size_t i = 0; i < a.values.size(); ++i) {
    ASSERT_EQ(b.values[i], round_to_dtype(a.values[i], DType::kFP16)) << "element " << i;
  }
  // Exactly representable values, infinities and NaN survive.
  Array c;
  c.type = ElemType::kFloat16;
  c.shape = {5};
  c.values = {0.5f, -1024.0f, 65504.0f, -INFINITY, NAN};
  ASSERT_TRUE(parse(encode(c), "mem", &b, &error)) << error;
  EXPECT_EQ(b.values[0], 0.5f);
  EXPECT_EQ(b.values[1], -1024.0f);
  EXPECT_EQ(b.values[2], 65504.0f);
  EXPECT_EQ(b.values[3], -INFINITY);
  EXPECT_TRUE(std::isnan(b.values[4]));
}

TEST(Npy, RoundTripThroughAFile) {
  const std::string path = ::testing::TempDir() + "npy_round_trip.npy";
  const Array a = make_array(ElemType::kFloat32, {1, 7, 3, 8});
  std::string error;
  ASSERT_TRUE(write(path, a, &error)) << error;
  Array b;
  ASSERT_TRUE(read(path, &b, &error)) << error;
  EXPECT_EQ(b.shape, a.shape);
  EXPECT_EQ(b.values, a.values);
  std::remove(path.c_str());
}

TEST(Npy, ScalarEmptyAndOneDimensionalShapes) {
  for (const std::vector<std::int64_t>& shape :
       {std::vector<std::int64_t>{}, {0}, {5}, {0, 3}, {2, 0, 4, 8}}) {
    const Array a = make_array(ElemType::kFloat32, shape);
    Array b;
    std::string error;
    ASSERT_TRUE(parse(encode(a), "mem", &b, &error)) << shape_string(shape) << ": " << error;
    EXPECT_EQ(b.shape, shape);
    EXPECT_EQ(b.values, a.values);
  }
  EXPECT_EQ(shape_string({}), "()");
  EXPECT_EQ(shape_string({5}), "(5,)");
  EXPECT_EQ(shape_string({2, 3}), "(2, 3)");
}

TEST(Npy, HeaderIsPaddedLikeNumpy) {
  const std::string bytes = encode(make_array(ElemType::kFloat32, {2, 2}));
  const std::size_t header_len =
      static_cast<unsigned char>(bytes[8]) |
      (static_cast<std::size_t>(static_cast<unsigned char>(bytes[9])) << 8);
  EXPECT_EQ((10 + header_len) % 64, 0u);
  EXPECT_EQ(bytes[10 + header_len - 1], '\n');
  EXPECT_NE(bytes.find("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 2), }"),
            std::string::npos);
}

TEST(Npy, AcceptsVersion2AndHeaderVariations) {
  // What NumPy writes for a header over 64 KiB, and what other writers produce.
  for (const std::string& dict :
       {std::string("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }"),
        std::string("{\"shape\": (2,3), \"descr\": \"<f4\", \"fortran_order\": False}"),
        std::string("  {'fortran_order':False,'shape':( 2 , 3 ,),'descr':'<f4'}  ")}) {
    for (int major : {1, 2}) {
      Array a;
      std::string error;
      ASSERT_TRUE(parse(make_file(dict, f4_bytes(6), major), "x.npy", &a, &error))
          << dict << " v" << major << ": " << error;
      EXPECT_EQ(a.shape, (std::vector<std::int64_t>{2, 3}));
    }
  }
}

struct MalformedCase {
  const char* what;
  std::string bytes;
  const char* expected;  // a fragment of the message
};

TEST(Npy, RejectsEveryMalformedFile) {
  const std::string good = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }";
  const std::string good_file = make_file(good, f4_bytes(6));
  auto with_dict = [](const std::string& dict, std::int64_t elems = 6) {
    return make_file(dict, f4_bytes(elems));
  };
  std::string v2_short_len = make_file(good, f4_bytes(6), 2);
  v2_short_len[11] = 0x7f;  // header length ~2 GiB: past the end of the file
  const std::vector<MalformedCase> cases = {
      {"empty file", "", "not a .npy file"},
      {"bad magic", "\x93NUMPZ" + good_file.substr(6), "not a .npy file"},
      {"text file", "hello, world\n", "not a .npy file"},
      {"magic only", "\x93NUMPY", "truncated"},
      {"no header length", std::string("\x93NUMPY\x01\x00", 8), "truncated"},
      {"version 3.0", make_file(good, f4_bytes(6), 3), "unsupported .npy format version 3.0"},
      {"version 1.1", make_file(good, f4_bytes(6), 1, 1), "unsupported .npy format version 1.1"},
      {"header past the end", good_file.substr(0, 40), "truncated .npy header"},
      {"v2 header past the end", v2_short_len, "truncated .npy header"},
      {"truncated data", good_file.substr(0, good_file.size() - 1), "truncated .npy data"},
      {"no data", good_file.substr(0, good_file.size() - 24), "truncated .npy data"},
      {"trailing bytes", good_file + "x", "trailing bytes"},
      {"float64", with_dict("{'descr': '<f8', 'fortran_order': False, 'shape': (2, 3), }", 12),
       "unsupported dtype '<f8' (float64"},
      {"big-endian float32",
       with_dict("{'descr': '>f4', 'fortran_order': False, 'shape': (2, 3), }"), "big-endian"},
      {"big-endian float16",
       with_dict("{'descr': '>f2', 'fortran_order': False, 'shape': (2, 3), }", 3), "big-endian"},
      {"int32", with_dict("{'descr': '<i4', 'fortran_order': False, 'shape': (2, 3), }"),
       "unsupported dtype '<i4'"},
      {"bfloat16 as void",
       with_dict("{'descr': '|V2', 'fortran_order': False, 'shape': (2, 3), }", 3),
       "unsupported dtype '|V2'"},
      {"fortran order", with_dict("{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3), }"),
       "Fortran-order"},
      {"missing shape", with_dict("{'descr': '<f4', 'fortran_order': False, }"),
       "key 'shape' is missing"},
      {"missing descr", with_dict("{'fortran_order': False, 'shape': (2, 3), }"),
       "key 'descr' is missing"},
      {"missing fortran_order", with_dict("{'descr': '<f4', 'shape': (2, 3), }"),
       "key 'fortran_order' is missing"},
      {"duplicate key",
       with_dict("{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }"),
       "appears twice"},
      {"unknown key",
       with_dict("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), 'extra': 1, }"),
       "unexpected key 'extra'"},
      {"shape not a tuple", with_dict("{'descr': '<f4', 'fortran_order': False, 'shape': (6), }"),
       "not a tuple"},
      {"shape as a list", with_dict("{'descr': '<f4', 'fortran_order': False, 'shape': [2, 3], }"),
       "expected a string, True, False or a tuple"},
      {"negative dim", with_dict("{'descr': '<f4', 'fortran_order': False, 'shape': (-2, 3), }"),
       "negative dimension"},
      {"non-integer dim",
       with_dict("{'descr': '<f4', 'fortran_order': False, 'shape': (2.5, 3), }"),
       "expected ',' or ')'"},
      {"dim overflows int64",
       with_dict("{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999,), }"),
       "overflows int64"},
      {"size overflows 64 bits",
       with_dict("{'descr': '<f4', 'fortran_order': False, 'shape': (4294967296, 4294967296), }"),
       "too large"},
      {"descr not a string", with_dict("{'descr': 4, 'fortran_order': False, 'shape': (2, 3), }"),
       "expected a string, True, False or a tuple"},
      {"fortran_order not a bool",
       with_dict("{'descr': '<f4', 'fortran_order': 0, 'shape': (2, 3), }"),
       "expected a string, True, False or a tuple"},
      {"fortran_order a string",
       with_dict("{'descr': '<f4', 'fortran_order': 'no', 'shape': (2, 3), }"),
       "'fortran_order' must be True or False"},
      {"unclosed dict", with_dict("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3)"),
       "expected ',' or '}'"},
      {"unbalanced quotes", with_dict("{'descr: '<f4', 'fortran_order': False, 'shape': (2, 3), }"),
       "unexpected key 'descr: '"},
      {"unclosed string", with_dict("{'descr': '<f4, 'fortran_order': False, 'shape': (2, 3), }"),
       "expected ',' or '}' after the value of 'descr'"},
      {"missing colon", with_dict("{'descr' '<f4', 'fortran_order': False, 'shape': (2, 3), }"),
       "expected ':' after key 'descr'"},
      {"not a dict", with_dict("('<f4', False, (2, 3))"), "expected '{'"},
      {"text after the dict",
       with_dict("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), } x"),
       "unexpected text after the header dict"},
      {"non-ASCII header",
       with_dict("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), '\xc3\xa9': 1}"),
       "non-ASCII"},
  };
  for (const MalformedCase& c : cases) {
    SCOPED_TRACE(c.what);
    const std::string error = parse_error(c.bytes);
    EXPECT_NE(error.find(c.expected), std::string::npos) << "message: " << error;
    EXPECT_EQ(error.rfind("x.npy: ", 0), 0u) << "message must start with the file name: " << error;
    EXPECT_EQ(error.find('\n'), std::string::npos) << "message must be one line: " << error;
  }
}

// Index files (cu_seqlens): int32 and int64 read exactly where integers are asked for, and only
// there; floats are refused with a hint.
TEST(Npy, IntegerFilesWhereIntegersAreRead) {
  for (ElemType type : {ElemType::kInt32, ElemType::kInt64}) {
    Array a;
    a.type = type;
    a.shape = {5};
    a.ints = {0, 17, 17, 16777217, type == ElemType::kInt32 ? -7 : (std::int64_t{1} << 40)};
    const std::string bytes = encode(a);
    EXPECT_NE(bytes.find(type == ElemType::kInt32 ? "'<i4'" : "'<i8'"), std::string::npos);
    Array b;
    std::string error;
    ASSERT_TRUE(parse(bytes, "cu.npy", &b, &error, Content::kInteger)) << error;
    EXPECT_EQ(b.type, type);
    EXPECT_TRUE(b.is_integer());
    EXPECT_EQ(b.shape, a.shape);
    EXPECT_EQ(b.ints, a.ints);
    EXPECT_TRUE(b.values.empty());
    // Where floats are read, an integer file stays an unsupported dtype.
    EXPECT_FALSE(parse(bytes, "q.npy", &b, &error));
    EXPECT_NE(error.find("unsupported dtype"), std::string::npos) << error;
  }
  Array f = make_array(ElemType::kFloat32, {3});
  Array out;
  std::string error;
  EXPECT_FALSE(parse(encode(f), "cu.npy", &out, &error, Content::kInteger));
  EXPECT_EQ(error,
            "cu.npy: unsupported dtype '<f4' (floating point; offsets are integers: save "
            "numpy.asarray(a, dtype=numpy.int32)); expected '<i4' (int32) or '<i8' (int64)");
  EXPECT_FALSE(parse(make_file("{'descr': '>i8', 'fortran_order': False, 'shape': (1,), }",
                               std::string(8, '\0')),
                     "cu.npy", &out, &error, Content::kInteger));
  EXPECT_NE(error.find("big-endian"), std::string::npos) << error;
  EXPECT_FALSE(parse(make_file("{'descr': '<i4', 'fortran_order': False, 'shape': (2,), }",
                               std::string(4, '\0')),
                     "cu.npy", &out, &error, Content::kInteger));
  EXPECT_NE(error.find("truncated .npy data"), std::string::npos) << error;
}

TEST(Npy, ReadReportsMissingFile) {
  Array a;
  std::string error;
  const std::string path = ::testing::TempDir() + "does_not_exist.npy";
  EXPECT_FALSE(read(path, &a, &error));
  EXPECT_NE(error.find(path + ": cannot open"), std::string::npos) << error;
}

// A directory opens as a stream of 0 bytes; it must be reported as what it is, not as "file has 0
// bytes".
TEST(Npy, ReadReportsADirectory) {
  Array a;
  std::string error;
  const std::string path = ::testing::TempDir();
  EXPECT_FALSE(read(path, &a, &error));
  EXPECT_EQ(error, path + ": is a directory, expected a .npy file");
}

TEST(Npy, WriteRejectsValueCountMismatch) {
  Array a = make_array(ElemType::kFloat32, {2, 2});
  a.values.pop_back();
  std::string error;
  const std::string path = ::testing::TempDir() + "mismatch.npy";
  EXPECT_FALSE(write(path, a, &error));
  EXPECT_NE(error.find("3 values for shape (2, 2)"), std::string::npos) << error;
  std::FILE* f = std::fopen(path.c_str(), "rb");
  EXPECT_EQ(f, nullptr) << "a file was written";
  if (f != nullptr) std::fclose(f);
}

}  // namespace
}  // namespace flashattn::npy
