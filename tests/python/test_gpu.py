"""CUDA tensors through the Python package: every CUDA backend against the float64 reference with
the naive backend in the test dtype as the baseline (docs/testing.md), the caller's current
stream, CUDA graph capture and replay, torch.compile on CUDA, CPU/CUDA mixes, a second device;
the variants (window, softcap, ALiBi, sinks, varlen) on every CUDA backend, which must match
the reference or refuse them ("unsupported: ... does not implement ..."), never ignore them.
Skipped with a reason without a CUDA device (and without torch, which allocates the memory)."""
import functools
import re

import numpy as np
import pytest

import flashattn
from flashattn._reference import attention_numpy
from tolerance import check_attention, naive_float32

try:
    import torch
except ImportError:
    torch = None

pytestmark = pytest.mark.gpu

DTYPES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}


def cuda_backend_names():
    """"auto" and every CUDA backend built in (whether usable here is checked in the test)."""
    return ["auto"] + [b.name for b in flashattn.list_backends() if b.device == "cuda"]


def make_inputs(b, sq, sk, h, hk, d, dtype="bf16", seed=0, device="cuda"):
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(shape, generator=g) + 0.5
               for shape in ((b, sq, h, d), (b, sk, hk, d), (b, sk, hk, d)))
    return tuple(x.to(device=device, dtype=getattr(torch, DTYPES[dtype])) for x in (q, k, v))


def as_numpy64(x):
    return x.detach().to("cpu", torch.float64).numpy()


def run_poisoned(q, k, v, causal, backend, softmax_scale=None):
    """forward() into NaN-poisoned outputs: an element never written stays NaN and fails."""
    out = torch.full_like(q, float("nan"), memory_format=torch.contiguous_format)
    lse = torch.full((q.shape[0], q.shape[2], q.shape[1]), float("nan"), device=q.device)
    flashattn.forward(q, k, v, out, lse, softmax_scale=softmax_scale, causal=causal,
                      backend=backend)
    return out, lse


def skip_if_not_applicable(backend, run):
    """Runs `run`; a backend that is not usable here or does not cover the case is a skip."""
    info = {b.name: b for b in flashattn.list_backends()}
    if backend in info and not info[backend].usable:
        pytest.skip(f"{backend}: {info[backend].why_not}")
    try:
        return run()
    except RuntimeError as e:
        if str(e).startswith("unsupported:"):
            pytest.skip(f"{backend}: {e}")
        raise


# (batch, seqlen_q, seqlen_k, heads, kv_heads, head_dim)
SHAPES = [
    (2, 113, 203, 6, 2, 64),
    (1, 203, 113, 6, 1, 128),      # causal: the first 90 rows see no key
    (1, 1023, 1025, 4, 2, 256),
    (2, 1, 4097, 4, 4, 128),
    (1, 4097, 1, 2, 1, 64),
    (2, 339, 239, 2, 2, 96),
]


@pytest.mark.parametrize("backend", cuda_backend_names())
@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "b{}_sq{}_sk{}_h{}/{}_d{}".format(*s))
def test_matches_float64_reference(shape, causal, dtype, backend):
    seed = sum(shape) * 7 + causal
    q, k, v = make_inputs(*shape, dtype=dtype, seed=seed)
    out, lse = skip_if_not_applicable(backend, lambda: run_poisoned(q, k, v, causal, backend))
    qn, kn, vn = (as_numpy64(x) for x in (q, k, v))
    ref_out, ref_lse = attention_numpy(qn, kn, vn, None, causal)
    if backend == "naive":  # not its own baseline: the float32 CPU naive, as the verifier does
        base_out, base_lse = naive_float32(qn, kn, vn, None, causal, dtype)
    else:
        base_out, base_lse = (as_numpy64(x) for x in run_poisoned(q, k, v, causal, "naive"))
    check_attention(as_numpy64(out), as_numpy64(lse), ref_out, ref_lse, base_out, base_lse, dtype,
                    context=f"{backend} {dtype} shape={shape} causal={causal} seed={seed}")


@pytest.mark.parametrize("backend", cuda_backend_names())
def test_flash_attn_func_strided_and_deterministic(backend):
    q, k, v = make_inputs(2, 300, 500, 8, 2, 128, "bf16", seed=3)
    qt, kt, vt = (x.transpose(1, 2).contiguous().transpose(1, 2) for x in (q, k, v))  # BHSD
    out1, lse1 = skip_if_not_applicable(backend, lambda: flashattn.flash_attn_func(
        qt, kt, vt, causal=True, return_lse=True, backend=backend))
    out2, lse2 = flashattn.flash_attn_func(q, k, v, causal=True, return_lse=True, backend=backend)
    assert out1.device == q.device and out1.is_contiguous() and lse1.dtype == torch.float32
    assert torch.equal(out1, out2) and torch.equal(lse1, lse2)


