// Device element types and 16-byte vector loads/stores with conversion to and from float.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

namespace flashattn::cuda {

__device__ __forceinline__ float to_float(float x) { return x; }
__device__ __forceinline__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ __forceinline__ float to_float(__half x) { return __half2float(x); }

template <typename T>
__device__ __forceinline__ T from_float(float x);
template <>
__device__ __forceinline__ float from_float<float>(float x) { return x; }
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}
template <>
__device__ __forceinline__ __half from_float<__half>(float x) { return __float2half_rn(x); }

// x rounded to T and back: what the tensor-core path would see of P.
template <typename T>
__device__ __forceinline__ float round_to(float x) { return to_float(from_float<T>(x)); }

// Elements of T in one 16-byte vector: 8 for 16-bit types, 4 for float.
template <typename T>
constexpr int kVecElems = 16 / sizeof(T);

// Loads 16 bytes (kVecElems<T> elements) from 16-byte aligned global memory, as floats.
template <typename T>
__device__ __forceinline__ void load_vec_as_float(const T* src_gmem, float* dst) {
  const uint4 raw = __ldg(reinterpret_cast<const uint4*>(src_gmem));
  const T* elems = reinterpret_cast<const T*>(&raw);
#pragma unroll
  for (int i = 0; i < kVecElems<T>; ++i) dst[i] = to_float(elems[i]);
}

// Stores kVecElems<T> floats converted to T as one 16-byte store.
template <typename T>
__device__ __forceinline__ void store_vec_from_float(T* dst_gmem, const float* src) {
  uint4 raw;
  T* elems = reinterpret_cast<T*>(&raw);
#pragma unroll
  for (int i = 0; i < kVecElems<T>; ++i) elems[i] = from_float<T>(src[i]);
  *reinterpret_cast<uint4*>(dst_gmem) = raw;
}

// kVecElems<T> elements from 16-byte aligned global memory into 16-byte aligned shared memory as
// floats, or zeros when !valid (src_gmem is then not read).
template <typename T>
__device__ __forceinline__ void copy_vec_as_float(const T* src_gmem, bool valid, float* dst_smem) {
  float vals[kVecElems<T>];
  if (valid) {
    load_vec_as_float(src_gmem, vals);
  } else {
#pragma unroll
    for (int i = 0; i < kVecElems<T>; ++i) vals[i] = 0.0f;
  }
#pragma unroll
  for (int i = 0; i < kVecElems<T>; i += 4) {
    *reinterpret_cast<float4*>(dst_smem + i) =
        make_float4(vals[i], vals[i + 1], vals[i + 2], vals[i + 3]);
  }
}

// Four floats as four consecutive T at 8- (16-bit T) or 16-byte (float) aligned memory.
__device__ __forceinline__ void store4_from_float(float* dst, float4 v) {
  *reinterpret_cast<float4*>(dst) = v;
}
__device__ __forceinline__ void store4_from_float(__nv_bfloat16* dst, float4 v) {
  const __nv_bfloat162 lo = __floats2bfloat162_rn(v.x, v.y), hi = __floats2bfloat162_rn(v.z, v.w);
  *reinterpret_cast<uint2*>(dst) = make_uint2(*reinterpret_cast<const unsigned*>(&lo),
                                              *reinterpret_cast<const unsigned*>(&hi));
}
__device__ __forceinline__ void store4_from_float(__half* dst, float4 v) {
  const __half2 lo = __floats2half2_rn(v.x, v.y), hi = __floats2half2_rn(v.z, v.w);
  *reinterpret_cast<uint2*>(dst) = make_uint2(*reinterpret_cast<const unsigned*>(&lo),
                                              *reinterpret_cast<const unsigned*>(&hi));
}

// Four consecutive elements from 8- (16-bit T) or 16-byte (float) aligned shared memory, as floats.
__device__ __forceinline__ float4 load4_as_float(const float* src_smem) {
  return *reinterpret_cast<const float4*>(src_smem);
}
__device__ __forceinline__ float4 load4_as_float(const __nv_bfloat16* src_smem) {
  const uint2 raw = *reinterpret_cast<const uint2*>(src_smem);
  const float2 lo = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&raw.x));
  const float2 hi = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&raw.y));
  return make_float4(lo.x, lo.y, hi.x, hi.y);
}
__device__ __forceinline__ float4 load4_as_float(const __half* src_smem) {
  const uint2 raw = *reinterpret_cast<const uint2*>(src_smem);
  const float2 lo = __half22float2(*reinterpret_cast<const __half2*>(&raw.x));
  const float2 hi = __half22float2(*reinterpret_cast<const __half2*>(&raw.y));
  return make_float4(lo.x, lo.y, hi.x, hi.y);
}

}  // namespace flashattn::cuda
