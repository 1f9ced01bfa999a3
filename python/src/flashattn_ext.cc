// flashattn._C: the nanobind binding of the C++ API. Arrays arrive through DLPack (PyTorch, JAX,
// CuPy, NumPy, ...; NumPy bfloat16 arrays of ml_dtypes, which NumPy cannot export, through a
// uint16 view); this file only turns them into TensorViews, runs flashattn::forward (dense, varlen
// or KV cache) or flashattn::combine with the GIL released, answers flashattn::workspace_bytes
// for a forward call, and maps a failed Status to a Python exception. Every argument check
// beyond "is this an array of a dtype and device the library knows" is the library's, so Python
// users get the same messages as C++ callers; the exceptions are what the library cannot see
// once the views are made: a rank-0 lse, cache, new-token or side array (a rank-0 view means
// "not given"), a softcap that float32 cannot hold, a num_splits beyond int, and the workspace
// array's rank, stride, device and alignment (the library gets only its pointer and size).
//
// Exception mapping (StatusCode -> Python):
//   invalid_rank, invalid_shape, invalid_stride, misaligned, unsupported_head_dim, invalid_scale,
//   invalid_argument, aliasing, null_pointer, unknown_backend -> ValueError
//   invalid_dtype                                             -> TypeError
//   invalid_device, backend_unavailable, unsupported, out_of_memory, cuda_error, internal
//                                                             -> RuntimeError
// The message is Status::to_string(): "invalid_shape: k.shape[2] (kv heads) = 3 must divide ...".
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <optional>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "flashattn/flashattn.h"

namespace nb = nanobind;

