// validate(): every bad input stops here, on the host, before anything is launched or written.
// Messages name the argument and say expected vs actual.
#include <cmath>
#include <cstdio>
#include <cstdint>
#include <initializer_list>
#include <utility>
#include <string>
#include <vector>

#include "cuda/common/runtime.h"
#include "flashattn/combine.h"
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

// Outputs are written through their strides: a zero stride on a dim of size > 1 would make two
// output elements one address.
Status check_no_zero_stride(const TensorView& t, const char* name) {
  if (t.numel() == 0) return Status::Ok();
  for (int d = 0; d < t.rank; ++d) {
    if (t.shape[d] > 1 && t.stride[d] == 0) {
      return fail(StatusCode::kInvalidStride,
                  std::string(name) + ".stride[" + std::to_string(d) + "] = 0 with " + name +
                      ".shape[" + std::to_string(d) + "] = " + std::to_string(t.shape[d]) +
                      ": an output needs a distinct address per element");
    }
  }
  return Status::Ok();
}

// A 1-D (or 2-D) float32 / int32 side input: dtype, shape, contiguous, pointer, device.
Status check_side_tensor(const TensorView& t, const char* name, DType dtype,
                         std::initializer_list<std::int64_t> shape, const char* layout,
                         Device device) {
  if (t.dtype != dtype) {
    return fail(StatusCode::kInvalidDtype, std::string(name) + ".dtype = " +
                                               std::string(dtype_name(t.dtype)) + ", expected " +
                                               std::string(dtype_name(dtype)));
  }
  const int rank = static_cast<int>(shape.size());
  if (t.rank != rank) {
    return fail(StatusCode::kInvalidRank, std::string(name) + ".rank = " + std::to_string(t.rank) +
                                              ", expected " + std::to_string(rank) + " " + layout);
  }
  int d = 0;
  for (std::int64_t want : shape) {
    if (t.shape[d] != want) {
      return fail(StatusCode::kInvalidShape, std::string(name) + ".shape[" + std::to_string(d) +
                                                 "] = " + std::to_string(t.shape[d]) +
                                                 ", expected " + std::to_string(want) + " " +
                                                 layout);
    }
    ++d;
  }
  // Contiguous: the kernels read these by index.
  std::int64_t running = 1;
  for (int i = rank - 1; i >= 0; --i) {
    if (t.shape[i] > 1 && t.stride[i] != running) {
      return fail(StatusCode::kInvalidStride,
                  std::string(name) + ".stride[" + std::to_string(i) + "] = " +
                      std::to_string(t.stride[i]) + ", expected " + std::to_string(running) +
                      " (contiguous)");
    }
    running *= t.shape[i];
  }
  FA_RETURN_IF_ERROR(check_pointer(t, name, static_cast<std::int64_t>(dtype_size(dtype))));
  if (t.device != device) {
    return fail(StatusCode::kInvalidDevice, std::string(name) + ".device = " +
                                                device_name(t.device) + " must equal q.device = " +
                                                device_name(device));
  }
  return Status::Ok();
}

// The values of the varlen index tensors, when they are host memory (CPU tensors): offsets start
// at 0, never decrease, end within the packed tensors, and every length fits max_seqlen; seqused_k
// within its sequence. On a CUDA device the values are not read here (that would synchronize);
// the kernels clamp them to the tensors.
Status check_varlen_values(const ForwardParams& p, std::int64_t batch) {
  if (p.cu_seqlens_q.device.type != DeviceType::kCPU) return Status::Ok();
  struct Offsets {
    const TensorView* t;
    const char* name;
    std::int64_t total, max_len;
    const char* total_name;
    const char* max_name;
  };
  const Offsets lists[] = {
      {&p.cu_seqlens_q, "cu_seqlens_q", p.q.shape[0], p.max_seqlen_q, "q.shape[0] (total_q)",
       "max_seqlen_q"},
      {&p.cu_seqlens_k, "cu_seqlens_k", p.k.shape[0], p.max_seqlen_k, "k.shape[0] (total_k)",
       "max_seqlen_k"}};
  for (const Offsets& o : lists) {
    const auto* c = static_cast<const std::int32_t*>(o.t->data);
    if (c[0] != 0) {
      return fail(StatusCode::kInvalidArgument,
                  std::string(o.name) + "[0] = " + std::to_string(c[0]) + ", expected 0");
    }
    for (std::int64_t b = 0; b < batch; ++b) {
      const std::int64_t len = static_cast<std::int64_t>(c[b + 1]) - c[b];
      if (len < 0) {
        return fail(StatusCode::kInvalidArgument,
                    std::string(o.name) + "[" + std::to_string(b + 1) + "] = " +
                        std::to_string(c[b + 1]) + " < " + o.name + "[" + std::to_string(b) +
                        "] = " + std::to_string(c[b]) + ": offsets must not decrease");
      }
      // An offset past the packed tensor is reported before a length over max_seqlen: it is the
      // cause, whatever max_seqlen says.
      if (c[b + 1] > o.total) {
        return fail(StatusCode::kInvalidArgument,
                    std::string(o.name) + "[" + std::to_string(b + 1) + "] = " +
                        std::to_string(c[b + 1]) + " is past " + o.total_name + " = " +
                        std::to_string(o.total));
      }
      if (len > o.max_len) {
        return fail(StatusCode::kInvalidArgument,
                    std::string(o.max_name) + " = " + std::to_string(o.max_len) +
                        " is below the length of sequence " + std::to_string(b) + " (" +
                        std::to_string(len) + ", from " + o.name + ")");
      }
    }
  }
  if (p.seqused_k.defined()) {
    const auto* used = static_cast<const std::int32_t*>(p.seqused_k.data);
    const auto* ck = static_cast<const std::int32_t*>(p.cu_seqlens_k.data);
    for (std::int64_t b = 0; b < batch; ++b) {
      const std::int64_t len = static_cast<std::int64_t>(ck[b + 1]) - ck[b];
      if (used[b] < 0 || used[b] > len) {
        return fail(StatusCode::kInvalidArgument,
                    "seqused_k[" + std::to_string(b) + "] = " + std::to_string(used[b]) +
                        ", expected 0 to " + std::to_string(len) +
                        " (sequence " + std::to_string(b) + "'s keys in cu_seqlens_k)");
      }
    }
  }
  return Status::Ok();
}

