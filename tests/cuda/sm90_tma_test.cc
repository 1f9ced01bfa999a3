// TMA, mbarrier, stmatrix and elect.sync on the GPU (sm_90; skipped elsewhere). Tensors hold
// distinct 16-bit ids (1, 2, ...), shared memory and outputs start poisoned, and every element
// is checked against where the 128B swizzle (wgmma_layout.h sw128_offset) or the instruction's
// documented layout puts it; out-of-bounds box rows must read as 0 and must not be written.
#include <cuda.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "cuda/common/runtime.h"
#include "cuda/common/tensor_map.h"
#include "cuda/primitives/wgmma_layout.h"
#include "flashattn/tensor.h"
#include "test_util.h"
#if defined(FLASHATTN_HAVE_CUDA_KERNELS)
#include "sm90_tma_kernels.h"
#endif

namespace flashattn::testing::sm90 {
namespace {

namespace ptx = cuda::ptx;

#if !defined(FLASHATTN_HAVE_CUDA_KERNELS)

TEST(Sm90Tma, NotBuilt) { GTEST_SKIP() << "skipped: GPU kernels not built"; }

#else

constexpr std::uint16_t kPoison = 0xAAAA;  // never an id (ids stay below 40000) nor 0
constexpr int kBoxBytes = 64 * 64 * 2;     // one {64, 64} box of 16-bit elements

class Sm90TmaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    FA_SKIP_WITHOUT_CUDA();
    const Status usable = tma_usable();
    if (usable.code() == StatusCode::kBackendUnavailable)
      GTEST_SKIP() << "skipped: " << usable.message();
    ASSERT_TRUE(usable.ok()) << usable.to_string();
  }
};

// A BSHD tensor [2][50][3][128] whose rows are padded (row stride 448 elements, batch stride
// 50 * 448 + 64), as a strided view of a larger buffer would be; the buffer has a guard of
// kGuard elements after the last batch. Element (b, s, h, d) holds id(b, s, h, d), the padding
// and the guard hold `fill`.
struct Bshd {
  static constexpr int kB = 2, kS = 50, kH = 3, kD = 128;
  static constexpr std::int64_t kRowStride = 448, kHeadStride = 128;
  static constexpr std::int64_t kBatchStride = kS * kRowStride + 64;
  static constexpr std::int64_t kGuard = 4096;
  static constexpr std::int64_t kElems = kB * kBatchStride + kGuard;

  static std::int64_t offset(int b, int s, int h, int d) {
    return b * kBatchStride + s * kRowStride + h * kHeadStride + d;
  }
  static std::uint16_t id(int b, int s, int h, int d) {
    return static_cast<std::uint16_t>(1 + ((b * kS + s) * kH + h) * kD + d);
  }
  static std::vector<std::uint16_t> make(bool with_ids, std::uint16_t fill) {
    std::vector<std::uint16_t> v(kElems, fill);
    if (!with_ids) return v;
    for (int b = 0; b < kB; ++b) {
      for (int s = 0; s < kS; ++s) {
        for (int h = 0; h < kH; ++h) {
          for (int d = 0; d < kD; ++d) v[offset(b, s, h, d)] = id(b, s, h, d);
        }
      }
    }
    return v;
  }
  // TMA's view: dims innermost first {d, s, h, b}; box {64 columns, 64 rows, 1, 1}.
  static cuda::TmaTensor view() {
    cuda::TmaTensor t;
    t.rank = 4;
    const std::int64_t dims[4] = {kD, kS, kH, kB};
    const std::int64_t strides[4] = {1, kRowStride, kHeadStride, kBatchStride};
    for (int i = 0; i < 4; ++i) {
      t.dims[i] = dims[i];
      t.strides[i] = strides[i];
      t.box[i] = i < 2 ? 64 : 1;
    }
    return t;
  }
};

