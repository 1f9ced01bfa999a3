// wgmma.mma_async (sm_90a only): one warpgroup (4 consecutive warps, the first warp index a
// multiple of 4; 128 threads, all executing every call below, no divergence) computes
// D[64 x N] (+)= A[64 x 16] * B[16 x N] per instruction, bf16 or fp16 inputs, float32
// accumulate. B always comes from shared memory through a descriptor; A from shared memory (SS)
// or from 4 registers per thread (RS). Layouts, descriptors and fragments: wgmma_layout.h.
//
// The instructions are asynchronous. Protocol, per batch of products:
//   fence_operands(acc)      compiler fence: no ordinary use of acc moves into the async window
//   wgmma_fence()            orders earlier register writes (acc, A fragments) before the wgmmas
//   wgmma_ss / wgmma_rs ...  the k16 steps; the first with accumulate = false (D = A*B, so the
//                            accumulator needs no zeroing stores), the rest true
//   wgmma_commit()           closes the batch into a group
//   wgmma_wait<n>()          until at most n groups are pending; then fence_operands(acc)
// Reading or writing acc or the A registers of a pending group is undefined; so is letting TMA
// overwrite shared memory that a pending group reads. Shared memory written with ordinary stores
// and read by wgmma needs fence_proxy_async_shared() (fence.cuh) in the writers before the
// barrier. Consecutive wgmmas into the same accumulator need no fence between them.
// Build A fragments (e.g. P from S) before wgmma_fence(): built after it, ptxas inserts its own
// waits (warning C7519/C7517) and serializes the pipeline. Keep every wrapper inlined and every
// accumulator index a compile-time constant (no calls, no run-time indexing inside the batch).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "cuda/primitives/arch.h"
#include "cuda/primitives/wgmma_layout.h"

namespace flashattn::cuda::ptx {

// Orders this warpgroup's earlier accesses to accumulator and A-fragment registers (and shared
// memory, for wgmma's reads) before the wgmmas that follow.
__device__ __forceinline__ void wgmma_fence() {
#if defined(FA_SM90A_PTX)
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#else
  __trap();
#endif
}

// Closes the wgmmas issued since the last commit into one group.
__device__ __forceinline__ void wgmma_commit() {
#if defined(FA_SM90A_PTX)
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
#else
  __trap();
#endif
}

// Waits until at most kPending of the most recent groups are still running.
template <int kPending>
__device__ __forceinline__ void wgmma_wait() {
  static_assert(kPending >= 0 && kPending <= 7, "wgmma.wait_group takes 0..7");
#if defined(FA_SM90A_PTX)
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kPending) : "memory");
#else
  __trap();
#endif
}

// Compiler-only fence on each register of an accumulator (or A fragment): nvcc may not move
// ordinary reads or writes of them across it, i.e. into the window between wgmma_fence() and
// wgmma_wait(). Emits no instruction.
template <int kRegs>
__device__ __forceinline__ void fence_operands(float (&r)[kRegs]) {
#pragma unroll
  for (int i = 0; i < kRegs; ++i) asm volatile("" : "+f"(r[i])::"memory");
}
template <int kRegs>
__device__ __forceinline__ void fence_operands(std::uint32_t (&r)[kRegs]) {
#pragma unroll
  for (int i = 0; i < kRegs; ++i) asm volatile("" : "+r"(r[i])::"memory");
}

namespace detail {

// The asm operand lists. A product of width N has R = N / 2 accumulator operands %0..%R-1 ("+f",
// read and written); the inputs follow from %R on. PTX needs one literal string per N, hence the
// lists of 8, 16, ..., 128 operands and one specialization per N below.
// clang-format off
#define FA_WGMMA_D8 "%0, %1, %2, %3, %4, %5, %6, %7"
#define FA_WGMMA_D16 FA_WGMMA_D8 ", %8, %9, %10, %11, %12, %13, %14, %15"
#define FA_WGMMA_D24 FA_WGMMA_D16 ", %16, %17, %18, %19, %20, %21, %22, %23"
#define FA_WGMMA_D32 FA_WGMMA_D24 ", %24, %25, %26, %27, %28, %29, %30, %31"
#define FA_WGMMA_D40 FA_WGMMA_D32 ", %32, %33, %34, %35, %36, %37, %38, %39"
#define FA_WGMMA_D48 FA_WGMMA_D40 ", %40, %41, %42, %43, %44, %45, %46, %47"
#define FA_WGMMA_D56 FA_WGMMA_D48 ", %48, %49, %50, %51, %52, %53, %54, %55"
#define FA_WGMMA_D64 FA_WGMMA_D56 ", %56, %57, %58, %59, %60, %61, %62, %63"
#define FA_WGMMA_D72 FA_WGMMA_D64 ", %64, %65, %66, %67, %68, %69, %70, %71"
#define FA_WGMMA_D80 FA_WGMMA_D72 ", %72, %73, %74, %75, %76, %77, %78, %79"
#define FA_WGMMA_D88 FA_WGMMA_D80 ", %80, %81, %82, %83, %84, %85, %86, %87"
#define FA_WGMMA_D96 FA_WGMMA_D88 ", %88, %89, %90, %91, %92, %93, %94, %95"
#define FA_WGMMA_D104 FA_WGMMA_D96 ", %96, %97, %98, %99, %100, %101, %102, %103"
#define FA_WGMMA_D112 FA_WGMMA_D104 ", %104, %105, %106, %107, %108, %109, %110, %111"
#define FA_WGMMA_D120 FA_WGMMA_D112 ", %112, %113, %114, %115, %116, %117, %118, %119"
#define FA_WGMMA_D128 FA_WGMMA_D120 ", %120, %121, %122, %123, %124, %125, %126, %127"

#define FA_WGMMA_F8(d) \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), \
  "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7])
#define FA_WGMMA_F16(d) FA_WGMMA_F8(d), \
  "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), \
  "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
#define FA_WGMMA_F24(d) FA_WGMMA_F16(d), \
  "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), \
  "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23])
