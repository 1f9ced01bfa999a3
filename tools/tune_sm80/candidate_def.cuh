// Builds a Candidate from a Sm80Config (included by the tune_hdim*.cu translation units).
#pragma once

#include <string>

#include "candidates.h"
#include "cuda/sm80/flash_sm80_kernel.cuh"

namespace flashattn::tune {

template <class Cfg>
Status launch_sm80(const ForwardParams& p, cudaStream_t stream) {
  return cuda::launch_flash_sm80_config<__nv_bfloat16, Cfg>(cuda::kernel_args_of(p), stream);
}

template <class Cfg>
Candidate make_candidate() {
  std::string name = "M" + std::to_string(Cfg::kBlockM) + " N" + std::to_string(Cfg::kBlockN) +
                     " W" + std::to_string(Cfg::kWarps) + (Cfg::kQInRegs ? " qreg" : "") + " B" +
                     std::to_string(Cfg::kMinBlocks);
  return {Cfg::kHeadDim, name, &launch_sm80<Cfg>,
          reinterpret_cast<const void*>(&cuda::flash_sm80_kernel<__nv_bfloat16, Cfg, false>),
          Cfg::kThreads, Cfg::kSmemBytes};
}

}  // namespace flashattn::tune