// A device copy of host data, read back with get().
struct DeviceArray {
  cuda::DeviceBuffer buf;
  std::size_t count = 0;
  Status put(const std::vector<std::uint16_t>& host) {
    count = host.size();
    Status st = buf.allocate(count * 2, "tensor");
    if (!st.ok()) return st;
    return cuda::status_from_cuda(
        cudaMemcpy(buf.data(), host.data(), count * 2, cudaMemcpyHostToDevice), "upload");
  }
  std::vector<std::uint16_t> get() const {
    std::vector<std::uint16_t> host(count);
    EXPECT_EQ(cudaMemcpy(host.data(), buf.data(), count * 2, cudaMemcpyDeviceToHost), cudaSuccess);
    return host;
  }
};

TmaBoxes boxes_of(int rank, std::initializer_list<std::vector<int> > coords) {
  TmaBoxes b;
  b.rank = rank;
  b.box_bytes = kBoxBytes;
  for (const std::vector<int>& c : coords) {
    for (int i = 0; i < rank; ++i) b.coords[b.count][i] = c[i];
    ++b.count;
  }
  return b;
}

// Checks a box's shared image against want(r, c) for its 64 x 64 elements, at smem offset box *
// 8 KB: the 128B swizzle puts (r, c) at sw128_offset(64, r, c).
template <class Want>
void expect_box(const std::vector<std::uint16_t>& smem, int box, Want want,
                const std::string& what) {
  int bad = 0;
  for (int r = 0; r < 64; ++r) {
    for (int c = 0; c < 64; ++c) {
      const std::uint16_t got = smem[(box * kBoxBytes + ptx::sw128_offset(64, r, c)) / 2];
      const std::uint16_t expected = want(r, c);
      if (got != expected && ++bad <= 5) {
        ADD_FAILURE() << what << " box " << box << " (" << r << ", " << c << "): got " << got
                      << ", expected " << expected;
      }
    }
  }
  EXPECT_EQ(bad, 0) << what << " box " << box;
}

// Q-tile loads from a padded BSHD tensor: two boxes make a 64 x 128 tile (d 0-63 and 64-127 of
// batch 1, head 2), one box starts at row 32 so that rows 50-95 lie past the sequence: zeros.
TEST_F(Sm90TmaTest, Load4dBshdSwizzled128BWithZeroFilledTail) {
  DeviceArray x;
  ASSERT_TRUE(x.put(Bshd::make(true, kPoison)).ok());
  alignas(128) CUtensorMap map;
  Status st = cuda::make_tensor_map(&map, DType::kBF16, x.buf.data(), Bshd::view(),
                                    cuda::TmaSwizzle::k128B);
  ASSERT_TRUE(st.ok()) << st.to_string();
  const TmaBoxes boxes = boxes_of(4, {{0, 0, 2, 1}, {64, 0, 2, 1}, {64, 32, 0, 0}});
  std::vector<std::uint16_t> smem;
  st = run_tma_load(map, boxes, &smem);
  ASSERT_TRUE(st.ok()) << st.to_string();
  ASSERT_EQ(smem.size(), 3u * kBoxBytes / 2);
  for (int box = 0; box < boxes.count; ++box) {
    const int* c0 = boxes.coords[box];
    expect_box(
        smem, box,
        [&](int r, int c) -> std::uint16_t {
          const int s = c0[1] + r;
          return s < Bshd::kS ? Bshd::id(c0[3], s, c0[2], c0[0] + c) : 0;
        },
        "4D load");
  }
}

// A 2D fp16 tensor [100][64]; the box at row 64 covers rows 64-127, of which 36 exist.
TEST_F(Sm90TmaTest, Load2dTailRowsAreZero) {
  constexpr int kRows = 100;
  std::vector<std::uint16_t> host(kRows * 64);
  for (std::size_t i = 0; i < host.size(); ++i) host[i] = static_cast<std::uint16_t>(i + 1);
  DeviceArray x;
  ASSERT_TRUE(x.put(host).ok());
  cuda::TmaTensor t;
  t.rank = 2;
  t.dims[0] = 64;
  t.dims[1] = kRows;
  t.strides[0] = 1;
  t.strides[1] = 64;
  t.box[0] = 64;
  t.box[1] = 64;
  alignas(128) CUtensorMap map;
  Status st = cuda::make_tensor_map(&map, DType::kFP16, x.buf.data(), t, cuda::TmaSwizzle::k128B);
  ASSERT_TRUE(st.ok()) << st.to_string();
  std::vector<std::uint16_t> smem;
  st = run_tma_load(map, boxes_of(2, {{0, 64}}), &smem);
  ASSERT_TRUE(st.ok()) << st.to_string();
  expect_box(
      smem, 0,
      [&](int r, int c) -> std::uint16_t { return 64 + r < kRows ? host[(64 + r) * 64 + c] : 0; },
      "2D load");
}

