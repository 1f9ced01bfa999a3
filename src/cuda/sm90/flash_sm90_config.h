// Tile shapes of the Hopper flash kernel (wgmma + TMA, sm_90a), and the one chosen per head dim.
// Plain constexpr arithmetic: the host code (backend, tensor maps) includes it too.
//
// A block owns kBlockM = 128 (d64: 192) query rows of one (batch, head) at a time (a
// persistent block takes several such work tiles in turn) and streams kBlockN-key tiles of K
// and V through a kStages-deep ring in shared memory. Warp roles (FlashAttention-3's layout):
//   warpgroup 0      producer: one elected lane of warp 0 issues every TMA copy (per work
//                    tile Q, then K and V per key tile); the warpgroup gives its registers
//                    back (setmaxnreg)
//   warpgroups 1-2   consumers (1-3 at kConsumers = 3): each owns 64 query rows end to end
//                    (S = Q K^T, softmax, O += P V, output); they never exchange data
// Shared-memory tiles are 128B-swizzled column blocks of 64 elements (cuda/primitives/
// wgmma_layout.h), one TMA box {64, rows} per block, so a tile's width is the head dim rounded
// up to 64 (kHeadDimPad): d96 loads a second block whose columns 96-127 lie past the tensor's
// inner extent and arrive as zeros, and its O accumulator is 128 wide (the last 32 columns are
// computed on zeros and never stored). kBlockN and kStages per head dim come from
// tools/tune_sm90 (docs/performance.md, flash-sm90 v4), within 227 KB and the 240-register
// consumer budget.
#pragma once

#include <cstdint>

#include "common/mask_rule.h"

namespace flashattn::cuda {

template <int kHeadDim_, int kBlockN_, int kStages_, bool kPingPong_ = false,
          int kPingPongMinTiles_ = 0, int kConsumers_ = 2, int kQBuffers_ = 1>
struct Sm90Config {
  static constexpr int kHeadDim = kHeadDim_;
  // The consumer warpgroups take turns issuing their products (flash_sm90_kernel.cuh) on work
  // tiles of at least kPingPongMinTiles key tiles; shorter ones issue freely. While each work
  // tile opened and closed its own ring of turns (v3-v12) they cost on short tiles (the tuner,
  // N176 with against without: d128 512 -5%, 1k -2.5%; causal 512 -8%, 1k -5%); since the
  // ring carries over between work tiles (v13) they pay on every tile (kPingPongFrom).
  static constexpr bool kPingPong = kPingPong_;
  static constexpr int kPingPongMinTiles = kPingPongMinTiles_;
  // Consumer warpgroups of 64 query rows each: two (kBlockM = 128), or three (kBlockM = 192,
  // FlashAttention-3's d64 shape: a third warp per scheduler to hide the softmax's latency, at
  // 160 registers per consumer thread instead of 240).
  static constexpr int kConsumers = kConsumers_;
  static constexpr int kBlockM = 64 * kConsumers;
  static constexpr int kBlockN = kBlockN_;
  static constexpr int kStages = kStages_;
  // Rate per (row x key) in percent of two consumers' at equal kBlockN, for
  // sm90_short_tiles_pay: three ran d64 16k at 510.6 TFLOP/s against 419.6 (tools/tune_sm90,
  // N128 both, docs/performance.md flash-sm90 v10).
  static constexpr int kRatePct = kConsumers == 3 ? 122 : 100;
  // Q buffers in shared memory: with two, work tile k + 1's Q loads into the other buffer while
  // tile k runs (round k takes buffer k % kQBuffers), instead of after tile k's last S. A tuner
  // candidate (tools/tune_sm90) where the shared memory has room: d64 (113 KB), d128 N128
  // (193 KB); not d128 N176 (241 KB) or d256.
  static constexpr int kQBuffers = kQBuffers_;

  static constexpr int kWarpgroup = 128;  // threads
  static constexpr int kThreads = (1 + kConsumers) * kWarpgroup;
  static constexpr int kConsumerRows = kBlockM / kConsumers;  // one wgmma m64
  // 384 threads start at 168 registers each (65536 / 384, __launch_bounds__(384, 1)); the
  // producer's 168 -> 24 frees 144 * 128 = 18432, the consumers' 168 -> 240 take 72 * 256 = 18432.
  // 512 threads start at 128: the producer's 128 -> 24 frees 13312, three consumer warpgroups'
  // 128 -> 160 take 12288 (setmaxnreg counts in multiples of 8; 168 would need 15360).
  static constexpr int kProducerRegs = 24, kConsumerRegs = kConsumers == 2 ? 240 : 160;