@pytest.mark.parametrize("sizes", [(0, 5, 7), (2, 0, 7), (2, 5, 0)], ids=["batch0", "sq0", "sk0"])
def test_empty_dimensions(sizes):
    b, sq, sk = sizes
    q, k, v = make_inputs(b, sq, sk, 4, 2, 64, "fp16")
    out, lse = flashattn.flash_attn_func(q, k, v, return_lse=True)
    assert out.shape == q.shape and lse.shape == (b, 4, sq)
    if sk == 0:
        assert torch.all(out == 0) and torch.all(torch.isneginf(lse))


def test_batch_times_heads_beyond_grid_limit():
    q, k, v = make_inputs(2, 16, 24, 35000, 35000, 8, "fp16", seed=4)  # 70000 (batch, head) pairs
    out, lse = run_poisoned(q, k, v, True, "auto")
    base_out, base_lse = run_poisoned(q, k, v, True, "naive")
    ref_out, ref_lse = attention_numpy(as_numpy64(q), as_numpy64(k), as_numpy64(v), None, True)
    check_attention(as_numpy64(out), as_numpy64(lse), ref_out, ref_lse, as_numpy64(base_out),
                    as_numpy64(base_lse), "fp16", context="batch*heads = 70000")


# ---- streams ----

def test_runs_on_the_current_stream():
    """The op must run on torch's current stream: on another stream it would read q before the
    (delayed) copy that precedes it on the current one."""
    q, k, v = make_inputs(2, 512, 512, 8, 8, 128, "bf16", seed=5)
    q_new = make_inputs(2, 512, 512, 8, 8, 128, "bf16", seed=6)[0]
    expected = flashattn.flash_attn_func(q_new, k, v, backend="flash")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        torch.cuda._sleep(100_000_000)  # ~50 ms of GPU time before the copy
        q.copy_(q_new)
        out = flashattn.flash_attn_func(q, k, v, backend="flash")
    torch.cuda.synchronize()
    assert torch.equal(out, expected)


def test_forward_explicit_stream():
    q, k, v = make_inputs(1, 256, 256, 4, 4, 64, "fp16", seed=7)
    q_new = make_inputs(1, 256, 256, 4, 4, 64, "fp16", seed=8)[0]
    expected = flashattn.flash_attn_func(q_new, k, v, backend="flash")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    out = torch.empty_like(q)
    with torch.cuda.stream(side):
        torch.cuda._sleep(100_000_000)
        q.copy_(q_new)
    flashattn.forward(q, k, v, out, backend="flash", stream=side.cuda_stream)
    torch.cuda.synchronize()
    assert torch.equal(out, expected)


# ---- CUDA graphs ----

@pytest.mark.parametrize("backend", ["flash", "auto"])
def test_cuda_graph_capture_and_replay(backend):
    q, k, v = make_inputs(2, 333, 555, 8, 2, 128, "bf16", seed=9)
    side = torch.cuda.Stream()  # warm-up off the default stream, as torch's docs advise
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            flashattn.flash_attn_func(q, k, v, causal=True, backend=backend)
    torch.cuda.current_stream().wait_stream(side)

    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out, lse = flashattn.flash_attn_func(q, k, v, causal=True, return_lse=True,
                                             backend=backend)
    for seed in (10, 11):
        for dst, src in zip((q, k, v), make_inputs(2, 333, 555, 8, 2, 128, "bf16", seed=seed)):
            dst.copy_(src)
        graph.replay()
        expected, expected_lse = flashattn.flash_attn_func(q, k, v, causal=True, return_lse=True,
                                                           backend=backend)
        torch.cuda.synchronize()
        assert torch.equal(out, expected) and torch.equal(lse, expected_lse)


# ---- torch.compile ----

def attention_block(q, k, v):
    out, lse = flashattn.flash_attn_func(q * 2.0, k, v, causal=True, return_lse=True)
    return out.float().sum(-1) + lse.transpose(1, 2)


