// Host launchers of the TMA, mbarrier, stmatrix and elect.sync test kernels
// (sm90_tma_kernels.cu). Shared-memory contents come back as raw images, so the test
// (sm90_tma_test.cc) checks every element's position against cuda/primitives/wgmma_layout.h.
#pragma once

#include <cuda.h>  // CUtensorMap

#include <cstdint>
#include <string>
#include <vector>

#include "flashattn/status.h"

namespace flashattn::testing::sm90 {

// Ok when the sm_90a test kernels can run here; kBackendUnavailable (skip) or kInternal (fail:
// an sm_90a build on a 9.0 device that would not run them) otherwise. sm90_test_support.cuh.
Status tma_usable();

// Up to 4 boxes of one tensor map, coordinates innermost first (rank of the map). Box b lives at
// shared-memory offset b * box_bytes (each box a multiple of 1024 bytes: swizzle-aligned).
struct TmaBoxes {
  int rank = 0;
  int count = 0;
  int coords[4][5] = {};
  int box_bytes = 0;
};

// Loads the boxes (one mbarrier, expect_tx of count * box_bytes) into shared memory first filled
// with 0xFFFF, and returns the shared image, count * box_bytes / 2 elements.
Status run_tma_load(const CUtensorMap& map, const TmaBoxes& boxes,
                    std::vector<std::uint16_t>* smem);

// Writes `image` (count * box_bytes / 2 elements) into shared memory with ordinary stores, then
// stores the boxes by TMA.
Status run_tma_store(const CUtensorMap& map, const TmaBoxes& boxes,
                     const std::vector<std::uint16_t>& image);

// Loads `in` boxes through in_map, then stores the same shared memory as `out` boxes (same count
// and box_bytes) through out_map.
Status run_tma_round_trip(const CUtensorMap& in_map, const TmaBoxes& in, const CUtensorMap& out_map,
                          const TmaBoxes& out);

// mbarrier producer/consumer over a 2-stage ring, kPingIters iterations (6 phases per stage):
// producer warp 0 writes it * 1000 + lane into stage it % 2 (all 32 lanes arrive on full[s],
// count 32), 64 consumer threads read lanes c % 32 of it and arrive on empty[s] (count 64).
// values[it * 64 + c] is what consumer c read at iteration it; fresh[0], fresh[1] are
// try_wait(parity 0), try_wait(parity 1) on a barrier that no one has arrived on yet.
constexpr int kPingIters = 12, kPingConsumers = 64;
Status run_mbarrier_ping(std::vector<int>* values, std::vector<int>* fresh);

// A TMA ring, as the kernel's producer runs it: 2 stages of a 64 x 64 bf16 box, kRingTiles tiles
// of `map` (rows it * 64). One elected producer lane waits empty[s] (parity ^ 1), arms full[s]
// with expect_tx and loads; 128 consumer threads wait full[s], copy the stage to
// out[it][8192 bytes], fence the proxy and release empty[s].
constexpr int kRingTiles = 8;
Status run_tma_ring(const CUtensorMap& map, std::vector<std::uint16_t>* out);

// stmatrix.x4 of a 64 x 64 accumulator tile: frag[i * 128 + t] is accumulator register i of
// thread t (as 16 bits); the warpgroup stores it into a 128B-swizzled tile (the epilogue's
// addressing of stmatrix.cuh), returned as a 64 x 64 image.
Status run_stmatrix_tile(const std::vector<std::uint16_t>& frag, std::vector<std::uint16_t>* tile);

// One warp: regs[k * 32 + l] is register k of lane l; lane l addresses row l % 8 of matrix l / 8
// (matrix k at byte 128 k, rows of 16 bytes). Returns the 4 matrices stored plainly (plain[256
// elements]) and with .trans (trans[256]).
Status run_stmatrix_plain(const std::vector<std::uint32_t>& regs, std::vector<std::uint16_t>* plain,
                          std::vector<std::uint16_t>* trans);

// elect.sync in 4 warps, twice: out[call * 128 + tid] = 1 where elected.
Status run_elect(std::vector<int>* out);

}  // namespace flashattn::testing::sm90
