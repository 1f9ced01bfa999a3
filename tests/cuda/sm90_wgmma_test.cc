// wgmma on the GPU (sm_90a; skipped elsewhere): SS and RS m64nNk16 products with K-major and
// MN-major B in 128B-swizzled shared memory, attention's S = Q K^T -> P -> O = P V register chain,
// and a warp-specialized block (setmaxnreg, TMA, mbarrier, named barriers). Inputs are multiples
// of 1/8 in [-2, 2]: exact in bf16 and fp16, so every product and partial sum is exact in float32
// and the results must equal the float64 reference. A layout mistake (a swizzle, a descriptor
// field, a fragment formula of wgmma_layout.h) moves whole values and fails by far; the
// accumulators start as NaN, so an unwritten or wrongly accumulated register fails too.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <ostream>
#include <sstream>
#include <string>
#include <vector>

#include "common/dtype_convert.h"
#include "common/random.h"
#include "cuda/primitives/wgmma_layout.h"
#include "flashattn/tensor.h"
#include "test_util.h"
#if defined(FLASHATTN_HAVE_CUDA_KERNELS)
#include "sm90_wgmma_kernels.h"
#endif

namespace flashattn::testing::sm90 {

#if defined(FLASHATTN_HAVE_CUDA_KERNELS)
// For gtest's listing and failure lines (found by argument-dependent lookup, so beside the type).
void PrintTo(const WgmmaCase& c, std::ostream* os) {
  *os << (c.a_from_registers ? "RS " : "SS ") << dtype_name(c.dtype) << " m64n" << c.n << " k"
      << c.k << (c.b_major == cuda::ptx::Major::kK ? " B K-major" : " B MN-major");
}
#endif

namespace {

namespace ptx = cuda::ptx;
using ptx::Major;

#if !defined(FLASHATTN_HAVE_CUDA_KERNELS)

TEST(Sm90Wgmma, NotBuilt) { GTEST_SKIP() << "skipped: GPU kernels not built"; }

#else

constexpr int kThreads = 128;

// A row-major matrix of doubles.
struct Matrix {
  int rows = 0, cols = 0;
  std::vector<double> v;
  double at(int r, int c) const { return v[static_cast<std::size_t>(r) * cols + c]; }
  double& at(int r, int c) { return v[static_cast<std::size_t>(r) * cols + c]; }
};

// Entries k / denom for k uniform in -k_max..k_max (default: eighths in [-2, 2]).
Matrix random_matrix(int rows, int cols, std::uint64_t seed, int k_max = 16, int denom = 8) {
  Matrix m{rows, cols, std::vector<double>(static_cast<std::size_t>(rows) * cols)};
  const std::uint64_t key = splitmix64(seed);
  for (std::size_t i = 0; i < m.v.size(); ++i) {
    const int k = static_cast<int>(splitmix64(key ^ i) % (2 * k_max + 1)) - k_max;
    m.v[i] = static_cast<double>(k) / denom;
  }
  return m;
}

std::uint16_t bits_of(DType dtype, double x) {
  return dtype == DType::kBF16 ? float_to_bf16_bits(static_cast<float>(x))
                               : float_to_fp16_bits(static_cast<float>(x));
}

// The NaN of `dtype`: fills the tile bytes that no operand element occupies, so that a read of
// them turns the product into NaN.
std::uint16_t nan_bits(DType dtype) { return dtype == DType::kBF16 ? 0x7fc0 : 0x7e00; }

// `m` as a 128B-swizzled tile image (wgmma_layout.h sw128_offset): row r of the matrix is row r
// of the tile.
std::vector<std::uint16_t> sw128_image(const Matrix& m, DType dtype) {
  std::vector<std::uint16_t> img(ptx::sw128_tile_bytes(m.rows, m.cols) / 2, nan_bits(dtype));
  for (int r = 0; r < m.rows; ++r) {
    for (int c = 0; c < m.cols; ++c)
      img[ptx::sw128_offset(m.rows, r, c) / 2] = bits_of(dtype, m.at(r, c));
  }
  return img;
}

Matrix transpose(const Matrix& m) {
  Matrix t{m.cols, m.rows, std::vector<double>(m.v.size())};
  for (int r = 0; r < m.rows; ++r) {
    for (int c = 0; c < m.cols; ++c) t.at(c, r) = m.at(r, c);
  }
  return t;
}

Matrix product(const Matrix& a, const Matrix& b) {
  Matrix d{a.rows, b.cols, std::vector<double>(static_cast<std::size_t>(a.rows) * b.cols)};
  for (int r = 0; r < a.rows; ++r) {
    for (int c = 0; c < b.cols; ++c) {
      double s = 0;
      for (int k = 0; k < a.cols; ++k) s += a.at(r, k) * b.at(k, c);
      d.at(r, c) = s;
    }
  }
  return d;
}

// The RS operand: register r of k16 step j of thread t holds A(a_frag_row(t, r),
// 16 j + a_frag_col(t, r, half)), half 0 in the low 16 bits.
std::vector<std::uint32_t> a_fragments(const Matrix& a, DType dtype) {
  const int steps = a.cols / 16;
  std::vector<std::uint32_t> f(static_cast<std::size_t>(steps) * 4 * kThreads);
  for (int j = 0; j < steps; ++j) {
    for (int r = 0; r < 4; ++r) {
      for (int t = 0; t < kThreads; ++t) {
        const int row = ptx::a_frag_row(t, r);
        const std::uint32_t lo = bits_of(dtype, a.at(row, 16 * j + ptx::a_frag_col(t, r, 0)));
        const std::uint32_t hi = bits_of(dtype, a.at(row, 16 * j + ptx::a_frag_col(t, r, 1)));
        f[static_cast<std::size_t>(j * 4 + r) * kThreads + t] = lo | (hi << 16);
      }
    }
  }
  return f;
}

// Compares raw accumulators (register i of thread t at [i * 128 + t]) with `ref` through the
// accumulator layout; counts mismatches and reports the first few.
void expect_accumulators(const std::vector<float>& d, const Matrix& ref, const std::string& what) {
  ASSERT_EQ(d.size(), static_cast<std::size_t>(ref.cols / 2) * kThreads) << what;
  int bad = 0;
  for (int i = 0; i < ref.cols / 2; ++i) {
    for (int t = 0; t < kThreads; ++t) {
      const int row = ptx::acc_row(t, i), col = ptx::acc_col(t, i);
      const double got = d[static_cast<std::size_t>(i) * kThreads + t], want = ref.at(row, col);
      if (!(got == want)) {  // exact: see the file comment (NaN fails too)
        if (++bad <= 5) {
          ADD_FAILURE() << what << ": D[" << row << "][" << col << "] (thread " << t
                        << ", register " << i << ") = " << got << ", expected " << want;
        }
      }
    }
  }
  EXPECT_EQ(bad, 0) << what << ": " << bad << " of " << ref.rows * ref.cols << " elements differ";
}

class Sm90WgmmaTest : public ::testing::TestWithParam<WgmmaCase> {
 protected:
  void SetUp() override {
    FA_SKIP_WITHOUT_CUDA();
    const Status usable = wgmma_usable();
    if (usable.code() == StatusCode::kBackendUnavailable)
      GTEST_SKIP() << "skipped: " << usable.message();
    ASSERT_TRUE(usable.ok()) << usable.to_string();
  }
};

std::string case_name(const ::testing::TestParamInfo<WgmmaCase>& p) {
  const WgmmaCase& c = p.param;
  std::ostringstream os;
  os << (c.a_from_registers ? "RS" : "SS") << "_" << dtype_name(c.dtype) << "_n" << c.n << "_k"
     << c.k << (c.b_major == Major::kK ? "_BKmajor" : "_BMNmajor");
  return os.str();
}

// D = A B for one case: A [64][k]; B as stored: [n][k] for K-major (B = stored^T, as K of
// Q K^T), [k][n] for MN-major (as V of P V).
TEST_P(Sm90WgmmaTest, MatchesFloat64Product) {
  const WgmmaCase c = GetParam();
  const std::uint64_t seed = base_seed() ^ (static_cast<std::uint64_t>(c.n) << 20) ^
                             (static_cast<std::uint64_t>(c.k) << 8) ^
                             (c.a_from_registers ? 1u : 0u) ^ (c.b_major == Major::kMN ? 2u : 0u);
  SCOPED_TRACE("seed " + std::to_string(seed));
  const Matrix a = random_matrix(64, c.k, seed);
  const Matrix b_stored = c.b_major == Major::kK ? random_matrix(c.n, c.k, seed + 1)
                                                 : random_matrix(c.k, c.n, seed + 1);
  const Matrix b = c.b_major == Major::kK ? transpose(b_stored) : b_stored;
  std::vector<float> d;
  const Status st =
      run_wgmma(c, c.a_from_registers ? std::vector<std::uint16_t>{} : sw128_image(a, c.dtype),
                c.a_from_registers ? a_fragments(a, c.dtype) : std::vector<std::uint32_t>{},
                sw128_image(b_stored, c.dtype), &d);
  ASSERT_TRUE(st.ok()) << st.to_string();
  expect_accumulators(d, product(a, b), case_name({c, 0}));
}

INSTANTIATE_TEST_SUITE_P(Shapes, Sm90WgmmaTest, ::testing::ValuesIn(wgmma_cases()), case_name);

class Sm90WgmmaChainTest : public ::testing::TestWithParam<DType> {
 protected:
  void SetUp() override {
    FA_SKIP_WITHOUT_CUDA();
    const Status usable = wgmma_usable();
    if (usable.code() == StatusCode::kBackendUnavailable)
      GTEST_SKIP() << "skipped: " << usable.message();
    ASSERT_TRUE(usable.ok()) << usable.to_string();
  }
};

// S = Q K^T with d = 128 over 64 keys, P = S rounded to the dtype (as the kernel rounds P),
// O = P V with d = 128. Q and K are quarters in [-1, 1], so S is a multiple of 1/16 below 128 in
// magnitude and P a multiple of 1/16; with V in eighths, every partial sum of P V is a multiple
// of 1/128 below 2^14: exact in float32 whatever the order of accumulation.
TEST_P(Sm90WgmmaChainTest, QKtThenPVFromRegisters) {
  const DType dtype = GetParam();
  const std::uint64_t seed = base_seed() ^ 0xc4a1u ^ static_cast<std::uint64_t>(dtype);
  SCOPED_TRACE("seed " + std::to_string(seed));
  const Matrix q = random_matrix(64, 128, seed, 4, 4), k = random_matrix(64, 128, seed + 1, 4, 4);
  const Matrix v = random_matrix(64, 128, seed + 2);  // [key][d]
  Matrix p = product(q, transpose(k));
  for (double& x : p.v) x = round_to_dtype(static_cast<float>(x), dtype);
  std::vector<float> o;
  const Status st = run_attention_chain(dtype, sw128_image(q, dtype), sw128_image(k, dtype),
                                        sw128_image(v, dtype), &o);
  ASSERT_TRUE(st.ok()) << st.to_string();
  expect_accumulators(o, product(p, v), "O = P V");
}

INSTANTIATE_TEST_SUITE_P(Dtypes, Sm90WgmmaChainTest, ::testing::Values(DType::kBF16, DType::kFP16),
                         [](const ::testing::TestParamInfo<DType>& p) {
                           return std::string(dtype_name(p.param));
                         });

// 3 warpgroups: the producer drops to 24 registers, the consumers rise to 240 and hold 192
// accumulator registers each; TMA-loaded, 128B-swizzled A and B; bias through a bar.arrive /
// bar.sync pair; a swap between the consumers through a second named barrier.
TEST(Sm90WarpSpecialized, SetmaxnregTmaWgmmaNamedBarriers) {
  FA_SKIP_WITHOUT_CUDA();
  const Status usable = wgmma_usable();
  if (usable.code() == StatusCode::kBackendUnavailable)
    GTEST_SKIP() << "skipped: " << usable.message();
  ASSERT_TRUE(usable.ok()) << usable.to_string();
  const std::uint64_t seed = base_seed() ^ 0x3a9u;
  SCOPED_TRACE("seed " + std::to_string(seed));
  const Matrix a = random_matrix(128, 64, seed), b = random_matrix(384, 64, seed + 1);
  const Matrix bias_m = random_matrix(1, 384, seed + 2);
  std::vector<std::uint16_t> a_bits, b_bits;
  for (double x : a.v) a_bits.push_back(float_to_bf16_bits(static_cast<float>(x)));
  for (double x : b.v) b_bits.push_back(float_to_bf16_bits(static_cast<float>(x)));
  std::vector<float> bias(bias_m.v.begin(), bias_m.v.end());
  WarpSpecializedResult res;
  const Status st = run_warp_specialized(a_bits, b_bits, bias, &res);
  ASSERT_TRUE(st.ok()) << st.to_string();

  const Matrix bt = transpose(b);  // [64][384]
  for (int c = 0; c < 2; ++c) {
    Matrix a_c{64, 64,
               std::vector<double>(a.v.begin() + c * 64 * 64, a.v.begin() + (c + 1) * 64 * 64)};
    Matrix d = product(a_c, bt);  // [64][384]: D1 = columns 0..255, D2 = 256..383
    for (int r = 0; r < 64; ++r) {
      for (int col = 0; col < 384; ++col) d.at(r, col) += bias[col];
    }
    Matrix d1{64, 256, {}}, d2{64, 128, {}};
    for (int r = 0; r < 64; ++r) {
      for (int col = 0; col < 384; ++col) (col < 256 ? d1.v : d2.v).push_back(d.at(r, col));
    }
    const std::size_t n1 = 128 * kThreads, n2 = 64 * kThreads;
    expect_accumulators(std::vector<float>(res.d1.begin() + c * n1, res.d1.begin() + (c + 1) * n1),
                        d1, "consumer " + std::to_string(c) + " D1 (N = 256)");
    expect_accumulators(std::vector<float>(res.d2.begin() + c * n2, res.d2.begin() + (c + 1) * n2),
                        d2, "consumer " + std::to_string(c) + " D2 (N = 128)");
    // Register 0 of thread t is D1[acc_row(t, 0)][acc_col(t, 0)] of the other consumer, before
    // the bias.
    for (int t = 0; t < kThreads; ++t) {
      const int other = 1 - c;
      Matrix a_o{
          64, 64,
          std::vector<double>(a.v.begin() + other * 64 * 64, a.v.begin() + (other + 1) * 64 * 64)};
      double want = 0;
      for (int k = 0; k < 64; ++k) {
        want += a_o.at(ptx::acc_row(t, 0), k) * b.at(ptx::acc_col(t, 0), k);
      }
      ASSERT_EQ(res.swap[static_cast<std::size_t>(c) * kThreads + t], want)
          << "consumer " << c << " thread " << t << " read the wrong swap value";
    }
  }
}

#endif  // FLASHATTN_HAVE_CUDA_KERNELS

}  // namespace
}  // namespace flashattn::testing::sm90
