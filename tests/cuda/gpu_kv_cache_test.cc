// flash-decode (the GPU KV-cache backend) against the float64 reference, through the verifier's
// rule (verifier::judge, docs/testing.md) with the float32 CPU naive algorithm as the baseline:
// contiguous and paged caches (pages 16, 48, 64, 80, 256), ragged cache_seqlens including 0, appended
// tokens (the cache's new rows checked bit for bit; up to 16 appended by the attention kernel,
// 37 by the append kernel), GQA ratios 1 to 8, causal, every split count
// from 1 to more splits than key tiles, the variants, rows without keys; paged equals contiguous
// bit for bit at the same split count; CUDA-graph replay equals eager.
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <string>
#include <vector>

#include "common/mask_rule.h"
#include "common/owned_tensor.h"
#include "common/random.h"
#include "cpu/reference.h"
#include "flashattn/combine.h"
#include "flashattn/flashattn.h"
#include "test_util.h"
#include "verify/compare.h"
#include "verify/verify.h"

namespace flashattn {
namespace {

struct KvCase {
  std::string name;
  DType dtype = DType::kBF16;
  std::int64_t heads = 8, kv_heads = 2, head_dim = 128;
  std::int64_t seqlen_q = 1, seqlen_new = 1;
  std::vector<std::int32_t> cache_seqlens = {0, 700, 1023};
  std::int64_t capacity = 1100;  // keys per sequence the cache holds
  std::int64_t page_size = 0;    // 0: contiguous
  bool causal = false;
  int num_splits = 0;
  std::int64_t window_left = -1, window_right = -1;
  float softcap = 0.0f;
  bool alibi = false, sinks = false;
  // The caller's workspace, filled with NaN first: a split without keys leaves its partial row
  // unwritten, and the merge must not read it into the result.
  bool nan_workspace = false;
};

void PrintTo(const KvCase& c, std::ostream* os) { *os << c.name; }

std::vector<float> randoms(std::int64_t n, std::uint64_t stream, float mean = 0.0f) {
  std::vector<float> v(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) {
    v[static_cast<std::size_t>(i)] =
        mean + normal_at(testing::base_seed(), stream, static_cast<std::uint64_t>(i));
  }
  return v;
}

// The dtype's rounding of `v` (what a tensor of that dtype holds).
std::vector<float> rounded(const std::vector<float>& v, DType dtype, std::int64_t n) {
  OwnedTensor t;
  EXPECT_TRUE(OwnedTensor::create(dtype, Device::cpu(), {n}, &t).ok());
  EXPECT_TRUE(t.from_host_float(v).ok());
  std::vector<float> r;
  EXPECT_TRUE(t.to_host_float(&r).ok());
  return r;
}

// One problem's data on the host (values already rounded to the dtype), in logical layout:
// caches (batch, capacity, kv_heads, d), the new tokens (batch, seqlen_new, kv_heads, d).
struct KvData {
  std::int64_t batch = 0;
  std::vector<float> q, k_cache, v_cache, k_new, v_new, alibi, sinks;
  std::vector<std::int32_t> page_of;  // paged: the page of (b, p), a shuffled permutation
};

KvData make_data(const KvCase& c) {
  KvData d;
  d.batch = static_cast<std::int64_t>(c.cache_seqlens.size());
  const std::int64_t per_key = c.kv_heads * c.head_dim;
  d.q = rounded(randoms(d.batch * c.seqlen_q * c.heads * c.head_dim, 1), c.dtype,
                d.batch * c.seqlen_q * c.heads * c.head_dim);
  d.k_cache = rounded(randoms(d.batch * c.capacity * per_key, 2), c.dtype, d.batch * c.capacity * per_key);
  d.v_cache = rounded(randoms(d.batch * c.capacity * per_key, 3), c.dtype, d.batch * c.capacity * per_key);
  d.k_new = rounded(randoms(d.batch * c.seqlen_new * per_key, 4), c.dtype, d.batch * c.seqlen_new * per_key);
  d.v_new = rounded(randoms(d.batch * c.seqlen_new * per_key, 5), c.dtype, d.batch * c.seqlen_new * per_key);
  if (c.alibi) {
    for (std::int64_t h = 0; h < c.heads; ++h) d.alibi.push_back(0.5f / static_cast<float>(h + 1));
  }
  if (c.sinks) d.sinks = randoms(c.heads, 6, 1.0f);
  if (c.page_size > 0) {
    const std::int64_t pages = c.capacity / c.page_size;
    d.page_of.resize(static_cast<std::size_t>(d.batch * pages));
    std::iota(d.page_of.begin(), d.page_of.end(), 0);
    // A fixed shuffle (Fisher-Yates over the test's random stream): pages out of order.
    for (std::size_t i = d.page_of.size(); i > 1; --i) {
      const auto u = normal_at(testing::base_seed(), 7, i);
      const std::size_t j = static_cast<std::size_t>(std::fabs(u) * 1e6) % i;
      std::swap(d.page_of[i - 1], d.page_of[j]);
    }
  }
  return d;
}

// The cache in the tensor's storage layout: contiguous as is; paged as (num_pages, page_size,
// kv_heads, d) with key j of sequence b on page page_of[b, j / page_size].
std::vector<float> to_storage(const KvCase& c, const KvData& d, const std::vector<float>& cache) {
  if (c.page_size == 0) return cache;
  const std::int64_t per_key = c.kv_heads * c.head_dim, pages = c.capacity / c.page_size;
  std::vector<float> s(cache.size());
  for (std::int64_t b = 0; b < d.batch; ++b) {
    for (std::int64_t j = 0; j < c.capacity; ++j) {
      const std::int64_t page = d.page_of[static_cast<std::size_t>(b * pages + j / c.page_size)];
      std::copy_n(cache.begin() + (b * c.capacity + j) * per_key, per_key,
                  s.begin() + (page * c.page_size + j % c.page_size) * per_key);
    }
  }
  return s;
}

struct Tensors {
  OwnedTensor q, k_cache, v_cache, k, v, out, lse, seqlens, table, alibi, sinks;
};

// Tensors of the problem on `device` (the cache as given, in storage layout) and their params.
void make_tensors(const KvCase& c, const KvData& d, Device device, DType dtype,
                  const std::vector<float>& k_store, const std::vector<float>& v_store,
                  const std::vector<std::int32_t>& seqlens, bool with_new, Tensors* t,
                  ForwardParams* p) {
  const std::int64_t b = d.batch;
  const std::vector<std::int64_t> cache_dims =
      c.page_size > 0 ? std::vector<std::int64_t>{b * c.capacity / c.page_size, c.page_size, c.kv_heads, c.head_dim}
                      : std::vector<std::int64_t>{b, c.capacity, c.kv_heads, c.head_dim};
  auto make = [&](OwnedTensor* x, DType dt, const std::vector<std::int64_t>& dims,
                  const std::vector<float>& values) {
    ASSERT_TRUE(OwnedTensor::create(dt, device, dims, x).ok());
    if (!values.empty()) {
      ASSERT_TRUE(x->from_host_float(values).ok());
    }
  };
  make(&t->q, dtype, {b, c.seqlen_q, c.heads, c.head_dim}, d.q);
  make(&t->k_cache, dtype, cache_dims, k_store);
  make(&t->v_cache, dtype, cache_dims, v_store);
  make(&t->out, dtype, {b, c.seqlen_q, c.heads, c.head_dim}, {});
  make(&t->lse, DType::kFP32, {b, c.heads, c.seqlen_q}, {});
  ASSERT_TRUE(t->out.fill_nan().ok());
  ASSERT_TRUE(t->lse.fill_nan().ok());
  ASSERT_TRUE(OwnedTensor::create(DType::kInt32, device, {b}, &t->seqlens).ok());
  ASSERT_TRUE(t->seqlens.from_host_int32(seqlens).ok());
  *p = ForwardParams();
  p->q = t->q.view();
  p->k_cache = t->k_cache.view();
  p->v_cache = t->v_cache.view();
  p->cache_seqlens = t->seqlens.view();
  p->out = t->out.view();
  p->lse = t->lse.view();
  if (with_new && c.seqlen_new > 0) {
    make(&t->k, dtype, {b, c.seqlen_new, c.kv_heads, c.head_dim}, d.k_new);
    make(&t->v, dtype, {b, c.seqlen_new, c.kv_heads, c.head_dim}, d.v_new);
    p->k = t->k.view();
    p->v = t->v.view();
  }
  if (c.page_size > 0) {
    ASSERT_TRUE(OwnedTensor::create(DType::kInt32, device, {b, c.capacity / c.page_size}, &t->table).ok());
    ASSERT_TRUE(t->table.from_host_int32(d.page_of).ok());
    p->block_table = t->table.view();
  }
  if (c.alibi) {
    make(&t->alibi, DType::kFP32, {c.heads}, d.alibi);
    p->alibi_slopes = t->alibi.view();
  }
  if (c.sinks) {
    make(&t->sinks, DType::kFP32, {c.heads}, d.sinks);
    p->sinks = t->sinks.view();
  }
  p->causal = c.causal;
  p->window_left = c.window_left;
  p->window_right = c.window_right;
  p->softcap = c.softcap;
  p->num_splits = c.num_splits;
}

// The cache after the append, in logical layout.
std::vector<float> appended(const KvCase& c, const KvData& d, const std::vector<float>& cache,
                            const std::vector<float>& fresh) {
  std::vector<float> r = cache;
  const std::int64_t per_key = c.kv_heads * c.head_dim;
  for (std::int64_t b = 0; b < d.batch; ++b) {
    for (std::int64_t t = 0; t < c.seqlen_new; ++t) {
      std::copy_n(fresh.begin() + (b * c.seqlen_new + t) * per_key, per_key,
                  r.begin() + (b * c.capacity + c.cache_seqlens[b] + t) * per_key);
    }
  }
  return r;
}

struct GpuRun {
  verifier::HostOutputs result;
  std::vector<float> k_cache, v_cache;  // storage layout, after the call
};

GpuRun run_gpu(const KvCase& c, const KvData& d) {
  GpuRun r;
  Tensors t;
  ForwardParams p;
  make_tensors(c, d, Device::cuda(0), c.dtype, to_storage(c, d, d.k_cache),
               to_storage(c, d, d.v_cache), c.cache_seqlens, /*with_new=*/true, &t, &p);
  OwnedTensor workspace;
  if (c.nan_workspace) {
    std::size_t bytes = 0;
    EXPECT_TRUE(workspace_bytes(p, "flash-decode", &bytes).ok());
    EXPECT_GT(bytes, 0u) << c.name << ": splits need a workspace";
    EXPECT_TRUE(OwnedTensor::create(DType::kFP32, Device::cuda(0),
                                    {static_cast<std::int64_t>(bytes / 4)}, &workspace).ok());
    EXPECT_TRUE(workspace.fill_nan().ok());
    p.workspace = workspace.view().data;
    p.workspace_size = bytes;
  }
  const Status st = forward(p, "flash-decode");
  EXPECT_TRUE(st.ok()) << st.to_string();
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_TRUE(t.out.to_host_float(&r.result.out).ok());
  EXPECT_TRUE(t.lse.to_host_float(&r.result.lse).ok());
  EXPECT_TRUE(t.k_cache.to_host_float(&r.k_cache).ok());
  EXPECT_TRUE(t.v_cache.to_host_float(&r.v_cache).ok());
  return r;
}

// Judges flash-decode on case c against the float64 reference with the CPU naive baseline.
void check_case(const KvCase& c, GpuRun* run_out = nullptr) {
  const KvData d = make_data(c);
  GpuRun run = run_gpu(c, d);
  // The cache: the new rows written, nothing else touched.
  const std::vector<float> k_after = appended(c, d, d.k_cache, d.k_new);
  const std::vector<float> v_after = appended(c, d, d.v_cache, d.v_new);
  EXPECT_TRUE(run.k_cache == to_storage(c, d, k_after)) << c.name << ": k_cache after the append";
  EXPECT_TRUE(run.v_cache == to_storage(c, d, v_after)) << c.name << ": v_cache after the append";

  // Reference and baseline: the appended cache (logical, contiguous), cache_seqlens + new.
  KvCase plain = c;
  plain.page_size = 0;
  std::vector<std::int32_t> lens = c.cache_seqlens;
  for (auto& l : lens) l += static_cast<std::int32_t>(c.seqlen_new);
  Tensors h;
  ForwardParams hp;
  make_tensors(plain, d, Device::cpu(), c.dtype, k_after, v_after, lens, false, &h, &hp);
  verifier::ReferenceOutputs ref;
  ref.out.resize(run.result.out.size());
  ref.lse.resize(run.result.lse.size());
  ASSERT_TRUE(cpu::reference_forward_f64(hp, ref.out.data(), ref.lse.data()).ok());
  ASSERT_TRUE(cpu::naive_forward<float>(hp).ok());
  verifier::HostOutputs baseline;
  ASSERT_TRUE(h.out.to_host_float(&baseline.out).ok());
  ASSERT_TRUE(h.lse.to_host_float(&baseline.lse).ok());

  verifier::OutputDims dims;
  dims.batch = d.batch;
  dims.seqlen_q = c.seqlen_q;
  dims.heads = c.heads;
  dims.head_dim = c.head_dim;
  for (std::int64_t b = 0; b < d.batch; ++b) {
    const MaskRule rule = MaskRule::make(c.seqlen_q, lens[b], c.window_left,
                                         c.causal ? 0 : c.window_right, c.causal);
    for (std::int64_t i = 0; i < c.seqlen_q; ++i) {
      dims.row_without_keys.push_back(rule.row_range(i).empty() ? 1 : 0);
    }
  }
  VerifyReport report;
  report.backend = "flash-decode (" + c.name + ")";
  report.reference = "cpu-reference (float64)";
  report.baseline = "cpu naive (float32 accumulate)";
  verifier::judge(dims, c.dtype, run.result, baseline, ref, /*check_lse=*/true, &report);
  EXPECT_TRUE(report.passed) << report.to_string();
  if (run_out != nullptr) *run_out = run;
}

std::vector<KvCase> cases() {
  std::vector<KvCase> v;
  auto add = [&](std::string name, auto edit) {
    KvCase c;
    c.name = std::move(name);
    edit(c);
    v.push_back(c);
  };
  add("bf16_d128_gqa4_one_token", [](KvCase&) {});
  add("fp16_d64_gqa8_four_tokens_causal", [](KvCase& c) {
    c.dtype = DType::kFP16; c.head_dim = 64; c.heads = 16; c.kv_heads = 2; c.seqlen_q = 4;
    c.seqlen_new = 4; c.causal = true; });
  add("fp32_d256_mha_no_new", [](KvCase& c) {
    c.dtype = DType::kFP32; c.head_dim = 256; c.heads = 2; c.kv_heads = 2; c.seqlen_new = 0; });
  add("bf16_d96_gqa3_prefill_causal", [](KvCase& c) {
    c.head_dim = 96; c.heads = 6; c.kv_heads = 2; c.seqlen_q = 37; c.seqlen_new = 37;
    c.causal = true; c.cache_seqlens = {0, 5, 300}; c.capacity = 400; });
  for (std::int64_t page : {16, 64, 256}) {
    add("bf16_paged" + std::to_string(page), [page](KvCase& c) {
      c.page_size = page; c.capacity = 1280; c.seqlen_q = 2; c.seqlen_new = 2; c.causal = true; });
  }
  // Pages that are not a power of two and not a multiple of the kernel's 64-key tile: a tile
  // spans pages, the split boundaries fall inside a page (the page cursor of the whole tiles
  // starts there), at d256 (4 rows per copy pass) and d40 (chunks past head_dim).
  add("bf16_paged48_splits3", [](KvCase& c) {
    c.page_size = 48; c.capacity = 1296; c.num_splits = 3; });
  add("bf16_d256_paged80_splits2", [](KvCase& c) {
    c.head_dim = 256; c.heads = 4; c.page_size = 80; c.capacity = 1120; c.num_splits = 2; });
  add("fp16_d40_paged48_two_tokens", [](KvCase& c) {
    c.dtype = DType::kFP16; c.head_dim = 40; c.heads = 10; c.page_size = 48; c.capacity = 1296;
    c.seqlen_q = 2; c.seqlen_new = 2; c.causal = true; c.num_splits = 4; });
  for (int splits : {1, 2, 3, 7, 40}) {  // 40: more splits than the 17 key tiles
    add("bf16_splits" + std::to_string(splits), [splits](KvCase& c) {
      c.num_splits = splits; c.page_size = 64; c.capacity = 1088; });
  }
  for (std::int64_t ratio : {1, 2, 4, 8}) {
    add("fp16_gqa" + std::to_string(ratio), [ratio](KvCase& c) {
      c.dtype = DType::kFP16; c.kv_heads = 2; c.heads = 2 * ratio; c.seqlen_q = 3;
      c.seqlen_new = 2; c.causal = true; });
  }
  add("bf16_window_softcap_alibi_sinks", [](KvCase& c) {
    c.window_left = 256; c.softcap = 30.0f; c.alibi = true; c.sinks = true; c.seqlen_q = 2;
    c.seqlen_new = 2; c.causal = true; c.num_splits = 5; });
  // The fused append (up to kFusedAppendMax new tokens, written by the attention kernel): new
  // rows across 16-key groups, pages of 16 and key tiles of 64, read by three splits.
  add("bf16_paged16_append16_unaligned_splits3", [](KvCase& c) {
    c.page_size = 16; c.capacity = 1280; c.cache_seqlens = {15, 55, 1001}; c.seqlen_q = 16;
    c.seqlen_new = 16; c.causal = true; c.num_splits = 3; });
  add("bf16_rows_without_keys", [](KvCase& c) {
    c.cache_seqlens = {0, 0, 9}; c.seqlen_new = 0; c.num_splits = 3; c.sinks = false; });
  add("bf16_sinks_rows_without_keys", [](KvCase& c) {
    c.cache_seqlens = {0, 0, 9}; c.seqlen_new = 0; c.num_splits = 3; c.sinks = true; });
  // The tensor-core kernel's other buckets and shapes: d256 (Q from shared memory), a head dim
  // that is not a multiple of 16 (zero-filled chunks), 32 query heads on one kv head (two row
  // chunks per sequence), long caches across many splits.
  add("bf16_d256_gqa2_alibi_causal", [](KvCase& c) {
    c.head_dim = 256; c.heads = 4; c.kv_heads = 2; c.seqlen_q = 2; c.seqlen_new = 2;
    c.causal = true; c.alibi = true; });
  add("fp16_d40_gqa5_softcap", [](KvCase& c) {
    c.dtype = DType::kFP16; c.head_dim = 40; c.heads = 10; c.kv_heads = 2; c.softcap = 20.0f; });
  add("bf16_d128_mqa32_long", [](KvCase& c) {
    c.heads = 32; c.kv_heads = 1; c.cache_seqlens = {3000, 8191}; c.capacity = 8192; });
  // The merge's rounds of loads (decode_merge_kernel.cuh: 8 splits per thread and round; d256
  // takes 16 splits a round, d40 96) and splits without keys over a NaN workspace: sequence 0
  // has one key, so 99 of its 100 splits (255 of 256) see none.
  add("bf16_d256_splits100_sinks_nan_workspace", [](KvCase& c) {
    c.head_dim = 256; c.heads = 4; c.kv_heads = 2; c.cache_seqlens = {0, 2000, 4000};
    c.capacity = 4096; c.num_splits = 100; c.sinks = true; c.nan_workspace = true; });
  add("fp16_d40_splits256_nan_workspace", [](KvCase& c) {
    c.dtype = DType::kFP16; c.head_dim = 40; c.heads = 10; c.kv_heads = 2; c.num_splits = 256;
    c.nan_workspace = true; });
  add("fp32_d64_mqa_long_ragged", [](KvCase& c) {
    c.dtype = DType::kFP32; c.cache_seqlens.assign(8, 0);
    for (int b = 0; b < 8; ++b) c.cache_seqlens[b] = 1000 * b + 17;
    c.capacity = 8200; c.head_dim = 64; c.heads = 4; c.kv_heads = 1; });
  return v;
}

class GpuKvCacheTest : public ::testing::TestWithParam<KvCase> {};

TEST_P(GpuKvCacheTest, MatchesReference) {
  FA_SKIP_WITHOUT_CUDA();
  FA_SKIP_UNLESS_BACKEND_USABLE(std::string("flash-decode"));
  check_case(GetParam());
}

INSTANTIATE_TEST_SUITE_P(Quick, GpuKvCacheTest, ::testing::ValuesIn(cases()),
                         [](const ::testing::TestParamInfo<KvCase>& p) { return p.param.name; });

// Paged equals contiguous bit for bit at the same split count; auto picks flash-decode.
TEST(GpuKvCache, PagedEqualsContiguous) {
  FA_SKIP_WITHOUT_CUDA();
  FA_SKIP_UNLESS_BACKEND_USABLE(std::string("flash-decode"));
  for (int splits : {1, 4}) {
    KvCase c;
    c.name = "paged_vs_contiguous";
    c.capacity = 1152;  // 72 pages of 16, 24 of 48, 18 of 64
    c.seqlen_q = 2;
    c.seqlen_new = 2;
    c.causal = true;
    c.num_splits = splits;
    const KvData d = make_data(c);
    const GpuRun contiguous = run_gpu(c, d);
    for (std::int64_t page : {16, 48, 64}) {
      KvCase paged = c;
      paged.page_size = page;
      const KvData dp = make_data(paged);  // same values (the streams do not depend on paging)
      const GpuRun p = run_gpu(paged, dp);
      EXPECT_TRUE(contiguous.result.out == p.result.out) << "splits " << splits << " page " << page;
      EXPECT_TRUE(contiguous.result.lse == p.result.lse) << "splits " << splits << " page " << page;
    }
  }
  KvCase c;
  const KvData d = make_data(c);
  Tensors t;
  ForwardParams p;
  make_tensors(c, d, Device::cuda(0), c.dtype, d.k_cache, d.v_cache, c.cache_seqlens, true, &t, &p);
  std::string name;
  ASSERT_TRUE(resolve_backend(p, "auto", &name).ok());
  EXPECT_EQ(name, "flash-decode");
}

// A decode step captured in a CUDA graph (workspace from the caller) and replayed gives the
// eager result bit for bit; the replay appends again at the same rows (same values).
TEST(GpuKvCache, GraphReplayEqualsEager) {
  FA_SKIP_WITHOUT_CUDA();
  FA_SKIP_UNLESS_BACKEND_USABLE(std::string("flash-decode"));
  KvCase c;
  c.num_splits = 6;
  c.page_size = 16;
  c.capacity = 1104;
  const KvData d = make_data(c);
  Tensors t;
  ForwardParams p;
  make_tensors(c, d, Device::cuda(0), c.dtype, to_storage(c, d, d.k_cache),
               to_storage(c, d, d.v_cache), c.cache_seqlens, true, &t, &p);
  std::size_t bytes = 0;
  ASSERT_TRUE(workspace_bytes(p, "flash-decode", &bytes).ok());
  ASSERT_GT(bytes, 0u) << "6 splits need a workspace";
  void* ws = nullptr;
  ASSERT_EQ(cudaMalloc(&ws, bytes), cudaSuccess);
  p.workspace = ws;
  p.workspace_size = bytes;
  ASSERT_TRUE(forward(p, "flash-decode").ok());
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  std::vector<float> eager_o, eager_l, graph_o, graph_l;
  ASSERT_TRUE(t.out.to_host_float(&eager_o).ok());
  ASSERT_TRUE(t.lse.to_host_float(&eager_l).ok());
  ASSERT_TRUE(t.out.fill_nan().ok());
  ASSERT_TRUE(t.lse.fill_nan().ok());
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  cudaGraph_t graph = nullptr;
  ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  const Status st = forward(p, "flash-decode", stream);
  ASSERT_EQ(cudaStreamEndCapture(stream, &graph), cudaSuccess);
  ASSERT_TRUE(st.ok()) << st.to_string();
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  ASSERT_EQ(cudaGraphLaunch(exec, stream), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  ASSERT_TRUE(t.out.to_host_float(&graph_o).ok());
  ASSERT_TRUE(t.lse.to_host_float(&graph_l).ok());
  EXPECT_TRUE(eager_o == graph_o);
  EXPECT_TRUE(eager_l == graph_l);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
  cudaFree(ws);
}

// A workspace too small for the splits is refused by name and nothing is written.
TEST(GpuKvCache, SmallWorkspaceRefused) {
  FA_SKIP_WITHOUT_CUDA();
  FA_SKIP_UNLESS_BACKEND_USABLE(std::string("flash-decode"));
  KvCase c;
  c.num_splits = 4;
  const KvData d = make_data(c);
  Tensors t;
  ForwardParams p;
  make_tensors(c, d, Device::cuda(0), c.dtype, d.k_cache, d.v_cache, c.cache_seqlens, true, &t, &p);
  void* ws = nullptr;
  ASSERT_EQ(cudaMalloc(&ws, 256), cudaSuccess);
  p.workspace = ws;
  p.workspace_size = 256;
  const Status st = forward(p, "flash-decode");
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("workspace"), std::string::npos) << st.message();
  std::vector<float> o, k;
  ASSERT_TRUE(t.out.to_host_float(&o).ok());
  for (float x : o) ASSERT_TRUE(std::isnan(x)) << "out written despite the error";
  ASSERT_TRUE(t.k_cache.to_host_float(&k).ok());
  EXPECT_TRUE(k == d.k_cache) << "cache written despite the error";
  cudaFree(ws);
}


// combine() on CUDA tensors against the host's float64 merge of the same parts (float32 inputs,
// some rows' parts at -inf, one row with every part at -inf).
TEST(GpuCombine, MatchesHost) {
  FA_SKIP_WITHOUT_CUDA();
  FA_SKIP_UNLESS_BACKEND_USABLE(std::string("flash-decode"));
  const std::int64_t batch = 2, seqlen_q = 5, heads = 3, head_dim = 64, n = 4;
  std::vector<OwnedTensor> o_h(n), l_h(n), o_d(n), l_d(n);
  CombineParams host, dev;
  for (std::int64_t i = 0; i < n; ++i) {
    ASSERT_TRUE(OwnedTensor::create(DType::kFP32, Device::cpu(), {batch, seqlen_q, heads, head_dim}, &o_h[i]).ok());
    ASSERT_TRUE(OwnedTensor::create(DType::kFP32, Device::cpu(), {batch, heads, seqlen_q}, &l_h[i]).ok());
    ASSERT_TRUE(o_h[i].from_host_float(randoms(batch * seqlen_q * heads * head_dim, 20 + i)).ok());
    std::vector<float> l = randoms(batch * heads * seqlen_q, 30 + i);
    for (std::size_t r = 0; r < l.size(); ++r) {
      l[r] *= 3.0f;
      if ((r + i) % 3 == 0 || r == 7) l[r] = -INFINITY;  // no key in this part (row 7: in none)
    }
    ASSERT_TRUE(l_h[i].from_host_float(l).ok());
    ASSERT_TRUE(o_h[i].copy_to(Device::cuda(0), &o_d[i]).ok());
    ASSERT_TRUE(l_h[i].copy_to(Device::cuda(0), &l_d[i]).ok());
    host.outs.push_back(o_h[i].view());
    host.lses.push_back(l_h[i].view());
    dev.outs.push_back(o_d[i].view());
    dev.lses.push_back(l_d[i].view());
  }
  OwnedTensor out_h, lse_h, out_d, lse_d;
  ASSERT_TRUE(OwnedTensor::create(DType::kFP32, Device::cpu(), {batch, seqlen_q, heads, head_dim}, &out_h).ok());
  ASSERT_TRUE(OwnedTensor::create(DType::kFP32, Device::cpu(), {batch, heads, seqlen_q}, &lse_h).ok());
  ASSERT_TRUE(OwnedTensor::create(DType::kBF16, Device::cuda(0), {batch, seqlen_q, heads, head_dim}, &out_d).ok());
  ASSERT_TRUE(OwnedTensor::create(DType::kFP32, Device::cuda(0), {batch, heads, seqlen_q}, &lse_d).ok());
  host.out = out_h.view();
  host.lse = lse_h.view();
  dev.out = out_d.view();
  dev.lse = lse_d.view();
  ASSERT_TRUE(combine(host).ok());
  const Status st = combine(dev);
  ASSERT_TRUE(st.ok()) << st.to_string();
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  std::vector<float> o1, o2, l1, l2;
  ASSERT_TRUE(out_h.to_host_float(&o1).ok());
  ASSERT_TRUE(out_d.to_host_float(&o2).ok());
  ASSERT_TRUE(lse_h.to_host_float(&l1).ok());
  ASSERT_TRUE(lse_d.to_host_float(&l2).ok());
  for (std::size_t i = 0; i < o1.size(); ++i) {
    // bf16 out: within one bf16 step of the float64 merge (plus float32 noise).
    ASSERT_NEAR(o2[i], o1[i], std::fabs(o1[i]) * 0.0079 + 1e-6) << "element " << i;
  }
  for (std::size_t i = 0; i < l1.size(); ++i) {
    if (std::isinf(l1[i])) {
      ASSERT_EQ(l1[i], l2[i]) << "row " << i;
    } else {
      ASSERT_NEAR(l2[i], l1[i], 1e-5 * std::max(1.0f, std::fabs(l1[i]))) << "row " << i;
    }
  }
}

}  // namespace
}  // namespace flashattn
