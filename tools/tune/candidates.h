// The candidates a tile-shape tuner compares (tools/tune_sm80, tools/tune_sm90): each is a kernel
// configuration compiled into the tuner only (the library carries just the chosen one per head
// dim). The tuner's main (tune_main.cc) is shared; each tuner defines its name and its groups.
#pragma once

#include <cuda_runtime.h>

#include <string>
#include <vector>

#include "flashattn/forward.h"

namespace flashattn::tune {

struct Candidate {
  int head_dim;
  std::string name;  // "M128 N64 W4 qreg"
  Status (*launch)(const ForwardParams&, cudaStream_t);
  const void* kernel;  // for cudaFuncGetAttributes / occupancy
  int threads, smem_bytes;
};

// The tuner's name (for messages) and its bf16 candidates, one group per head dim (each group is
// timed against itself, cell by cell): groups.cc, over the add_hdim* of the tuner's own
// tune_hdim*.cu.
extern const char* const kToolName;
std::vector<std::vector<Candidate>> candidate_groups();

}  // namespace flashattn::tune
