"""The PyTorch operators torch.ops.flashattn.fwd, fwd_varlen, fwd_kvcache and combine, registered
through torch.library when torch is importable.

Schemas:
  fwd(Tensor q, Tensor k, Tensor v, float? softmax_scale, bool causal, int window_left,
      int window_right, float softcap, Tensor? alibi_slopes, Tensor? sinks, str backend)
      -> (Tensor out, Tensor lse)
  fwd_varlen(Tensor q, Tensor k, Tensor v, Tensor cu_seqlens_q, Tensor cu_seqlens_k,
             int max_seqlen_q, int max_seqlen_k, Tensor? seqused_k, float? softmax_scale,
             bool causal, int window_left, int window_right, float softcap,
             Tensor? alibi_slopes, Tensor? sinks, str backend) -> (Tensor out, Tensor lse)
  fwd_kvcache(Tensor q, Tensor(a!) k_cache, Tensor(b!) v_cache, Tensor? k, Tensor? v,
              Tensor cache_seqlens, Tensor? block_table, float? softmax_scale, bool causal,
              int window_left, int window_right, float softcap, Tensor? alibi_slopes,
              Tensor? sinks, int num_splits, str backend) -> (Tensor out, Tensor lse)
      k_cache and v_cache are mutated: the new tokens k, v (None: none) are written into them at
      rows cache_seqlens[b].. (torch.library spells the alias sets a1 and a2: "Tensor(a1!)
      k_cache, Tensor(a2!) v_cache"). cache_seqlens int32 (batch), block_table int32 (batch,
      max_pages_per_seq) or None (contiguous cache); num_splits 0 (chosen) to 256.
  combine(Tensor[] outs, Tensor[] lses, ScalarType out_dtype) -> (Tensor out, Tensor lse)
      merges N >= 1 float32 partial results (flashattn/combine.h) into out of out_dtype and the
      float32 LSE.
The fields are include/flashattn/params.h's: window_left / window_right -1 is unbounded, softcap
0 is off; alibi_slopes float32 (heads) or (batch, heads), sinks float32 (heads); cu_seqlens_q /
cu_seqlens_k int32 (batch + 1), seqused_k int32 (batch). No defaults: every argument is passed,
so the schema reads the same on every torch version.

- One implementation per op for CPU and CUDA tensors: it allocates out (q's shape and dtype,
  contiguous) and the float32 LSE on q's device ((batch, heads, seqlen_q) dense, (heads, total_q)
  varlen) and calls the library, on the caller's current CUDA stream for CUDA tensors. A backend
  that needs a workspace (flash-decode with more than one split, naive) gets it from torch's
  caching allocator (torch_workspace), never from the library: so every op on CUDA tensors can
  be captured in a CUDA graph, and the workspace is the implementation's, not an op input.
- The fake (meta) implementations return empties of the same shapes, dtypes and strides, so
  torch.compile(fullgraph=True) traces each op as one node and torch.library.opcheck passes.
  Argument checks happen when the op runs (in the library), except q's rank, which the fakes
  need to compute the LSE shape.
- In plain eager mode the public functions (flash_attn_func and the others in _api) call an op's
  implementation directly rather than through the dispatcher (call_fwd and the like, _eager):
  torch.library's autograd / ADInplaceOrView / aliasing layers cost 38-58 us per call on the CI
  machine's CPU, for the same bits. Under torch.compile, FakeTensorMode or any other dispatch or
  torch-function mode, functorch transforms, tensor subclasses, or with an input that requires
  grad (so the op's autograd refusal is attached), they go through the op. The direct path
  bumps the written caches' version counters as the op does.
- There is no backward pass yet: the autograd formula raises when a gradient is requested
  (fwd_kvcache mutates its caches, and torch.library takes no autograd formula for a mutating op:
  its backward raises torch's "no autograd formula was registered").
"""
# No `from __future__ import annotations` here: torch.library reads the schema from real
# annotation objects.
from typing import List, Optional, Tuple

from . import _C

try:
    import torch
except ImportError:  # torch is optional: the NumPy/DLPack path works without it
    torch = None

_Q_RANK_MESSAGE = "invalid_rank: q.rank = {}, expected 4 (batch, seqlen_q, heads, head_dim)"
_Q_RANK_MESSAGE_VARLEN = "invalid_rank: q.rank = {}, expected 3 (total_q, heads, head_dim)"
_PART_RANK_MESSAGE = ("invalid_rank: outs[0].rank = {}, expected 4 (batch, seqlen_q, heads, "
                      "head_dim)")