@pytest.mark.parametrize("mode", ["default", "reduce-overhead"])
def test_compile_fullgraph_cuda(mode):
    torch._dynamo.reset()
    q, k, v = make_inputs(2, 256, 384, 8, 2, 64, "bf16", seed=12)
    compiled = torch.compile(attention_block, fullgraph=True, mode=mode)
    expected = attention_block(q, k, v)
    for _ in range(3):  # reduce-overhead records a CUDA graph on a later call
        got = compiled(q, k, v)
    torch.cuda.synchronize()
    assert torch.allclose(got, expected, rtol=1e-5, atol=1e-3)


def test_opcheck_cuda():
    q, k, v = make_inputs(2, 65, 130, 6, 2, 64, "bf16", seed=13)
    torch.library.opcheck(torch.ops.flashattn.fwd.default,
                          (q, k, v, None, True, -1, -1, 0.0, None, None, "auto"))


# ---- devices ----

@pytest.mark.parametrize("which", ["k_on_cpu", "q_on_cpu"])
def test_cpu_cuda_mix_raises(which):
    q, k, v = make_inputs(1, 16, 16, 2, 2, 64, "bf16")
    if which == "k_on_cpu":
        k, match = k.cpu(), r"invalid_device: k\.device = cpu must equal q\.device = cuda:\d"
    else:
        q, match = q.cpu(), r"invalid_device: k\.device = cuda:\d must equal q\.device = cpu"
    with pytest.raises(RuntimeError, match=match):
        flashattn.flash_attn_func(q, k, v)


def test_cpu_backend_on_cuda_tensors_raises():
    q, k, v = make_inputs(1, 16, 16, 2, 2, 64, "bf16")
    with pytest.raises(RuntimeError, match=r"backend \"cpu-flash\" runs on cpu tensors"):
        flashattn.flash_attn_func(q, k, v, backend="cpu-flash")


def test_non_default_device():
    if torch.cuda.device_count() < 2:
        pytest.skip("needs 2 CUDA devices")
    q, k, v = make_inputs(2, 200, 300, 4, 2, 128, "bf16", seed=14, device="cuda:1")
    with torch.cuda.device(0):  # the current device is not the tensors' device
        out, lse = flashattn.flash_attn_func(q, k, v, causal=True, return_lse=True)
    assert out.device == q.device and lse.device == q.device
    expected = flashattn.flash_attn_func(q.to("cuda:0"), k.to("cuda:0"), v.to("cuda:0"),
                                         causal=True)
    assert torch.equal(out.to("cuda:0"), expected)


def test_cupy_arrays():
    cupy = pytest.importorskip("cupy", reason="cupy is not installed")
    q, k, v = make_inputs(1, 64, 64, 4, 2, 64, "fp16", seed=15)
    qc, kc, vc = (cupy.from_dlpack(x) for x in (q, k, v))
    out = flashattn.flash_attn_func(qc, kc, vc)  # through torch: a torch tensor comes back
    assert torch.equal(out, flashattn.flash_attn_func(q, k, v))
    out_c = cupy.empty_like(qc)
    flashattn.forward(qc, kc, vc, out_c)  # CuPy's current stream
    cupy.cuda.get_current_stream().synchronize()
    assert np.array_equal(cupy.asnumpy(out_c), out.cpu().numpy())


# ---- the variants: each CUDA backend matches the reference or refuses, never ignores ----

# The variant each option is (the registry's words in "does not implement ...").
VARIANT_WORDS = {"window_size": "sliding window", "softcap": "softcap",
                 "alibi_slopes": "ALiBi", "sinks": "sinks", "cu_seqlens_q": "variable length"}


def refused_or_raise(error, backend, options):
    """Passes when `error` is a backend's refusal of a variant these options use (for "auto":
    no CUDA backend implements one of them); re-raises anything else."""
    message = str(error)
    used = [VARIANT_WORDS[name] for name in options if name in VARIANT_WORDS]
    refusal = re.search(r'backend "[^"]+" does not implement (.+?)(;|$)', message)
    if refusal is None and backend != "auto" and message.startswith("unsupported: "):
        # A backend that implements the variants but not these params otherwise (flash-sm80
        # and fp32): the same skip as skip_if_not_applicable's.
        pytest.skip(f"{backend}: {message}")
    explicit = message.startswith("unsupported: ") and backend != "auto"
    auto = backend == "auto" and message.startswith(
        'backend_unavailable: backend = "auto" found no usable backend for cuda tensors')
    if not (refusal and (explicit or auto)):
        raise error
    assert any(word in refusal.group(1) for word in used), (message, used)