namespace {

using flashattn::DType;
using flashattn::Device;
using flashattn::Status;
using flashattn::StatusCode;
using flashattn::TensorView;

// Inputs are only read, so read-only arrays (a NumPy array with writeable=False) are fine there.
using InputArray = nb::ndarray<nb::ro>;
using OutputArray = nb::ndarray<>;

[[noreturn]] void raise_status(const Status& st) {
  const std::string msg = st.to_string();
  switch (st.code()) {
    case StatusCode::kInvalidRank:
    case StatusCode::kInvalidShape:
    case StatusCode::kInvalidStride:
    case StatusCode::kMisaligned:
    case StatusCode::kUnsupportedHeadDim:
    case StatusCode::kInvalidScale:
    case StatusCode::kInvalidArgument:
    case StatusCode::kAliasing:
    case StatusCode::kNullPointer:
    case StatusCode::kUnknownBackend:
      throw nb::value_error(msg.c_str());
    case StatusCode::kInvalidDtype:
      throw nb::type_error(msg.c_str());
    default:
      throw std::runtime_error(msg);
  }
}

std::string dlpack_dtype_name(nb::dlpack::dtype dt) {
  std::string base;
  switch (static_cast<nb::dlpack::dtype_code>(dt.code)) {
    case nb::dlpack::dtype_code::Int: base = "int"; break;
    case nb::dlpack::dtype_code::UInt: base = "uint"; break;
    case nb::dlpack::dtype_code::Float: base = "float"; break;
    case nb::dlpack::dtype_code::Bfloat: base = "bfloat"; break;
    case nb::dlpack::dtype_code::Complex: base = "complex"; break;
    case nb::dlpack::dtype_code::Bool: return "bool";
    default: base = "dlpack_code" + std::to_string(dt.code) + "_"; break;
  }
  std::string name = base + std::to_string(dt.bits);
  if (dt.lanes != 1) name += "x" + std::to_string(dt.lanes);
  return name;
}

// What an array may hold, and how the message for a dtype the library has no DType for ends:
// q, k, v and out take the value dtypes; lse and the side inputs (alibi_slopes, sinks: float32;
// cu_seqlens_q, cu_seqlens_k, seqused_k: int32) take every DType, and the library reports one of
// the wrong kind ("lse.dtype = fp16, expected fp32").
struct DtypeRule {
  bool int32_ok;
  const char* expected;
};
constexpr DtypeRule kAttentionDtypes = {false,
                                        " is not supported, expected bfloat16, float16 or float32"};
constexpr DtypeRule kFloat32 = {true, ", expected float32"};
constexpr DtypeRule kInt32 = {true, ", expected int32"};

DType to_dtype(nb::dlpack::dtype dt, const char* name, DtypeRule rule) {
  if (dt.lanes == 1 && dt.bits == 16 && dt.code == uint8_t(nb::dlpack::dtype_code::Bfloat)) {
    return DType::kBF16;
  }
  if (dt.lanes == 1 && dt.bits == 16 && dt.code == uint8_t(nb::dlpack::dtype_code::Float)) {
    return DType::kFP16;
  }
  if (dt.lanes == 1 && dt.bits == 32 && dt.code == uint8_t(nb::dlpack::dtype_code::Float)) {
    return DType::kFP32;
  }
  if (rule.int32_ok && dt.lanes == 1 && dt.bits == 32 &&
      dt.code == uint8_t(nb::dlpack::dtype_code::Int)) {
    return DType::kInt32;
  }
  raise_status(Status(StatusCode::kInvalidDtype,
                      std::string(name) + ".dtype = " + dlpack_dtype_name(dt) + rule.expected));
}

Device to_device(int device_type, int device_id, const char* name) {
  switch (device_type) {
    case nb::device::cpu::value:
    case nb::device::cuda_host::value:  // pinned host memory: the CPU backends can read it
      return Device::cpu();
    case nb::device::cuda::value:
    case nb::device::cuda_managed::value:
      return Device::cuda(device_id);
    default:
      raise_status(Status(StatusCode::kInvalidDevice,
                          std::string(name) + " is on DLPack device type " +
                              std::to_string(device_type) + ", expected cpu or cuda"));
  }
}

// str(x): nb::str(handle) calls PyObject_Str (nb::str(object) would only cast).
std::string python_str(nb::handle x) { return nb::str(x).c_str(); }

// "None", "list", "numpy.ndarray of dtype object": what the caller passed, in their terms.
std::string python_type_name(nb::handle obj) {
  if (obj.is_none()) return "None";
  const nb::handle type = obj.type();
  std::string name = python_str(nb::object(type.attr("__qualname__")));
  const std::string module = python_str(nb::object(type.attr("__module__")));
  if (module != "builtins") name = module + "." + name;
  if (nb::hasattr(obj, "dtype")) name += " of dtype " + python_str(nb::object(obj.attr("dtype")));
  return name;
}

// ml_dtypes' bfloat16 (JAX's NumPy bfloat16: dtype name "bfloat16", kind 'V', itemsize 2) is a
// NumPy user dtype that NumPy exports through neither DLPack nor the buffer protocol. Its bits
// are IEEE bfloat16, so a uint16 view of the same memory imports, and the caller reads it as bf16.
// An invalid object for anything else.
nb::object numpy_bfloat16_as_uint16(nb::handle obj) {
  // Only arrays of a NumPy that is already imported can be NumPy arrays: never import it here.
  nb::object numpy = nb::steal(PyImport_GetModule(nb::str("numpy").ptr()));
  if (!numpy.is_valid()) {
    PyErr_Clear();
    return {};
  }
  if (!nb::isinstance(obj, numpy.attr("ndarray"))) return {};
  nb::object dt = obj.attr("dtype");
  if (nb::cast<std::string>(dt.attr("name")) != "bfloat16" ||
      nb::cast<std::string>(dt.attr("kind")) != "V" || nb::cast<int>(dt.attr("itemsize")) != 2) {
    return {};
  }
  return obj.attr("view")(numpy.attr("uint16"));
}

// Imports `obj` as `Array` without a copy: a DLPack array as it is, or the uint16 bits of a NumPy
// bfloat16 array (then *bf16_bits is set). False when it is neither.
template <typename Array>
bool import_array(nb::handle obj, Array* a, bool* bf16_bits) {
  *bf16_bits = false;
  if (nb::try_cast(obj, *a, /*convert=*/false)) return true;  // the common case, first
  const nb::object bits = numpy_bfloat16_as_uint16(obj);
  if (bits.is_valid() && nb::try_cast(bits, *a, /*convert=*/false)) {
    *bf16_bits = true;
    return true;
  }
  return false;
}

template <typename Array>
TensorView to_view(const Array& a, const char* name, bool bf16_bits, DtypeRule dtypes) {
  TensorView t;
  t.data = const_cast<void*>(static_cast<const void*>(a.data()));
  t.dtype = bf16_bits ? DType::kBF16 : to_dtype(a.dtype(), name, dtypes);
  t.device = to_device(a.device_type(), a.device_id(), name);
  // A rank above kMaxRank keeps its rank but no sizes (all 0): validate() checks every rank
  // (step 1) before it reads a size, so the library reports it with its own message.
  t.rank = static_cast<int>(a.ndim());
  if (t.rank <= flashattn::kMaxRank) {
    for (int d = 0; d < t.rank; ++d) {
      t.shape[d] = static_cast<std::int64_t>(a.shape(static_cast<std::size_t>(d)));
      t.stride[d] = a.stride(static_cast<std::size_t>(d));
    }
  }
  return t;
}

// The TypeError for an argument that did not import as an array. When the object has
// __dlpack__, its own error says why (a torch tensor that requires grad, an unsupported dtype).
[[noreturn]] void raise_not_an_array(nb::handle obj, const char* name, const char* expected) {
  std::string why;
  if (nb::hasattr(obj, "__dlpack__")) {
    try {
      obj.attr("__dlpack__")();
      why = " (its __dlpack__() works, but the array was not usable here)";
    } catch (nb::python_error& e) {
      // The exception's type and message: what() would add the traceback of a __dlpack__
      // written in Python (torch's), frames of the caller's own code included.
      why = ": its __dlpack__() raised " +
            nb::cast<std::string>(nb::handle(e.type()).attr("__name__")) + ": " +
            nb::cast<std::string>(nb::str(e.value()));
    }
  }
  throw nb::type_error(
      (std::string(name) + ": expected " + expected + ", got " + python_type_name(obj) + why)
          .c_str());
}

// q, k, v and the side inputs: any DLPack array, read-only is fine. `keep` holds the imported
// array (and with it the producer's buffer) alive until the call returns.
TensorView input_view(nb::handle obj, const char* name, std::vector<InputArray>* keep,
                      DtypeRule dtypes = kAttentionDtypes) {
  InputArray a;
  bool bf16_bits = false;
  if (!import_array(obj, &a, &bf16_bits)) {
    raise_not_an_array(obj, name,
                       "an array that supports DLPack (torch.Tensor, numpy.ndarray, "
                       "cupy.ndarray, jax.Array, ...)");
  }
  keep->push_back(a);
  return to_view(a, name, bf16_bits, dtypes);
}

// An optional side input (alibi_slopes, sinks, cu_seqlens_q, cu_seqlens_k, seqused_k): None is
// "not given". A rank-0 array is refused here: the library reads a rank-0 view as "not given",
// which would silently drop the option.
TensorView side_view(nb::handle obj, const char* name, DtypeRule dtypes, const char* ranks,
                     std::vector<InputArray>* keep) {
  if (obj.is_none()) return TensorView{};
  TensorView t = input_view(obj, name, keep, dtypes);
  if (t.rank == 0) {
    raise_status(Status(StatusCode::kInvalidRank,
                        std::string(name) + ".rank = 0, expected " + ranks));
  }
  return t;
}

// softcap arrives as a double and the library reads a float: a finite value that float cannot
// hold would turn into inf (reported as "softcap = inf") or into 0 (silently "off").
float softcap_as_float(double softcap) {
  const float f = static_cast<float>(softcap);
  if (std::isfinite(softcap) && (!std::isfinite(f) || (softcap > 0.0 && f == 0.0f))) {
    char text[160];
    std::snprintf(text, sizeof(text),
                  "softcap = %g %s in float32, expected a finite value >= 0 (0 is off)", softcap,
                  std::isfinite(f) ? "rounds to 0 (off)" : "is beyond the range");
    raise_status(Status(StatusCode::kInvalidArgument, text));
  }
  return f;
}

// out, lse (and a KV cache that new tokens are written into): writable DLPack arrays, taken as
// they are: an implicitly converted copy would be written and thrown away. `why` ends the
// read-only message (" (the new tokens k, v are written into it)").
TensorView output_view(nb::handle obj, const char* name, DtypeRule dtypes,
                       std::vector<OutputArray>* keep, const char* why = "") {
  OutputArray a;
  bool bf16_bits = false;
  if (!import_array(obj, &a, &bf16_bits)) {
    InputArray ro;
    if (import_array(obj, &ro, &bf16_bits)) {
      throw nb::value_error(
          (std::string(name) + " is read-only, expected a writable array" + why).c_str());
    }
    raise_not_an_array(obj, name, "a writable array that supports DLPack");
  }
  keep->push_back(a);
  return to_view(a, name, bf16_bits, dtypes);
}

// An optional 4-D array of the KV cache call (k_cache, v_cache, the new tokens k, v): None is "not
// given". A rank-0 array is refused: the library reads a rank-0 view as "not given" (a rank-0
// k_cache would silently turn the call into a dense one without keys). With `writable` the array
// is written in place (the caches when new tokens come), so it must be writable.
TensorView kv_view(nb::handle obj, const char* name, const char* layout, bool writable,
                   std::vector<InputArray>* inputs, std::vector<OutputArray>* outputs) {
  if (obj.is_none()) return TensorView{};
  TensorView t = writable ? output_view(obj, name, kAttentionDtypes, outputs,
                                        " (the new tokens k, v are written into it)")
                          : input_view(obj, name, inputs);
  if (t.rank == 0) {
    raise_status(Status(StatusCode::kInvalidRank,
                        std::string(name) + ".rank = 0, expected 4 " + layout));
  }
  return t;
}

// num_splits arrives as an int64 and the library reads an int: a value beyond int gets the
// library's own message (validate(): "num_splits = ..., expected 0 (chosen) to 256") with the
// value the caller gave, not a wrapped one.
int num_splits_as_int(std::int64_t num_splits) {
  if (num_splits < std::numeric_limits<int>::min() ||
      num_splits > std::numeric_limits<int>::max()) {
    raise_status(Status(StatusCode::kInvalidArgument,
                        "num_splits = " + std::to_string(num_splits) +
                            ", expected 0 (chosen) to " + std::to_string(flashattn::kMaxSplits)));
  }
  return static_cast<int>(num_splits);
}

// The workspace of a forward() call (ForwardParams::workspace): a writable rank-1 contiguous
// array on q's device, 16-byte aligned (the CUDA kernels' vectors), of any dtype: its bytes are
// what counts. The library sees only a pointer and a size, so these checks are the binding's.
void attach_workspace_array(nb::handle obj, flashattn::ForwardParams* p,
                            std::vector<OutputArray>* keep) {
  OutputArray a;
  if (!nb::try_cast(obj, a, /*convert=*/false)) {
    InputArray ro;
    if (nb::try_cast(obj, ro, /*convert=*/false)) {
      throw nb::value_error("workspace is read-only, expected a writable array (the backend "
                            "writes its scratch data there)");
    }
    raise_not_an_array(obj, "workspace",
                       "None, a writable array (torch.empty(bytes, dtype=torch.uint8, "
                       "device=q.device)) or a callable taking the bytes and returning one");
  }
  keep->push_back(a);
  if (a.ndim() != 1) {
    raise_status(Status(StatusCode::kInvalidRank, "workspace.rank = " + std::to_string(a.ndim()) +
                                                      ", expected 1 (a flat buffer of bytes)"));
  }
  if (a.shape(0) > 1 && a.stride(0) != 1) {
    raise_status(Status(StatusCode::kInvalidStride,
                        "workspace.stride[0] = " + std::to_string(a.stride(0)) +
                            ", expected 1 (contiguous)"));
  }
  const flashattn::Device device = to_device(a.device_type(), a.device_id(), "workspace");
  if (device != p->q.device) {
    raise_status(Status(StatusCode::kInvalidDevice,
                        "workspace.device = " + flashattn::device_name(device) +
                            " must equal q.device = " + flashattn::device_name(p->q.device)));
  }
  if (reinterpret_cast<std::uintptr_t>(a.data()) % flashattn::kRequiredAlignmentBytes != 0) {
    raise_status(Status(StatusCode::kMisaligned,
                        "workspace.data is not " +
                            std::to_string(flashattn::kRequiredAlignmentBytes) +
                            "-byte aligned"));
  }
  p->workspace = a.data();
  p->workspace_size = a.nbytes();
}

// Bytes of workspace the backend that runs these params needs ("auto" resolved as forward()
// resolves it); the params are validated first, as forward() would (the size is read off them).
// SIZE_MAX when the count does not fit 64 bits (forward() then refuses the call, naming why).
std::size_t required_workspace(const flashattn::ForwardParams& p, const std::string& backend) {
  Status st = flashattn::validate(p);
  if (st.ok()) {
    std::size_t bytes = 0;
    st = flashattn::workspace_bytes(p, backend, &bytes);
    if (st.ok()) return bytes;
  }
  raise_status(st);
}

// forward()'s workspace argument: None (the library allocates one when the backend needs it,
// then synchronizes: not capturable), an array (attach_workspace_array), or a callable
// allocate(bytes) -> array, called only when the backend needs bytes > 0. The callable is how
// the Python layer passes torch's caching allocator: one call imports the arguments once and
// gets exactly what the backend that runs needs.
void attach_workspace(nb::handle workspace, const std::string& backend,
                      flashattn::ForwardParams* p, std::vector<OutputArray>* keep) {
  if (workspace.is_none()) return;
  if (!PyCallable_Check(workspace.ptr())) return attach_workspace_array(workspace, p, keep);
  const std::size_t bytes = required_workspace(*p, backend);
  if (bytes == 0 || bytes == std::numeric_limits<std::size_t>::max()) return;
  attach_workspace_array(workspace(bytes), p, keep);
}

// forward(q, k, v, out, lse, softmax_scale, causal, window_left, window_right, softcap,
//         alibi_slopes, sinks, cu_seqlens_q, cu_seqlens_k, seqused_k, max_seqlen_q, max_seqlen_k,
//         backend, k_cache=None, v_cache=None, cache_seqlens=None, block_table=None,
//         num_splits=0, stream=0, workspace=None): writes out (and lse) in place. The side
// inputs are arrays or None; max_seqlen_q / max_seqlen_k are read only with cu_seqlens (0
// otherwise). stream is a cudaStream_t as an integer (0: the default stream); ignored on the
// CPU. workspace: attach_workspace.
// workspace_bytes(the same arguments up to num_splits): the bytes of workspace that call needs
// (required_workspace); it launches nothing.
// KV cache (any of k_cache, v_cache, cache_seqlens, block_table given; params.h): k and v are the
// optional new tokens (None for none), which the library writes into the caches in place, so
// then the caches must be writable arrays.
// The Python layer (flashattn/_api.py) checks the options' types; the library checks every value.
//
// One body for both: `Run...` is forward()'s (stream, workspace) and empty for workspace_bytes(),
// which returns the bytes instead of running.
template <typename... Run>
auto forward_call(nb::handle q, nb::handle k, nb::handle v, nb::handle out, nb::handle lse,
                  std::optional<double> softmax_scale, bool causal, std::int64_t window_left,
                  std::int64_t window_right, double softcap, nb::handle alibi_slopes,
                  nb::handle sinks, nb::handle cu_seqlens_q, nb::handle cu_seqlens_k,
                  nb::handle seqused_k, std::int64_t max_seqlen_q, std::int64_t max_seqlen_k,
                  const std::string& backend, nb::handle k_cache, nb::handle v_cache,
                  nb::handle cache_seqlens, nb::handle block_table, std::int64_t num_splits,
                  Run... run) {
  static_assert(sizeof...(Run) == 0 || sizeof...(Run) == 2, "(stream, workspace) or nothing");
  std::vector<InputArray> inputs;
  std::vector<OutputArray> outputs;
  flashattn::ForwardParams p;
  p.q = input_view(q, "q", &inputs);
  const bool kv_call = !k_cache.is_none() || !v_cache.is_none() || !cache_seqlens.is_none() ||
                       !block_table.is_none();
  if (kv_call) {
    constexpr const char* kCacheLayout =
        "(batch, cache_len, kv_heads, head_dim) or, paged, (num_pages, page_size, kv_heads, "
        "head_dim)";
    constexpr const char* kNewLayout = "(batch, seqlen_new, kv_heads, head_dim)";
    const bool appends = !k.is_none() || !v.is_none();
    p.k_cache = kv_view(k_cache, "k_cache", kCacheLayout, appends, &inputs, &outputs);
    p.v_cache = kv_view(v_cache, "v_cache", kCacheLayout, appends, &inputs, &outputs);
    p.k = kv_view(k, "k", kNewLayout, false, &inputs, &outputs);
    p.v = kv_view(v, "v", kNewLayout, false, &inputs, &outputs);
    p.cache_seqlens = side_view(cache_seqlens, "cache_seqlens", kInt32, "1 (batch)", &inputs);
    p.block_table =
        side_view(block_table, "block_table", kInt32, "2 (batch, max_pages_per_seq)", &inputs);
  } else {
    p.k = input_view(k, "k", &inputs);
    p.v = input_view(v, "v", &inputs);
  }
  p.out = output_view(out, "out", kAttentionDtypes, &outputs);
  const bool varlen = !cu_seqlens_q.is_none() || !cu_seqlens_k.is_none();
  if (!lse.is_none()) {
    p.lse = output_view(lse, "lse", kFloat32, &outputs);
    if (p.lse.rank == 0) {  // a rank-0 view reads as "no LSE" to the library
      raise_status(Status(StatusCode::kInvalidRank,
                          varlen ? "lse.rank = 0, expected 2 (heads, total_q)"
                                 : "lse.rank = 0, expected 3 (batch, heads, seqlen_q)"));
    }
  }
  if (softmax_scale.has_value()) p.softmax_scale = static_cast<float>(*softmax_scale);
  p.causal = causal;
  p.window_left = window_left;
  p.window_right = window_right;
  p.softcap = softcap_as_float(softcap);
  p.alibi_slopes =
      side_view(alibi_slopes, "alibi_slopes", kFloat32, "1 (heads) or 2 (batch, heads)", &inputs);
  p.sinks = side_view(sinks, "sinks", kFloat32, "1 (heads)", &inputs);
  p.cu_seqlens_q = side_view(cu_seqlens_q, "cu_seqlens_q", kInt32, "1 (batch + 1)", &inputs);
  p.cu_seqlens_k = side_view(cu_seqlens_k, "cu_seqlens_k", kInt32, "1 (batch + 1)", &inputs);
  p.seqused_k = side_view(seqused_k, "seqused_k", kInt32, "1 (batch)", &inputs);
  p.max_seqlen_q = max_seqlen_q;
  p.max_seqlen_k = max_seqlen_k;
  p.num_splits = num_splits_as_int(num_splits);

  if constexpr (sizeof...(Run) == 0) {
    return required_workspace(p, backend);
  } else {
    const auto [stream, workspace] = std::tuple<Run...>(run...);
    attach_workspace(workspace, backend, &p, &outputs);
    Status st;
    {
      nb::gil_scoped_release release;
      st = flashattn::forward(p, backend, reinterpret_cast<flashattn::StreamHandle>(stream));
    }
    if (!st.ok()) raise_status(st);
  }
}

// Registers an entry point with forward_call's common arguments, then `run` (forward()'s stream
// and workspace). .none() on every array: None reaches input_view / output_view and gets their
// TypeError naming the argument, not nanobind's "incompatible function arguments" listing.
template <typename Fn, typename... Run>
void def_forward_entry(nb::module_& m, const char* name, Fn fn, const char* doc,
                       const Run&... run) {
  m.def(name, fn, nb::arg("q").none(), nb::arg("k").none(), nb::arg("v").none(),
        nb::arg("out").none(), nb::arg("lse").none(), nb::arg("softmax_scale").none(),
        nb::arg("causal"), nb::arg("window_left"), nb::arg("window_right"), nb::arg("softcap"),
        nb::arg("alibi_slopes").none(), nb::arg("sinks").none(), nb::arg("cu_seqlens_q").none(),
        nb::arg("cu_seqlens_k").none(), nb::arg("seqused_k").none(), nb::arg("max_seqlen_q"),
        nb::arg("max_seqlen_k"), nb::arg("backend"), nb::arg("k_cache").none() = nb::none(),
        nb::arg("v_cache").none() = nb::none(), nb::arg("cache_seqlens").none() = nb::none(),
        nb::arg("block_table").none() = nb::none(), nb::arg("num_splits") = 0, run..., doc);
}

// combine(outs, lses, out, lse, stream): merges the partial results outs[i], lses[i] (lists of
// float32 arrays) into out (and lse, or None) in place (flashattn/combine.h). Every part is named
// by its index ("outs[2]") in the library's messages.
void combine(nb::list outs, nb::list lses, nb::handle out, nb::handle lse, std::uintptr_t stream) {
  std::vector<InputArray> inputs;
  std::vector<OutputArray> outputs;
  flashattn::CombineParams p;
  for (auto [list, prefix, parts] : {std::tuple{&outs, "outs", &p.outs},
                                     std::tuple{&lses, "lses", &p.lses}}) {
    for (std::size_t i = 0; i < list->size(); ++i) {
      const std::string name = std::string(prefix) + "[" + std::to_string(i) + "]";
      // kFloat32's rule: any DType imports, and the library names a part that is not float32.
      parts->push_back(input_view((*list)[i], name.c_str(), &inputs, kFloat32));
    }
  }
  p.out = output_view(out, "out", kAttentionDtypes, &outputs);
  if (!lse.is_none()) {
    p.lse = output_view(lse, "lse", kFloat32, &outputs);
    if (p.lse.rank == 0) {  // a rank-0 view reads as "no LSE" to the library
      raise_status(Status(StatusCode::kInvalidRank,
                          "lse.rank = 0, expected 3 (batch, heads, seqlen_q)"));
    }
  }
  Status st;
  {
    nb::gil_scoped_release release;
    st = flashattn::combine(p, reinterpret_cast<flashattn::StreamHandle>(stream));
  }
  if (!st.ok()) raise_status(st);
}

// (name, description, device "cpu" | "cuda", usable, why_not) per backend, in registry order.
std::vector<std::tuple<std::string, std::string, std::string, bool, std::string>> list_backends() {
  std::vector<std::tuple<std::string, std::string, std::string, bool, std::string>> rows;
  for (const flashattn::BackendInfo& b : flashattn::list_backends()) {
    rows.emplace_back(b.name, b.description,
                      b.device_type == flashattn::DeviceType::kCUDA ? "cuda" : "cpu", b.usable,
                      b.why_not);
  }
  return rows;
}

}  // namespace