NO_BACKWARD_MESSAGE = (
    "flashattn has no backward pass yet (forward only): call flash_attn_func under "
    "torch.no_grad() / torch.inference_mode(), or on tensors that do not require grad")


def lse_shape(q_shape) -> Tuple[int, ...]:
    """(batch, heads, seqlen_q) for a BSHD q shape. For a q of the wrong rank the library names
    q's rank first; (0,) is only a placeholder."""
    return (q_shape[0], q_shape[2], q_shape[1]) if len(q_shape) == 4 else (0,)


def varlen_lse_shape(q_shape) -> Tuple[int, ...]:
    """(heads, total_q) for a packed (total_q, heads, head_dim) q shape; (0,) as lse_shape."""
    return (q_shape[1], q_shape[0]) if len(q_shape) == 3 else (0,)


def combine_lse_shape(part_shape) -> Tuple[int, ...]:
    """(batch, heads, seqlen_q) for a partial output of shape (batch, seqlen_q, heads, head_dim)
    (the caller checks the rank: combine() has no q whose rank the library would name)."""
    return (part_shape[0], part_shape[2], part_shape[1])


_current_raw_stream = None if torch is None else getattr(torch._C, "_cuda_getCurrentRawStream",
                                                          None)


def torch_stream(t) -> int:
    """The cudaStream_t (as an int) of torch's current stream on t's device; 0 for CPU tensors.
    Through torch._C._cuda_getCurrentRawStream where torch has it (what the code Inductor
    generates calls), which skips torch.cuda.current_stream's Stream object and device lookup:
    one or two calls of this per op on the eager path."""
    if not t.is_cuda:
        return 0
    if _current_raw_stream is not None:
        return _current_raw_stream(t.get_device())
    return torch.cuda.current_stream(t.device).cuda_stream


def torch_workspace(t, stream: int):
    """The workspace argument of _C.forward for tensors on t's device, run on `stream`: for CUDA
    tensors a callable that the binding calls with the bytes the backend that runs needs (only
    when it needs some: flash-decode's split-KV partials, the naive backend's S matrix,
    flash-sm90's tile counter) and that returns torch.empty(bytes, dtype=torch.uint8) on t's
    device. It comes from torch's caching
    allocator, so the library neither allocates nor synchronizes, and the call can be captured
    in a CUDA graph: inside a capture the buffer comes from the graph's private pool and stays
    the graph's. The allocator orders its reuse after the current stream; on another stream the
    buffer is recorded there too. None for CPU tensors (no CPU backend needs a workspace)."""
    if not t.is_cuda:
        return None

    def allocate(nbytes: int):
        ws = torch.empty(nbytes, dtype=torch.uint8, device=t.device)
        if stream != torch_stream(t):
            ws.record_stream(torch.cuda.ExternalStream(stream, device=t.device))
        return _dl(ws)  # the capsule keeps ws (and so the allocator's block) alive
    return allocate


def _run_forward(q, k, v, out, lse, *args, **kwargs) -> None:
    """_C.forward on torch's current stream of q's device with torch_workspace; args and kwargs
    are _C.forward's after lse, up to the stream. Every tensor goes as a DLPack capsule (_dl)."""
    stream = torch_stream(q)
    tensor = torch.Tensor
    args = [_dl(a) if isinstance(a, tensor) else a for a in args]
    kwargs = {n: _dl(a) if isinstance(a, tensor) else a for n, a in kwargs.items()}
    _C.forward(_dl(q), _dl(k), _dl(v), _dl(out), _dl(lse), *args, stream=stream,
               workspace=torch_workspace(q, stream), **kwargs)


def _dl(x):
    """What the binding imports for torch tensor x: a DLPack capsule from
    torch.utils.dlpack.to_dlpack (1.1 us on the CI machine's CPU) rather than the tensor itself,
    whose __dlpack__() nanobind would call (9.2 us there: its Python-side checks; up to 9
    tensors per KV-cache call). The capsule shares x's storage (the caches are written in place)
    and exports tensors that require grad (ALiBi slopes or sinks may be parameters; the op only
    reads them). None and non-strided tensors (sparse) pass as they are: the binding then calls
    __dlpack__ and reports its error."""
    if x is None or x.layout is not torch.strided:
        return x
    return _to_dlpack(x)


