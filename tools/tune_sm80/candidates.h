// The tile shapes the tuner compares, per head dim: each is a Sm80Config instantiation compiled
// into the tuner only (the library carries just the chosen one per head dim).
#pragma once

#include <cuda_runtime.h>

#include <string>
#include <vector>

#include "cuda/common/kernel_args.h"

namespace flashattn::tune {

struct Candidate {
  int head_dim;
  std::string name;  // "M128 N64 W4 qreg"
  Status (*launch)(const cuda::KernelArgs&, cudaStream_t);
  const void* kernel;  // for cudaFuncGetAttributes / occupancy
  int threads, smem_bytes;
};

// Appends the bf16 candidates of one head dim (one translation unit each: tune_hdim*.cu).
void add_hdim64(std::vector<Candidate>* out);
void add_hdim128(std::vector<Candidate>* out);
void add_hdim256(std::vector<Candidate>* out);

}  // namespace flashattn::tune