NB_MODULE(_C, m) {
  m.doc() = "flashattn's C++ API (low level; use flashattn.flash_attn_func)";
  m.attr("version") = flashattn::kVersion;
  def_forward_entry(
      m, "forward", &forward_call<std::uintptr_t, nb::handle>,
      "Attention forward into caller-provided arrays (BSHD, or packed (total, heads, head_dim) "
      "with cu_seqlens; lse float32 (batch, heads, seqlen_q) / (heads, total_q) or None; the "
      "side inputs arrays or None). With k_cache: a KV cache call, k and v the new tokens "
      "(or None), written into the caches in place. stream: a cudaStream_t as an int. "
      "workspace: None (the library allocates one if the backend needs it, and synchronizes), "
      "a writable 1-D contiguous array on q's device, 16-byte aligned, or a callable taking "
      "the bytes needed (called only when > 0) and returning one. Raises ValueError / "
      "TypeError / RuntimeError with the library's message.",
      nb::arg("stream") = 0, nb::arg("workspace").none() = nb::none());
  def_forward_entry(
      m, "workspace_bytes", &forward_call<>,
      "Bytes of workspace forward() with these arguments needs (0 for none; 2**64 - 1 when the "
      "count does not fit 64 bits), for the backend that would run (\"auto\" resolved); the "
      "arguments are validated as forward() validates them. Launches nothing.");
  m.def("combine", &combine, nb::arg("outs"), nb::arg("lses"), nb::arg("out").none(),
        nb::arg("lse").none(), nb::arg("stream"),
        "Merges partial results (lists of float32 outs (batch, seqlen_q, heads, head_dim) and "
        "lses (batch, heads, seqlen_q)) into out (and lse, or None) in place. Raises as "
        "forward.");
  m.def("list_backends", &list_backends,
        "Every backend built in: (name, description, device, usable, why_not).");
}
