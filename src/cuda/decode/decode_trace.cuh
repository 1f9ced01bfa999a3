// Per-block timestamps of flash-decode's phases, to see where a decode step's time goes: block
// start and end on the GPU-wide clock, each phase boundary on the SM's cycle counter, printed by
// thread 0 as one "decode-trace" line per block when the block ends
// (tools/profile/decode_step.py --trace and decode_trace_report.py read them). Compiled in only
// with -DFLASHATTN_DECODE_TRACE (scripts/device_decode_trace.sh); otherwise every call is empty
// and the kernel is the same code.
#pragma once

#include <cstdint>

#ifdef FLASHATTN_DECODE_TRACE
#include <cstdio>
#endif

#include "cuda/primitives/special_regs.cuh"

namespace flashattn::cuda {

// The phase boundaries, in kernel order; kTraceTile0 + j for key tile j < kTraceTiles (the
// later tiles are not marked).
constexpr int kTraceTiles = 4;
enum DecodeTracePoint : int {
  kTraceEntry = 0,    // the block's first instruction
  kTraceBlock,        // the block's split, rows and key range known (cache_seqlens read)
  kTraceIssued,       // Q and the ring's first tiles issued
  kTraceLoop,         // the key loop's setup done (score mods, Q fragments' offsets)
  kTraceTile0,        // tile j landed for every thread (after the wait and barrier)
  kTraceLoopEnd = kTraceTile0 + kTraceTiles,  // the last tile's products done, ring drained
  kTraceMerged,       // the warps' states in shared memory
  kTraceEnd,          // the block's rows written
  kTracePoints
};
// report()'s line has one clk field per point; tools/profile/decode_trace_report.py reads it
// with the same names and order (its POINTS, TILE0 and TILES).
static_assert(kTracePoints == 11 && kTraceTile0 == 4, "report()'s fields and the report's");

struct DecodeTrace {
#ifdef FLASHATTN_DECODE_TRACE
  std::uint32_t* clk;  // shared: [kTracePoints]
  std::uint64_t t0;

  __device__ __forceinline__ static DecodeTrace start() {
    __shared__ std::uint32_t clk_smem[kTracePoints];
    DecodeTrace t;
    t.clk = clk_smem;
    t.t0 = ptx::globaltimer_ns();
    if (threadIdx.x == 0) t.clk[kTraceEntry] = ptx::clock_after(0);
    return t;
  }
  __device__ __forceinline__ void mark(int point, std::uint32_t dep = 0) const {
    if (threadIdx.x == 0) clk[point] = ptx::clock_after(dep);
  }
  __device__ __forceinline__ void report(int tiles) const {
    if (threadIdx.x != 0) return;
    clk[kTraceEnd] = ptx::clock_after(0);
    const std::uint64_t t1 = ptx::globaltimer_ns();
    std::uint32_t d[kTracePoints];
    for (int i = 0; i < kTracePoints; ++i) d[i] = clk[i] - clk[kTraceEntry];
    printf("decode-trace blk %u %u sm %u t0 %llu t1 %llu tiles %d clk %u %u %u %u %u %u %u %u %u %u %u\n",
           blockIdx.x, blockIdx.y, ptx::sm_id(), static_cast<unsigned long long>(t0),
           static_cast<unsigned long long>(t1), tiles, d[0], d[1], d[2], d[3], d[4], d[5], d[6],
           d[7], d[8], d[9], d[10]);
  }
#else
  __device__ __forceinline__ static DecodeTrace start() { return {}; }
  __device__ __forceinline__ void mark(int, std::uint32_t = 0) const {}
  __device__ __forceinline__ void report(int) const {}
#endif
};

}  // namespace flashattn::cuda
