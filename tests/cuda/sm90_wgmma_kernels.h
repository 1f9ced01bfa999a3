// Host launchers of the wgmma / setmaxnreg test kernels (sm90_wgmma_kernels.cu). Each runs one
// block on the current device and returns what the threads held, in raw per-thread order, so
// that the test (sm90_wgmma_test.cc) maps registers to matrix positions through the documented
// layouts of cuda/primitives/wgmma_layout.h: a wrong layout there fails the test.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "cuda/primitives/wgmma_layout.h"
#include "flashattn/status.h"
#include "flashattn/tensor.h"

namespace flashattn::testing::sm90 {

// Ok when the sm_90a test kernels can run here; kBackendUnavailable (skip) or kInternal (fail:
// an sm_90a build on a 9.0 device that would not run them) otherwise. sm90_test_support.cuh.
Status wgmma_usable();

// One m64nNk16 product chain: D[64 x n] = A[64 x k] * B[k x n], k / 16 steps.
struct WgmmaCase {
  DType dtype;
  int n, k;
  bool a_from_registers;     // the RS form; else SS (A in shared memory)
  cuda::ptx::Major b_major;  // kK: B stored [n][k]; kMN: B stored [k][n]
};
// The cases compiled into the kernel file (one instantiation each).
std::vector<WgmmaCase> wgmma_cases();

// One warpgroup runs `c`; D starts as NaN and the first step does not accumulate.
//   a_tile:  SS only: A as a 128B-swizzled K-major tile image (sw128_offset), 64 rows x k
//            columns, sw128_tile_bytes(64, k) / 2 elements (128-byte rows even when k < 64)
//   a_frags: RS only: register r of k16 step j of thread t at [(j * 4 + r) * 128 + t]
//   b_tile:  B as a swizzled tile image, n rows x k columns (kK) or k rows x n columns (kMN)
//   d:       accumulator register i of thread t at [i * 128 + t]
Status run_wgmma(const WgmmaCase& c, const std::vector<std::uint16_t>& a_tile,
                 const std::vector<std::uint32_t>& a_frags,
                 const std::vector<std::uint16_t>& b_tile, std::vector<float>* d);

// Attention's two products on one tile, head dim 128, 64 queries, 64 keys:
//   S = Q K^T (SS, Q and K K-major), P = S rounded to dtype and repacked in registers as the A
//   fragments of the next product (acc_index_of_a), O = P V (RS, V MN-major, N = 128).
// q_tile, k_tile: 64 rows x 128 images; v_tile: 64 keys x 128 image. o: [i * 128 + t], 64 regs.
Status run_attention_chain(DType dtype, const std::vector<std::uint16_t>& q_tile,
                           const std::vector<std::uint16_t>& k_tile,
                           const std::vector<std::uint16_t>& v_tile, std::vector<float>* o);

// The warp-specialized shape of the sm_90 kernel, 3 warpgroups (384 threads): warpgroup 0 drops
// to 24 registers, its warp 0 loads A [128][64] and B [384][64] (bf16, row-major) by TMA with
// 128B swizzle onto one mbarrier, and its warp 1 publishes a bias[384] through a named barrier
// (bar.arrive); warpgroups 1 and 2 rise to 240 registers and each computes, from its 64 rows of
// A (rows 64c..64c+63 for consumer c), D1 = A_c B[0:256]^T and D2 = A_c B[256:384]^T (192 live
// accumulator registers, more than the 168 a thread starts with), plus the bias by column.
// Then the consumers swap D1's register 0 through shared memory across a second named barrier.
struct WarpSpecializedResult {
  std::vector<float> d1;    // [c][i][t]: consumer c, register i (128), thread t
  std::vector<float> d2;    // [c][i][t], 64 registers
  std::vector<float> swap;  // [c][t]: what consumer c read of the other consumer's d1[0]
};
Status run_warp_specialized(const std::vector<std::uint16_t>& a,
                            const std::vector<std::uint16_t>& b, const std::vector<float>& bias,
                            WarpSpecializedResult* out);

}  // namespace flashattn::testing::sm90