// The KV cache's own fields (ForwardParams::k_cache); q, out, lse, the scalars and the other side
// inputs are then checked by validate() itself on the problem with the cache in k's place.
Status validate_kv_cache_fields(const ForwardParams& p) {
  if (p.varlen() || p.seqused_k.defined()) {
    return fail(StatusCode::kInvalidArgument,
                "k_cache is given with cu_seqlens / seqused_k: the KV cache takes dense q "
                "(batch, seqlen_q, heads, head_dim) and cache_seqlens gives each sequence's keys");
  }
  if (!p.v_cache.defined()) {
    return fail(StatusCode::kInvalidArgument, "k_cache is given without v_cache");
  }
  if (!p.cache_seqlens.defined()) {
    return fail(StatusCode::kInvalidArgument,
                "k_cache is given without cache_seqlens (int32 (batch): the keys in the cache)");
  }
  if (p.k.defined() != p.v.defined()) {
    return fail(StatusCode::kInvalidArgument,
                std::string(p.k.defined() ? "k" : "v") + " (new tokens) is given without " +
                    (p.k.defined() ? "v" : "k") + ": append both or neither");
  }
  const bool paged = p.block_table.defined();
  const bool has_new = p.k.defined();
  const char* cache_layout = paged ? "(num_pages, page_size, kv_heads, head_dim)"
                                   : "(batch, cache_len, kv_heads, head_dim)";
  FA_RETURN_IF_ERROR(check_rank(p.q, "q", 4, "(batch, seqlen_q, heads, head_dim)"));
  FA_RETURN_IF_ERROR(check_rank(p.k_cache, "k_cache", 4, cache_layout));
  FA_RETURN_IF_ERROR(check_rank(p.v_cache, "v_cache", 4, cache_layout));
  if (has_new) {
    FA_RETURN_IF_ERROR(check_rank(p.k, "k", 4, "(batch, seqlen_new, kv_heads, head_dim)"));
    FA_RETURN_IF_ERROR(check_rank(p.v, "v", 4, "(batch, seqlen_new, kv_heads, head_dim)"));
  }
  for (auto [t, name] : {std::pair{&p.k_cache, "k_cache"}, std::pair{&p.v_cache, "v_cache"},
                         std::pair{&p.k, "k"}, std::pair{&p.v, "v"}}) {
    if (t->defined() && t->dtype != p.q.dtype) {
      return fail(StatusCode::kInvalidDtype, std::string(name) + ".dtype = " +
                                                 std::string(dtype_name(t->dtype)) +
                                                 " must equal q.dtype = " +
                                                 std::string(dtype_name(p.q.dtype)));
    }
  }
  static const char* kCacheDims[] = {"batch", "cache_len", "kv_heads", "head_dim"};
  static const char* kPagedDims[] = {"num_pages", "page_size", "kv_heads", "head_dim"};
  for (int d = 0; d < 4; ++d) {
    FA_RETURN_IF_ERROR(check_same_dim(p.v_cache, "v_cache", d, p.k_cache, "k_cache", d,
                                      paged ? kPagedDims[d] : kCacheDims[d]));
  }
  FA_RETURN_IF_ERROR(check_same_dim(p.k_cache, "k_cache", 3, p.q, "q", 3, "head_dim"));
  if (!paged) FA_RETURN_IF_ERROR(check_same_dim(p.k_cache, "k_cache", 0, p.q, "q", 0, "batch"));
  const std::int64_t batch = p.q.shape[0], heads = p.q.shape[2], kv_heads = p.k_cache.shape[2];
  if (kv_heads == 0 && heads > 0) {
    return fail(StatusCode::kInvalidShape, "k_cache.shape[2] (kv heads) = 0, expected >= 1 when "
                                           "q.shape[2] (heads) = " + std::to_string(heads));
  }
  if (kv_heads > 0 && heads % kv_heads != 0) {
    return fail(StatusCode::kInvalidShape, "k_cache.shape[2] (kv heads) = " +
                                               std::to_string(kv_heads) +
                                               " must divide q.shape[2] (heads) = " +
                                               std::to_string(heads));
  }
  if (has_new) {
    static const char* kNewDims[] = {"batch", "seqlen_new", "kv_heads", "head_dim"};
    FA_RETURN_IF_ERROR(check_same_dim(p.k, "k", 0, p.q, "q", 0, "batch"));
    FA_RETURN_IF_ERROR(check_same_dim(p.k, "k", 2, p.k_cache, "k_cache", 2, "kv_heads"));
    FA_RETURN_IF_ERROR(check_same_dim(p.k, "k", 3, p.k_cache, "k_cache", 3, "head_dim"));
    for (int d = 0; d < 4; ++d) {
      FA_RETURN_IF_ERROR(check_same_dim(p.v, "v", d, p.k, "k", d, kNewDims[d]));
    }
  }
  const std::int64_t page_size = p.k_cache.shape[1];
  if (paged && (page_size < 16 || page_size > 256 || page_size % 16 != 0)) {
    return fail(StatusCode::kInvalidArgument,
                "page_size (k_cache.shape[1]) = " + std::to_string(page_size) +
                    ", expected a multiple of 16 from 16 to 256");
  }
  // Strides and pointers (the caches are written when new tokens come: distinct addresses).
  for (auto [t, name] : {std::pair{&p.k_cache, "k_cache"}, std::pair{&p.v_cache, "v_cache"},
                         std::pair{&p.k, "k"}, std::pair{&p.v, "v"}}) {
    if (!t->defined()) continue;
    FA_RETURN_IF_ERROR(check_strides(*t, name, kRequiredAlignmentBytes));
    FA_RETURN_IF_ERROR(check_pointer(*t, name, kRequiredAlignmentBytes));
  }
  if (has_new) {
    FA_RETURN_IF_ERROR(check_no_zero_stride(p.k_cache, "k_cache"));
    FA_RETURN_IF_ERROR(check_no_zero_stride(p.v_cache, "v_cache"));
  }
  for (auto [t, name] : {std::pair{&p.k_cache, "k_cache"}, std::pair{&p.v_cache, "v_cache"},
                         std::pair{&p.k, "k"}, std::pair{&p.v, "v"}}) {
    if (t->defined() && t->device != p.q.device) {
      return fail(StatusCode::kInvalidDevice, std::string(name) + ".device = " +
                                                  device_name(t->device) +
                                                  " must equal q.device = " +
                                                  device_name(p.q.device));
    }
  }
  FA_RETURN_IF_ERROR(check_side_tensor(p.cache_seqlens, "cache_seqlens", DType::kInt32, {batch},
                                       "(batch)", p.q.device));
  if (paged) {
    if (p.block_table.rank != 2) {
      return fail(StatusCode::kInvalidRank, "block_table.rank = " +
                                                std::to_string(p.block_table.rank) +
                                                ", expected 2 (batch, max_pages_per_seq)");
    }
    FA_RETURN_IF_ERROR(check_side_tensor(p.block_table, "block_table", DType::kInt32,
                                         {batch, p.block_table.shape[1]},
                                         "(batch, max_pages_per_seq)", p.q.device));
  }
  for (auto [t, name] : {std::pair{&p.k_cache, "k_cache"}, std::pair{&p.v_cache, "v_cache"},
                         std::pair{&p.k, "k"}, std::pair{&p.v, "v"},
                         std::pair{&p.cache_seqlens, "cache_seqlens"},
                         std::pair{&p.block_table, "block_table"}}) {
    if (t->defined() && t->numel() > 0) {
      FA_RETURN_IF_ERROR(cuda::check_pointer_device(t->data, t->device, name));
    }
  }
  // The values, on the host only (reading device memory would synchronize).
  const std::int64_t seqlen_new = has_new ? p.k.shape[1] : 0;
  const std::int64_t max_pages = paged ? p.block_table.shape[1] : 0;
  const std::int64_t capacity = paged ? max_pages * page_size : page_size;
  const std::string capacity_text =
      paged ? "the capacity max_pages_per_seq * page_size = " + std::to_string(max_pages) +
                  " * " + std::to_string(page_size) + " = " + std::to_string(capacity)
            : "the capacity k_cache.shape[1] (cache_len) = " + std::to_string(capacity);
  if (p.q.device.type == DeviceType::kCPU) {
    const auto* lens = static_cast<const std::int32_t*>(p.cache_seqlens.data);
    const auto* table = static_cast<const std::int32_t*>(p.block_table.data);
    const std::int64_t num_pages = p.k_cache.shape[0];
    for (std::int64_t b = 0; b < batch; ++b) {
      if (lens[b] < 0) {
        return fail(StatusCode::kInvalidArgument, "cache_seqlens[" + std::to_string(b) + "] = " +
                                                      std::to_string(lens[b]) + ", expected >= 0");
      }
      const std::int64_t keys = static_cast<std::int64_t>(lens[b]) + seqlen_new;
      if (keys > capacity) {
        return fail(StatusCode::kInvalidArgument,
                    "cache_seqlens[" + std::to_string(b) + "] + seqlen_new = " +
                        std::to_string(lens[b]) + " + " + std::to_string(seqlen_new) +
                        " is past " + capacity_text);
      }
      if (paged) {
        for (std::int64_t n = 0; n < (keys + page_size - 1) / page_size; ++n) {
          const std::int32_t page = table[b * max_pages + n];
          if (page < 0 || page >= num_pages) {
            return fail(StatusCode::kInvalidArgument,
                        "block_table[" + std::to_string(b) + ", " + std::to_string(n) + "] = " +
                            std::to_string(page) + ", expected a page index from 0 to " +
                            std::to_string(num_pages - 1) + " (k_cache.shape[0] (num_pages) = " +
                            std::to_string(num_pages) + ")");
          }
        }
      }
    }
  }
  // The caches are written (new tokens) and read: no overlap with q, the outputs, the new tokens
  // or the index tensors, nor with each other.
  const std::pair<const TensorView*, const char*> others[] = {
      {&p.q, "q"}, {&p.out, "out"}, {&p.lse, "lse"}, {&p.k, "k"}, {&p.v, "v"},
      {&p.cache_seqlens, "cache_seqlens"}, {&p.block_table, "block_table"},
      {&p.alibi_slopes, "alibi_slopes"}, {&p.sinks, "sinks"}};
  for (auto [c, cname] : {std::pair{&p.k_cache, "k_cache"}, std::pair{&p.v_cache, "v_cache"}}) {
    for (auto [t, name] : others) {
      if (overlaps(*c, *t)) {
        return fail(StatusCode::kAliasing,
                    std::string(cname) + " overlaps " + name + ": the cache must not alias " +
                        "another argument");
      }
    }
  }
  for (auto [o, oname] : {std::pair{&p.out, "out"}, std::pair{&p.lse, "lse"}}) {
    for (auto [t, name] : {std::pair{&p.k, "k"}, std::pair{&p.v, "v"}}) {
      if (overlaps(*o, *t)) {
        return fail(StatusCode::kAliasing,
                    std::string(oname) + " overlaps " + name + ": outputs must not alias inputs");
      }
    }
  }
  if (overlaps(p.k_cache, p.v_cache)) {
    return fail(StatusCode::kAliasing, "k_cache overlaps v_cache");
  }
  return Status::Ok();
}

}  // namespace