  static constexpr int kBlockCols = 64;  // elements per 128-byte swizzled row
  static constexpr int kHeadDimPad = (kHeadDim + kBlockCols - 1) / kBlockCols * kBlockCols;
  static constexpr int kColBlocks = kHeadDimPad / kBlockCols;
  static constexpr int kDSteps = kHeadDim / 16;  // k16 steps of QK^T (d96: 6, the zeros skipped)
  static constexpr int kNSteps = kBlockN / 16;   // k16 steps of PV
  static constexpr int kNTiles = kBlockN / 8;    // n8 column slabs of S per warp
  static constexpr int kDTiles = kHeadDimPad / 8;
  static constexpr int kChunks = kHeadDim / 8;   // 16-byte chunks of an output row
  // O += P V as kPvSplits products of kPvN columns: one m64n256 accumulator (d256) made ptxas
  // serialize the wgmmas and spill (C7512, ~1 KB), two of n128 do not.
  static constexpr int kPvSplits = kHeadDimPad > 192 ? 2 : 1;
  // Whether the variant kernel's epilogue stages O through Q's shared memory (and Q goes back
  // to the producer only after it): where storing 128 accumulator floats straight to global
  // memory spilled it, d256, 48-68 bytes with 4-byte stores (some inside the key loop), 20 with
  // the 16-byte ones. The dense kernel always stores straight from registers (no spill) and
  // returns Q after the last S (flash-sm90 v12).
  static constexpr bool kVariantStagedEpilogue = kPvSplits > 1;
  // The softmax's exponent argument as one FFMA where a warp's scaled maxima allow
  // (fragment_ops.cuh softmax_update's kFusedExp): the long tiles of d96 and d128 (N176) and
  // d192. Measured on an H100 (docs/performance.md, flash-sm90 v14, CLI A/B in one call): d96
  // 16k +16%, d128 16k +8%, d128 4k +6%, d192 16k +8%; d128's N128 short tiles lost 3% at 512
  // (the short tiles of d96 / d128 keep the exact form), d64 0.4-4% and d256 causal 1.5-2% (both
  // keep it everywhere).
  static constexpr bool kFusedExp =
      ((kHeadDim == 96 || kHeadDim == 128) && kBlockN == 176) || kHeadDim == 192;
  static constexpr int kPvN = kHeadDimPad / kPvSplits;

  static constexpr int kRowBytes = 128;
  static constexpr int kQBytes = kBlockM * kRowBytes * kColBlocks;
  static constexpr int kKvTileBytes = kBlockN * kRowBytes * kColBlocks;  // one K or V tile
  static constexpr int kQOffset = 0;
  static constexpr int kKOffset = kQOffset + kQBuffers * kQBytes;         // [kStages]
  static constexpr int kVOffset = kKOffset + kStages * kKvTileBytes;      // [kStages]
  static constexpr int kBarOffset = kVOffset + kStages * kKvTileBytes;
  // mbarriers: q_full[kQBuffers], k_full[kStages], v_full[kStages], k_empty[kStages],
  // v_empty[kStages], q_empty[kQBuffers], 8 bytes each; then each Q buffer's round's work tile
  // (8 bytes, 4 used).
  static constexpr int kBarBytes = 8 * (3 * kQBuffers + 4 * kStages);
  static constexpr int kAlignSlack = 1024;  // the dynamic base rounded up to the swizzle atom
  static constexpr int kSmemBytes = kBarOffset + kBarBytes + kAlignSlack;