// Shared memory written with ordinary stores (the swizzled image of known values), then stored by
// TMA into a poisoned padded BSHD tensor: exactly the boxes' in-bounds elements change; rows past
// the sequence, the row padding and the guard after the tensor keep the poison.
TEST_F(Sm90TmaTest, Store4dFromGenericWritesSkipsOutOfBounds) {
  DeviceArray y;
  ASSERT_TRUE(y.put(Bshd::make(false, kPoison)).ok());
  alignas(128) CUtensorMap map;
  Status st = cuda::make_tensor_map(&map, DType::kBF16, y.buf.data(), Bshd::view(),
                                    cuda::TmaSwizzle::k128B);
  ASSERT_TRUE(st.ok()) << st.to_string();
  const TmaBoxes boxes = boxes_of(4, {{0, 0, 1, 0}, {64, 0, 1, 0}, {0, 32, 2, 1}});
  auto value = [](int box, int r, int c) {
    return static_cast<std::uint16_t>(1 + box * 4096 + r * 64 + c);
  };
  std::vector<std::uint16_t> image(boxes.count * kBoxBytes / 2, 0);
  for (int box = 0; box < boxes.count; ++box) {
    for (int r = 0; r < 64; ++r) {
      for (int c = 0; c < 64; ++c) {
        image[(box * kBoxBytes + ptx::sw128_offset(64, r, c)) / 2] = value(box, r, c);
      }
    }
  }
  st = run_tma_store(map, boxes, image);
  ASSERT_TRUE(st.ok()) << st.to_string();
  std::vector<std::uint16_t> want = Bshd::make(false, kPoison);
  for (int box = 0; box < boxes.count; ++box) {
    const int* c0 = boxes.coords[box];
    for (int r = 0; r < 64 && c0[1] + r < Bshd::kS; ++r) {
      for (int c = 0; c < 64; ++c)
        want[Bshd::offset(c0[3], c0[1] + r, c0[2], c0[0] + c)] = value(box, r, c);
    }
  }
  const std::vector<std::uint16_t> got = y.get();
  int bad = 0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    if (got[i] != want[i] && ++bad <= 5) {
      ADD_FAILURE() << "element " << i << ": got " << got[i] << ", expected " << want[i];
    }
  }
  EXPECT_EQ(bad, 0);
}

