"""The workspace through the Python package (python/src/flashattn_ext.cc, flashattn.forward,
flashattn.workspace_bytes, the torch ops): the binding answers the library's workspace_bytes() for
a call ("auto" resolved) and takes a workspace array or an allocator callable, which it checks
(rank, stride, device, alignment, writable) before the library sees the pointer.

On the CPU (CI): every CPU backend needs 0 bytes, for dense, varlen and KV-cache calls; the size
query refuses what forward() refuses, with the same message; a bad workspace argument is refused
with the binding's message; an allocator is never called when nothing is needed.
On a GPU (skipped without one): flash-decode's split-KV workspace is asked for and refused when
too small (nothing written), and a decode step with num_splits=4 and 0 is captured in a CUDA graph
through flash_attn_with_kvcache (torch's caching allocator holds the workspace), replayed as
cache_seqlens grows, and equal bit for bit to the eager call."""
import numpy as np
import pytest

import flashattn
from helpers import aligned_empty, attention_inputs, kvcache_inputs, varlen_inputs

try:
    import torch
except ImportError:
    torch = None

CPU_BACKENDS = ["auto", "cpu-flash", "cpu-reference"]


def dense_call():
    q, k, v = attention_inputs(2, 5, 7, 4, 2, 64, np.float32, seed=1)
    return dict(q=q, k=k, v=v, out=aligned_empty(q.shape, q.dtype))


def kv_call(page_size=None):
    p = kvcache_inputs([3, 9], 2, 2, 4, 2, 64, np.float32, seed=2, page_size=page_size)
    return dict(q=p["q"], k=p["k"], v=p["v"], out=aligned_empty(p["q"].shape, p["q"].dtype),
                k_cache=p["k_cache"], v_cache=p["v_cache"], cache_seqlens=p["cache_seqlens"],
                block_table=p["block_table"])


def forward_args(call):
    """flashattn.forward's positional arrays and keywords for a call dict."""
    keywords = {name: call[name] for name in ("k_cache", "v_cache", "cache_seqlens",
                                               "block_table", "cu_seqlens_q", "cu_seqlens_k",
                                               "max_seqlen_q", "max_seqlen_k") if name in call}
    return (call["q"], call["k"], call["v"], call["out"]), keywords


# ---- the size, on the CPU ----

@pytest.mark.parametrize("backend", CPU_BACKENDS)
@pytest.mark.parametrize("kind, num_splits", [("dense", 0), ("varlen", 0)] + [
    (kind, n) for kind in ("contiguous", "paged16") for n in (0, 1, 4)])
def test_cpu_backends_need_no_workspace(kind, num_splits, backend):
    if kind == "dense":
        call = dense_call()
    elif kind == "varlen":
        q, k, v, cu_q, cu_k = varlen_inputs([3, 0, 5], [4, 6, 2], 4, 2, 64, np.float32, seed=3)
        call = dict(q=q, k=k, v=v, out=aligned_empty(q.shape, q.dtype), cu_seqlens_q=cu_q,
                    cu_seqlens_k=cu_k, max_seqlen_q=5, max_seqlen_k=6)
    else:
        call = kv_call(16 if kind == "paged16" else None)
    args, keywords = forward_args(call)
    if kind in ("contiguous", "paged16"):
        keywords["num_splits"] = num_splits
    assert flashattn.workspace_bytes(*args, backend=backend, **keywords) == 0


def test_binding_answers_zero_for_the_cpu():
    call = dense_call()
    assert flashattn._C.workspace_bytes(call["q"], call["k"], call["v"], call["out"], None, None,
                                        False, -1, -1, 0.0, None, None, None, None, None, 0, 0,
                                        "auto") == 0


def three_kv_heads(call):
    call["k"] = call["v"] = aligned_empty(call["k"].shape[:2] + (3, 64), np.float32)


def beyond_capacity(call):
    call["cache_seqlens"] = np.array([3, 200], dtype=np.int32)  # capacity 128


