"""The torch.library registrations (fwd, fwd_varlen) on CPU tensors: schemas, opcheck, fake
tensors, torch.compile (fullgraph, with window_size and varlen), autograd's explicit refusal,
the variants against the float64 reference, and bf16 through torch.
Skipped with a reason where torch is not installed (CI); the GPU side is in test_gpu.py."""
import re

import numpy as np
import pytest

import flashattn
from flashattn._reference import attention_numpy, attention_torch
from helpers import DLPackOnly
from tolerance import check_attention, naive_float32

try:
    import torch
except ImportError:
    torch = None

pytestmark = pytest.mark.torch

DTYPES = ["bf16", "fp16", "fp32"]


def torch_dtype(name):
    return {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[name]


def make_inputs(b, sq, sk, h, hk, d, dtype="bf16", seed=0, device="cpu"):
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(shape, generator=g) + 0.5
               for shape in ((b, sq, h, d), (b, sk, hk, d), (b, sk, hk, d)))
    return tuple(x.to(device=device, dtype=torch_dtype(dtype)) for x in (q, k, v))


def as_numpy64(x):
    return x.detach().to("cpu", torch.float64).numpy()


def check_against_reference(q, k, v, out, lse, dtype, causal, softmax_scale=None, context=""):
    qn, kn, vn = (as_numpy64(x) for x in (q, k, v))
    ref_out, ref_lse = attention_numpy(qn, kn, vn, softmax_scale, causal)
    base_out, base_lse = naive_float32(qn, kn, vn, softmax_scale, causal, dtype)
    check_attention(as_numpy64(out), as_numpy64(lse), ref_out, ref_lse, base_out, base_lse, dtype,
                    context=context)


# ---- correctness on CPU tensors ----

