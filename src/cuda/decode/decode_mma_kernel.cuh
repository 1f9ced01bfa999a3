// flash-decode's split-KV attention on tensor cores (bf16 / fp16, sm_80+): the kernel every
// 16-bit KV-cache call runs (float32 inputs take decode_kernel.cuh's CUDA-core kernel).
//
// Decoding is bound by reading K and V once: batch 64 x 8k keys x 8 kv heads x d128 is 2.15 GB
// of K and V, 500 us at the H200's 4.3 TB/s, against 8.6 GFLOP per query token (32 query
// heads), 17 TFLOP/s: 3% of mma.sync's peak (4x that with the padding rows of the m16 tile), so
// the work is to keep enough bytes in flight and never stall the loads on the arithmetic. The CUDA-core kernel (v1) loaded each tile
// synchronously, converted it to float in shared memory and spent 4x the FMAs on padding rows:
// 0.44 TB/s (docs/performance.md).
//
// Block (split s, row chunk c, kv head hk; batch entry b), 4 warps. The chunk's kRows = 16 rows
// are (token, query head) pairs sharing kv head hk (GQA packing: row r is token (r0 + r) / group,
// head hk * group + (r0 + r) % group), one m16 tile, so each K / V byte is read once for all of
// them. Key tiles of kBlockN = 64 keys stream through a kStages-deep cp.async ring (paged or
// contiguous rows, DecodeKvRows; keys past the sequence and pages outside the cache
// zero-filled). Warp w owns keys 16 w .. 16 w + 15 of every tile with its own online-softmax state
// (fragment_ops.cuh: S = Q K^T as 16 mma.sync, the mask and score mods, the lazy-rescaled update,
// P rounded to T, O += P V as kD / 8 mma.sync), so warps never wait on each other inside a tile;
// at the end the 4 warps' (max, sum, O) merge through shared memory like 4 splits.
//
// One split: O / l and the LSE (sink included) go to out and lse. More: each split writes its
// float32 partial O (normalized) and LSE (no sink) to the workspace for decode_merge_kernel.
//
// New tokens (up to kFusedAppendMax) are appended here rather than by a kernel of their own:
// every block reads the keys from cache_seqlens[b] on from the new k / v, and block (split 0,
// chunk 0) of each (sequence, kv head) writes them into the cache.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "common/attention_args.h"
#include "common/mask_rule.h"
#include "cuda/attention/fragment_ops.cuh"
#include "cuda/attention/online_softmax.cuh"
#include "cuda/attention/score_mod.cuh"
#include "cuda/common/device_dtype.cuh"
#include "cuda/decode/decode.h"
#include "cuda/decode/decode_block.cuh"
#include "cuda/decode/decode_trace.cuh"
#include "cuda/primitives/cp_async.cuh"
#include "cuda/primitives/ldmatrix.cuh"
#include "cuda/primitives/mma_sm80.cuh"
#include "cuda/primitives/smem.cuh"
#include "cuda/sm80/smem_layout.h"