@pytest.mark.parametrize("call, breaks, error", [
    (dense_call, three_kv_heads, ValueError),
    (dense_call, lambda c: c.update(backend="fastest"), ValueError),
    (kv_call, beyond_capacity, ValueError),
])
def test_size_query_refuses_what_forward_refuses(call, breaks, error):
    """The same checks, the same messages: the size is read off validated params only."""
    call = call()
    call["backend"] = "auto"
    breaks(call)
    args, keywords = forward_args(call)
    keywords["backend"] = call["backend"]
    with pytest.raises(error) as forward_error:
        flashattn.forward(*args, **keywords)
    with pytest.raises(error) as size_error:
        flashattn.workspace_bytes(*args, **keywords)
    assert str(size_error.value) == str(forward_error.value)
    assert str(forward_error.value).startswith(("invalid_shape:", "unknown_backend:",
                                                "invalid_argument:"))


# ---- the workspace argument, on the CPU ----

def never_called(nbytes):
    raise AssertionError(f"the allocator was called for {nbytes} bytes on the CPU")


@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_allocator_not_called_when_nothing_is_needed(backend):
    call = kv_call(16)
    args, keywords = forward_args(call)
    expected = aligned_empty(call["out"].shape, call["out"].dtype)
    flashattn.forward(*args[:3], expected, backend=backend, **keywords)
    flashattn.forward(*args, backend=backend, workspace=never_called, **keywords)
    assert np.array_equal(call["out"], expected)


def test_workspace_array_not_needed_is_accepted():
    """A valid workspace the backend does not need changes nothing."""
    call = dense_call()
    args, keywords = forward_args(call)
    expected = flashattn.flash_attn_func(call["q"], call["k"], call["v"])
    flashattn.forward(*args, workspace=aligned_empty((4096,), np.uint8), **keywords)
    assert np.array_equal(call["out"], expected)


@pytest.mark.parametrize("workspace, error, match", [
    ("bytes", TypeError, r"^workspace: expected None, a writable array \(torch\.empty\(bytes, "
                         r"dtype=torch\.uint8, device=q\.device\)\) or a callable"),
    (aligned_empty((4, 64), np.uint8), ValueError,
     r"^invalid_rank: workspace\.rank = 2, expected 1 \(a flat buffer of bytes\)$"),
    (aligned_empty((256,), np.uint8)[::2], ValueError,
     r"^invalid_stride: workspace\.stride\[0\] = 2, expected 1 \(contiguous\)$"),
    (aligned_empty((256,), np.uint8, offset_bytes=1), ValueError,
     r"^misaligned: workspace\.data is not 16-byte aligned$"),
])
def test_bad_workspace_is_refused(workspace, error, match):
    call = dense_call()
    args, keywords = forward_args(call)
    with pytest.raises(error, match=match):
        flashattn.forward(*args, workspace=workspace, **keywords)


def test_read_only_workspace_is_refused():
    call = dense_call()
    args, keywords = forward_args(call)
    ws = aligned_empty((256,), np.uint8)
    ws.flags.writeable = False
    with pytest.raises(ValueError, match=r"^workspace is read-only, expected a writable array"):
        flashattn.forward(*args, workspace=ws, **keywords)


@pytest.mark.torch
def test_torch_cpu_tensors_need_no_workspace():
    call = {name: (torch.from_numpy(x) if isinstance(x, np.ndarray) else x)
            for name, x in kv_call().items()}
    args, keywords = forward_args(call)
    assert flashattn.workspace_bytes(*args, num_splits=4, **keywords) == 0


# ---- on a GPU ----

