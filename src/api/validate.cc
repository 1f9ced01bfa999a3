// validate(): every bad input stops here, on the host, before anything is launched or written.
// Messages name the argument and say expected vs actual.
#include <cmath>
#include <cstdio>
#include <cstdint>
#include <utility>
#include <string>

#include "cuda/common/runtime.h"
#include "flashattn/forward.h"

namespace flashattn {
namespace {

Status fail(StatusCode code, const std::string& msg) { return Status(code, msg); }

Status check_rank(const TensorView& t, const char* name, int rank, const char* layout) {
  if (t.rank != rank) {
    return fail(StatusCode::kInvalidRank, std::string(name) + ".rank = " + std::to_string(t.rank) +
                                              ", expected " + std::to_string(rank) + " " + layout);
  }
  for (int d = 0; d < rank; ++d) {
    if (t.shape[d] < 0) {
      return fail(StatusCode::kInvalidShape, std::string(name) + ".shape[" + std::to_string(d) +
                                                 "] = " + std::to_string(t.shape[d]) +
                                                 " must be >= 0");
    }
  }
  return Status::Ok();
}

Status check_same_dim(const TensorView& a, const char* a_name, int a_dim, const TensorView& b,
                      const char* b_name, int b_dim, const char* what) {
  if (a.shape[a_dim] != b.shape[b_dim]) {
    return fail(StatusCode::kInvalidShape,
                std::string(a_name) + ".shape[" + std::to_string(a_dim) + "] (" + what + ") = " +
                    std::to_string(a.shape[a_dim]) + " must equal " + b_name + ".shape[" +
                    std::to_string(b_dim) + "] = " + std::to_string(b.shape[b_dim]));
  }
  return Status::Ok();
}

// Strides: last dim contiguous, the others non-negative multiples of `align_bytes`. Only strides
// that address something are checked: an empty tensor addresses nothing (NumPy reports all its
// strides as 0), and a dim of size 1 is only indexed at 0, whatever its stride.
Status check_strides(const TensorView& t, const char* name, std::int64_t align_bytes) {
  if (t.numel() == 0) return Status::Ok();
  const std::int64_t elem = static_cast<std::int64_t>(dtype_size(t.dtype));
  const int last = t.rank - 1;
  if (t.stride[last] != 1 && t.shape[last] > 1) {
    return fail(StatusCode::kInvalidStride, std::string(name) + ".stride[" +
                                                std::to_string(last) + "] = " +
                                                std::to_string(t.stride[last]) +
                                                ", expected 1 (last dim contiguous)");
  }
  for (int d = 0; d < last; ++d) {
    if (t.shape[d] == 1) continue;
    if (t.stride[d] < 0) {
      return fail(StatusCode::kInvalidStride, std::string(name) + ".stride[" + std::to_string(d) +
                                                  "] = " + std::to_string(t.stride[d]) +
                                                  ", expected >= 0");
    }
    if ((t.stride[d] * elem) % align_bytes != 0) {
      return fail(StatusCode::kInvalidStride,
                  std::string(name) + ".stride[" + std::to_string(d) + "] = " +
                      std::to_string(t.stride[d]) + " elements (" +
                      std::to_string(t.stride[d] * elem) + " bytes), expected a multiple of " +
                      std::to_string(align_bytes / elem) + " elements (" +
                      std::to_string(align_bytes) + " bytes)");
    }
  }
  return Status::Ok();
}

Status check_pointer(const TensorView& t, const char* name, std::int64_t align_bytes) {
  if (t.numel() == 0) return Status::Ok();  // empty tensors may carry a null pointer
  if (t.data == nullptr) {
    return fail(StatusCode::kNullPointer, std::string(name) + ".data is null but " + name +
                                              " has " + std::to_string(t.numel()) + " elements");
  }
  const auto addr = reinterpret_cast<std::uintptr_t>(t.data);
  if (addr % static_cast<std::uintptr_t>(align_bytes) != 0) {
    return fail(StatusCode::kMisaligned, std::string(name) + ".data = " +
                                             std::to_string(addr) + " is not " +
                                             std::to_string(align_bytes) +
                                             "-byte aligned (address mod " +
                                             std::to_string(align_bytes) + " = " +
                                             std::to_string(addr % align_bytes) + ")");
  }
  return Status::Ok();
}

bool overlaps(const TensorView& a, const TensorView& b) {
  if (a.numel() == 0 || b.numel() == 0 || a.device != b.device) return false;
  const auto a0 = reinterpret_cast<std::uintptr_t>(a.data);
  const auto b0 = reinterpret_cast<std::uintptr_t>(b.data);
  return a0 < b0 + static_cast<std::uintptr_t>(b.span_bytes()) &&
         b0 < a0 + static_cast<std::uintptr_t>(a.span_bytes());
}

std::string supported_head_dims() {
  return "multiples of " + std::to_string(kHeadDimStep) + " from " + std::to_string(kHeadDimStep) +
         " to " + std::to_string(kMaxHeadDim) + " (8, 16, 24, ..., 256)";
}

#define FA_RETURN_IF_ERROR(expr)          \
  do {                                    \
    Status _st = (expr);                  \
    if (!_st.ok()) return _st;            \
  } while (0)

}  // namespace

Status validate(const ForwardParams& p) {
  const bool has_lse = p.lse.defined();
  // 1. Ranks and non-negative sizes.
  FA_RETURN_IF_ERROR(check_rank(p.q, "q", 4, "(batch, seqlen_q, heads, head_dim)"));
  FA_RETURN_IF_ERROR(check_rank(p.k, "k", 4, "(batch, seqlen_k, kv_heads, head_dim)"));
  FA_RETURN_IF_ERROR(check_rank(p.v, "v", 4, "(batch, seqlen_k, kv_heads, head_dim)"));
  FA_RETURN_IF_ERROR(check_rank(p.out, "out", 4, "(batch, seqlen_q, heads, head_dim)"));
  if (has_lse) FA_RETURN_IF_ERROR(check_rank(p.lse, "lse", 3, "(batch, heads, seqlen_q)"));

  // 2. Dtypes: q, k, v, out share one; LSE is float32.
  for (auto [t, name] : {std::pair{&p.k, "k"}, std::pair{&p.v, "v"}, std::pair{&p.out, "out"}}) {
    if (t->dtype != p.q.dtype) {
      return fail(StatusCode::kInvalidDtype, std::string(name) + ".dtype = " +
                                                 std::string(dtype_name(t->dtype)) +
                                                 " must equal q.dtype = " +
                                                 std::string(dtype_name(p.q.dtype)));
    }
  }
  if (p.q.dtype != DType::kBF16 && p.q.dtype != DType::kFP16 && p.q.dtype != DType::kFP32) {
    return fail(StatusCode::kInvalidDtype,
                "q.dtype = " + std::to_string(static_cast<int>(p.q.dtype)) +
                    " (not a DType value), expected one of bf16, fp16, fp32");
  }
  if (has_lse && p.lse.dtype != DType::kFP32) {
    return fail(StatusCode::kInvalidDtype,
                "lse.dtype = " + std::string(dtype_name(p.lse.dtype)) + ", expected fp32");
  }

  // 3. Shapes agree.
  FA_RETURN_IF_ERROR(check_same_dim(p.k, "k", 0, p.q, "q", 0, "batch"));
  FA_RETURN_IF_ERROR(check_same_dim(p.k, "k", 3, p.q, "q", 3, "head_dim"));
  for (int d = 0; d < 4; ++d) {
    static const char* kNames[] = {"batch", "seqlen_k", "kv_heads", "head_dim"};
    FA_RETURN_IF_ERROR(check_same_dim(p.v, "v", d, p.k, "k", d, kNames[d]));
  }
  for (int d = 0; d < 4; ++d) {
    static const char* kNames[] = {"batch", "seqlen_q", "heads", "head_dim"};
    FA_RETURN_IF_ERROR(check_same_dim(p.out, "out", d, p.q, "q", d, kNames[d]));
  }
  if (has_lse) {
    FA_RETURN_IF_ERROR(check_same_dim(p.lse, "lse", 0, p.q, "q", 0, "batch"));
    FA_RETURN_IF_ERROR(check_same_dim(p.lse, "lse", 1, p.q, "q", 2, "heads"));
    FA_RETURN_IF_ERROR(check_same_dim(p.lse, "lse", 2, p.q, "q", 1, "seqlen_q"));
  }
  const std::int64_t heads = p.q.shape[2], kv_heads = p.k.shape[2];
  if (kv_heads == 0 && heads > 0) {
    return fail(StatusCode::kInvalidShape,
                "k.shape[2] (kv heads) = 0, expected >= 1 when q.shape[2] (heads) = " +
                    std::to_string(heads));
  }
  if (kv_heads > 0 && heads % kv_heads != 0) {
    return fail(StatusCode::kInvalidShape, "k.shape[2] (kv heads) = " + std::to_string(kv_heads) +
                                               " must divide q.shape[2] (heads) = " +
                                               std::to_string(heads));
  }

  // 4. Head dim.
  const std::int64_t d = p.q.shape[3];
  if (d < kHeadDimStep || d > kMaxHeadDim || d % kHeadDimStep != 0) {
    return fail(StatusCode::kUnsupportedHeadDim, "q.shape[3] (head_dim) = " + std::to_string(d) +
                                                     " is not supported; supported: " +
                                                     supported_head_dims());
  }

  // 5. Scale.
  if (p.softmax_scale.has_value()) {
    const float s = *p.softmax_scale;
    if (!std::isfinite(s) || s <= 0.0f) {
      // snprintf, not an ostringstream: this runs inside the Python extension, where the first
      // iostream use crashed on the H200 machine (libstdc++ iostream init of a newer GCC's
      // objects against the process's libstdc++).
      char text[96];
      std::snprintf(text, sizeof(text), "softmax_scale = %g, expected a finite value > 0",
                    static_cast<double>(s));
      return fail(StatusCode::kInvalidScale, text);
    }
  }

  // 6. Strides, then pointers and alignment: a reversed view (x[..., ::-1]) starts at its row's
  // last element, so its pointer is misaligned too, but the stride is what the caller must fix.
  for (auto [t, name] : {std::pair{&p.q, "q"}, std::pair{&p.k, "k"}, std::pair{&p.v, "v"},
                         std::pair{&p.out, "out"}}) {
    FA_RETURN_IF_ERROR(check_strides(*t, name, kRequiredAlignmentBytes));
    FA_RETURN_IF_ERROR(check_pointer(*t, name, kRequiredAlignmentBytes));
  }
  if (has_lse) {
    FA_RETURN_IF_ERROR(check_strides(p.lse, "lse", 4));
    FA_RETURN_IF_ERROR(check_pointer(p.lse, "lse", 4));
  }

  // 7. Devices: one device for all; a CUDA view must hold device memory of that device.
  for (auto [t, name] : {std::pair{&p.k, "k"}, std::pair{&p.v, "v"}, std::pair{&p.out, "out"},
                         std::pair{&p.lse, "lse"}}) {
    if (t->defined() && t->device != p.q.device) {
      return fail(StatusCode::kInvalidDevice, std::string(name) + ".device = " +
                                                  device_name(t->device) +
                                                  " must equal q.device = " +
                                                  device_name(p.q.device));
    }
  }
  for (auto [t, name] : {std::pair{&p.q, "q"}, std::pair{&p.k, "k"}, std::pair{&p.v, "v"},
                         std::pair{&p.out, "out"}, std::pair{&p.lse, "lse"}}) {
    if (t->defined() && t->numel() > 0) {
      FA_RETURN_IF_ERROR(cuda::check_pointer_device(t->data, t->device, name));
    }
  }

  // 8. Outputs must not overlap inputs (or each other).
  for (auto [t, name] : {std::pair{&p.q, "q"}, std::pair{&p.k, "k"}, std::pair{&p.v, "v"}}) {
    if (overlaps(p.out, *t)) {
      return fail(StatusCode::kAliasing,
                  std::string("out overlaps ") + name + ": outputs must not alias inputs");
    }
    if (has_lse && overlaps(p.lse, *t)) {
      return fail(StatusCode::kAliasing,
                  std::string("lse overlaps ") + name + ": outputs must not alias inputs");
    }
  }
  if (has_lse && overlaps(p.lse, p.out)) {
    return fail(StatusCode::kAliasing, "lse overlaps out: the two outputs must not alias");
  }
  return Status::Ok();
}

float ForwardParams::scale() const {
  if (softmax_scale.has_value()) return *softmax_scale;
  return 1.0f / std::sqrt(static_cast<float>(q.shape[3]));
}

}  // namespace flashattn
