// Builds a Candidate from a Sm90Config (included by the tune_hdim*.cu translation units).
#pragma once

#include <string>

#include "candidates.h"
#include "cuda/sm90/flash_sm90_kernel.cuh"

namespace flashattn::tune {

template <class Cfg>
Status launch_sm90(const ForwardParams& p, cudaStream_t stream) {
  return cuda::launch_flash_sm90_config<__nv_bfloat16, Cfg>(
      cuda::kernel_args_of(p), cuda::sm90_extents(p), static_cast<unsigned*>(p.workspace), stream);
}

template <class Cfg>
Candidate make_candidate() {
  std::string name = "M" + std::to_string(Cfg::kBlockM) + " N" + std::to_string(Cfg::kBlockN) +
                     " S" + std::to_string(Cfg::kStages) +
                     (Cfg::kPingPong ? " pingpong" : "") +
                     (Cfg::kPingPong && Cfg::kPingPongMinTiles > 0
                          ? ">=" + std::to_string(Cfg::kPingPongMinTiles) + "tiles"
                          : "") +
                     (Cfg::kQBuffers > 1 ? " Qx" + std::to_string(Cfg::kQBuffers) : "");
  return {Cfg::kHeadDim, name, &launch_sm90<Cfg>,
          reinterpret_cast<const void*>(&cuda::flash_sm90_kernel<__nv_bfloat16, Cfg, false>),
          Cfg::kThreads, Cfg::kSmemBytes};
}

}  // namespace flashattn::tune