  static_assert(kConsumers == 2 || kConsumers == 3, "two or three consumer warpgroups");
  static_assert(kQBuffers == 1 || kQBuffers == 2, "one or two Q buffers");
  static_assert(kQBuffers == 1 || !kVariantStagedEpilogue,
                "the staged epilogue writes O through the one Q buffer");
  static_assert(kHeadDim % 16 == 0, "head dim must be a multiple of 16");
  static_assert(kBlockN % 16 == 0 && kBlockN >= 16 && kBlockN <= 256, "kBlockN: wgmma N");
  static_assert(kKvTileBytes % 1024 == 0 && kQBytes % 1024 == 0, "tiles keep 1024-alignment");
  static_assert(kSmemBytes <= 227 * 1024, "shared memory per block exceeds 227 KB");
  static_assert(kKvTileBytes < (1 << 20), "mbarrier tx-count limit");
  static_assert(kPvN % kBlockCols == 0, "each PV product starts on a column block");
};

// The configuration each head dim runs with, from tools/tune_sm90 on the H200 (bf16, 4k and 16k,
// causal and not; docs/performance.md "flash-sm90"): the widest key tile that fits won at every
// head dim (N192 over N128 at d64 +4%, N176 over N128 at d128 +4-7%, N80 over N64 at d256 +14%),
// a third stage gained nothing (the K/V tiles come from L2 in time), ping-pong +0.3-1.7% at
// d64-d128. Consumer registers per thread: S = kBlockN / 2 floats, P = kBlockN / 4, O =
// kHeadDimPad / 2: d128 88 + 44 + 64, d256 40 + 20 + 128, under 240. d96 and d192 (not in the
// tuner) take the shape of their neighbour (d96 is computed 128 wide).
//
// The softmax's exponentials all run on MUFU. At d64, where MUFU looked like the bound (a
// consumer warp's softmax phase per N192 key tile: 564 instructions against 98 MUFU.EX2 at 8
// clocks each), a degree-3 polynomial on the FMA pipe for every 8th exponential was predicted
// +3.5-6% and measured 0.4-0.7% slower at 2k-4k (every 4th: 4-5% slower), -1.6% at 16k, and
// dropping it gained 1k 6.4%: the softmax phase already hides under the other warpgroup's
// products (docs/performance.md, flash-sm90 v8; the code is in git history, 850e3c0).
//
// Ping-pong on every work tile (kPingPongFrom = 1) since v13, whose turns carry over from tile
// to tile: the CLI A/B against v12's from-16 (turns closed per tile) measured d64 512 / 1k
// +4.3% / +3.7%, d128 +1.8% / +1.5%, window (1024, 0) at 512 +4-6.5%, 4k-16k within 1%
// (docs/performance.md, flash-sm90 v13). Before, per-tile rings lost at up to 8 tiles.
//
// d64 runs three consumer warpgroups (M192 N128, FlashAttention-3's d64 shape): with two, each
// scheduler held one consumer warp whose softmax phase the other warpgroup's products covered
// only in part; a third warp per scheduler covers it, and S + P + O = 64 + 32 + 32 registers fit
// the 160 that 512 threads leave. Tuner (bf16, H200, same run): dense 16k 421.5 (M128 N192) ->
// 510.6 TFLOP/s, 4k 415.9 -> 491.9, causal 16k 422.3 -> 477.2; N112 and N96 at M192 lost 4-7%,
// ping-pong from every tile tied from 16 (docs/performance.md, flash-sm90 v10). Short causal
// ranges keep M128 N128 (Sm90ShortConfigFor): causal 1k 279.5 against 255.0.
template <int kHeadDim>
struct Sm90ConfigFor;
constexpr int kPingPongFrom = 1;
//                                                  d    N  stages ping-pong from   smem
template <> struct Sm90ConfigFor<64>  {
  using type = Sm90Config<64, 128, 2, true, kPingPongFrom, 3>;  // 89 KB, 3 consumers
};
template <> struct Sm90ConfigFor<96>  {
  using type = Sm90Config<96, 176, 2, true, kPingPongFrom>;  // 209 KB
};
template <> struct Sm90ConfigFor<128> {
  using type = Sm90Config<128, 176, 2, true, kPingPongFrom>;  // 209 KB
};
template <> struct Sm90ConfigFor<192> { using type = Sm90Config<192, 96, 2>; };  // 193 KB
template <> struct Sm90ConfigFor<256> { using type = Sm90Config<256, 80, 2>; };  // 225 KB

// A second shape for short key ranges, where a wide tile's partial work is a large share:
// d64's 192-row blocks straddle the causal diagonal with more masked scores than 128-row ones
// (causal 1k: M192 N128 255.0 TFLOP/s against M128 N128 279.5; earlier, N192 computed 1152
// keys for 1024: v3 with N128 ran d64 1k at 316.4, v4 with N192 at 286.6); d128's N176 runs
// causal 512 at 248.3 against N128's 277.6 and causal 1k at 362.8 against 390.5
// (tools/tune_sm90, both without ping-pong), and puts a window (1024, 0) block's 1152 keys in
// 7 tiles of 176 against 9 of 128. Head dims without one use their Sm90ConfigFor.
// sm90_short_tiles_pay picks.
template <int kHeadDim>
struct Sm90ShortConfigFor { using type = typename Sm90ConfigFor<kHeadDim>::type; };
template <> struct Sm90ShortConfigFor<64> {
  using type = Sm90Config<64, 128, 2, true, kPingPongFrom>;  // 81 KB
};
template <> struct Sm90ShortConfigFor<128> {
  using type = Sm90Config<128, 128, 2, true, kPingPongFrom>;  // 161 KB
};

// A tile shape as sm90_short_tiles_pay weighs it: rows and keys per tile, and its rate per
// (row x key) in percent of two consumer warpgroups' at equal kBlockN.
struct Sm90TileShape {
  int block_m, block_n, rate_pct;
};
template <class Cfg>
constexpr Sm90TileShape sm90_tile_shape() {
  return {Cfg::kBlockM, Cfg::kBlockN, Cfg::kRatePct};
}

// Whether the short shape takes less time than the long one for one sequence (seqlen_q
// queries, seqlen_k keys, the window (left, right) with -1 unbounded and causal as right = 0),
// by the sum over its blocks of rows x key tiles x (keys per tile + kTileCost) / rate, the
// tiles counted as the kernel does, from the first key a block sees (MaskRule::key_tiles).
// kTileCost, a key tile's fixed cost in keys (the wait for S, the row max, the barrier
// handshakes), fits the tuner's d64 16k pair (N192 431.1 against N128 414.4 TFLOP/s: 20 keys);
// it then gives d64 +7% for N128 at 1k (measured +10%) and -1.6% at 4k (measured -0.7%), d128
// causal +16% at 512 and +10% at 1k (measured +12% and +7.6%), d128 dense a tie at 512 and 1k
// (measured 0.99x and 0.96x) and N176 ahead from 2k. With d64's 192-row blocks (rate 122) it
// gives M128 causal 1k +10% (measured +9.6%: 279.5 against 255.0 TFLOP/s), M192 dense 1k +8%
// (measured +4.5%), dense 4k +18% (+16%), causal 4k +12% (+8.3%). A partial last block counts
// whole: its consumers run on rows past the end. Long sequences are sampled: at most 64 blocks
// per shape, spread evenly, so the host's cost stays flat.
inline bool sm90_short_tiles_pay(long long seqlen_q, long long seqlen_k, long long window_left,
                                 long long window_right, Sm90TileShape long_shape,
                                 Sm90TileShape short_shape) {
  if ((long_shape.block_m == short_shape.block_m && long_shape.block_n == short_shape.block_n) ||
      seqlen_q <= 0 || seqlen_k <= 0) {
    return false;
  }
  constexpr long long kTileCost = 20, kMaxSamples = 64;
  const MaskRule rule = MaskRule::make(seqlen_q, seqlen_k, window_left, window_right, false);
  auto cost = [&](const Sm90TileShape& shape) {
    const long long blocks = (seqlen_q + shape.block_m - 1) / shape.block_m;
    const long long step = (blocks + kMaxSamples - 1) / kMaxSamples;
    long long keys = 0;
    for (long long m = 0; m < blocks; m += step) {
      std::int64_t first_key = 0, tiles = 0;
      rule.key_tiles(m * shape.block_m, shape.block_m, shape.block_n, &first_key, &tiles);
      keys += tiles * (shape.block_n + kTileCost);
    }
    return static_cast<double>(keys) * static_cast<double>(step * shape.block_m) /
           shape.rate_pct;
  };
  return cost(short_shape) < cost(long_shape);
}

}  // namespace flashattn::cuda