namespace flashattn::cuda {

template <int kD>
struct DecodeMmaTraits {
  static constexpr int kThreads = 128;
  static constexpr int kWarps = kThreads / 32;
  static constexpr int kRows = 16;      // one m16 tile of packed rows per block
  static constexpr int kBlockN = 64;    // keys per tile: 16 per warp
  static constexpr int kWarpN = kBlockN / kWarps;
  // Stages: the tiles in flight per block while one is read. d128: 32 KB of K + V per tile, 3
  // stages + Q = 100 KB, 2 blocks per SM, 4 tiles (128 KB) in flight per SM: at 4.3 TB/s over
  // 132 SMs (33 KB/us each) that covers 4 us of latency, several times the loaded DRAM latency.
  static constexpr int kStages = kD <= 64 ? 4 : kD <= 128 ? 3 : 2;
  static constexpr bool kQInRegs = kD <= 128;  // d256: 64 more registers; Q from smem instead
  static constexpr int kDSteps = kD / 16;      // k16 steps of QK^T
  static constexpr int kDTiles = kD / 8;       // n8 tiles of O
  static constexpr int kChunks = kD / 8;       // 16-byte chunks per row (8, 16, 32: powers of 2)
  static constexpr int kRowBytes = kD * 2;     // swizzled rows (sm80/smem_layout.h), >= 128
  static constexpr int kRowsPerCopy = kThreads / kChunks;  // rows one pass of the block copies
  static constexpr int kQBytes = kRows * kRowBytes;
  static constexpr int kTileBytes = kBlockN * kRowBytes;
  static constexpr int kPipeBytes = kQBytes + 2 * kStages * kTileBytes;
  // The merge: the warps' O as float [kWarps][kRows][kOStride], then their max and sum.
  static constexpr int kOStride = kD + 4;
  static constexpr int kMergeBytes = 4 * (kWarps * kRows * kOStride + 2 * kWarps * kRows);
  static constexpr int kSmemBytes = kPipeBytes > kMergeBytes ? kPipeBytes : kMergeBytes;
  static_assert(kD == 64 || kD == 128 || kD == 256, "head-dim buckets");
  static_assert(kBlockN % kRowsPerCopy == 0, "copy passes must tile the key tile");
};

// The packed rows of a lane: fragment rows g and g + 8 of the chunk starting at packed row r0.
struct PackedRow {
  int i;  // query token (validate(): seqlen_q and heads fit an int)
  int h;  // query head
  bool valid;      // inside the call's rows (the chunk's last rows can be padding)
};

__device__ __forceinline__ PackedRow packed_row(std::int64_t row, const FastDivmod& group,
                                                std::int64_t hk, std::int64_t rows_total) {
  PackedRow p;
  p.valid = row < rows_total;
  std::uint32_t q = 0, r = 0;
  group.divmod(static_cast<std::uint32_t>(p.valid ? row : 0), &q, &r);  // rows < 2^31
  p.i = static_cast<int>(q);
  p.h = static_cast<int>(hk * group.d + r);
  return p;
}

// Where the K and V rows of one (sequence, kv head) lie, set up once per block so that a key
// tile's addresses cost a few integer instructions per 16 keys: the first version called
// AttentionArgs::kv_offset per row and copy (a 64-bit division by page_size each when paged), ~890
// instructions per warp and tile, which held the kernel at 3.3 TB/s contiguous and 1.3 TB/s
// paged (ncu, batch 64 x 8k).
//
// Keys come in groups of 16 (a tile starts at a multiple of 64, and a page holds a multiple of
// 16 keys, so a group never crosses a page): one block-table read per group.
struct DecodeKvRows {
  const unsigned char* k_head;  // contiguous: key 0 of (b, hk); paged: head hk of page 0
  const unsigned char* v_head;
  std::int64_t k_row_bytes, v_row_bytes;    // one key further
  std::int64_t k_page_bytes, v_page_bytes;  // one page further (paged)
  const std::int32_t* table;                // this sequence's block-table row; null: contiguous
  std::uint32_t page_size;
  std::int64_t num_pages;
  std::int64_t seqlen_k;
  // The fused append (DecodeNewTokens given): keys from cache_len on are the new tokens, read
  // from new_k / new_v (token 0 of (b, hk)) instead of the cache, which this call writes at the
  // same time. Without: cache_len is past every key.
  std::int64_t cache_len;
  const unsigned char* new_k;
  const unsigned char* new_v;
  std::int64_t new_k_row_bytes, new_v_row_bytes;
  // Tiles ending at or before this key are whole: in the sequence, no new token.
  std::int64_t whole_end;