if torch is not None:
    from torch.utils.dlpack import to_dlpack as _to_dlpack

    def _fwd_impl(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, softmax_scale: Optional[float],
            causal: bool, window_left: int, window_right: int, softcap: float,
            alibi_slopes: Optional[torch.Tensor], sinks: Optional[torch.Tensor],
            backend: str) -> Tuple[torch.Tensor, torch.Tensor]:
        """Attention forward: returns (out, lse). See flashattn.flash_attn_func."""
        out = q.new_empty(q.shape)
        lse = q.new_empty(lse_shape(q.shape), dtype=torch.float32)
        _run_forward(q, k, v, out, lse, softmax_scale, causal, window_left, window_right,
                     softcap, alibi_slopes, sinks, None, None, None, 0, 0, backend)
        return out, lse

    fwd = torch.library.custom_op("flashattn::fwd", mutates_args=(),
                                  device_types=("cpu", "cuda"))(_fwd_impl)

    @fwd.register_fake
    def _fwd_fake(q, k, v, softmax_scale, causal, window_left, window_right, softcap,
                  alibi_slopes, sinks, backend):
        if q.dim() != 4:
            raise ValueError(_Q_RANK_MESSAGE.format(q.dim()))
        return q.new_empty(q.shape), q.new_empty(lse_shape(q.shape), dtype=torch.float32)

    def _fwd_varlen_impl(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                   cu_seqlens_q: torch.Tensor, cu_seqlens_k: torch.Tensor, max_seqlen_q: int,
                   max_seqlen_k: int, seqused_k: Optional[torch.Tensor],
                   softmax_scale: Optional[float], causal: bool, window_left: int,
                   window_right: int, softcap: float, alibi_slopes: Optional[torch.Tensor],
                   sinks: Optional[torch.Tensor],
                   backend: str) -> Tuple[torch.Tensor, torch.Tensor]:
        """Variable-length attention forward: returns (out (total_q, heads, head_dim),
        lse (heads, total_q)). See flashattn.flash_attn_varlen_func."""
        out = q.new_empty(q.shape)
        lse = q.new_empty(varlen_lse_shape(q.shape), dtype=torch.float32)
        _run_forward(q, k, v, out, lse, softmax_scale, causal, window_left, window_right,
                     softcap, alibi_slopes, sinks, cu_seqlens_q, cu_seqlens_k, seqused_k,
                     max_seqlen_q, max_seqlen_k, backend)
        return out, lse

    fwd_varlen = torch.library.custom_op("flashattn::fwd_varlen", mutates_args=(),
                                         device_types=("cpu", "cuda"))(_fwd_varlen_impl)

    @fwd_varlen.register_fake
    def _fwd_varlen_fake(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                         seqused_k, softmax_scale, causal, window_left, window_right, softcap,
                         alibi_slopes, sinks, backend):
        if q.dim() != 3:
            raise ValueError(_Q_RANK_MESSAGE_VARLEN.format(q.dim()))
        return q.new_empty(q.shape), q.new_empty(varlen_lse_shape(q.shape), dtype=torch.float32)

    # mutates_args marks the caches Tensor(a!) in the schema: functionalization (torch.compile)
    # then knows the op writes them, and opcheck checks that nothing else is written.
    def _fwd_kvcache_impl(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                    k: Optional[torch.Tensor], v: Optional[torch.Tensor],
                    cache_seqlens: torch.Tensor, block_table: Optional[torch.Tensor],
                    softmax_scale: Optional[float], causal: bool, window_left: int,
                    window_right: int, softcap: float, alibi_slopes: Optional[torch.Tensor],
                    sinks: Optional[torch.Tensor], num_splits: int,
                    backend: str) -> Tuple[torch.Tensor, torch.Tensor]:
        """Attention over a KV cache, appending the new tokens k, v to it in place: returns
        (out, lse). See flashattn.flash_attn_with_kvcache."""
        out = q.new_empty(q.shape)
        lse = q.new_empty(lse_shape(q.shape), dtype=torch.float32)
        # The capsules share the storage: the library writes the caches' own memory.
        _run_forward(q, k, v, out, lse, softmax_scale, causal, window_left, window_right,
                     softcap, alibi_slopes, sinks, None, None, None, 0, 0, backend,
                     k_cache=k_cache, v_cache=v_cache, cache_seqlens=cache_seqlens,
                     block_table=block_table, num_splits=num_splits)
        return out, lse

    fwd_kvcache = torch.library.custom_op("flashattn::fwd_kvcache",
                                          mutates_args=("k_cache", "v_cache"),
                                          device_types=("cpu", "cuda"))(_fwd_kvcache_impl)

    @fwd_kvcache.register_fake
    def _fwd_kvcache_fake(q, k_cache, v_cache, k, v, cache_seqlens, block_table, softmax_scale,
                          causal, window_left, window_right, softcap, alibi_slopes, sinks,
                          num_splits, backend):
        if q.dim() != 4:
            raise ValueError(_Q_RANK_MESSAGE.format(q.dim()))
        return q.new_empty(q.shape), q.new_empty(lse_shape(q.shape), dtype=torch.float32)

    def _combine_impl(outs: List[torch.Tensor], lses: List[torch.Tensor],
                out_dtype: torch.dtype) -> Tuple[torch.Tensor, torch.Tensor]:
        """Merges partial results: returns (out of out_dtype, lse float32). See
        flashattn.combine."""
        if outs[0].dim() != 4:
            raise ValueError(_PART_RANK_MESSAGE.format(outs[0].dim()))
        out = outs[0].new_empty(outs[0].shape, dtype=out_dtype)
        lse = outs[0].new_empty(combine_lse_shape(outs[0].shape), dtype=torch.float32)
        _C.combine([_dl(x) for x in outs], [_dl(x) for x in lses], _dl(out), _dl(lse),
                   torch_stream(out))
        return out, lse

    combine = torch.library.custom_op("flashattn::combine", mutates_args=(),
                                      device_types=("cpu", "cuda"))(_combine_impl)

    @combine.register_fake
    def _combine_fake(outs, lses, out_dtype):
        if outs[0].dim() != 4:
            raise ValueError(_PART_RANK_MESSAGE.format(outs[0].dim()))
        return (outs[0].new_empty(outs[0].shape, dtype=out_dtype),
                outs[0].new_empty(combine_lse_shape(outs[0].shape), dtype=torch.float32))

    def _setup_context(ctx, inputs, output):
        pass

    def _backward(ctx, grad_out, grad_lse):
        raise RuntimeError(NO_BACKWARD_MESSAGE)

    fwd.register_autograd(_backward, setup_context=_setup_context)
    fwd_varlen.register_autograd(_backward, setup_context=_setup_context)

    combine.register_autograd(_backward, setup_context=_setup_context)

    def _tensors(args):
        for a in args:
            if isinstance(a, (list, tuple)):
                yield from (x for x in a if isinstance(x, torch.Tensor))
            elif isinstance(a, torch.Tensor):
                yield a

    def _direct_ok(args) -> bool:
        """Whether calling an op's implementation directly is the same as calling the op: eager,
        no mode or transform that would see the op (torch.compile, FakeTensorMode and other
        dispatch modes, torch function modes, functorch), plain tensors only (no subclass, no
        fake), and nothing that asks for autograd (whose formula raises: the op must run to
        raise it). The check costs ~1 us."""
        try:
            if (torch.compiler.is_compiling() or torch._C._len_torch_dispatch_stack() > 0 or
                    torch._C._is_torch_function_mode_enabled() or
                    torch._C._are_functorch_transforms_active()):
                return False
        except AttributeError:  # a torch without these: always the op
            return False
        grad = torch.is_grad_enabled()
        for t in _tensors(args):
            if type(t) is not torch.Tensor or (grad and t.requires_grad):
                return False
        return True

    def _eager(op, impl, mutated=()):
        """The op, or in eager mode (_direct_ok) its implementation called directly: the
        torch.library dispatch (autograd, ADInplaceOrView, the aliasing check) cost ~70 us per
        call on the CI machine's CPU (397 vs 329 us for a KV-cache step on cpu-reference), most
        of an eager decode step's host time. `mutated`: the positions of arguments the op writes,
        whose version counters are bumped as the op's ADInplaceOrView kernel would."""
        bump = getattr(torch.autograd.graph, "increment_version", None)  # torch >= 2.1
        direct_possible = bump is not None or not mutated

        def call(*args):
            if not (direct_possible and _direct_ok(args)):
                return op(*args)
            result = impl(*args)
            for i in mutated:
                bump(args[i])
            return result
        call.__name__ = impl.__name__
        return call

    # What _api calls: the op under torch.compile and the other modes, the function otherwise.
    call_fwd = _eager(fwd, _fwd_impl)
    call_fwd_varlen = _eager(fwd_varlen, _fwd_varlen_impl)
    call_fwd_kvcache = _eager(fwd_kvcache, _fwd_kvcache_impl, mutated=(1, 2))
    call_combine = _eager(combine, _combine_impl)
else:
    fwd = None
    fwd_varlen = None
    fwd_kvcache = None
    combine = None
    call_fwd = call_fwd_varlen = call_fwd_kvcache = call_combine = None