// Load through a 5D view of the BSHD tensor (d split into 2 halves of 64: {64, 2, s, h, b}), store
// the same shared memory through a 3D view of another tensor [2][80][128] at row 20: rows 50-63
// of the load were zero-filled, rows 80-83 of the store are past the tensor.
TEST_F(Sm90TmaTest, RoundTrip5dLoadTo3dStore) {
  DeviceArray x, y;
  ASSERT_TRUE(x.put(Bshd::make(true, kPoison)).ok());
  constexpr int kYRows = 80, kYBatch = 2;
  ASSERT_TRUE(y.put(std::vector<std::uint16_t>(kYBatch * kYRows * 128 + 4096, kPoison)).ok());
  cuda::TmaTensor in;
  in.rank = 5;
  const std::int64_t in_dims[5] = {64, 2, Bshd::kS, Bshd::kH, Bshd::kB};
  const std::int64_t in_strides[5] = {1, 64, Bshd::kRowStride, Bshd::kHeadStride,
                                      Bshd::kBatchStride};
  const int in_box[5] = {64, 1, 64, 1, 1};
  for (int i = 0; i < 5; ++i) {
    in.dims[i] = in_dims[i];
    in.strides[i] = in_strides[i];
    in.box[i] = in_box[i];
  }
  cuda::TmaTensor out;
  out.rank = 3;
  const std::int64_t out_dims[3] = {128, kYRows, kYBatch};
  const std::int64_t out_strides[3] = {1, 128, kYRows * 128};
  const int out_box[3] = {64, 64, 1};
  for (int i = 0; i < 3; ++i) {
    out.dims[i] = out_dims[i];
    out.strides[i] = out_strides[i];
    out.box[i] = out_box[i];
  }
  alignas(128) CUtensorMap in_map, out_map;
  Status st =
      cuda::make_tensor_map(&in_map, DType::kBF16, x.buf.data(), in, cuda::TmaSwizzle::k128B);
  ASSERT_TRUE(st.ok()) << st.to_string();
  st = cuda::make_tensor_map(&out_map, DType::kBF16, y.buf.data(), out, cuda::TmaSwizzle::k128B);
  ASSERT_TRUE(st.ok()) << st.to_string();
  st = run_tma_round_trip(in_map, boxes_of(5, {{0, 0, 0, 2, 1}, {0, 1, 0, 2, 1}}), out_map,
                          boxes_of(3, {{0, 20, 1}, {64, 20, 1}}));
  ASSERT_TRUE(st.ok()) << st.to_string();
  std::vector<std::uint16_t> want(y.count, kPoison);
  for (int r = 0; r < 64 && 20 + r < kYRows; ++r) {
    for (int d = 0; d < 128; ++d) {
      want[(1 * kYRows + 20 + r) * 128 + d] = r < Bshd::kS ? Bshd::id(1, r, 2, d) : 0;
    }
  }
  const std::vector<std::uint16_t> got = y.get();
  int bad = 0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    if (got[i] != want[i] && ++bad <= 5) {
      ADD_FAILURE() << "element " << i << ": got " << got[i] << ", expected " << want[i];
    }
  }
  EXPECT_EQ(bad, 0);
}

// Two stages, 12 iterations: each stage's barriers go through 6 phases. A consumer that passed a
// wait early would read the previous pass's value, a producer that passed early would overwrite
// a value before it was read: either changes `values`.
TEST_F(Sm90TmaTest, MbarrierPhasesOverAProducerConsumerRing) {
  std::vector<int> values, fresh;
  const Status st = run_mbarrier_ping(&values, &fresh);
  ASSERT_TRUE(st.ok()) << st.to_string();
  EXPECT_EQ(fresh[0], 0) << "try_wait(parity 0) on a new barrier must not pass";
  EXPECT_EQ(fresh[1], 1) << "try_wait(parity 1) on a new barrier must pass (the producer's start)";
  for (int it = 0; it < kPingIters; ++it) {
    for (int c = 0; c < kPingConsumers; ++c) {
      ASSERT_EQ(values[it * kPingConsumers + c], it * 1000 + c % 32)
          << "iteration " << it << " consumer " << c;
    }
  }
}

// The producer ring of the attention kernel: 8 tiles of a [500][64] bf16 tensor through 2 TMA
// stages (expect_tx on full, 128 consumer arrivals on empty); the last tile has 52 rows.
TEST_F(Sm90TmaTest, MbarrierTmaRingOverPhases) {
  constexpr int kRows = 500;
  std::vector<std::uint16_t> host(kRows * 64);
  for (std::size_t i = 0; i < host.size(); ++i) host[i] = static_cast<std::uint16_t>(i + 1);
  DeviceArray x;
  ASSERT_TRUE(x.put(host).ok());
  cuda::TmaTensor t;
  t.rank = 2;
  t.dims[0] = 64;
  t.dims[1] = kRows;
  t.strides[0] = 1;
  t.strides[1] = 64;
  t.box[0] = 64;
  t.box[1] = 64;
  alignas(128) CUtensorMap map;
  Status st = cuda::make_tensor_map(&map, DType::kBF16, x.buf.data(), t, cuda::TmaSwizzle::k128B);
  ASSERT_TRUE(st.ok()) << st.to_string();
  std::vector<std::uint16_t> out;
  st = run_tma_ring(map, &out);
  ASSERT_TRUE(st.ok()) << st.to_string();
  ASSERT_EQ(out.size(), static_cast<std::size_t>(kRingTiles) * kBoxBytes / 2);
  for (int it = 0; it < kRingTiles; ++it) {
    expect_box(
        out, it,
        [&](int r, int c) -> std::uint16_t {
          const int row = it * 64 + r;
          return row < kRows ? host[row * 64 + c] : 0;
        },
        "ring tile " + std::to_string(it));
  }
}