  __device__ __forceinline__ static DecodeKvRows make(const KernelArgs& a,
                                                      const DecodeBounds& bd,
                                                      const DecodeNewTokens& nt, std::int64_t b,
                                                      std::int64_t hk, std::int64_t seqlen_k) {
    constexpr std::int64_t kElem = 2;  // bf16 / fp16
    DecodeKvRows r;
    const bool paged = a.block_table != nullptr;
    r.k_head = static_cast<const unsigned char*>(a.k) +
               ((paged ? 0 : b * a.k_stride[0]) + hk * a.k_stride[2]) * kElem;
    r.v_head = static_cast<const unsigned char*>(a.v) +
               ((paged ? 0 : b * a.v_stride[0]) + hk * a.v_stride[2]) * kElem;
    r.k_row_bytes = a.k_stride[1] * kElem;
    r.v_row_bytes = a.v_stride[1] * kElem;
    r.k_page_bytes = a.k_stride[0] * kElem;
    r.v_page_bytes = a.v_stride[0] * kElem;
    r.table = paged ? a.block_table + b * a.block_table_stride : nullptr;
    r.page_size = static_cast<std::uint32_t>(paged ? a.page_size : 0);
    r.num_pages = bd.num_pages;
    r.seqlen_k = seqlen_k;
    // cache_seqlens[b] as given (even negative: key cache_len + t holds new token t, as the
    // append kernel would have written it, for every key >= 0).
    r.cache_len = nt.k != nullptr ? static_cast<std::int64_t>(a.cache_seqlens[b])
                                  : std::int64_t{1} << 62;
    r.new_k = static_cast<const unsigned char*>(nt.k) +
              (b * nt.k_stride[0] + hk * nt.k_stride[2]) * kElem;
    r.new_v = static_cast<const unsigned char*>(nt.v) +
              (b * nt.v_stride[0] + hk * nt.v_stride[2]) * kElem;
    r.new_k_row_bytes = nt.k_stride[1] * kElem;
    r.new_v_row_bytes = nt.v_stride[1] * kElem;
    r.whole_end = min(seqlen_k, r.cache_len);
    return r;
  }

  // The first K and V bytes of keys [key16, key16 + 16); false when the group's page lies
  // outside the cache (DecodeBounds: it reads as zeros). Keys fit 32 bits (the capacity does).
  __device__ __forceinline__ bool group(std::int64_t key16, const unsigned char** k,
                                        const unsigned char** v) const {
    if (table == nullptr) {
      *k = k_head + key16 * k_row_bytes;
      *v = v_head + key16 * v_row_bytes;
      return true;
    }
    const std::uint32_t key = static_cast<std::uint32_t>(key16);
    const std::int64_t page = table[key / page_size];
    const std::uint32_t within = key % page_size;
    *k = k_head + page * k_page_bytes + within * k_row_bytes;
    *v = v_head + page * v_page_bytes + within * v_row_bytes;
    return page >= 0 && page < num_pages;
  }
};

// A thread's share of every key tile's copies, set up once per block: chunk c = tid % kChunks
// of rows r + i * kRowsPerCopy (r = tid / kChunks), the K / V bytes of that chunk of key r, and
// the swizzled destination of copy 0. Copy i's destination is copy 0's plus i rows with the
// chunk XOR-ed by ((i * kRowsPerCopy) & 7): r < kRowsPerCopy, which divides 8 or is a multiple
// of it, so (r + i * kRowsPerCopy) & 7 = r ^ ((i * kRowsPerCopy) & 7) (d64 / d128: 0).
template <int kD>
struct DecodeCopyLane {
  using Tr = DecodeMmaTraits<kD>;
  static constexpr std::uint32_t kStepBytes = Tr::kRowsPerCopy * Tr::kRowBytes;
  static_assert(Tr::kRowsPerCopy % 8 == 0 || 8 % Tr::kRowsPerCopy == 0, "swizzle period");
  const unsigned char* k;  // key r, chunk c (chunk 0 past head_dim: an address, never read)
  const unsigned char* v;
  std::uint32_t dst0;
  bool chunk_ok;  // chunk c lies inside head_dim

