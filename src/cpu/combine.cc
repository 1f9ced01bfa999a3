// The host merge of partial attention results, and the public combine() (flashattn/combine.h),
// which sends CUDA tensors to cuda::combine_cuda.
#include "cpu/combine.h"

#include <string>

#include "common/dtype_convert.h"
#include "cpu/host_loop.h"
#include "cuda/decode/combine_cuda.h"

namespace flashattn::cpu {

Status combine_host(const CombineParams& p) {
  const TensorView& out = p.out;
  const std::int64_t batch = out.shape[0], seqlen_q = out.shape[1], heads = out.shape[2],
                     head_dim = out.shape[3];
  const auto n = static_cast<std::int64_t>(p.outs.size());
  if (batch == 0 || seqlen_q == 0 || heads == 0) return Status::Ok();
  float* lse_out = static_cast<float*>(p.lse.data);
  return parallel_for(batch * heads, [&] { return [&](std::int64_t item) {
    const std::int64_t b = item / heads, h = item % heads;
    for (std::int64_t r = 0; r < seqlen_q; ++r) {
      const double merged = combine_row(
          n, head_dim,
          [&](std::int64_t i) {
            const TensorView& l = p.lses[static_cast<std::size_t>(i)];
            return static_cast<double>(static_cast<const float*>(
                l.data)[b * l.stride[0] + h * l.stride[1] + r * l.stride[2]]);
          },
          [&](std::int64_t i, std::int64_t d) {
            const TensorView& o = p.outs[static_cast<std::size_t>(i)];
            return static_cast<double>(static_cast<const float*>(o.data)[offset4(o, b, r, h, d)]);
          },
          [&](std::int64_t d, double v) {
            store_from_float(out.data, out.dtype, offset4(out, b, r, h, d), static_cast<float>(v));
          });
      if (lse_out != nullptr) {
        lse_out[b * p.lse.stride[0] + h * p.lse.stride[1] + r * p.lse.stride[2]] =
            static_cast<float>(merged);
      }
    }
  }; });
}

void combine_f64(const std::vector<const double*>& outs, const std::vector<const double*>& lses,
                 std::int64_t batch, std::int64_t seqlen_q, std::int64_t heads,
                 std::int64_t head_dim, double* out, double* lse) {
  const auto n = static_cast<std::int64_t>(outs.size());
  for (std::int64_t b = 0; b < batch; ++b) {
    for (std::int64_t h = 0; h < heads; ++h) {
      for (std::int64_t r = 0; r < seqlen_q; ++r) {
        const std::int64_t lse_at = (b * heads + h) * seqlen_q + r;
        const std::int64_t o_at = ((b * seqlen_q + r) * heads + h) * head_dim;
        const double merged = combine_row(
            n, head_dim, [&](std::int64_t i) { return lses[static_cast<std::size_t>(i)][lse_at]; },
            [&](std::int64_t i, std::int64_t d) {
              return outs[static_cast<std::size_t>(i)][o_at + d];
            },
            [&](std::int64_t d, double v) {
              if (out != nullptr) out[o_at + d] = v;
            });
        if (lse != nullptr) lse[lse_at] = merged;
      }
    }
  }
}

}  // namespace flashattn::cpu

namespace flashattn {

Status combine(const CombineParams& params, StreamHandle stream) {
  Status st = validate_combine(params);
  if (!st.ok()) return st;
  if (params.out.device.type == DeviceType::kCUDA) return cuda::combine_cuda(params, stream);
  return cpu::combine_host(params);
}

}  // namespace flashattn