# (id, (batch, seqlen_q, seqlen_k, heads, kv_heads, head_dim), options): side inputs by name
GPU_VARIANTS = [
    ("window", (2, 257, 513, 8, 2, 128), {"window_size": (64, 16)}),
    ("window_causal_rows_without_keys", (1, 513, 257, 4, 1, 64),
     {"window_size": (32, -1), "causal": True}),
    ("softcap", (2, 257, 513, 8, 2, 128), {"softcap": 30.0, "softmax_scale": 0.5}),
    ("alibi_heads", (2, 257, 513, 8, 2, 128), {"alibi_slopes": "heads", "causal": True}),
    ("alibi_batch_heads", (2, 257, 513, 8, 2, 64), {"alibi_slopes": "batch_heads"}),
    ("sinks", (1, 513, 257, 4, 2, 128), {"sinks": "normal", "causal": True}),
    ("all", (2, 333, 555, 8, 2, 128), {"window_size": (100, 0), "causal": True, "softcap": 10.0,
                                      "alibi_slopes": "batch_heads", "sinks": "normal"}),
]
VARLEN_LENS = ([17, 0, 300, 1, 129], [40, 0, 300, 7, 1])
GPU_VARLEN = [
    ("varlen_causal_seqused_k", {"causal": True, "seqused_k": [30, 0, 200, 7, 0]}),
    ("varlen_all", {"window_size": (64, -1), "causal": True, "softcap": 8.0,
                    "alibi_slopes": "batch_heads", "sinks": "normal",
                    "seqused_k": [40, 0, 250, 3, 1]}),
]


def gpu_side_inputs(options, batch, heads, seed):
    rng = np.random.default_rng(seed)
    options = dict(options)
    if options.get("alibi_slopes") == "heads":
        options["alibi_slopes"] = (2.0 ** (-8.0 * np.arange(1, heads + 1) / heads))
    elif options.get("alibi_slopes") == "batch_heads":
        options["alibi_slopes"] = rng.uniform(0, 1, (batch, heads))
    if options.get("sinks") == "normal":
        options["sinks"] = rng.normal(0, 2, heads)
    for name in ("alibi_slopes", "sinks"):
        if name in options:
            options[name] = np.asarray(options[name], np.float32)
    if "seqused_k" in options:
        options["seqused_k"] = np.asarray(options["seqused_k"], np.int32)
    return options


@functools.lru_cache(maxsize=None)
def variant_case(name, dtype):
    """CPU inputs (rounded to dtype, as float64), options (NumPy side inputs) and the float64
    reference and float32 CPU baseline, once per (case, dtype) for every backend."""
    seed = sum(map(ord, name + dtype))
    if name.startswith("varlen"):
        options = dict(next(c for c in GPU_VARLEN if c[0] == name)[1])
        lens_q, lens_k = VARLEN_LENS
        g = torch.Generator().manual_seed(seed)
        q, k, v = (torch.randn(shape, generator=g) + 0.5
                   for shape in ((sum(lens_q), 8, 128), (sum(lens_k), 2, 128),
                                 (sum(lens_k), 2, 128)))
        options = gpu_side_inputs(options, len(lens_q), 8, seed)
        options["cu_seqlens_q"] = np.concatenate([[0], np.cumsum(lens_q)]).astype(np.int32)
        options["cu_seqlens_k"] = np.concatenate([[0], np.cumsum(lens_k)]).astype(np.int32)
    else:
        shape, options = next(c[1:] for c in GPU_VARIANTS if c[0] == name)
        q, k, v = make_inputs(*shape, dtype="fp32", seed=seed, device="cpu")
        options = gpu_side_inputs(options, shape[0], shape[3], seed)
    q, k, v = (x.to(getattr(torch, DTYPES[dtype])) for x in (q, k, v))
    qn, kn, vn = (as_numpy64(x) for x in (q, k, v))
    scale, causal = options.get("softmax_scale"), options.get("causal", False)
    ref_options = {n: x for n, x in options.items() if n not in ("softmax_scale", "causal")}
    ref = attention_numpy(qn, kn, vn, scale, causal, **ref_options)
    base = naive_float32(qn, kn, vn, scale, causal, dtype, **ref_options)
    return (q, k, v), options, ref, base