  __device__ __forceinline__ static DecodeCopyLane make(const DecodeKvRows& kv, int head_dim,
                                                        int tid) {
    const int c = tid % Tr::kChunks, r = tid / Tr::kChunks;
    DecodeCopyLane l;
    l.chunk_ok = c * 8 < head_dim;
    const int c_src = l.chunk_ok ? c : 0;
    l.k = kv.k_head + r * kv.k_row_bytes + 16 * c_src;
    l.v = kv.v_head + r * kv.v_row_bytes + 16 * c_src;
    l.dst0 = sm80::swizzle<Tr>(r, c);
    return l;
  }
  __device__ __forceinline__ std::uint32_t dst_of(int copy) const {
    return (dst0 ^ (((copy * Tr::kRowsPerCopy) & 7) << 4)) +
           static_cast<std::uint32_t>(copy) * kStepBytes;
  }
};

// Where the next whole tile's first 16-key group lies in a paged cache: whole tiles are issued
// in key order (they are a prefix of the split's tiles), so one division per block finds the
// first and each group steps on (a page holds a multiple of 16 keys).
struct DecodePageCursor {
  std::uint32_t slot = 0;    // block-table entry
  std::uint32_t within = 0;  // key inside that page

  __device__ __forceinline__ static DecodePageCursor at(const DecodeKvRows& kv, std::int64_t key) {
    DecodePageCursor c;
    if (kv.table != nullptr) {
      c.slot = static_cast<std::uint32_t>(key) / kv.page_size;
      c.within = static_cast<std::uint32_t>(key) % kv.page_size;
    }
    return c;
  }
  __device__ __forceinline__ void advance(std::uint32_t page_size) {
    const bool wrap = within + 16 == page_size;
    within = wrap ? 0 : within + 16;
    slot += wrap ? 1 : 0;
  }
};

template <int kD>
__device__ __forceinline__ void decode_issue_whole_tile(const DecodeKvRows& kv,
                                                        const DecodeCopyLane<kD>& ln,
                                                        DecodePageCursor* cur, std::int64_t n0,
                                                        std::uint32_t k_smem,
                                                        std::uint32_t v_smem) {
  using Tr = DecodeMmaTraits<kD>;
  constexpr int kCopies = Tr::kBlockN / Tr::kRowsPerCopy;
  const std::int64_t k_step = Tr::kRowsPerCopy * kv.k_row_bytes;  // copy i + 1's key
  const std::int64_t v_step = Tr::kRowsPerCopy * kv.v_row_bytes;
  if (kv.table == nullptr) {
    const unsigned char* k = ln.k + n0 * kv.k_row_bytes;
    const unsigned char* v = ln.v + n0 * kv.v_row_bytes;
#pragma unroll
    for (int i = 0; i < kCopies; ++i) {
      ptx::cp_async_16(k_smem + ln.dst_of(i), k + i * k_step, ln.chunk_ok);
      ptx::cp_async_16(v_smem + ln.dst_of(i), v + i * v_step, ln.chunk_ok);
    }
    return;
  }
  constexpr int kGroups = Tr::kBlockN / 16, kPerGroup = 16 / Tr::kRowsPerCopy;
  static_assert(kPerGroup >= 1, "a pass of copies within one 16-key group");
#pragma unroll
  for (int m = 0; m < kGroups; ++m) {
    const std::int64_t page = kv.table[cur->slot];
    const std::uint32_t within = cur->within;
    cur->advance(kv.page_size);
    const bool ok = ln.chunk_ok && page >= 0 && page < kv.num_pages;
    const unsigned char* k = ok ? ln.k + page * kv.k_page_bytes + within * kv.k_row_bytes : ln.k;
    const unsigned char* v = ok ? ln.v + page * kv.v_page_bytes + within * kv.v_row_bytes : ln.v;
#pragma unroll
    for (int i = 0; i < kPerGroup; ++i) {
      const int copy = m * kPerGroup + i;
      ptx::cp_async_16(k_smem + ln.dst_of(copy), k + i * k_step, ok);
      ptx::cp_async_16(v_smem + ln.dst_of(copy), v + i * v_step, ok);
    }
  }
}

// Issues the cp.async of key tile [n0, n0 + kBlockN) of K and V into one ring slot, any tile
// (the sequence's last, new tokens, pages outside the cache): thread tid copies chunk
// c = tid % kChunks of keys r + i * kRowsPerCopy (r = tid / kChunks) into DecodeCopyLane's
// destinations; a key past seqlen_k, a page outside the cache or a chunk past head_dim is
// zero-filled (so masked keys meet V = 0). r and c are worked out again here rather than kept
// in DecodeCopyLane: two more live registers spilled d256 on sm_80 (8 bytes).
template <int kD>
__device__ __forceinline__ void decode_issue_tile(const DecodeKvRows& kv,
                                                  const DecodeCopyLane<kD>& ln, std::int64_t n0,
                                                  std::uint32_t k_smem, std::uint32_t v_smem,
                                                  int tid) {
  using Tr = DecodeMmaTraits<kD>;
  constexpr int kGroups = Tr::kBlockN / 16, kPerGroup = 16 / Tr::kRowsPerCopy;
  const int chunk_bytes = 16 * (ln.chunk_ok ? tid % Tr::kChunks : 0), r = tid / Tr::kChunks;
  // Keys of this tile the sequence has (all 64 but in its last tile).
  const int keys_left = static_cast<int>(min(static_cast<std::int64_t>(Tr::kBlockN), kv.seqlen_k - n0));
#pragma unroll
  for (int m = 0; m < kGroups; ++m) {
    const unsigned char *k_src = nullptr, *v_src = nullptr;
    const std::int64_t key16 = n0 + 16 * m;
    bool ok = ln.chunk_ok && 16 * m < keys_left;
    if (ok) ok = kv.group(key16, &k_src, &v_src);
    // A group holding new tokens (the fused append; uniform over the block): those rows come
    // from the new k / v. Their page must still be in the cache (else zeros, as when the append
    // kernel skipped the row and the attention read the page as zeros).
    const bool fresh = key16 + 16 > kv.cache_len;
#pragma unroll
    for (int i = 0; i < kPerGroup; ++i) {
      const int row_in_group = r + i * Tr::kRowsPerCopy;
      const bool valid = ok && 16 * m + row_in_group < keys_left;
      const unsigned char* k_row = k_src + row_in_group * kv.k_row_bytes;
      const unsigned char* v_row = v_src + row_in_group * kv.v_row_bytes;
      if (fresh && key16 + row_in_group >= kv.cache_len) {
        const std::int64_t t = key16 + row_in_group - kv.cache_len;
        k_row = kv.new_k + t * kv.new_k_row_bytes;
        v_row = kv.new_v + t * kv.new_v_row_bytes;
      }
      const std::uint32_t dst = ln.dst_of(m * kPerGroup + i);
      ptx::cp_async_16(k_smem + dst, valid ? k_row + chunk_bytes : kv.k_head, valid);
      ptx::cp_async_16(v_smem + dst, valid ? v_row + chunk_bytes : kv.v_head, valid);
    }
  }
}

template <typename T, int kD>
__global__ void __launch_bounds__(DecodeMmaTraits<kD>::kThreads, 2)
decode_mma_kernel(KernelArgs args, DecodeSplit split, DecodeNewTokens nt) {
  using Tr = DecodeMmaTraits<kD>;
  constexpr int kRows = Tr::kRows, kBlockN = Tr::kBlockN, kStages = Tr::kStages;
  constexpr int kDSteps = Tr::kDSteps, kDTiles = Tr::kDTiles;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  const std::uint32_t q_smem = ptx::smem_addr(smem_raw);
  const std::uint32_t kv_smem = q_smem + Tr::kQBytes;  // slot s: K at 2s, V at 2s + 1

  const DecodeTrace trace = DecodeTrace::start();  // empty unless FLASHATTN_DECODE_TRACE
  const int tid = static_cast<int>(threadIdx.x), lane = tid % 32, warp = tid / 32;
  const int g = lane / 4, t = lane % 4;
  const DecodeBlock blk = DecodeBlock::make<kRows, kBlockN>(args, split);
  const std::int64_t rows_total = blk.rows_total, hk = blk.hk, b = blk.b;
  const std::int64_t r0 = blk.r0, n_begin = blk.n_begin;
  const SeqInfo& seq = blk.seq;
  const MaskRule& rule = blk.rule;
  const int count = static_cast<int>(blk.n_stop - n_begin);
  trace.mark(kTraceBlock, static_cast<std::uint32_t>(count));
  const DecodeKvRows kv = DecodeKvRows::make(args, split.bounds, nt, b, hk, seq.seqlen_k);
  const DecodeCopyLane<kD> lane_copy = DecodeCopyLane<kD>::make(kv, args.head_dim, tid);
  auto slot_k = [&](int j) { return kv_smem + (2 * (j % kStages)) * Tr::kTileBytes; };
  auto slot_v = [&](int j) { return kv_smem + (2 * (j % kStages) + 1) * Tr::kTileBytes; };
  DecodePageCursor page_cursor = DecodePageCursor::at(kv, n_begin * kBlockN);
  auto issue = [&](int j) {  // the split's tile j into its ring slot (uniform over the block)
    const std::int64_t n0 = (n_begin + j) * kBlockN;
    if (n0 + kBlockN <= kv.whole_end) {
      decode_issue_whole_tile<kD>(kv, lane_copy, &page_cursor, n0, slot_k(j), slot_v(j));
    } else {
      decode_issue_tile<kD>(kv, lane_copy, n0, slot_k(j), slot_v(j), tid);
    }
  };
  auto issue_q = [&] {  // Q's rows (zeros past the last row and past head_dim)
    const auto* q_base = static_cast<const T*>(args.q);
    for (int e = tid; e < kRows * Tr::kChunks; e += Tr::kThreads) {
      const int r = e / Tr::kChunks, c = e % Tr::kChunks;
      const PackedRow pr = packed_row(r0 + r, split.by_group, hk, rows_total);
      const bool ok = pr.valid && c * 8 < args.head_dim;
      const T* src = q_base + b * args.q_stride[0] + pr.i * args.q_stride[1] +
                     pr.h * args.q_stride[2] + c * 8;
      ptx::cp_async_16(q_smem + sm80::swizzle<Tr>(r, c), ok ? src : q_base, ok);
    }
  };
  // The ring's first kStages - 1 tiles: one commit group each (empty past the split's tiles, so
  // the group count stays uniform). Q joins tile 0's group, issued after it: the K / V tiles are
  // what the step waits for. Not unrolled: one copy of the issue code for all of them.
#pragma unroll 1
  for (int j = 0; j < kStages - 1; ++j) {
    if (j < count) issue(j);
    if (j == 0) issue_q();
    ptx::cp_async_commit();
  }
  trace.mark(kTraceIssued);
  // Tiles every row of the chunk sees whole (no mask needed: MaskRule::interior_tiles).
  std::int64_t interior_first = 0, interior_end = 0;
  rule.interior_tiles(blk.i_first, blk.i_count, kBlockN, &interior_first, &interior_end);

  // The fused append: block (split 0, chunk 0) of each (sequence, kv head) writes the new
  // tokens into the cache while the loads above are in flight. No block reads those cache rows
  // in this call (the new keys come from nt: DecodeKvRows), so nothing waits for the writes.
  if (nt.k != nullptr && blk.s_idx == 0 && r0 == 0) {
    constexpr int kRowsPerPass = Tr::kThreads / Tr::kChunks;
    for (std::int64_t tok = tid / Tr::kChunks; tok < args.seqlen_new; tok += kRowsPerPass) {
      decode_append_row<T>(args, nt, split.bounds, b, tok, hk, tid % Tr::kChunks, Tr::kChunks);
    }
  }

  // This lane's two rows, their score mods (ALiBi's slope is per head: rows differ).
  PackedRow rows[2];
  ScoreMod mods[2];
#pragma unroll
  for (int hh = 0; hh < 2; ++hh) {
    rows[hh] = packed_row(r0 + g + 8 * hh, split.by_group, hk, rows_total);
    mods[hh] = ScoreMod::make(args, b, rows[hh].h);
  }
  const bool any_mod = args.softcap > 0.0f || args.alibi_slopes != nullptr;
  const std::int64_t diag = rule.diag();

  const sm80::LaneOffsets<Tr> q_lanes(sm80::q_lane_row(lane), sm80::q_lane_chunk(lane));
  const sm80::LaneOffsets<Tr> k_lanes(sm80::k_lane_row(lane), sm80::k_lane_chunk(lane));
  const sm80::LaneOffsets<Tr> v_lanes(sm80::v_lane_row(lane), sm80::v_lane_chunk(lane));
  std::uint32_t q_frag[Tr::kQInRegs ? kDSteps : 1][4];
  float row_max[1][2] = {{-INFINITY, -INFINITY}}, row_sum[1][2] = {{0.0f, 0.0f}};
  float alpha[1][2];
  float o[1][kDTiles][4];
#pragma unroll
  for (int dt = 0; dt < kDTiles; ++dt) {
#pragma unroll
    for (int e = 0; e < 4; ++e) o[0][dt][e] = 0.0f;
  }

  trace.mark(kTraceLoop);
  for (int j = 0; j < count; ++j) {
    // Tile j (and Q) landed for every thread; every warp is done with tile j - 1's slot.
    ptx::cp_async_wait<kStages - 2>();
    __syncthreads();
    if (j < kTraceTiles) trace.mark(kTraceTile0 + j);
    if (j + kStages - 1 < count) issue(j + kStages - 1);
    ptx::cp_async_commit();
    if constexpr (Tr::kQInRegs) {
      if (j == 0) {
#pragma unroll
        for (int ds = 0; ds < kDSteps; ++ds) ptx::ldmatrix_x4(q_frag[ds], q_lanes.at(q_smem, 0, ds));
      }
    }

    // S = Q K^T over this warp's 16 keys.
    float s[1][2][4] = {};
    const std::uint32_t k_tile = slot_k(j), v_tile = slot_v(j);
    // d256 unrolls 4 steps at a time: fully unrolled, ptxas hoists all 32 ldmatrix (128
    // registers) above the products and spills beside the 128-float O.
#pragma unroll(Tr::kQInRegs ? kDSteps : 4)
    for (int ds = 0; ds < kDSteps; ++ds) {
      std::uint32_t a_reg[4];
      if constexpr (Tr::kQInRegs) {
#pragma unroll
        for (int e = 0; e < 4; ++e) a_reg[e] = q_frag[ds][e];
      } else {
        ptx::ldmatrix_x4(a_reg, q_lanes.at(q_smem, 0, ds));
      }
      std::uint32_t kb[4];
      ptx::ldmatrix_x4(kb, k_lanes.at(k_tile, warp, ds));
      ptx::mma_m16n8k16<T>(s[0][0], a_reg, kb[0], kb[1]);
      ptx::mma_m16n8k16<T>(s[0][1], a_reg, kb[2], kb[3]);
    }

    const std::int64_t n0 = (n_begin + j) * kBlockN;
    const std::int64_t n0_warp = n0 + warp * Tr::kWarpN;
    if (any_mod) {
#pragma unroll
      for (int hh = 0; hh < 2; ++hh) {
        const float dist0 = static_cast<float>(rows[hh].i + diag - n0_warp - 2 * t);
#pragma unroll
        for (int nt = 0; nt < 2; ++nt) {
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            float& x = s[0][nt][2 * hh + e];
            if (args.softcap > 0.0f) x = softcap_exact(args.softcap_consts, x);
            if (mods[hh].alibi()) {
              x = mods[hh].apply_alibi(x, dist0 - static_cast<float>(8 * nt + e));
            }
          }
        }
      }
    }
    if (n_begin + j < interior_first || n_begin + j >= interior_end) {
#pragma unroll
      for (int hh = 0; hh < 2; ++hh) {
        mask_fragment_row<1, 2>(s, 0, hh, rule, static_cast<std::int64_t>(rows[hh].i), n0_warp,
                                t);
      }
    }

    const bool moved = softmax_update<1, 2>(s, row_max, row_sum, alpha, args.scale_log2);
    rescale_fragment<1, kDTiles>(o, alpha, moved);
    const std::uint32_t p[4] = {ptx::pack2<T>(s[0][0][0], s[0][0][1]),
                                ptx::pack2<T>(s[0][0][2], s[0][0][3]),
                                ptx::pack2<T>(s[0][1][0], s[0][1][1]),
                                ptx::pack2<T>(s[0][1][2], s[0][1][3])};
#pragma unroll
    for (int dp = 0; dp < kDTiles / 2; ++dp) {
      std::uint32_t vb[4];  // B fragments of d-tiles 2dp and 2dp + 1
      ptx::ldmatrix_x4_trans(vb, v_lanes.at(v_tile, warp, dp));
      ptx::mma_m16n8k16<T>(o[0][2 * dp], p, vb[0], vb[1]);
      ptx::mma_m16n8k16<T>(o[0][2 * dp + 1], p, vb[2], vb[3]);
    }
  }

