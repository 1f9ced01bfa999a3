// The KV cache on cpu-reference (ForwardParams::k_cache): the result equals the float64 reference
// of the same keys as a plain variable-length problem, bit for bit; a paged cache (pages in a
// shuffled order) equals the contiguous one exactly; new tokens are written into the cache at
// cache_seqlens and attended; ragged cache_seqlens including 0, GQA ratios 1 to 8, rows without
// keys. Bad input is refused by name; other backends refuse a KV cache by name.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <numeric>
#include <string>
#include <vector>

#include "api/backend.h"
#include "common/random.h"
#include "flashattn/flashattn.h"
#include "test_util.h"

namespace flashattn {
namespace {

// 64-byte aligned float storage.
class Floats {
 public:
  explicit Floats(std::int64_t n) : storage_(static_cast<std::size_t>(n) + 16, 0.0f) {
    const auto addr = reinterpret_cast<std::uintptr_t>(storage_.data());
    data_ = storage_.data() + ((64 - addr % 64) % 64) / 4;
    n_ = n;
  }
  float* data() { return data_; }
  float& operator[](std::int64_t i) { return data_[i]; }
  std::vector<float> copy() const { return std::vector<float>(data_, data_ + n_); }

 private:
  std::vector<float> storage_;
  float* data_;
  std::int64_t n_;
};

struct Case {
  std::vector<std::int32_t> seqlens = {0, 17, 40};
  std::int64_t seqlen_q = 3, seqlen_new = 3, heads = 4, kv_heads = 2, head_dim = 32;
  std::int64_t cache_len = 64, page_size = 16;
  bool causal = true;
};

std::vector<float> random(std::int64_t n, std::uint64_t stream) {
  std::vector<float> v(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) {
    v[static_cast<std::size_t>(i)] = 0.5f + normal_at(testing::base_seed(), stream, static_cast<std::uint64_t>(i));
  }
  return v;
}

struct CacheRun {
  std::vector<float> out, lse;  // dense (batch, seqlen_q, heads, head_dim), (batch, heads, seqlen_q)
  std::vector<float> k_cache, v_cache;  // after the call, as a contiguous (batch, cache_len, ...)
};

TensorView view4(float* p, std::int64_t a, std::int64_t b, std::int64_t c, std::int64_t d) {
  return TensorView::contiguous(p, DType::kFP32, Device::cpu(), {a, b, c, d});
}

// Runs the case on cpu-reference with a contiguous cache (paged = false) or a paged one.
CacheRun run_cache(const Case& c, bool paged, const char* backend = "cpu-reference") {
  const auto batch = static_cast<std::int64_t>(c.seqlens.size());
  const std::int64_t kvrow = c.kv_heads * c.head_dim, cache_n = batch * c.cache_len * kvrow;
  const std::vector<float> q0 = random(batch * c.seqlen_q * c.heads * c.head_dim, 0);
  const std::vector<float> kc0 = random(cache_n, 1), vc0 = random(cache_n, 2);
  const std::vector<float> kn0 = random(batch * c.seqlen_new * kvrow, 3);
  const std::vector<float> vn0 = random(batch * c.seqlen_new * kvrow, 4);
  Floats q(static_cast<std::int64_t>(q0.size())), kn(static_cast<std::int64_t>(kn0.size()) + 1),
      vn(static_cast<std::int64_t>(vn0.size()) + 1);
  std::copy(q0.begin(), q0.end(), q.data());
  std::copy(kn0.begin(), kn0.end(), kn.data());
  std::copy(vn0.begin(), vn0.end(), vn.data());
  const std::int64_t pages_per_seq = c.cache_len / c.page_size, num_pages = batch * pages_per_seq + 3;
  // Paged: sequence b's page n is page perm[b * pages_per_seq + n] of a shuffled pool.
  std::vector<std::int32_t> perm(static_cast<std::size_t>(num_pages));
  std::iota(perm.begin(), perm.end(), 0);
  for (std::size_t i = perm.size() - 1; i > 0; --i) {
    std::swap(perm[i], perm[splitmix64(testing::base_seed() + i) % (i + 1)]);
  }
  const std::int64_t cache_elems = paged ? num_pages * c.page_size * kvrow : cache_n;
  Floats kc(cache_elems), vc(cache_elems);
  auto at = [&](std::int64_t b, std::int64_t j) {  // element offset of key j of sequence b
    if (!paged) return (b * c.cache_len + j) * kvrow;
    return (perm[static_cast<std::size_t>(b * pages_per_seq + j / c.page_size)] * c.page_size +
            j % c.page_size) * kvrow;
  };
  for (std::int64_t b = 0; b < batch; ++b)
    for (std::int64_t j = 0; j < c.cache_len; ++j)
      for (std::int64_t e = 0; e < kvrow; ++e) {
        kc[at(b, j) + e] = kc0[static_cast<std::size_t>((b * c.cache_len + j) * kvrow + e)];
        vc[at(b, j) + e] = vc0[static_cast<std::size_t>((b * c.cache_len + j) * kvrow + e)];
      }
  std::vector<std::int32_t> table(static_cast<std::size_t>(batch * pages_per_seq));
  std::copy(perm.begin(), perm.begin() + static_cast<std::ptrdiff_t>(table.size()), table.begin());
  std::vector<std::int32_t> lens = c.seqlens;
  Floats out(static_cast<std::int64_t>(q0.size())), lse(batch * c.heads * c.seqlen_q);
  ForwardParams p;
  p.q = view4(q.data(), batch, c.seqlen_q, c.heads, c.head_dim);
  p.out = view4(out.data(), batch, c.seqlen_q, c.heads, c.head_dim);
  p.lse = TensorView::contiguous(lse.data(), DType::kFP32, Device::cpu(), {batch, c.heads, c.seqlen_q});
  p.causal = c.causal;
  p.k_cache = paged ? view4(kc.data(), num_pages, c.page_size, c.kv_heads, c.head_dim)
                    : view4(kc.data(), batch, c.cache_len, c.kv_heads, c.head_dim);
  p.v_cache = paged ? view4(vc.data(), num_pages, c.page_size, c.kv_heads, c.head_dim)
                    : view4(vc.data(), batch, c.cache_len, c.kv_heads, c.head_dim);
  p.cache_seqlens = TensorView::contiguous(lens.data(), DType::kInt32, Device::cpu(), {batch});
  if (paged) {
    p.block_table = TensorView::contiguous(table.data(), DType::kInt32, Device::cpu(),
                                           {batch, pages_per_seq});
  }
  if (c.seqlen_new > 0) {
    p.k = view4(kn.data(), batch, c.seqlen_new, c.kv_heads, c.head_dim);
    p.v = view4(vn.data(), batch, c.seqlen_new, c.kv_heads, c.head_dim);
  }
  const Status st = forward(p, backend);
  EXPECT_TRUE(st.ok()) << st.to_string();
  CacheRun r{out.copy(), lse.copy(), std::vector<float>(static_cast<std::size_t>(cache_n)),
        std::vector<float>(static_cast<std::size_t>(cache_n))};
  for (std::int64_t b = 0; b < batch; ++b)
    for (std::int64_t j = 0; j < c.cache_len; ++j)
      for (std::int64_t e = 0; e < kvrow; ++e) {
        r.k_cache[static_cast<std::size_t>((b * c.cache_len + j) * kvrow + e)] = kc[at(b, j) + e];
        r.v_cache[static_cast<std::size_t>((b * c.cache_len + j) * kvrow + e)] = vc[at(b, j) + e];
      }
  // The cache after: the old one with rows [len, len + seqlen_new) holding the new tokens.
  for (std::int64_t b = 0; b < batch; ++b)
    for (std::int64_t j = 0; j < c.cache_len; ++j)
      for (std::int64_t e = 0; e < kvrow; ++e) {
        const std::int64_t t = j - c.seqlens[static_cast<std::size_t>(b)];
        const auto i = static_cast<std::size_t>((b * c.cache_len + j) * kvrow + e);
        const bool fresh = t >= 0 && t < c.seqlen_new;
        const auto n = static_cast<std::size_t>((b * c.seqlen_new + t) * kvrow + e);
        EXPECT_EQ(r.k_cache[i], fresh ? kn0[n] : kc0[i]) << "b=" << b << " j=" << j;
        EXPECT_EQ(r.v_cache[i], fresh ? vn0[n] : vc0[i]) << "b=" << b << " j=" << j;
        if (r.k_cache[i] != (fresh ? kn0[n] : kc0[i])) return r;
      }
  // The reference: the same keys as a packed variable-length problem.
  std::vector<std::int32_t> cu_q = {0}, cu_k = {0};
  std::vector<float> kp, vp;
  for (std::int64_t b = 0; b < batch; ++b) {
    const std::int64_t keys = c.seqlens[static_cast<std::size_t>(b)] + c.seqlen_new;
    cu_q.push_back(static_cast<std::int32_t>((b + 1) * c.seqlen_q));
    cu_k.push_back(cu_k.back() + static_cast<std::int32_t>(keys));
    for (std::int64_t j = 0; j < keys; ++j)
      for (std::int64_t e = 0; e < kvrow; ++e) {
        kp.push_back(r.k_cache[static_cast<std::size_t>((b * c.cache_len + j) * kvrow + e)]);
        vp.push_back(r.v_cache[static_cast<std::size_t>((b * c.cache_len + j) * kvrow + e)]);
      }
  }
  Floats kpf(static_cast<std::int64_t>(kp.size()) + 1), vpf(static_cast<std::int64_t>(vp.size()) + 1);
  std::copy(kp.begin(), kp.end(), kpf.data());
  std::copy(vp.begin(), vp.end(), vpf.data());
  Floats out2(static_cast<std::int64_t>(q0.size())), lse2(batch * c.heads * c.seqlen_q);
  ForwardParams v;
  const std::int64_t total_q = batch * c.seqlen_q, total_k = cu_k.back();
  v.q = TensorView::contiguous(q.data(), DType::kFP32, Device::cpu(), {total_q, c.heads, c.head_dim});
  v.out = TensorView::contiguous(out2.data(), DType::kFP32, Device::cpu(), {total_q, c.heads, c.head_dim});
  v.lse = TensorView::contiguous(lse2.data(), DType::kFP32, Device::cpu(), {c.heads, total_q});
  v.k = TensorView::contiguous(kpf.data(), DType::kFP32, Device::cpu(), {total_k, c.kv_heads, c.head_dim});
  v.v = TensorView::contiguous(vpf.data(), DType::kFP32, Device::cpu(), {total_k, c.kv_heads, c.head_dim});
  v.cu_seqlens_q = TensorView::contiguous(cu_q.data(), DType::kInt32, Device::cpu(), {batch + 1});
  v.cu_seqlens_k = TensorView::contiguous(cu_k.data(), DType::kInt32, Device::cpu(), {batch + 1});
  v.max_seqlen_q = c.seqlen_q;
  v.max_seqlen_k = c.cache_len;
  v.causal = c.causal;
  const Status st2 = forward(v, backend);
  EXPECT_TRUE(st2.ok()) << st2.to_string();
  for (std::int64_t e = 0; e < total_q * c.heads * c.head_dim; ++e) {
    EXPECT_EQ(r.out[static_cast<std::size_t>(e)], out2[e]) << e;
    if (r.out[static_cast<std::size_t>(e)] != out2[e]) break;
  }
  for (std::int64_t b = 0; b < batch; ++b)
    for (std::int64_t h = 0; h < c.heads; ++h)
      for (std::int64_t i = 0; i < c.seqlen_q; ++i) {
        EXPECT_EQ(r.lse[static_cast<std::size_t>((b * c.heads + h) * c.seqlen_q + i)],
                  lse2[h * total_q + b * c.seqlen_q + i]);
      }
  return r;
}

void expect_same(const CacheRun& a, const CacheRun& b) {
  EXPECT_TRUE(a.out == b.out);
  EXPECT_TRUE(std::memcmp(a.lse.data(), b.lse.data(), a.lse.size() * 4) == 0);
  EXPECT_TRUE(a.k_cache == b.k_cache);
  EXPECT_TRUE(a.v_cache == b.v_cache);
}

TEST(KvCache, ContiguousAndPagedMatchTheReference) {
  for (bool causal : {false, true}) {
    for (std::int64_t seqlen_new : {0, 1, 3}) {
      for (std::int64_t page : {16, 32, 64}) {
        SCOPED_TRACE("causal=" + std::to_string(causal) + " new=" + std::to_string(seqlen_new) +
                     " page=" + std::to_string(page));
        Case c;
        c.causal = causal;
        c.seqlen_new = seqlen_new;
        c.page_size = page;
        expect_same(run_cache(c, false), run_cache(c, true));
      }
    }
  }
}

// cpu-flash: the same bits paged and contiguous and as its own varlen run of the same keys
// (run_cache checks that), and within float32 noise of the float64 reference.
TEST(KvCache, CpuFlashMatchesTheReference) {
  for (bool causal : {false, true}) {
    for (std::int64_t seqlen_new : {0, 3}) {
      SCOPED_TRACE("causal=" + std::to_string(causal) + " new=" + std::to_string(seqlen_new));
      Case c;
      c.causal = causal;
      c.seqlen_new = seqlen_new;
      c.seqlens = {0, 17, static_cast<std::int32_t>(61 - seqlen_new)};
      const CacheRun flash = run_cache(c, false, "cpu-flash");
      expect_same(flash, run_cache(c, true, "cpu-flash"));
      const CacheRun ref = run_cache(c, false);
      EXPECT_TRUE(flash.k_cache == ref.k_cache);
      float max_ref = 0.0f, max_diff = 0.0f;
      for (std::size_t i = 0; i < ref.out.size(); ++i) {
        max_ref = std::max(max_ref, std::fabs(ref.out[i]));
        max_diff = std::max(max_diff, std::fabs(flash.out[i] - ref.out[i]));
      }
      EXPECT_LE(max_diff, 64 * 1.1920929e-7f * max_ref) << "max |O_flash - O_ref|";
      for (std::size_t i = 0; i < ref.lse.size(); ++i) {
        if (std::isinf(ref.lse[i])) {
          EXPECT_EQ(flash.lse[i], ref.lse[i]) << i;
        } else {
          EXPECT_NEAR(flash.lse[i], ref.lse[i], 1e-5f * std::max(1.0f, std::fabs(ref.lse[i]))) << i;
        }
      }
    }
  }
}

TEST(KvCache, GqaRatiosOneToEight) {
  for (std::int64_t g = 1; g <= 8; ++g) {
    SCOPED_TRACE("group=" + std::to_string(g));
    Case c;
    c.kv_heads = 2;
    c.heads = 2 * g;
    expect_same(run_cache(c, false), run_cache(c, true));
  }
}

TEST(KvCache, RowsWithoutKeys) {
  // Sequence 0 has no key at all (empty cache, no new tokens): O = 0, LSE = -inf. With causal
  // and more queries than keys, the first rows of sequence 1 see none either.
  Case c;
  c.seqlens = {0, 2, 64};
  c.seqlen_new = 0;
  c.seqlen_q = 5;
  const CacheRun r = run_cache(c, false);
  expect_same(r, run_cache(c, true));
  for (std::int64_t h = 0; h < c.heads; ++h) {
    for (std::int64_t i = 0; i < c.seqlen_q; ++i) {
      EXPECT_EQ(r.lse[static_cast<std::size_t>(h * c.seqlen_q + i)],
                -std::numeric_limits<float>::infinity());
    }
    EXPECT_EQ(r.lse[static_cast<std::size_t>((c.heads + h) * c.seqlen_q)],
              -std::numeric_limits<float>::infinity());  // seq 1 row 0: 0 + 2 - 5 < 0
  }
  for (std::int64_t e = 0; e < c.seqlen_q * c.heads * c.head_dim; ++e) {
    EXPECT_EQ(r.out[static_cast<std::size_t>(e)], 0.0f);
  }
}

TEST(KvCache, AppendFillsTheCacheToCapacity) {
  Case c;
  c.seqlens = {61, 0, 32};
  c.seqlen_new = 3;
  expect_same(run_cache(c, false), run_cache(c, true));
}

// A valid paged problem (batch 2, 4 pages of 16 per sequence, 9 pages), broken one field at a time.
struct Bad {
  Floats q{2 * 1 * 4 * 32}, out{2 * 1 * 4 * 32}, lse{2 * 4}, kc{9 * 16 * 2 * 32},
      vc{9 * 16 * 2 * 32}, kn{2 * 2 * 2 * 32}, vn{2 * 2 * 2 * 32};
  std::vector<std::int32_t> lens = {10, 60}, table = {0, 1, 2, 3, 4, 5, 6, 7};
  ForwardParams p;
  Bad() {
    p.q = view4(q.data(), 2, 1, 4, 32);
    p.out = view4(out.data(), 2, 1, 4, 32);
    p.lse = TensorView::contiguous(lse.data(), DType::kFP32, Device::cpu(), {2, 4, 1});
    p.k_cache = view4(kc.data(), 9, 16, 2, 32);
    p.v_cache = view4(vc.data(), 9, 16, 2, 32);
    p.k = view4(kn.data(), 2, 2, 2, 32);
    p.v = view4(vn.data(), 2, 2, 2, 32);
    p.cache_seqlens = TensorView::contiguous(lens.data(), DType::kInt32, Device::cpu(), {2});
    p.block_table = TensorView::contiguous(table.data(), DType::kInt32, Device::cpu(), {2, 4});
  }
  void expect(StatusCode code, const std::string& words) {
    const std::vector<float> k0 = kc.copy(), o0 = out.copy();
    const Status st = forward(p, "cpu-reference");
    EXPECT_EQ(st.code(), code) << st.to_string();
    EXPECT_NE(st.message().find(words), std::string::npos) << st.message();
    EXPECT_TRUE(kc.copy() == k0) << "cache written despite the error";
    EXPECT_TRUE(out.copy() == o0) << "out written despite the error";
  }
};

TEST(KvCacheBadInput, ValidIsAccepted) {
  Bad b;
  EXPECT_TRUE(validate(b.p).ok()) << validate(b.p).to_string();
}

TEST(KvCacheBadInput, EachField) {
  { Bad b; b.p.cache_seqlens = TensorView(); b.expect(StatusCode::kInvalidArgument, "without cache_seqlens"); }
  { Bad b; b.p.v_cache = TensorView(); b.expect(StatusCode::kInvalidArgument, "without v_cache"); }
  { Bad b; b.p.v = TensorView(); b.expect(StatusCode::kInvalidArgument, "k (new tokens) is given without v"); }
  { Bad b; b.p.k_cache.dtype = DType::kBF16; b.expect(StatusCode::kInvalidDtype, "k_cache.dtype = bf16 must equal q.dtype = fp32"); }
  { Bad b; b.p.v.dtype = DType::kFP16; b.expect(StatusCode::kInvalidDtype, "v.dtype = fp16"); }
  { Bad b; b.p.v_cache.shape[0] = 8; b.expect(StatusCode::kInvalidShape, "v_cache.shape[0] (num_pages) = 8"); }
  { Bad b; b.p.k.shape[2] = 1; b.p.v.shape[2] = 1; b.expect(StatusCode::kInvalidShape, "k.shape[2] (kv_heads) = 1"); }
  { Bad b; b.p.k_cache.shape[1] = 8; b.p.v_cache.shape[1] = 8; b.expect(StatusCode::kInvalidArgument, "page_size (k_cache.shape[1]) = 8"); }
  { Bad b; b.lens[1] = -1; b.expect(StatusCode::kInvalidArgument, "cache_seqlens[1] = -1"); }
  { Bad b; b.lens[1] = 63; b.expect(StatusCode::kInvalidArgument, "cache_seqlens[1] + seqlen_new = 63 + 2 is past the capacity max_pages_per_seq * page_size = 4 * 16 = 64"); }
  { Bad b; b.table[0] = 9; b.expect(StatusCode::kInvalidArgument, "block_table[0, 0] = 9, expected a page index from 0 to 8"); }
  { Bad b; b.table[7] = -3; b.expect(StatusCode::kInvalidArgument, "block_table[1, 3] = -3"); }
  { Bad b; b.p.block_table.dtype = DType::kFP32; b.expect(StatusCode::kInvalidDtype, "block_table.dtype = fp32"); }
  { Bad b; b.p.cache_seqlens.shape[0] = 3; b.expect(StatusCode::kInvalidShape, "cache_seqlens.shape[0] = 3"); }
  { Bad b; b.p.cu_seqlens_q = b.p.cache_seqlens; b.expect(StatusCode::kInvalidArgument, "k_cache is given with cu_seqlens"); }
  { Bad b; b.p.k_cache.stride[3] = 2; b.expect(StatusCode::kInvalidStride, "k_cache.stride[3] = 2"); }
  { Bad b; b.p.v_cache.device = Device::cuda(0); b.expect(StatusCode::kInvalidDevice, "v_cache.device = cuda:0"); }
  { Bad b; b.p.v_cache.data = b.kc.data(); b.expect(StatusCode::kAliasing, "k_cache overlaps v_cache"); }
  { Bad b; b.p.out.data = b.kn.data(); b.p.out.shape[0] = 1; b.p.q.shape[0] = 1; b.p.lse = TensorView(); b.lens.resize(1);
    b.p.cache_seqlens.shape[0] = 1; b.p.block_table.shape[0] = 1; b.p.k.shape[0] = b.p.v.shape[0] = 1;
    b.expect(StatusCode::kAliasing, "out overlaps k"); }
  { Bad b; b.p.k_cache = TensorView(); b.expect(StatusCode::kInvalidArgument, "v_cache is given without k_cache"); }
  { Bad b; b.p.num_splits = -1; b.expect(StatusCode::kInvalidArgument, "num_splits = -1, expected 0 (chosen) to 256"); }
  { Bad b; b.p.num_splits = 257; b.expect(StatusCode::kInvalidArgument, "num_splits = 257"); }
  { Bad b; b.p.q.shape[3] = 64; b.p.out.shape[3] = 64; b.expect(StatusCode::kInvalidShape, "k_cache.shape[3] (head_dim) = 32"); }
}

// auto takes cpu-flash on the CPU; a backend without a KV cache (the CUDA-core "flash") refuses it
// by name.
TEST(KvCacheBadInput, AutoTakesCpuFlashOthersRefuseByName) {
  Bad b;
  std::string name;
  ASSERT_TRUE(resolve_backend(b.p, "auto", &name).ok());
  EXPECT_EQ(name, "cpu-flash");
  const Status flash = check_supported(*find_backend("flash"), b.p);
  EXPECT_EQ(flash.code(), StatusCode::kUnsupported);
  EXPECT_NE(flash.message().find("does not implement a KV cache (k_cache / v_cache)"),
            std::string::npos) << flash.message();
}

}  // namespace
}  // namespace flashattn