def run_variant_poisoned(q, k, v, options, backend):
    """forward() into NaN-poisoned outputs with the options (side inputs as CUDA tensors)."""
    kwargs = {n: (torch.from_numpy(x).cuda() if isinstance(x, np.ndarray) else x)
              for n, x in options.items()}
    if "cu_seqlens_q" in kwargs:
        kwargs["max_seqlen_q"] = int(np.diff(options["cu_seqlens_q"]).max())
        kwargs["max_seqlen_k"] = int(np.diff(options["cu_seqlens_k"]).max())
        lse = torch.full((q.shape[1], q.shape[0]), float("nan"), device=q.device)
    else:
        lse = torch.full((q.shape[0], q.shape[2], q.shape[1]), float("nan"), device=q.device)
    out = torch.full_like(q, float("nan"), memory_format=torch.contiguous_format)
    flashattn.forward(q, k, v, out, lse, backend=backend, **kwargs)
    return out, lse


@pytest.mark.parametrize("backend", cuda_backend_names())
@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("name", [c[0] for c in GPU_VARIANTS + GPU_VARLEN])
def test_variant_matches_reference_or_is_refused(name, dtype, backend):
    info = {b.name: b for b in flashattn.list_backends()}
    if backend in info and not info[backend].usable:
        pytest.skip(f"{backend}: {info[backend].why_not}")
    (q, k, v), options, ref, base = variant_case(name, dtype)
    q, k, v = (x.cuda() for x in (q, k, v))
    try:
        out, lse = run_variant_poisoned(q, k, v, options, backend)
    except RuntimeError as e:
        refused_or_raise(e, backend, options)
        return
    try:  # the GPU naive backend as the baseline where it implements the variants, except for
        # itself (the float32 CPU naive then, as the verifier does)
        if backend != "naive":
            base = tuple(as_numpy64(x) for x in run_variant_poisoned(q, k, v, options, "naive"))
    except RuntimeError as e:
        refused_or_raise(e, "naive", options)  # else the float32 CPU naive baseline
    results = [as_numpy64(out), as_numpy64(lse), *ref, *base]
    if "cu_seqlens_q" in options:
        results = [x[None] for x in results]
    check_attention(*results, dtype, context=f"{name} {backend} {dtype}")
    if "sinks" in options:  # no NaN poison left, and rows without keys hold the sink
        assert not torch.isnan(lse).any()


@pytest.mark.parametrize("backend", cuda_backend_names())
def test_variants_through_flash_attn_func_and_compile(backend):
    """flash_attn_func / flash_attn_varlen_func with the variants on CUDA tensors, eager and
    under torch.compile(fullgraph=True): the same outputs, or the same refusal."""
    torch._dynamo.reset()
    q, k, v = make_inputs(2, 256, 384, 8, 2, 64, "bf16", seed=16)
    sinks = torch.randn(8, device="cuda")

    def block(q, k, v, sinks):
        return flashattn.flash_attn_func(q, k, v, causal=True, window_size=(64, 0), softcap=20.0,
                                         sinks=sinks, backend=backend)

    def varlen(q, k, v, cq, ck):
        return flashattn.flash_attn_varlen_func(q, k, v, cq, ck, 300, 300, causal=True,
                                                window_size=(32, -1), backend=backend)

    cu = torch.tensor([0, 100, 100, 400], dtype=torch.int32, device="cuda")
    qv, kv, vv = (x.reshape(-1, *x.shape[2:])[:400] for x in (q, k, v))
    for fn, args, options in (
            (block, (q, k, v, sinks), {"window_size": 1, "softcap": 1, "sinks": 1}),
            (varlen, (qv, kv, vv, cu, cu), {"window_size": 1, "cu_seqlens_q": 1})):
        try:
            expected = fn(*args)
        except RuntimeError as e:
            refused_or_raise(e, backend, options)
            continue
        got = torch.compile(fn, fullgraph=True)(*args)
        torch.cuda.synchronize()
        assert torch.equal(got, expected)


def test_refusal_check_itself():
    """refused_or_raise passes only a refusal that names a variant the call used."""
    options = {"softcap": 1.0}
    refused_or_raise(RuntimeError('unsupported: backend "flash" does not implement softcap'),
                     "flash", options)
    refused_or_raise(RuntimeError('backend_unavailable: backend = "auto" found no usable backend '
                                  'for cuda tensors; flash-sm80: backend "flash-sm80" does not '
                                  'implement softcap; flash: backend "flash" does not implement '
                                  'softcap'), "auto", options)
    for error in (RuntimeError("cuda_error: an illegal memory access"),
                  RuntimeError('unsupported: backend "flash" does not implement ALiBi slopes')):
        with pytest.raises(Exception):
            refused_or_raise(error, "flash", options)
