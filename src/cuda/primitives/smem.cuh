// Shared-memory addresses as the PTX instructions want them: 32-bit offsets in the .shared window.
// Every instruction in this folder that reads or writes shared memory takes such an address.
#pragma once

#include <cstdint>

namespace flashattn::cuda::ptx {

__device__ __forceinline__ std::uint32_t smem_addr(const void* ptr_smem) {
  return static_cast<std::uint32_t>(__cvta_generic_to_shared(ptr_smem));
}

// Writes 16 zero bytes at a 16-byte aligned shared address (one st.shared.v4).
__device__ __forceinline__ void st_shared_zero16(std::uint32_t addr_smem) {
  asm volatile("st.shared.v4.u32 [%0], {%1, %1, %1, %1};\n" ::"r"(addr_smem), "r"(0u) : "memory");
}

// One 32-bit word of shared memory (ld.shared / st.shared), for values passed between a block's
// threads under an mbarrier (whose arrive releases and whose wait acquires).
__device__ __forceinline__ std::uint32_t ld_shared_u32(std::uint32_t addr_smem) {
  std::uint32_t v;
  asm volatile("ld.shared.u32 %0, [%1];\n" : "=r"(v) : "r"(addr_smem) : "memory");
  return v;
}
__device__ __forceinline__ void st_shared_u32(std::uint32_t addr_smem, std::uint32_t v) {
  asm volatile("st.shared.u32 [%0], %1;\n" ::"r"(addr_smem), "r"(v) : "memory");
}

}  // namespace flashattn::cuda::ptx