#define FA_WGMMA_F32(d) FA_WGMMA_F24(d), \
  "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), \
  "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
#define FA_WGMMA_F40(d) FA_WGMMA_F32(d), \
  "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), \
  "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39])
#define FA_WGMMA_F48(d) FA_WGMMA_F40(d), \
  "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), \
  "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47])
#define FA_WGMMA_F56(d) FA_WGMMA_F48(d), \
  "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), \
  "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55])
#define FA_WGMMA_F64(d) FA_WGMMA_F56(d), \
  "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), \
  "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
#define FA_WGMMA_F72(d) FA_WGMMA_F64(d), \
  "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), \
  "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71])
#define FA_WGMMA_F80(d) FA_WGMMA_F72(d), \
  "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), \
  "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79])
#define FA_WGMMA_F88(d) FA_WGMMA_F80(d), \
  "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), \
  "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87])
#define FA_WGMMA_F96(d) FA_WGMMA_F88(d), \
  "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), \
  "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95])
#define FA_WGMMA_F104(d) FA_WGMMA_F96(d), \
  "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), \
  "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103])
#define FA_WGMMA_F112(d) FA_WGMMA_F104(d), \
  "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), \
  "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111])
#define FA_WGMMA_F120(d) FA_WGMMA_F112(d), \
  "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), \
  "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119])
#define FA_WGMMA_F128(d) FA_WGMMA_F120(d), \
  "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), \
  "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])

// SS: D, a-desc, b-desc, scale-d (a predicate made from a register), imm-scale-a/b = 1,
// imm-trans-a/b (immediates: Major). Inputs: %IA desc_a, %IB desc_b, %IS scale_d, %ITA, %ITB.
#define FA_WGMMA_SS_ASM(N, R, TY, IA, IB, IS, ITA, ITB)                                        \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %" #IS ", 0;\n"                               \
               "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." TY "." TY " {" FA_WGMMA_D##R \
               "}, %" #IA ", %" #IB ", p, 1, 1, %" #ITA ", %" #ITB ";\n}\n"                    \
               : FA_WGMMA_F##R(d)                                                              \
               : "l"(desc_a), "l"(desc_b), "r"(scale_d), "n"(kTransA), "n"(kTransB))

// RS: D, {a0..a3}, b-desc, scale-d, imm-scale-a/b = 1, imm-trans-b (A in registers is always
// K-major). Inputs: %I0..%I3 the A registers, %IB desc_b, %IS scale_d, %ITB.
#define FA_WGMMA_RS_ASM(N, R, TY, I0, I1, I2, I3, IB, IS, ITB)                                 \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %" #IS ", 0;\n"                               \
               "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." TY "." TY " {" FA_WGMMA_D##R \
               "}, {%" #I0 ", %" #I1 ", %" #I2 ", %" #I3 "}, %" #IB ", p, 1, 1, %" #ITB ";\n}\n" \
               : FA_WGMMA_F##R(d)                                                              \
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(scale_d),        \
                 "n"(kTransB))

template <int N>
struct Wgmma {
  static_assert(N % 16 == 0 && N >= 16 && N <= 256, "wgmma: N must be a multiple of 16 in 16..256");
};