Status validate(const ForwardParams& p) {
  if (p.kv_cache()) {
    FA_RETURN_IF_ERROR(validate_kv_cache_fields(p));
    // The rest as for a dense problem whose keys are the cache: a contiguous cache stands in for
    // k and v as it is; a paged one as an empty (batch, 0, kv_heads, head_dim) view (its pages
    // have been checked above).
    ForwardParams dense = p;
    dense.k_cache = dense.v_cache = dense.cache_seqlens = dense.block_table = TensorView();
    if (p.block_table.defined()) {
      dense.k = TensorView::contiguous(nullptr, p.q.dtype, p.q.device,
                                       {p.q.shape[0], 0, p.k_cache.shape[2], p.k_cache.shape[3]});
      dense.v = dense.k;
    } else {
      dense.k = p.k_cache;
      dense.v = p.v_cache;
    }
    return validate(dense);
  }
  if (p.cache_seqlens.defined() || p.block_table.defined() || p.v_cache.defined()) {
    return fail(StatusCode::kInvalidArgument,
                std::string(p.v_cache.defined()        ? "v_cache"
                            : p.cache_seqlens.defined() ? "cache_seqlens"
                                                        : "block_table") +
                    " is given without k_cache");
  }
  const bool has_lse = p.lse.defined();
  const bool varlen = p.varlen();
  if (p.cu_seqlens_q.defined() != p.cu_seqlens_k.defined()) {
    return fail(StatusCode::kInvalidArgument,
                std::string(p.cu_seqlens_q.defined() ? "cu_seqlens_q" : "cu_seqlens_k") +
                    " is given without " +
                    (p.cu_seqlens_q.defined() ? "cu_seqlens_k" : "cu_seqlens_q") +
                    ": variable length needs both");
  }
  if (p.seqused_k.defined() && !varlen) {
    return fail(StatusCode::kInvalidArgument,
                "seqused_k is given without cu_seqlens_q / cu_seqlens_k: it limits the keys of "
                "variable-length sequences");
  }
  // The dims of q, k, v and out: dense (batch, seq, heads, head_dim), varlen (total, heads,
  // head_dim).
  const int rank = varlen ? 3 : 4;
  const int h_dim = rank - 2, d_dim = rank - 1;

  // 1. Ranks and non-negative sizes.
  FA_RETURN_IF_ERROR(check_rank(p.q, "q", rank,
                                varlen ? "(total_q, heads, head_dim)"
                                       : "(batch, seqlen_q, heads, head_dim)"));
  FA_RETURN_IF_ERROR(check_rank(p.k, "k", rank,
                                varlen ? "(total_k, kv_heads, head_dim)"
                                       : "(batch, seqlen_k, kv_heads, head_dim)"));
  FA_RETURN_IF_ERROR(check_rank(p.v, "v", rank,
                                varlen ? "(total_k, kv_heads, head_dim)"
                                       : "(batch, seqlen_k, kv_heads, head_dim)"));
  FA_RETURN_IF_ERROR(check_rank(p.out, "out", rank,
                                varlen ? "(total_q, heads, head_dim)"
                                       : "(batch, seqlen_q, heads, head_dim)"));
  if (has_lse) {
    FA_RETURN_IF_ERROR(varlen ? check_rank(p.lse, "lse", 2, "(heads, total_q)")
                              : check_rank(p.lse, "lse", 3, "(batch, heads, seqlen_q)"));
  }

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
    const std::string_view name = dtype_name(p.q.dtype);
    return fail(StatusCode::kInvalidDtype,
                "q.dtype = " +
                    (name == "?" ? std::to_string(static_cast<int>(p.q.dtype)) +
                                       " (not a DType value)"
                                 : std::string(name)) +
                    ", expected one of bf16, fp16, fp32");
  }
  if (has_lse && p.lse.dtype != DType::kFP32) {
    return fail(StatusCode::kInvalidDtype,
                "lse.dtype = " + std::string(dtype_name(p.lse.dtype)) + ", expected fp32");
  }

  // 3. Shapes agree.
  if (!varlen) FA_RETURN_IF_ERROR(check_same_dim(p.k, "k", 0, p.q, "q", 0, "batch"));
  FA_RETURN_IF_ERROR(check_same_dim(p.k, "k", d_dim, p.q, "q", d_dim, "head_dim"));
  for (int d = 0; d < rank; ++d) {
    static const char* kDense[] = {"batch", "seqlen_k", "kv_heads", "head_dim"};
    static const char* kPacked[] = {"total_k", "kv_heads", "head_dim"};
    FA_RETURN_IF_ERROR(check_same_dim(p.v, "v", d, p.k, "k", d, varlen ? kPacked[d] : kDense[d]));
  }
  for (int d = 0; d < rank; ++d) {
    static const char* kDense[] = {"batch", "seqlen_q", "heads", "head_dim"};
    static const char* kPacked[] = {"total_q", "heads", "head_dim"};
    FA_RETURN_IF_ERROR(
        check_same_dim(p.out, "out", d, p.q, "q", d, varlen ? kPacked[d] : kDense[d]));
  }
  if (has_lse && varlen) {
    FA_RETURN_IF_ERROR(check_same_dim(p.lse, "lse", 0, p.q, "q", 1, "heads"));
    FA_RETURN_IF_ERROR(check_same_dim(p.lse, "lse", 1, p.q, "q", 0, "total_q"));
  } else if (has_lse) {
    FA_RETURN_IF_ERROR(check_same_dim(p.lse, "lse", 0, p.q, "q", 0, "batch"));
    FA_RETURN_IF_ERROR(check_same_dim(p.lse, "lse", 1, p.q, "q", 2, "heads"));
    FA_RETURN_IF_ERROR(check_same_dim(p.lse, "lse", 2, p.q, "q", 1, "seqlen_q"));
  }
  const std::int64_t heads = p.q.shape[h_dim], kv_heads = p.k.shape[h_dim];
  const std::string q_heads = "q.shape[" + std::to_string(h_dim) + "] (heads)";
  const std::string k_heads = "k.shape[" + std::to_string(h_dim) + "] (kv heads)";
  if (kv_heads == 0 && heads > 0) {
    return fail(StatusCode::kInvalidShape,
                k_heads + " = 0, expected >= 1 when " + q_heads + " = " + std::to_string(heads));
  }
  if (kv_heads > 0 && heads % kv_heads != 0) {
    return fail(StatusCode::kInvalidShape, k_heads + " = " + std::to_string(kv_heads) +
                                               " must divide " + q_heads + " = " +
                                               std::to_string(heads));
  }

  // 4. Head dim.
  const std::int64_t d = p.q.shape[d_dim];
  if (d < kHeadDimStep || d > kMaxHeadDim || d % kHeadDimStep != 0) {
    return fail(StatusCode::kUnsupportedHeadDim,
                "q.shape[" + std::to_string(d_dim) + "] (head_dim) = " + std::to_string(d) +
                    " is not supported; supported: " + supported_head_dims());
  }

  // 5. Scalars: scale, window, softcap, max_seqlen, workspace.
  // snprintf, not an ostringstream: this runs inside the Python extension, where the first
  // iostream use crashed on the H200 machine (libstdc++ iostream init of a newer GCC's objects
  // against the process's libstdc++).
  char text[160];
  if (p.softmax_scale.has_value()) {
    const float s = *p.softmax_scale;
    if (!std::isfinite(s) || s <= 0.0f) {
      std::snprintf(text, sizeof(text), "softmax_scale = %g, expected a finite value > 0",
                    static_cast<double>(s));
      return fail(StatusCode::kInvalidScale, text);
    }
  }
  for (auto [w, name] : {std::pair{p.window_left, "window_left"},
                         std::pair{p.window_right, "window_right"}}) {
    if (w < -1) {
      return fail(StatusCode::kInvalidArgument,
                  std::string(name) + " = " + std::to_string(w) +
                      ", expected -1 (unbounded) or a key count >= 0");
    }
  }
  if (p.causal && p.window_right > 0) {
    return fail(StatusCode::kInvalidArgument,
                "window_right = " + std::to_string(p.window_right) +
                    " with causal = true: causal puts the window's right edge on the diagonal "
                    "(expected window_right = 0 or -1)");
  }
  if (!std::isfinite(p.softcap) || p.softcap < 0.0f) {
    std::snprintf(text, sizeof(text), "softcap = %g, expected a finite value >= 0 (0 is off)",
                  static_cast<double>(p.softcap));
    return fail(StatusCode::kInvalidArgument, text);
  }
  if (p.num_splits < 0 || p.num_splits > kMaxSplits) {
    return fail(StatusCode::kInvalidArgument,
                "num_splits = " + std::to_string(p.num_splits) + ", expected 0 (chosen) to " +
                    std::to_string(kMaxSplits));
  }
  if (varlen) {
    for (auto [m, name] : {std::pair{p.max_seqlen_q, "max_seqlen_q"},
                           std::pair{p.max_seqlen_k, "max_seqlen_k"}}) {
      if (m < 0) {
        return fail(StatusCode::kInvalidArgument,
                    std::string(name) + " = " + std::to_string(m) + ", expected >= 0");
      }
    }
  }
  if (p.workspace_size > 0 && p.workspace == nullptr) {
    return fail(StatusCode::kNullPointer, "workspace is null but workspace_size = " +
                                              std::to_string(p.workspace_size) + " bytes");
  }
  if (p.workspace != nullptr) {
    // The naive backend's S matrix is float32; 16 bytes as for the tensors (cudaMalloc and
    // torch's allocator give 256 or more).
    const auto addr = reinterpret_cast<std::uintptr_t>(p.workspace);
    if (addr % kRequiredAlignmentBytes != 0) {
      return fail(StatusCode::kMisaligned,
                  "workspace = " + std::to_string(addr) + " is not " +
                      std::to_string(kRequiredAlignmentBytes) + "-byte aligned (address mod " +
                      std::to_string(kRequiredAlignmentBytes) + " = " +
                      std::to_string(addr % kRequiredAlignmentBytes) + ")");
    }
  }

  // 6. Strides, then pointers and alignment: a reversed view (x[..., ::-1]) starts at its row's
  // last element, so its pointer is misaligned too, but the stride is what the caller must fix.
  for (auto [t, name] : {std::pair{&p.q, "q"}, std::pair{&p.k, "k"}, std::pair{&p.v, "v"},
                         std::pair{&p.out, "out"}}) {
    FA_RETURN_IF_ERROR(check_strides(*t, name, kRequiredAlignmentBytes));
    FA_RETURN_IF_ERROR(check_pointer(*t, name, kRequiredAlignmentBytes));
  }
  FA_RETURN_IF_ERROR(check_no_zero_stride(p.out, "out"));
  if (has_lse) {
    FA_RETURN_IF_ERROR(check_strides(p.lse, "lse", 4));
    FA_RETURN_IF_ERROR(check_pointer(p.lse, "lse", 4));
    FA_RETURN_IF_ERROR(check_no_zero_stride(p.lse, "lse"));
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

  // 8. Side inputs: the varlen offsets first (with varlen they give the batch), then ALiBi slopes
  // and sinks.
  if (varlen) {
    if (p.cu_seqlens_q.rank != 1) {
      return fail(StatusCode::kInvalidRank, "cu_seqlens_q.rank = " +
                                                std::to_string(p.cu_seqlens_q.rank) +
                                                ", expected 1 (batch + 1)");
    }
    if (p.cu_seqlens_q.shape[0] < 1) {
      return fail(StatusCode::kInvalidShape, "cu_seqlens_q.shape[0] = " +
                                                 std::to_string(p.cu_seqlens_q.shape[0]) +
                                                 ", expected >= 1 (batch + 1)");
    }
  }
  const std::int64_t batch = varlen ? p.cu_seqlens_q.shape[0] - 1 : p.q.shape[0];
  if (varlen) {
    FA_RETURN_IF_ERROR(check_side_tensor(p.cu_seqlens_q, "cu_seqlens_q", DType::kInt32,
                                         {batch + 1}, "(batch + 1)", p.q.device));
    FA_RETURN_IF_ERROR(check_side_tensor(p.cu_seqlens_k, "cu_seqlens_k", DType::kInt32,
                                         {batch + 1}, "(batch + 1, as cu_seqlens_q)",
                                         p.q.device));
    if (p.seqused_k.defined()) {
      FA_RETURN_IF_ERROR(check_side_tensor(p.seqused_k, "seqused_k", DType::kInt32, {batch},
                                           "(batch)", p.q.device));
    }
  }
  if (p.alibi_slopes.defined()) {
    if (p.alibi_slopes.rank == 2) {
      FA_RETURN_IF_ERROR(check_side_tensor(p.alibi_slopes, "alibi_slopes", DType::kFP32,
                                           {batch, heads}, "(batch, heads)", p.q.device));
    } else {
      FA_RETURN_IF_ERROR(check_side_tensor(p.alibi_slopes, "alibi_slopes", DType::kFP32, {heads},
                                           "(heads) or (batch, heads)", p.q.device));
    }
  }
  if (p.sinks.defined()) {
    FA_RETURN_IF_ERROR(
        check_side_tensor(p.sinks, "sinks", DType::kFP32, {heads}, "(heads)", p.q.device));
  }
  const std::pair<const TensorView*, const char*> all_views[] = {
      {&p.q, "q"},         {&p.k, "k"},
      {&p.v, "v"},         {&p.out, "out"},
      {&p.lse, "lse"},     {&p.alibi_slopes, "alibi_slopes"},
      {&p.sinks, "sinks"}, {&p.cu_seqlens_q, "cu_seqlens_q"},
      {&p.cu_seqlens_k, "cu_seqlens_k"}, {&p.seqused_k, "seqused_k"}};
  for (auto [t, name] : all_views) {
    if (t->defined() && t->numel() > 0) {
      FA_RETURN_IF_ERROR(cuda::check_pointer_device(t->data, t->device, name));
    }
  }
  if (p.workspace != nullptr && p.workspace_size > 0) {
    const Status st = cuda::check_pointer_device(p.workspace, p.q.device, "workspace");
    if (!st.ok()) {
      return fail(st.code(), "workspace must be memory of q.device = " + device_name(p.q.device) +
                                 ": " + st.message());
    }
  }
  if (varlen) FA_RETURN_IF_ERROR(check_varlen_values(p, batch));

  // 9. Outputs must not overlap inputs (or each other).
  for (auto [t, name] : all_views) {
    if (t == &p.out || t == &p.lse) continue;
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
  // The workspace is written (the naive backend's S): it must not overlap any tensor.
  if (p.workspace != nullptr && p.workspace_size > 0) {
    const auto w0 = reinterpret_cast<std::uintptr_t>(p.workspace);
    for (auto [t, name] : all_views) {
      if (!t->defined() || t->numel() == 0 || t->device != p.q.device) continue;
      const auto t0 = reinterpret_cast<std::uintptr_t>(t->data);
      if (w0 < t0 + static_cast<std::uintptr_t>(t->span_bytes()) &&
          t0 < w0 + p.workspace_size) {
        return fail(StatusCode::kAliasing, std::string("workspace overlaps ") + name +
                                               ": the backend writes its workspace");
      }
    }
  }
  return Status::Ok();
}

Status validate_combine(const CombineParams& p) {
  const std::size_t n = p.outs.size();
  if (p.lses.size() != n) {
    return fail(StatusCode::kInvalidArgument,
                "lses has " + std::to_string(p.lses.size()) + " parts but outs has " +
                    std::to_string(n) + ": expected one LSE per partial output");
  }
  // Ranks, then dtypes, then shapes against out, then the head dim, strides and pointers,
  // devices, aliasing (forward()'s order).
  FA_RETURN_IF_ERROR(check_rank(p.out, "out", 4, "(batch, seqlen_q, heads, head_dim)"));
  const bool has_lse = p.lse.defined();
  if (has_lse) FA_RETURN_IF_ERROR(check_rank(p.lse, "lse", 3, "(batch, heads, seqlen_q)"));
  std::vector<std::string> out_names(n), lse_names(n);
  for (std::size_t i = 0; i < n; ++i) {
    out_names[i] = "outs[" + std::to_string(i) + "]";
    lse_names[i] = "lses[" + std::to_string(i) + "]";
    FA_RETURN_IF_ERROR(check_rank(p.outs[i], out_names[i].c_str(), 4,
                                  "(batch, seqlen_q, heads, head_dim)"));
    FA_RETURN_IF_ERROR(
        check_rank(p.lses[i], lse_names[i].c_str(), 3, "(batch, heads, seqlen_q)"));
  }
  if (p.out.dtype != DType::kBF16 && p.out.dtype != DType::kFP16 && p.out.dtype != DType::kFP32) {
    return fail(StatusCode::kInvalidDtype, "out.dtype = " + std::string(dtype_name(p.out.dtype)) +
                                               ", expected one of bf16, fp16, fp32");
  }
  if (has_lse && p.lse.dtype != DType::kFP32) {
    return fail(StatusCode::kInvalidDtype,
                "lse.dtype = " + std::string(dtype_name(p.lse.dtype)) + ", expected fp32");
  }
  for (std::size_t i = 0; i < n; ++i) {
    for (auto [t, name] : {std::pair{&p.outs[i], &out_names[i]}, std::pair{&p.lses[i], &lse_names[i]}}) {
      if (t->dtype != DType::kFP32) {
        return fail(StatusCode::kInvalidDtype, *name + ".dtype = " +
                                                   std::string(dtype_name(t->dtype)) +
                                                   ", expected fp32 (partial results are float32)");
      }
    }
  }
  static const char* kDims[] = {"batch", "seqlen_q", "heads", "head_dim"};
  for (std::size_t i = 0; i < n; ++i) {
    for (int d = 0; d < 4; ++d) {
      FA_RETURN_IF_ERROR(
          check_same_dim(p.outs[i], out_names[i].c_str(), d, p.out, "out", d, kDims[d]));
    }
    FA_RETURN_IF_ERROR(check_same_dim(p.lses[i], lse_names[i].c_str(), 0, p.out, "out", 0, "batch"));
    FA_RETURN_IF_ERROR(check_same_dim(p.lses[i], lse_names[i].c_str(), 1, p.out, "out", 2, "heads"));
    FA_RETURN_IF_ERROR(
        check_same_dim(p.lses[i], lse_names[i].c_str(), 2, p.out, "out", 1, "seqlen_q"));
  }
  if (has_lse) {
    FA_RETURN_IF_ERROR(check_same_dim(p.lse, "lse", 0, p.out, "out", 0, "batch"));
    FA_RETURN_IF_ERROR(check_same_dim(p.lse, "lse", 1, p.out, "out", 2, "heads"));
    FA_RETURN_IF_ERROR(check_same_dim(p.lse, "lse", 2, p.out, "out", 1, "seqlen_q"));
  }
  const std::int64_t d = p.out.shape[3];
  if (d < kHeadDimStep || d > kMaxHeadDim || d % kHeadDimStep != 0) {
    return fail(StatusCode::kUnsupportedHeadDim,
                "out.shape[3] (head_dim) = " + std::to_string(d) +
                    " is not supported; supported: " + supported_head_dims());
  }
  FA_RETURN_IF_ERROR(check_strides(p.out, "out", kRequiredAlignmentBytes));
  FA_RETURN_IF_ERROR(check_pointer(p.out, "out", kRequiredAlignmentBytes));
  FA_RETURN_IF_ERROR(check_no_zero_stride(p.out, "out"));
  if (has_lse) {
    FA_RETURN_IF_ERROR(check_strides(p.lse, "lse", 4));
    FA_RETURN_IF_ERROR(check_pointer(p.lse, "lse", 4));
    FA_RETURN_IF_ERROR(check_no_zero_stride(p.lse, "lse"));
  }
  for (std::size_t i = 0; i < n; ++i) {
    FA_RETURN_IF_ERROR(check_strides(p.outs[i], out_names[i].c_str(), kRequiredAlignmentBytes));
    FA_RETURN_IF_ERROR(check_pointer(p.outs[i], out_names[i].c_str(), kRequiredAlignmentBytes));
    FA_RETURN_IF_ERROR(check_strides(p.lses[i], lse_names[i].c_str(), 4));
    FA_RETURN_IF_ERROR(check_pointer(p.lses[i], lse_names[i].c_str(), 4));
  }
  // Devices: every tensor on out's device, and a CUDA view must hold memory of that device.
  std::vector<std::pair<const TensorView*, const char*>> views = {{&p.out, "out"}, {&p.lse, "lse"}};
  for (std::size_t i = 0; i < n; ++i) {
    views.push_back({&p.outs[i], out_names[i].c_str()});
    views.push_back({&p.lses[i], lse_names[i].c_str()});
  }
  for (auto [t, name] : views) {
    if (t->defined() && t->device != p.out.device) {
      return fail(StatusCode::kInvalidDevice, std::string(name) + ".device = " +
                                                  device_name(t->device) +
                                                  " must equal out.device = " +
                                                  device_name(p.out.device));
    }
  }
  for (auto [t, name] : views) {
    if (t->defined() && t->numel() > 0) {
      FA_RETURN_IF_ERROR(cuda::check_pointer_device(t->data, t->device, name));
    }
  }
  // The outputs must not overlap any input or each other.
  for (std::size_t v = 2; v < views.size(); ++v) {
    if (overlaps(p.out, *views[v].first)) {
      return fail(StatusCode::kAliasing, std::string("out overlaps ") + views[v].second +
                                             ": outputs must not alias inputs");
    }
    if (has_lse && overlaps(p.lse, *views[v].first)) {
      return fail(StatusCode::kAliasing, std::string("lse overlaps ") + views[v].second +
                                             ": outputs must not alias inputs");
    }
  }
  if (has_lse && overlaps(p.lse, p.out)) {
    return fail(StatusCode::kAliasing, "lse overlaps out: the two outputs must not alias");
  }
  return Status::Ok();
}

float ForwardParams::scale() const {
  if (softmax_scale.has_value()) return *softmax_scale;
  return 1.0f / std::sqrt(static_cast<float>(head_dim()));
}

}  // namespace flashattn