def decode_step(batch=2, heads=8, kv_heads=2, head_dim=128, seqlen_new=1, capacity=4096,
                page_size=None, lens=(1000, 3001), seed=0):
    """A bf16 decode step on CUDA: dict(q, k, v, k_cache, v_cache, cache_seqlens, block_table),
    the cache filled at random (every row: what the step does not read does not matter)."""
    g = torch.Generator(device="cuda").manual_seed(seed)

    def randn(*shape):
        return torch.randn(shape, generator=g, device="cuda").add_(0.5).to(torch.bfloat16)
    table = None
    if page_size is None:
        k_cache, v_cache = randn(batch, capacity, kv_heads, head_dim), randn(
            batch, capacity, kv_heads, head_dim)
    else:
        pages = batch * capacity // page_size
        k_cache, v_cache = (randn(pages, page_size, kv_heads, head_dim) for _ in range(2))
        table = torch.randperm(pages, generator=g, device="cuda").to(torch.int32).view(batch, -1)
    return dict(q=randn(batch, seqlen_new, heads, head_dim),
                k=randn(batch, seqlen_new, kv_heads, head_dim),
                v=randn(batch, seqlen_new, kv_heads, head_dim), k_cache=k_cache, v_cache=v_cache,
                cache_seqlens=torch.tensor(lens, dtype=torch.int32, device="cuda"),
                block_table=table)


def run_step(t, num_splits, **options):
    return flashattn.flash_attn_with_kvcache(
        t["q"], t["k_cache"], t["v_cache"], t["k"], t["v"], cache_seqlens=t["cache_seqlens"],
        block_table=t["block_table"], causal=True, num_splits=num_splits, return_lse=True,
        **options)


def step_workspace_bytes(t, num_splits):
    out = torch.empty_like(t["q"])
    return flashattn.workspace_bytes(t["q"], t["k"], t["v"], out, k_cache=t["k_cache"],
                                     v_cache=t["v_cache"], cache_seqlens=t["cache_seqlens"],
                                     block_table=t["block_table"], num_splits=num_splits)


def skip_without_flash_decode():
    info = {b.name: b for b in flashattn.list_backends()}
    if not info["flash-decode"].usable:
        pytest.skip(f"flash-decode: {info['flash-decode'].why_not}")


@pytest.mark.gpu
def test_split_kv_needs_a_workspace():
    skip_without_flash_decode()
    t = decode_step()
    assert step_workspace_bytes(t, 1) == 0
    assert step_workspace_bytes(t, 4) > 0
    # num_splits=0 picks more than one split for this shape (4 blocks on a GPU of many SMs):
    # the capture tests below then exercise the workspace with it.
    assert step_workspace_bytes(t, 0) > 0


@pytest.mark.gpu
def test_too_small_workspace_is_refused_and_nothing_written():
    skip_without_flash_decode()
    t = decode_step()
    need = step_workspace_bytes(t, 4)
    out = torch.full_like(t["q"], float("nan"))
    k_before, v_before = t["k_cache"].clone(), t["v_cache"].clone()
    small = torch.empty(need - 16, dtype=torch.uint8, device="cuda")
    with pytest.raises(ValueError, match=rf"^invalid_argument: workspace_size = {need - 16} bytes, "
                                         rf"expected at least {need} for backend flash-decode"):
        flashattn.forward(t["q"], t["k"], t["v"], out, k_cache=t["k_cache"], v_cache=t["v_cache"],
                          cache_seqlens=t["cache_seqlens"], num_splits=4, workspace=small)
    torch.cuda.synchronize()
    assert out.isnan().all()
    assert torch.equal(t["k_cache"], k_before) and torch.equal(t["v_cache"], v_before)


@pytest.mark.gpu
@pytest.mark.parametrize("given", ["array", "allocator", "library"])
def test_explicit_workspace_gives_the_same_bits(given):
    skip_without_flash_decode()
    t = decode_step()
    expected, expected_lse = run_step(t, 4)
    need = step_workspace_bytes(t, 4)
    calls = []

    def allocate(nbytes):
        calls.append(nbytes)
        return torch.empty(nbytes, dtype=torch.uint8, device="cuda")
    workspace = {"array": lambda: torch.empty(need, dtype=torch.uint8, device="cuda"),
                 "allocator": lambda: allocate,
                 # a CuPy-style caller: no workspace, the library allocates and synchronizes
                 "library": lambda: None}[given]()
    out = torch.empty_like(t["q"])
    lse = torch.empty_like(expected_lse)
    # flashattn.forward fills workspace=None from torch's allocator for torch tensors: the
    # binding itself is called to reach the library's own allocation.
    flashattn._C.forward(t["q"], t["k"], t["v"], out, lse, None, True, -1, -1, 0.0, None, None,
                         None, None, None, 0, 0, "auto", k_cache=t["k_cache"],
                         v_cache=t["v_cache"], cache_seqlens=t["cache_seqlens"], num_splits=4,
                         stream=torch.cuda.current_stream().cuda_stream, workspace=workspace)
    torch.cuda.synchronize()
    assert torch.equal(out, expected) and torch.equal(lse, expected_lse)
    assert calls == ([need] if given == "allocator" else [])