// Wgmma<N>: the m64nNk16 instruction; I0..I6 = R..R+6, the operand numbers after the accumulator.
#define FA_WGMMA_SHAPE(N, R, I0, I1, I2, I3, I4, I5, I6)                                       \
  template <>                                                                                  \
  struct Wgmma<N> {                                                                            \
    template <class T, int kTransA, int kTransB>                                               \
    static __device__ __forceinline__ void ss(float (&d)[R], std::uint64_t desc_a,             \
                                              std::uint64_t desc_b, std::uint32_t scale_d) {   \
      if constexpr (std::is_same_v<T, __nv_bfloat16>) {                                        \
        FA_WGMMA_SS_ASM(N, R, "bf16", I0, I1, I2, I3, I4);                                     \
      } else {                                                                                 \
        FA_WGMMA_SS_ASM(N, R, "f16", I0, I1, I2, I3, I4);                                      \
      }                                                                                        \
    }                                                                                          \
    template <class T, int kTransB>                                                            \
    static __device__ __forceinline__ void rs(float (&d)[R], const std::uint32_t (&a)[4],      \
                                              std::uint64_t desc_b, std::uint32_t scale_d) {   \
      if constexpr (std::is_same_v<T, __nv_bfloat16>) {                                        \
        FA_WGMMA_RS_ASM(N, R, "bf16", I0, I1, I2, I3, I4, I5, I6);                             \
      } else {                                                                                 \
        FA_WGMMA_RS_ASM(N, R, "f16", I0, I1, I2, I3, I4, I5, I6);                              \
      }                                                                                        \
    }                                                                                          \
  };

FA_WGMMA_SHAPE(16, 8, 8, 9, 10, 11, 12, 13, 14)
FA_WGMMA_SHAPE(32, 16, 16, 17, 18, 19, 20, 21, 22)
FA_WGMMA_SHAPE(48, 24, 24, 25, 26, 27, 28, 29, 30)
FA_WGMMA_SHAPE(64, 32, 32, 33, 34, 35, 36, 37, 38)
FA_WGMMA_SHAPE(80, 40, 40, 41, 42, 43, 44, 45, 46)
FA_WGMMA_SHAPE(96, 48, 48, 49, 50, 51, 52, 53, 54)
FA_WGMMA_SHAPE(112, 56, 56, 57, 58, 59, 60, 61, 62)
FA_WGMMA_SHAPE(128, 64, 64, 65, 66, 67, 68, 69, 70)
FA_WGMMA_SHAPE(144, 72, 72, 73, 74, 75, 76, 77, 78)
FA_WGMMA_SHAPE(160, 80, 80, 81, 82, 83, 84, 85, 86)
FA_WGMMA_SHAPE(176, 88, 88, 89, 90, 91, 92, 93, 94)
FA_WGMMA_SHAPE(192, 96, 96, 97, 98, 99, 100, 101, 102)
FA_WGMMA_SHAPE(208, 104, 104, 105, 106, 107, 108, 109, 110)
FA_WGMMA_SHAPE(224, 112, 112, 113, 114, 115, 116, 117, 118)
FA_WGMMA_SHAPE(240, 120, 120, 121, 122, 123, 124, 125, 126)
FA_WGMMA_SHAPE(256, 128, 128, 129, 130, 131, 132, 133, 134)

// clang-format on

#undef FA_WGMMA_SHAPE
#undef FA_WGMMA_RS_ASM
#undef FA_WGMMA_SS_ASM

template <class T>
constexpr bool kIs16Bit = std::is_same_v<T, __nv_bfloat16> || std::is_same_v<T, __half>;

}  // namespace detail

// D (+)= A * B, m64nNk16, A and B in shared memory: desc_a of a 64 x 16 A, desc_b of a 16 x N B
// (wgmma_layout.h). accumulate = false computes D = A * B, ignoring D's old contents.
template <class T, int N, Major kMajorA, Major kMajorB>
__device__ __forceinline__ void wgmma_ss(float (&d)[N / 2], std::uint64_t desc_a,
                                         std::uint64_t desc_b, bool accumulate) {
  static_assert(detail::kIs16Bit<T>, "wgmma_ss: bf16 or fp16 inputs");
#if defined(FA_SM90A_PTX)
  detail::Wgmma<N>::template ss<T, static_cast<int>(kMajorA), static_cast<int>(kMajorB)>(
      d, desc_a, desc_b, accumulate ? 1u : 0u);
#else
  __trap();
#endif
}

// D (+)= A * B, m64nNk16, A from registers (the 4-register fragment of wgmma_layout.h,
// a_frag_row / a_frag_col), B in shared memory.
template <class T, int N, Major kMajorB>
__device__ __forceinline__ void wgmma_rs(float (&d)[N / 2], const std::uint32_t (&a)[4],
                                         std::uint64_t desc_b, bool accumulate) {
  static_assert(detail::kIs16Bit<T>, "wgmma_rs: bf16 or fp16 inputs");
#if defined(FA_SM90A_PTX)
  detail::Wgmma<N>::template rs<T, static_cast<int>(kMajorB)>(d, a, desc_b, accumulate ? 1u : 0u);
#else
  __trap();
#endif
}

}  // namespace flashattn::cuda::ptx