  // The merge: every copy has landed and every warp is done with the ring before it is reused.
  ptx::cp_async_wait<0>();
  __syncthreads();
  trace.mark(kTraceLoopEnd);
  float* o_merge = reinterpret_cast<float*>(smem_raw);  // [kWarps][kRows][kOStride]
  float* max_merge = o_merge + Tr::kWarps * kRows * Tr::kOStride;  // [kWarps][kRows]
  float* sum_merge = max_merge + Tr::kWarps * kRows;
#pragma unroll
  for (int hh = 0; hh < 2; ++hh) {
    const int r = g + 8 * hh;
    const float sum = reduce_sum_lanes<4>(row_sum[0][hh]);
    if (t == 0) {
      max_merge[warp * kRows + r] = row_max[0][hh];
      sum_merge[warp * kRows + r] = sum;
    }
    float* dst = o_merge + (warp * kRows + r) * Tr::kOStride + 2 * t;
#pragma unroll
    for (int dt = 0; dt < kDTiles; ++dt) {
      *reinterpret_cast<float2*>(dst + 8 * dt) = make_float2(o[0][dt][2 * hh], o[0][dt][2 * hh + 1]);
    }
  }
  __syncthreads();
  trace.mark(kTraceMerged);

  // Thread tid: float4 column group tid % (kD / 4) of rows tid / (kD / 4) + k * kRowStep.
  constexpr int kColGroups = kD / 4;
  constexpr int kRowStep = Tr::kThreads / kColGroups;
  const int cg = tid % kColGroups;
  // Not unrolled, and left at the first padding row (the rows after it are padding too): this
  // code runs once per block, from a cold instruction cache, so its size is its time. Unrolled,
  // the 4 row copies at d128 took 1.3 us from the warps' merge to the last store at batch 1 x 8k
  // (H100, tools/profile/decode_step.py --trace), 4 of 16 rows valid at 32 / 8 heads.
#pragma unroll 1
  for (int r = tid / kColGroups; r < kRows; r += kRowStep) {
    const PackedRow pr = packed_row(r0 + r, split.by_group, hk, rows_total);
    if (!pr.valid) break;
    // The warps' states are relative to their own (possibly stale) maxima: rescale to the
    // largest, as combine() does with splits.
    float m = -INFINITY;
#pragma unroll
    for (int w = 0; w < Tr::kWarps; ++w) m = fmaxf(m, max_merge[w * kRows + r]);
    const float sub = safe_max(m);
    float l = 0.0f;
    float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
    for (int w = 0; w < Tr::kWarps; ++w) {
      const float wt = exp2f(exp2_arg(max_merge[w * kRows + r], sub, args.scale_log2));
      const float lw = sum_merge[w * kRows + r];
      if (lw == 0.0f) continue;  // a warp that saw no key (its max may be -inf: wt NaN-free)
      l = fmaf(lw, wt, l);
      const float4 ow = *reinterpret_cast<const float4*>(o_merge + (w * kRows + r) * Tr::kOStride +
                                                         4 * cg);
      acc.x = fmaf(wt, ow.x, acc.x);
      acc.y = fmaf(wt, ow.y, acc.y);
      acc.z = fmaf(wt, ow.z, acc.z);
      acc.w = fmaf(wt, ow.w, acc.w);
    }
    decode_finish_row<T>(args, split, blk.s_idx, b, pr.i, pr.h, 4 * cg, m, l, acc, cg == 0);
  }
  trace.report(count);
}

}  // namespace flashattn::cuda