@pytest.mark.gpu
def test_workspace_on_another_device_is_refused():
    skip_without_flash_decode()
    t = decode_step()
    out = torch.empty_like(t["q"])
    host = torch.empty(1 << 20, dtype=torch.uint8)
    with pytest.raises(RuntimeError,
                       match=r"^invalid_device: workspace\.device = cpu must equal q\.device = "
                             r"cuda:\d$"):
        flashattn.forward(t["q"], t["k"], t["v"], out, k_cache=t["k_cache"], v_cache=t["v_cache"],
                          cache_seqlens=t["cache_seqlens"], num_splits=4, workspace=host)


@pytest.mark.gpu
@pytest.mark.parametrize("layout", [None, 64], ids=["contiguous", "paged64"])
@pytest.mark.parametrize("seqlen_new", [1, 4])
@pytest.mark.parametrize("num_splits", [4, 0])
def test_decode_step_captured_in_a_cuda_graph(num_splits, seqlen_new, layout):
    """Capture one step (the new tokens appended at cache_seqlens), then per replay: new q, k, v
    and cache_seqlens advanced in place; the replay must append where the eager call would and
    give its output bit for bit."""
    skip_without_flash_decode()
    t = decode_step(seqlen_new=seqlen_new, page_size=layout)
    side = torch.cuda.Stream()  # warm-up off the default stream, as torch's docs advise
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            run_step(t, num_splits)
    torch.cuda.current_stream().wait_stream(side)

    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out, lse = run_step(t, num_splits)
    for seed in (1, 2, 3):
        fresh = decode_step(seqlen_new=seqlen_new, page_size=layout, seed=seed)
        for name in ("q", "k", "v"):
            t[name].copy_(fresh[name])
        t["cache_seqlens"].add_(seqlen_new)
        graph.replay()
        torch.cuda.synchronize()
        for b, n in enumerate(t["cache_seqlens"].tolist()):
            rows = torch.arange(n, n + seqlen_new, device="cuda")
            if layout is None:
                appended = t["k_cache"][b, rows]
            else:
                pages = t["block_table"][b, rows // layout].long()
                appended = t["k_cache"][pages, rows % layout]
            assert torch.equal(appended, t["k"][b])
        expected, expected_lse = run_step(t, num_splits)  # appends the same rows again
        torch.cuda.synchronize()
        assert torch.equal(out, expected) and torch.equal(lse, expected_lse)


@pytest.mark.gpu
@pytest.mark.parametrize("mode", ["default", "reduce-overhead"])
def test_decode_step_compiled(mode):
    """torch.compile(fullgraph=True) of a split-KV step: the workspace is the op's own, not an
    input, so the fake registration is unchanged and the compiled step gives the eager bits."""
    skip_without_flash_decode()
    torch._dynamo.reset()
    t = decode_step()

    def step(q, k_cache, v_cache, k, v, cache_seqlens):
        return flashattn.flash_attn_with_kvcache(q, k_cache, v_cache, k, v,
                                                 cache_seqlens=cache_seqlens, causal=True,
                                                 num_splits=0)
    args = (t["q"], t["k_cache"], t["v_cache"], t["k"], t["v"], t["cache_seqlens"])
    expected = step(*args)
    compiled = torch.compile(step, fullgraph=True, mode=mode)
    for _ in range(3):  # reduce-overhead records a CUDA graph on a later call
        got = compiled(*args)
    torch.cuda.synchronize()
    assert torch.equal(got, expected)
