// Tile shapes of the tensor-core (mma.sync) flash kernel, and the one chosen per head dim.
//
// A block owns kBlockM query rows of one (batch, head) and streams kBlockN-key tiles of K and V
// through a kStages-deep cp.async ring. Each of the kWarps warps owns kWarpM = kBlockM / kWarps
// rows end to end (QK^T, softmax, PV, output), so warps never exchange data; the only barriers
// are the one or two per key tile that publish the cp.async copies.
//
// Why kWarpM = 32 where registers allow it: every mma.sync m16n8k16 (4096 FLOP) needs a 256-byte
// B fragment from shared memory. With one 16-row m-tile per warp that is 16 FLOP per shared byte;
// at the H200's mma.sync peak (645 TFLOP/s measured, ~2600 FLOP/clock/SM) that asks for ~165
// B/clock/SM of the 128 shared memory delivers. Two m-tiles share each B fragment: 32 FLOP/byte,
// ~83 B/clock. kWarpM = 32 costs registers: the O accumulator is 32 * head_dim / 32 lanes =
// head_dim floats per thread, so d > 128 (256 floats at d256) uses kWarpM = 16.
#pragma once

namespace flashattn::cuda {

template <int kHeadDim_, int kBlockM_, int kBlockN_, int kWarps_, bool kQInRegs_, int kMinBlocks_>
struct Sm80Config {
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kBlockM = kBlockM_;
  static constexpr int kBlockN = kBlockN_;
  static constexpr int kWarps = kWarps_;
  // Q's A fragments loaded into registers once per block instead of from shared memory for
  // every key tile: saves a third of the QK^T shared-memory traffic, costs head_dim * kWarpM / 64
  // registers.
  static constexpr bool kQInRegs = kQInRegs_;
  static constexpr int kMinBlocks = kMinBlocks_;  // __launch_bounds__: caps registers
  // K and V tiles resident: the one being read and the next, in flight. One barrier per key tile
  // waits for both K and V of tile j before QK^T; it frees the warps of a block from moving in
  // lockstep twice per tile (+6% at d128 over waiting for K and V separately; 3 stages gained
  // nothing over 2 with 128x64 tiles: docs/performance.md, v2b and v3).
  static constexpr int kStages = 2;
  // Softcap's FMA-pipe tanh on tiles whose scores allow it (fragment_ops.cuh score_mod_fragment).
  // Not at d256: its branch spilled the variant kernel's 254 registers (8 bytes, sm_90a), and
  // at d256 the exact form's three MUFU ops per score are ~0.8x the tensor time of a score
  // (1024 FLOPs), where at d128 they are ~1.6x.
  static constexpr bool kSoftcapPoly = kHeadDim <= 192;

  static constexpr int kThreads = kWarps * 32;
  static constexpr int kWarpM = kBlockM / kWarps;
  static constexpr int kMTiles = kWarpM / 16;    // m16 tiles per warp
  static constexpr int kNTiles = kBlockN / 8;    // n8 tiles of S per m-tile
  static constexpr int kDTiles = kHeadDim / 8;   // n8 tiles of O per m-tile
  static constexpr int kDSteps = kHeadDim / 16;  // k16 steps of QK^T
  static constexpr int kNSteps = kBlockN / 16;   // k16 steps of PV
  static constexpr int kChunks = kHeadDim / 8;   // 16-byte chunks of a row in global memory
  // Shared-memory rows are whole multiples of 8 chunks (128 bytes) so the XOR swizzle
  // chunk ^ (row % 8) stays inside the row; d96 pads 12 chunks to 16.
  static constexpr int kRowChunks = (kChunks + 7) / 8 * 8;
  static constexpr int kRowBytes = kRowChunks * 16;
  static constexpr int kQBytes = kBlockM * kRowBytes;
  static constexpr int kKvTileBytes = kBlockN * kRowBytes;
  static constexpr int kSmemBytes = kQBytes + 2 * kStages * kKvTileBytes;

  static_assert(kHeadDim % 16 == 0, "head dim must be a multiple of 16");
  static_assert(kWarpM == 16 || kWarpM == 32, "a warp owns 16 or 32 query rows");
  static_assert(kBlockN % 16 == 0, "key tiles are whole k16 steps of PV");
  static_assert(kSmemBytes <= 227 * 1024, "shared memory per block exceeds 227 KB");
};

// The configuration each head dim runs with: the fastest spill-free candidate of tools/tune_sm80
// on the H200 (docs/performance.md, docs/bench/tune-sm80-v*.txt). d96 and d192 were not timed:
// they take the shapes of d128 and d256, whose register and shared-memory budgets they fit.
template <int kHeadDim>
struct Sm80ConfigFor;
//                                                  d    M    N  W  Q-regs blocks
template <> struct Sm80ConfigFor<64>  { using type = Sm80Config<64, 128, 64, 4, true, 2>; };
template <> struct Sm80ConfigFor<96>  { using type = Sm80Config<96, 128, 64, 4, false, 2>; };
template <> struct Sm80ConfigFor<128> { using type = Sm80Config<128, 128, 64, 4, false, 2>; };
template <> struct Sm80ConfigFor<192> { using type = Sm80Config<192, 64, 32, 4, true, 2>; };
template <> struct Sm80ConfigFor<256> { using type = Sm80Config<256, 64, 32, 4, true, 2>; };

}  // namespace flashattn::cuda
