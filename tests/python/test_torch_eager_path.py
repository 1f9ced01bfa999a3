"""The eager fast path of the torch ops (_ops._eager): in plain eager mode flash_attn_func,
flash_attn_varlen_func, flash_attn_with_kvcache and combine call the ops' implementations
directly (torch.library's dispatch cost ~70 us per call), and everywhere else they go through
the op. Checked on CPU tensors: the direct path gives the op's bits and writes the caches the
same way (bumping their version counters as the op does); _direct_ok refuses grad-requiring
inputs, fake tensors, tensor subclasses, dispatch and torch-function modes; FakeTensorMode,
torch.compile and autograd's refusal keep working through the op (test_torch_ops.py and
test_torch_kvcache.py test those through the same entry points). Skipped without torch."""
import pytest

import flashattn
from flashattn import _ops

try:
    import torch
except ImportError:
    torch = None

pytestmark = pytest.mark.torch


def rand(*shape, seed=0, dtype=None):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(shape, generator=g)
    return x if dtype is None else x.to(dtype)


def test_dense_direct_equals_op():
    q, k, v = rand(2, 33, 4, 64, seed=1), rand(2, 47, 2, 64, seed=2), rand(2, 47, 2, 64, seed=3)
    assert _ops._direct_ok((q, k, v))
    out, lse = flashattn.flash_attn_func(q, k, v, causal=True, window_size=(16, 0), softcap=5.0,
                                         return_lse=True)
    ref_out, ref_lse = torch.ops.flashattn.fwd(q, k, v, None, True, 16, 0, 5.0, None, None,
                                               "auto")
    assert torch.equal(out, ref_out) and torch.equal(lse, ref_lse)


def test_varlen_direct_equals_op():
    lens = [5, 0, 19]
    cu = torch.tensor([0, 5, 5, 24], dtype=torch.int32)
    q, k, v = rand(24, 4, 32, seed=4), rand(24, 2, 32, seed=5), rand(24, 2, 32, seed=6)
    out, lse = flashattn.flash_attn_varlen_func(q, k, v, cu, cu, max(lens), max(lens),
                                                causal=True, return_lse=True)
    ref_out, ref_lse = torch.ops.flashattn.fwd_varlen(q, k, v, cu, cu, max(lens), max(lens), None,
                                                      None, True, -1, -1, 0.0, None, None, "auto")
    assert torch.equal(out, ref_out) and torch.equal(lse, ref_lse)


def test_kvcache_direct_equals_op_and_bumps_versions():
    q = rand(2, 2, 8, 64, seed=7)
    cache = rand(2, 40, 2, 64, seed=8), rand(2, 40, 2, 64, seed=9)
    new = rand(2, 2, 2, 64, seed=10), rand(2, 2, 2, 64, seed=11)
    lens = torch.tensor([0, 30], dtype=torch.int32)
    k_direct, v_direct = (x.clone() for x in cache)
    k_op, v_op = (x.clone() for x in cache)
    versions = (k_direct._version, v_direct._version)
    out, lse = flashattn.flash_attn_with_kvcache(q, k_direct, v_direct, *new, cache_seqlens=lens,
                                                 causal=True, return_lse=True)
    assert k_direct._version > versions[0] and v_direct._version > versions[1]
    ref_out, ref_lse = torch.ops.flashattn.fwd_kvcache(q, k_op, v_op, *new, lens, None, None,
                                                       True, -1, -1, 0.0, None, None, 0, "auto")
    assert torch.equal(out, ref_out) and torch.equal(lse, ref_lse)
    assert torch.equal(k_direct, k_op) and torch.equal(v_direct, v_op)
    assert not torch.equal(k_direct, cache[0])  # the new tokens were written


def test_combine_direct_equals_op():
    parts = [rand(1, 3, 2, 16, seed=s) for s in (12, 13)]
    lses = [rand(1, 2, 3, seed=s) for s in (14, 15)]
    out, lse = flashattn.combine(parts, lses, return_lse=True)
    ref_out, ref_lse = torch.ops.flashattn.combine(parts, lses, torch.float32)
    assert torch.equal(out, ref_out) and torch.equal(lse, ref_lse)


def test_direct_ok_refusals():
    q = rand(1, 4, 2, 16)
    assert _ops._direct_ok((q, None, 1.0, [q, q]))
    g = q.clone().requires_grad_()
    assert not _ops._direct_ok((g,))
    assert not _ops._direct_ok(([q, g],))  # inside a list (combine's parts)
    with torch.no_grad():
        assert _ops._direct_ok((g,))  # nothing asks for autograd

    class Sub(torch.Tensor):
        pass

    assert not _ops._direct_ok((q.as_subclass(Sub),))
    from torch._subclasses.fake_tensor import FakeTensorMode
    with FakeTensorMode():
        assert not _ops._direct_ok((torch.empty(1, 4, 2, 16),))
    from torch.overrides import TorchFunctionMode

    class Mode(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))

    with Mode():
        assert not _ops._direct_ok((q,))


def test_grad_inputs_still_refuse_backward():
    q, k = rand(1, 8, 2, 16, seed=16).requires_grad_(), rand(1, 8, 2, 16, seed=17)
    out = flashattn.flash_attn_func(q, k, k)
    assert out.requires_grad  # the op ran: its autograd formula is attached
    with pytest.raises(RuntimeError, match=r"no backward pass yet"):
        out.sum().backward()


def op_names_run(fn):
    """The flashattn:: ops torch's profiler saw while fn ran (the profiler records dispatcher
    calls without entering a mode, so it does not change the path taken)."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        fn()
    return {e.key for e in prof.key_averages() if e.key.startswith("flashattn::")}


def test_eager_calls_skip_the_dispatcher():
    q, k = rand(1, 8, 2, 16, seed=18), rand(1, 8, 2, 16, seed=19)
    assert op_names_run(lambda: flashattn.flash_attn_func(q, k, k)) == set()
    lens = torch.tensor([3], dtype=torch.int32)
    assert op_names_run(lambda: flashattn.flash_attn_with_kvcache(q, k.clone(), k.clone(),
                                                                  cache_seqlens=lens)) == set()
    g = q.clone().requires_grad_()
    assert op_names_run(lambda: flashattn.flash_attn_func(g, k, k)) == {"flashattn::fwd"}