// The epilogue's store: accumulator register i of thread t (wgmma_layout.h acc_row / acc_col)
// lands at (acc_row, acc_col) of a 128B-swizzled 64 x 64 tile.
TEST_F(Sm90TmaTest, StmatrixAccumulatorToSwizzledTile) {
  auto id = [](int r, int c) { return static_cast<std::uint16_t>(1 + r * 64 + c); };
  std::vector<std::uint16_t> frag(32 * 128);
  for (int i = 0; i < 32; ++i) {
    for (int t = 0; t < 128; ++t) frag[i * 128 + t] = id(ptx::acc_row(t, i), ptx::acc_col(t, i));
  }
  std::vector<std::uint16_t> tile;
  const Status st = run_stmatrix_tile(frag, &tile);
  ASSERT_TRUE(st.ok()) << st.to_string();
  expect_box(tile, 0, id, "stmatrix tile");
}

// stmatrix.x4 and .x4.trans of known fragments into 4 plain 8 x 8 matrices: lane l's register k
// holds elements (l / 4, 2 (l % 4)) and (l / 4, 2 (l % 4) + 1) of matrix k; .trans stores element
// (r, c) of the fragment at row c, column r.
TEST_F(Sm90TmaTest, StmatrixPlainAndTransposed) {
  auto id = [](int k, int r, int c) { return static_cast<std::uint16_t>(1 + k * 64 + r * 8 + c); };
  std::vector<std::uint32_t> regs(4 * 32);
  for (int k = 0; k < 4; ++k) {
    for (int l = 0; l < 32; ++l) {
      regs[k * 32 + l] =
          id(k, l / 4, 2 * (l % 4)) | (std::uint32_t{id(k, l / 4, 2 * (l % 4) + 1)} << 16);
    }
  }
  std::vector<std::uint16_t> plain, trans;
  const Status st = run_stmatrix_plain(regs, &plain, &trans);
  ASSERT_TRUE(st.ok()) << st.to_string();
  for (int k = 0; k < 4; ++k) {
    for (int r = 0; r < 8; ++r) {
      for (int c = 0; c < 8; ++c) {
        EXPECT_EQ(plain[k * 64 + r * 8 + c], id(k, r, c))
            << "plain: matrix " << k << " (" << r << ", " << c << ")";
        EXPECT_EQ(trans[k * 64 + r * 8 + c], id(k, c, r))
            << "trans: matrix " << k << " (" << r << ", " << c << ")";
      }
    }
  }
}

// elect.sync: one lane per warp, the same lane both times.
TEST_F(Sm90TmaTest, ElectPicksOneLanePerWarp) {
  std::vector<int> out;
  const Status st = run_elect(&out);
  ASSERT_TRUE(st.ok()) << st.to_string();
  for (int call = 0; call < 2; ++call) {
    for (int w = 0; w < 4; ++w) {
      int elected = 0;
      for (int l = 0; l < 32; ++l) elected += out[call * 128 + w * 32 + l];
      EXPECT_EQ(elected, 1) << "call " << call << " warp " << w;
    }
  }
  for (int t = 0; t < 128; ++t) EXPECT_EQ(out[t], out[128 + t]) << "thread " << t;
}

#endif  // FLASHATTN_HAVE_CUDA_KERNELS

}  // namespace
}  // namespace flashattn::testing::sm90
