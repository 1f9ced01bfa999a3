// The naive GPU backend's launcher: the three-kernel golden reference, every variant (window,
// softcap, ALiBi, sinks, varlen), with cpu-reference's semantics:
//   1. S = scale * Q K^T, then softcap, then ALiBi; -inf where the mask hides the key; float32,
//      into the caller's workspace
//   2. softmax of each row of S in place, the sink's logit in the max and the denominator;
//      LSE = row max + log(row sum) (the sink included)
//   3. O = P V, float32 accumulation, rounded to the output dtype
// O(Sq * Sk) bytes through memory: slow, and out of memory at long lengths by design.
//
// The S buffer is the workspace (ForwardParams::workspace): one slab of
// max_seqlen_q x max_seqlen_k floats per (batch, head), batch * heads * seqlen_q * seqlen_k * 4
// bytes, dense or varlen alike (with varlen, seqlen_q and seqlen_k are max_seqlen_q and
// max_seqlen_k). Packing the sequences tighter (sum of lq * lk) would need their lengths on the
// host, and with device offsets that is a copy and a synchronization, which a graph-capturable
// forward cannot make. The launcher neither allocates nor synchronizes.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

#include "flashattn/forward.h"

namespace flashattn::cuda {

// *bytes = the bytes of the float32 S matrix, batch * heads * seqlen_q * seqlen_k * 4; false when
// that does not fit 64 bits (checked: the product wrapped to a small buffer before). Host code, in
// naive_backend.cc.
bool naive_workspace_bytes(const ForwardParams& params, std::size_t* bytes);

// Queues the three kernels on `stream`. `s_gmem` holds naive_workspace_bytes(params) bytes of
// device memory (may be null when that is 0).
Status launch_naive(const ForwardParams& params, float* s_gmem, cudaStream_t stream);

// Ok when this GPU can run the kernels (a compatible image was compiled for its architecture).
Status naive_kernels_available();

}  // namespace flashattn::cuda
