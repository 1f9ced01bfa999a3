// Special-function instructions without the library wrappers' range handling.
#pragma once

namespace flashattn::cuda::ptx {

// 2^x on the MUFU unit in one instruction; exp2f() adds denormal scaling around the same
// instruction. Results below 2^-126 flush to 0, far under the 2^-8 relative rounding that P gets
// when it is converted to bf16. ex2(-inf) = 0.
__device__ __forceinline__ float ex2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// 1 / x on the MUFU unit (within 1 ulp; rcp(inf) = 0, rcp(0) = inf); 1.0f / x adds a Newton
// step and a slow path for denormals.
__device__ __forceinline__ float rcp(float x) {
  float y;
  asm("rcp.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

}  // namespace flashattn::cuda::ptx