@pytest.mark.parametrize("backend", ["cpu-flash", "cpu-reference", "auto"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_cpu_tensors_match_reference(causal, dtype, backend):
    q, k, v = make_inputs(2, 113, 203, 6, 2, 64, dtype, seed=1)
    out, lse = flashattn.flash_attn_func(q, k, v, causal=causal, return_lse=True,
                                         backend=backend)
    assert out.dtype == q.dtype and out.shape == q.shape and out.is_contiguous()
    assert lse.dtype == torch.float32 and lse.shape == (2, 6, 113)
    check_against_reference(q, k, v, out, lse, dtype, causal, context=f"{backend} {dtype}")


def test_causal_seqlen_q_above_seqlen_k_bottom_right():
    q, k, v = make_inputs(1, 203, 113, 4, 1, 128, "bf16", seed=2)
    out, lse = flashattn.flash_attn_func(q, k, v, causal=True, return_lse=True)
    assert torch.all(out[:, :90] == 0) and torch.all(torch.isneginf(lse[:, :, :90]))
    check_against_reference(q, k, v, out, lse, "bf16", True, context="sq > sk")


def test_non_contiguous_tensors():
    q, k, v = make_inputs(2, 64, 96, 4, 2, 64, "fp16", seed=3)
    qt, kt, vt = (x.transpose(1, 2).contiguous().transpose(1, 2) for x in (q, k, v))  # BHSD
    assert not qt.is_contiguous()
    out, lse = flashattn.flash_attn_func(qt, kt, vt, softmax_scale=0.2, return_lse=True)
    check_against_reference(q, k, v, out, lse, "fp16", False, softmax_scale=0.2, context="bhsd")
    expected = flashattn.flash_attn_func(q, k, v, softmax_scale=0.2)
    assert torch.equal(out, expected)


def test_torch_reference_matches_numpy_reference():
    q, k, v = make_inputs(2, 33, 47, 6, 2, 32, "fp32", seed=4)
    for causal in (False, True):
        out_t, lse_t = attention_torch(q, k, v, causal=causal, head_chunk=4)
        out_n, lse_n = attention_numpy(as_numpy64(q), as_numpy64(k), as_numpy64(v), causal=causal)
        assert np.allclose(out_t.numpy(), out_n, rtol=0, atol=1e-12)
        assert np.array_equal(np.isneginf(lse_t.numpy()), np.isneginf(lse_n))


# ---- errors through the op ----

@pytest.mark.parametrize("case, exc, match", [
    ("kv_heads", ValueError, r"k\.shape\[2\] \(kv heads\) = 4 must divide"),
    ("dtype", TypeError, r"k\.dtype = fp16 must equal q\.dtype = bf16"),
    ("float64", TypeError, r"q\.dtype = float64 is not supported"),
    ("rank", ValueError, r"invalid_rank: q\.rank = 3"),
    ("stride", ValueError, r"invalid_stride: q\.stride\[3\] = 2"),
    ("head_dim", ValueError, r"unsupported_head_dim"),
    ("backend", ValueError, r"unknown_backend"),
    ("scale", ValueError, r"invalid_scale"),
    ("numpy_k", TypeError, r"k is a numpy\.ndarray but q is a torch\.Tensor"),
    # __dlpack__'s own error, its type and message only (no traceback of torch's Python code).
    ("sparse", TypeError, r"^q: expected an array that supports DLPack .*: its __dlpack__\(\) "
                          r"raised BufferError: Can't export tensors with layout other than "
                          r"torch\.strided$"),
])
def test_errors_keep_their_type_through_the_op(case, exc, match):
    q, k, v = make_inputs(1, 16, 16, 6, 2, 32, "bf16")
    kwargs = {}
    if case == "kv_heads":
        k, v = make_inputs(1, 16, 16, 6, 4, 32, "bf16")[1:]
    elif case == "dtype":
        k = k.half()
    elif case == "float64":
        q, k, v = q.double(), k.double(), v.double()
    elif case == "rank":
        q = q[0]
    elif case == "stride":
        q = torch.cat([q, q], dim=-1)[..., ::2]
    elif case == "head_dim":
        q, k, v = make_inputs(1, 16, 16, 6, 2, 36, "bf16")
    elif case == "backend":
        kwargs["backend"] = "fastest"
    elif case == "scale":
        kwargs["softmax_scale"] = -2.0
    elif case == "numpy_k":
        k = k.float().numpy()
    elif case == "sparse":
        q = q.float().to_sparse()
        k, v = k.float(), v.float()
    with pytest.raises(exc, match=match):
        flashattn.flash_attn_func(q, k, v, **kwargs)


# ---- registration: schema, opcheck, fake tensors ----

# Python ints are SymInt in the schemas torch.library infers (torch >= 2.4), int in older ones.
INT = r"(?:SymInt|int)"


def test_schema():
    schema = str(torch.ops.flashattn.fwd.default._schema)
    assert re.fullmatch(
        rf"flashattn::fwd\(Tensor q, Tensor k, Tensor v, float\? softmax_scale, bool causal, "
        rf"{INT} window_left, {INT} window_right, float softcap, Tensor\? alibi_slopes, "
        rf"Tensor\? sinks, str backend\) -> \(Tensor, Tensor\)", schema), schema


def test_schema_varlen():
    schema = str(torch.ops.flashattn.fwd_varlen.default._schema)
    assert re.fullmatch(
        rf"flashattn::fwd_varlen\(Tensor q, Tensor k, Tensor v, Tensor cu_seqlens_q, "
        rf"Tensor cu_seqlens_k, {INT} max_seqlen_q, {INT} max_seqlen_k, Tensor\? seqused_k, "
        rf"float\? softmax_scale, bool causal, {INT} window_left, {INT} window_right, "
        rf"float softcap, Tensor\? alibi_slopes, Tensor\? sinks, str backend\) -> "
        rf"\(Tensor, Tensor\)", schema), schema


def fwd_args(q, k, v, scale=None, causal=False, window=(-1, -1), softcap=0.0, alibi=None,
             sinks=None, backend="auto"):
    """torch.ops.flashattn.fwd's arguments, in schema order."""
    return (q, k, v, scale, causal, window[0], window[1], softcap, alibi, sinks, backend)


OPCHECK_CASES = [
    ("bf16_gqa_causal", (2, 33, 47, 6, 2, 64, "bf16"), {"causal": True}),
    ("fp16_mqa_scale", (1, 47, 33, 4, 1, 32, "fp16"), {"scale": 0.3, "backend": "cpu-flash"}),
    ("fp32_reference", (2, 17, 17, 2, 2, 16, "fp32"), {"causal": True,
                                                       "backend": "cpu-reference"}),
    ("sq_gt_sk_causal", (1, 40, 8, 2, 1, 64, "bf16"), {"causal": True}),
    ("window", (2, 33, 47, 6, 2, 64, "bf16"), {"window": (8, 2)}),
    ("window_causal_softcap", (1, 47, 33, 4, 2, 32, "fp16"), {"window": (5, -1), "causal": True,
                                                              "softcap": 4.0}),
    ("alibi_heads", (2, 33, 47, 6, 2, 64, "bf16"), {"alibi": "heads", "causal": True}),
    ("alibi_batch_heads_sinks", (2, 40, 8, 4, 1, 64, "fp32"), {"alibi": "batch_heads",
                                                               "sinks": True, "causal": True}),
]


def side_inputs(b, h, options, seed=0, device="cpu"):
    """alibi "heads" / "batch_heads" and sinks True made into float32 tensors."""
    g = torch.Generator().manual_seed(seed)
    options = dict(options)
    if options.get("alibi") == "heads":
        options["alibi"] = torch.rand(h, generator=g).to(device)
    elif options.get("alibi") == "batch_heads":
        options["alibi"] = torch.rand(b, h, generator=g).to(device)
    if options.get("sinks"):
        options["sinks"] = (torch.randn(h, generator=g) * 2).to(device)
    return options


@pytest.mark.parametrize("shape, options", [c[1:] for c in OPCHECK_CASES],
                         ids=[c[0] for c in OPCHECK_CASES])
def test_opcheck(shape, options):
    q, k, v = make_inputs(*shape)
    options = side_inputs(shape[0], shape[3], options)
    torch.library.opcheck(torch.ops.flashattn.fwd.default, fwd_args(q, k, v, **options))


def test_opcheck_strided():
    q, k, v = (x.transpose(1, 2).contiguous().transpose(1, 2)
               for x in make_inputs(2, 24, 40, 4, 2, 32, "bf16"))
    torch.library.opcheck(torch.ops.flashattn.fwd.default, fwd_args(q, k, v))


def test_fake_tensor_mode():
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        q = torch.empty(2, 100, 8, 128, dtype=torch.bfloat16)
        k = torch.empty(2, 300, 2, 128, dtype=torch.bfloat16)
        out, lse = flashattn.flash_attn_func(q, k, k, causal=True, return_lse=True)
        assert out.shape == q.shape and out.dtype == torch.bfloat16
        assert out.stride() == (100 * 8 * 128, 8 * 128, 128, 1)
        assert lse.shape == (2, 8, 100) and lse.dtype == torch.float32


def test_meta_tensors_and_fake_rank_error():
    q = torch.empty(1, 10, 4, 64, device="meta", dtype=torch.float16)
    out, lse = torch.ops.flashattn.fwd(*fwd_args(q, q, q))
    assert out.device.type == "meta" and out.shape == q.shape and lse.shape == (1, 4, 10)
    with pytest.raises(ValueError, match=r"invalid_rank: q\.rank = 3"):
        torch.ops.flashattn.fwd(*fwd_args(q[0], q, q))


# ---- torch.compile ----

def attention_block(q, k, v):
    out, lse = flashattn.flash_attn_func(q * 2.0, k, v, causal=True, return_lse=True,
                                         softmax_scale=0.125)
    return out.float().sum(-1) + lse.transpose(1, 2)


@pytest.mark.parametrize("dtype", ["bf16", "fp32"])
def test_compile_fullgraph_aot_eager(dtype):
    q, k, v = make_inputs(2, 40, 56, 4, 2, 32, dtype, seed=5)
    compiled = torch.compile(attention_block, fullgraph=True, backend="aot_eager")
    assert torch.equal(compiled(q, k, v), attention_block(q, k, v))


def test_compile_dynamic_shapes():
    compiled = torch.compile(attention_block, fullgraph=True, dynamic=True, backend="aot_eager")
    for sq, sk in ((40, 56), (17, 90)):
        q, k, v = make_inputs(1, sq, sk, 4, 2, 32, "fp16", seed=sq)
        assert torch.equal(compiled(q, k, v), attention_block(q, k, v))


def test_compile_fullgraph_inductor():
    torch._dynamo.reset()
    q, k, v = make_inputs(1, 40, 56, 4, 2, 32, "fp32", seed=6)
    compiled = torch.compile(attention_block, fullgraph=True)
    assert torch.allclose(compiled(q, k, v), attention_block(q, k, v), atol=1e-5)


# ---- autograd: forward only, said loudly ----

def test_backward_raises():
    q, k, v = make_inputs(1, 16, 16, 2, 2, 32, "fp32")
    q.requires_grad_(True)
    out = flashattn.flash_attn_func(q, k, v)
    assert out.requires_grad
    with pytest.raises(RuntimeError, match=r"no backward pass yet"):
        out.sum().backward()


def test_no_grad_and_forward_into_with_grad_tensors():
    q, k, v = make_inputs(1, 16, 16, 2, 2, 32, "fp32")
    q.requires_grad_(True)
    with torch.no_grad():
        out = flashattn.flash_attn_func(q, k, v)
    assert not out.requires_grad
    out2 = torch.empty_like(q, requires_grad=False)
    flashattn.forward(q, k, v, out2)  # inputs that require grad are only read
    assert torch.equal(out, out2)


# ---- other DLPack producers go through torch ----

def test_other_dlpack_producers_bf16():
    q, k, v = make_inputs(1, 24, 40, 4, 2, 64, "bf16", seed=8)
    out = flashattn.flash_attn_func(DLPackOnly(q), DLPackOnly(k), DLPackOnly(v), causal=True)
    assert isinstance(out, torch.Tensor) and out.dtype == torch.bfloat16
    assert torch.equal(out, flashattn.flash_attn_func(q, k, v, causal=True))


# ---- the variants through torch (CPU tensors) ----

def numpy_options(options):
    """attention_numpy's keywords for torch-tensor options."""
    return {name: (x.detach().cpu().numpy() if isinstance(x, torch.Tensor) else x)
            for name, x in options.items() if name not in ("softmax_scale", "causal")}


def check_variant(q, k, v, out, lse, dtype, options):
    qn, kn, vn = (as_numpy64(x) for x in (q, k, v))
    scale, causal = options.get("softmax_scale"), options.get("causal", False)
    ref_out, ref_lse = attention_numpy(qn, kn, vn, scale, causal, **numpy_options(options))
    base_out, base_lse = naive_float32(qn, kn, vn, scale, causal, dtype, **numpy_options(options))
    results = [as_numpy64(out), as_numpy64(lse), ref_out, ref_lse, base_out, base_lse]
    if "cu_seqlens_q" in options:  # (total, heads, d) / (heads, total) as one batch of one
        results = [x[None] for x in results]
    check_attention(*results, dtype, context=f"{dtype} {sorted(options)}")


def variant_options(name, b, h, seed=0):
    g = torch.Generator().manual_seed(seed)
    return {
        "window": {"window_size": (16, 4)},
        "window_causal_softcap": {"window_size": (24, -1), "causal": True, "softcap": 6.0},
        "alibi_batch_heads_sinks": {"alibi_slopes": torch.rand(b, h, generator=g),
                                    "sinks": torch.randn(h, generator=g) * 2, "causal": True},
        "all": {"window_size": (20, 0), "causal": True, "softcap": 5.0,
                "alibi_slopes": torch.rand(h, generator=g), "sinks": torch.randn(h, generator=g)},
    }[name]


VARIANTS = ["window", "window_causal_softcap", "alibi_batch_heads_sinks", "all"]


@pytest.mark.parametrize("backend", ["cpu-flash", "cpu-reference", "auto"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("variant", VARIANTS)
def test_cpu_tensors_variants_match_reference(variant, dtype, backend):
    q, k, v = make_inputs(2, 113, 203, 6, 2, 64, dtype, seed=11)
    options = variant_options(variant, 2, 6)
    out, lse = flashattn.flash_attn_func(q, k, v, return_lse=True, backend=backend, **options)
    assert out.dtype == q.dtype and out.shape == q.shape and out.is_contiguous()
    assert lse.dtype == torch.float32 and lse.shape == (2, 6, 113)
    check_variant(q, k, v, out, lse, dtype, options)


LENS_Q, LENS_K = [17, 0, 64, 1, 33], [40, 0, 64, 7, 1]


def varlen_tensors(dtype="bf16", heads=6, kv_heads=2, head_dim=64, seed=0, lens_q=LENS_Q,
                   lens_k=LENS_K):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(sum(lens_q), heads, head_dim, generator=g) + 0.5
    k = torch.randn(sum(lens_k), kv_heads, head_dim, generator=g) + 0.5
    v = torch.randn(sum(lens_k), kv_heads, head_dim, generator=g) + 0.5
    offsets = [torch.tensor([0] + list(np.cumsum(n)), dtype=torch.int32) for n in (lens_q,
                                                                                    lens_k)]
    q, k, v = (x.to(torch_dtype(dtype)) for x in (q, k, v))
    return q, k, v, offsets[0], offsets[1], max(lens_q), max(lens_k)


@pytest.mark.parametrize("backend", ["cpu-flash", "cpu-reference", "auto"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("variant", ["causal_seqused_k"] + VARIANTS)
def test_cpu_tensors_varlen_match_reference(variant, dtype, backend):
    q, k, v, cq, ck, max_q, max_k = varlen_tensors(dtype, seed=12)
    if variant == "causal_seqused_k":
        options = {"causal": True, "seqused_k": torch.tensor([30, 0, 10, 7, 0], dtype=torch.int32)}
    else:
        options = variant_options(variant, 5, 6)
    out, lse = flashattn.flash_attn_varlen_func(q, k, v, cq, ck, max_q, max_k, return_lse=True,
                                                backend=backend, **options)
    assert out.dtype == q.dtype and out.shape == q.shape and out.is_contiguous()
    assert lse.dtype == torch.float32 and lse.shape == (6, q.shape[0])
    check_variant(q, k, v, out, lse, dtype, {**options, "cu_seqlens_q": cq, "cu_seqlens_k": ck})


def fwd_varlen_args(q, k, v, cq, ck, max_q, max_k, seqused_k=None, scale=None, causal=False,
                    window=(-1, -1), softcap=0.0, alibi=None, sinks=None, backend="auto"):
    """torch.ops.flashattn.fwd_varlen's arguments, in schema order."""
    return (q, k, v, cq, ck, max_q, max_k, seqused_k, scale, causal, window[0], window[1],
            softcap, alibi, sinks, backend)


@pytest.mark.parametrize("options", [
    {},
    {"causal": True, "window": (8, -1), "seqused_k": [30, 0, 10, 7, 1]},
    {"alibi": "batch_heads", "sinks": True, "softcap": 3.0, "causal": True,
     "backend": "cpu-reference"},
], ids=["plain", "causal_window_seqused_k", "alibi_sinks_softcap"])
def test_opcheck_varlen(options):
    q, k, v, cq, ck, max_q, max_k = varlen_tensors("bf16", seed=13)
    options = side_inputs(5, 6, options)
    if "seqused_k" in options:
        options["seqused_k"] = torch.tensor(options["seqused_k"], dtype=torch.int32)
    torch.library.opcheck(torch.ops.flashattn.fwd_varlen.default,
                          fwd_varlen_args(q, k, v, cq, ck, max_q, max_k, **options))


def test_fake_tensor_mode_varlen():
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        q = torch.empty(300, 8, 128, dtype=torch.bfloat16)
        k = torch.empty(500, 2, 128, dtype=torch.bfloat16)
        cu = torch.empty(4, dtype=torch.int32)
        out, lse = flashattn.flash_attn_varlen_func(q, k, k, cu, cu, 200, 300, causal=True,
                                                    window_size=(64, 0), return_lse=True)
        assert out.shape == q.shape and out.dtype == torch.bfloat16
        assert out.stride() == (8 * 128, 128, 1)
        assert lse.shape == (8, 300) and lse.dtype == torch.float32 and lse.stride() == (300, 1)
        out, lse = flashattn.flash_attn_func(q[None], k[None], k[None], softcap=30.0,
                                             sinks=torch.empty(8), return_lse=True)
        assert out.shape == (1, 300, 8, 128) and lse.shape == (1, 8, 300)


def test_meta_tensors_varlen_and_fake_rank_error():
    q = torch.empty(10, 4, 64, device="meta", dtype=torch.float16)
    cu = torch.empty(3, device="meta", dtype=torch.int32)
    out, lse = torch.ops.flashattn.fwd_varlen(*fwd_varlen_args(q, q, q, cu, cu, 5, 5))
    assert out.device.type == "meta" and out.shape == q.shape and lse.shape == (4, 10)
    with pytest.raises(ValueError, match=r"^invalid_rank: q\.rank = 4, expected 3 \(total_q, "
                                         r"heads, head_dim\)$"):
        torch.ops.flashattn.fwd_varlen(*fwd_varlen_args(q[None], q, q, cu, cu, 5, 5))


# ---- torch.compile with the variants ----

def windowed_block(q, k, v, sinks):
    out, lse = flashattn.flash_attn_func(q * 2.0, k, v, causal=True, window_size=(16, 0),
                                         softcap=20.0, sinks=sinks, return_lse=True)
    return out.float().sum(-1) + lse.transpose(1, 2)


def varlen_block(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k):
    out, lse = flashattn.flash_attn_varlen_func(q * 2.0, k, v, cu_seqlens_q, cu_seqlens_k,
                                                max_seqlen_q, max_seqlen_k, causal=True,
                                                window_size=(8, -1), return_lse=True)
    return out.float().sum(-1) + lse.transpose(0, 1)


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_compile_fullgraph_window_size(backend):
    torch._dynamo.reset()
    q, k, v = make_inputs(2, 40, 56, 4, 2, 32, "fp32", seed=14)
    sinks = torch.randn(4)
    compiled = torch.compile(windowed_block, fullgraph=True, backend=backend)
    assert torch.allclose(compiled(q, k, v, sinks), windowed_block(q, k, v, sinks), atol=1e-5)


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_compile_fullgraph_varlen(backend, dynamic):
    torch._dynamo.reset()
    compiled = torch.compile(varlen_block, fullgraph=True, dynamic=dynamic, backend=backend)
    for seed, (lens_q, lens_k) in enumerate((([17, 0, 33], [40, 0, 33]),
                                             ([5, 9, 21, 2], [5, 30, 21, 8]))):
        args = varlen_tensors("fp32", heads=4, kv_heads=2, head_dim=32, seed=seed,
                              lens_q=lens_q, lens_k=lens_k)
        assert torch.allclose(compiled(*args), varlen_block(*args), atol=1e-5)


# ---- errors and autograd with the variants ----

@pytest.mark.parametrize("case, exc, match", [
    ("numpy_sinks", TypeError, r"^sinks is a numpy\.ndarray but q is a torch\.Tensor: the side "
                               r"inputs must be torch tensors \(or None\) too$"),
    ("list_slopes", TypeError, r"^alibi_slopes is a builtins\.list but q is a torch\.Tensor"),
    ("float64_slopes", TypeError, r"^invalid_dtype: alibi_slopes\.dtype = float64, expected "
                                  r"float32$"),
    ("slopes_shape", ValueError, r"^invalid_shape: alibi_slopes\.shape\[0\] = 5, expected 6"),
    ("window", ValueError, r"^invalid_argument: window_left = -2, expected -1"),
    ("softcap", ValueError, r"^invalid_argument: softcap = nan"),
    ("window_type", TypeError, r"^window_size must be a pair of ints"),
])
def test_variant_errors_through_the_op(case, exc, match):
    q, k, v = make_inputs(1, 16, 16, 6, 2, 32, "bf16")
    kwargs = {"numpy_sinks": {"sinks": np.zeros(6, np.float32)},
              "list_slopes": {"alibi_slopes": [0.5] * 6},
              "float64_slopes": {"alibi_slopes": torch.ones(6, dtype=torch.float64)},
              "slopes_shape": {"alibi_slopes": torch.ones(5)},
              "window": {"window_size": (-2, 0)},
              "softcap": {"softcap": float("nan")},
              "window_type": {"window_size": 3}}[case]
    with pytest.raises(exc, match=match):
        flashattn.flash_attn_func(q, k, v, **kwargs)


@pytest.mark.parametrize("case, exc, match", [
    ("cu_int64", TypeError, r"^invalid_dtype: cu_seqlens_q\.dtype = int64, expected int32$"),
    ("cu_numpy", TypeError, r"^cu_seqlens_k is a numpy\.ndarray but q is a torch\.Tensor"),
    ("max_tensor", TypeError, r"^max_seqlen_q must be an int >= 0 .*got Tensor$"),
    ("max_below", ValueError, r"^invalid_argument: max_seqlen_k = 10 is below the length of "
                              r"sequence 0 \(40, from cu_seqlens_k\)$"),
    ("not_from_0", ValueError, r"^invalid_argument: cu_seqlens_q\[0\] = 1, expected 0$"),
    ("seqused_int64", TypeError, r"^invalid_dtype: seqused_k\.dtype = int64, expected int32$"),
    ("q_rank4", ValueError, r"^invalid_rank: q\.rank = 4, expected 3"),
])
def test_varlen_errors_through_the_op(case, exc, match):
    q, k, v, cq, ck, max_q, max_k = varlen_tensors("bf16")
    kwargs = {}
    if case == "cu_int64":
        cq = cq.long()
    elif case == "cu_numpy":
        ck = ck.numpy()
    elif case == "max_tensor":
        max_q = torch.tensor(max_q)
    elif case == "max_below":
        max_k = 10
    elif case == "not_from_0":
        cq = cq.clone()
        cq[0] = 1
    elif case == "seqused_int64":
        kwargs["seqused_k"] = torch.zeros(5, dtype=torch.int64)
    elif case == "q_rank4":
        q = q[None]
    with pytest.raises(exc, match=match):
        flashattn.flash_attn_varlen_func(q, k, v, cq, ck, max_q, max_k, **kwargs)


def test_varlen_options_are_keyword_only():
    args = varlen_tensors("bf16")
    with pytest.raises(TypeError, match=r"positional argument"):
        flashattn.flash_attn_varlen_func(*args, 0.0)


def test_learned_slopes_and_sinks_and_backward_raises():
    """Slopes and sinks that require grad (parameters) are only read; backward() raises."""
    q, k, v = make_inputs(1, 16, 16, 2, 2, 32, "fp32")
    slopes = torch.nn.Parameter(torch.rand(2))
    sinks = torch.nn.Parameter(torch.zeros(2))
    out = flashattn.flash_attn_func(q, k, v, alibi_slopes=slopes, sinks=sinks)
    assert out.requires_grad
    with torch.no_grad():
        expected = flashattn.flash_attn_func(q, k, v, alibi_slopes=slopes.detach(),
                                             sinks=sinks.detach())
    assert torch.equal(out.detach(), expected)
    with pytest.raises(RuntimeError, match=r"no backward pass yet"):
        out.sum().backward()
    qv, kv, vv, cq, ck, max_q, max_k = varlen_tensors("fp32")
    qv.requires_grad_(True)
    out = flashattn.flash_attn_varlen_func(qv, kv, vv, cq, ck, max_q, max_k)
    with pytest.raises(RuntimeError, match=r"no backward pass yet"):
        out.sum().backward()


def test_torch_forward_varlen_into_own_tensors():
    q, k, v, cq, ck, max_q, max_k = varlen_tensors("fp16", seed=15)
    out = torch.full_like(q, float("nan"))
    lse = torch.full((6, q.shape[0]), float("nan"))
    flashattn.forward(q, k, v, out, lse, cu_seqlens_q=cq, cu_seqlens_k=ck, max_seqlen_q=max_q,
                      max_seqlen_k=max_k, causal=True, sinks=torch.ones(6))
    expected, expected_lse = flashattn.flash_attn_varlen_func(
        q, k, v, cq, ck, max_q, max_k, causal=True, sinks=torch.ones(6), return_lse=True)
    assert torch.equal(out, expected) and torch.equal(lse, expected_lse)
