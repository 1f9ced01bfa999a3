// Per consumer warpgroup and work tile, the SM clock at each phase boundary of consume(), to see
// what a work tile costs beyond its key tiles (the fit of docs/performance.md puts it at about
// 2.1 key tiles' time at d128, cuDNN's at 1.4): the wait for Q, the first turn, the first S and
// its softmax, the turns of the next key tiles, the last P V and the epilogue. Thread 0 of each
// consumer warpgroup writes the stamps of the block's first kSm90TraceRounds work tiles to a
// device buffer and prints them when its loop ends, one "sm90-trace" line per work tile
// (tools/profile/sm90_trace.py runs a shape and reads them). Compiled in only with
// -DFLASHATTN_SM90_TRACE (scripts/device_sm90_trace.sh); otherwise every call is empty and the
// kernel is the same code.
#pragma once

#include <cstdint>

#ifdef FLASHATTN_SM90_TRACE
#include <cstdio>
#endif

#include "cuda/primitives/special_regs.cuh"

namespace flashattn::cuda::sm90 {

constexpr int kSm90TraceRounds = 8;     // work tiles traced per block
constexpr int kSm90TraceTurns = 4;      // key-tile turns marked after the first S's
constexpr int kSm90TraceBlocks = 1024;  // blocks traced (the persistent grid has one per SM)
constexpr int kSm90TraceConsumers = 3;  // consumer warpgroups a block has at most
enum Sm90TracePoint : int {
  kTraceTop = 0,   // the consumer's work-tile loop at this round (before Q's wait)
  kTraceQ,         // the round's Q landed (q_full passed), coordinates known
  kTraceTurn0,     // the first S's turn began
  kTraceS0,        // the first S done (its wgmma wait)
  kTraceP0,        // its softmax done, P packed
  kTraceTurn1,     // key tile j's turn began (S_j and P_{j-1} V_{j-1}), j = 1 .. kSm90TraceTurns
  kTraceLastTurn = kTraceTurn1 + kSm90TraceTurns,  // the last P V's turn began
  kTraceLastPv,    // the last P V done
  kTraceStored,    // the epilogue's stores issued
  // Inside key tile j's step, j = 1 .. kSm90TraceTurns (the steady tile's time, turn j ->
  // turn j + 1, split into its waits and its work):
  kTraceSj,                                   // S_j landed (wgmma_wait<1>)
  kTraceSoftmaxj = kTraceSj + kSm90TraceTurns,  // its softmax done
  kTracePvj = kTraceSoftmaxj + kSm90TraceTurns,  // P_{j-1} V_{j-1} landed (wgmma_wait<0>)
  kTracePackj = kTracePvj + kSm90TraceTurns,   // P_j packed, O rescaled
  kSm90TracePoints = kTracePackj + kSm90TraceTurns
};
// Fields of a traced round in the buffer: the tile, its key tiles, the global timer at the top
// (2 words), then the points.
constexpr int kSm90TraceHead = 4;
constexpr int kSm90TraceFields = kSm90TraceHead + kSm90TracePoints;
// The report's columns (tools/profile/sm90_trace.py POINTS) follow this order.
static_assert(kSm90TracePoints == 28, "sm90_trace.py's POINTS");

#ifdef FLASHATTN_SM90_TRACE
// One per translation unit (no relocatable device code): each kernel instance writes its own.
static __device__ std::uint32_t g_sm90_trace[kSm90TraceBlocks * kSm90TraceConsumers *
                                             kSm90TraceRounds * kSm90TraceFields];
#endif

// A consumer's trace of one round (work tile): empty past the traced rounds and blocks, and on
// every thread but the warpgroup's first.
struct Sm90Trace {
#ifdef FLASHATTN_SM90_TRACE
  int at;  // the round's first field in g_sm90_trace; -1: not traced

  // The first field of (block, consumer, round k) in g_sm90_trace.
  __device__ __forceinline__ static int field0(unsigned blk, int consumer, int k) {
    return ((static_cast<int>(blk) * kSm90TraceConsumers + consumer) * kSm90TraceRounds + k) *
           kSm90TraceFields;
  }
  __device__ __forceinline__ static Sm90Trace round(int consumer, int k, int warpgroup_size) {
    Sm90Trace t;
    const unsigned blk = ptx::block_index_x();
    const bool traced = k < kSm90TraceRounds && blk < kSm90TraceBlocks &&
                        ptx::thread_index_x() % warpgroup_size == 0;
    t.at = traced ? field0(blk, consumer, k) : -1;
    return t;
  }
  __device__ __forceinline__ void mark(int point, std::uint32_t dep = 0) const {
    if (at >= 0) g_sm90_trace[at + kSm90TraceHead + point] = ptx::clock_after(dep);
  }
  __device__ __forceinline__ void top() const {
    if (at < 0) return;
    const std::uint64_t ns = ptx::globaltimer_ns();
    g_sm90_trace[at + 0] = ~0u;  // no tile yet (the block's end)
    g_sm90_trace[at + 2] = static_cast<std::uint32_t>(ns);
    g_sm90_trace[at + 3] = static_cast<std::uint32_t>(ns >> 32);
    mark(kTraceTop);
  }
  __device__ __forceinline__ void tile(unsigned tile, int key_tiles) const {
    if (at < 0) return;
    g_sm90_trace[at + 0] = tile;
    g_sm90_trace[at + 1] = static_cast<std::uint32_t>(key_tiles);
  }
  // After the consumer's last round: its rounds' lines (rounds: how many it ran).
  __device__ __forceinline__ static void report(int consumer, int rounds, int warpgroup_size) {
    const unsigned blk = ptx::block_index_x();
    if (blk >= kSm90TraceBlocks || ptx::thread_index_x() % warpgroup_size != 0) return;
    for (int k = 0; k < rounds && k < kSm90TraceRounds; ++k) {
      const std::uint32_t* f = g_sm90_trace + field0(blk, consumer, k);
      const std::uint32_t* p = f + kSm90TraceHead;
      printf("sm90-trace blk %u sm %u c %d round %d tile %u tiles %u t0 %llu clk %u %u %u %u %u "
             "%u %u %u %u %u %u %u %u %u %u %u %u %u %u %u %u %u %u %u %u %u %u %u\n",
             blk, ptx::sm_id(), consumer, k, f[0], f[1],
             static_cast<unsigned long long>(f[2]) | (static_cast<unsigned long long>(f[3]) << 32),
             p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7], p[8], p[9], p[10], p[11], p[12],
             p[13], p[14], p[15], p[16], p[17], p[18], p[19], p[20], p[21], p[22], p[23], p[24],
             p[25], p[26], p[27]);
    }
  }
#else
  __device__ __forceinline__ static Sm90Trace round(int, int, int) { return {}; }
  __device__ __forceinline__ void mark(int, std::uint32_t = 0) const {}
  __device__ __forceinline__ void top() const {}
  __device__ __forceinline__ void tile(unsigned, int) const {}
  __device__ __forceinline__ static void report(int, int, int) {}
#endif
};

}  // namespace flashattn::cuda::sm90
