"""The torch.library registration on CPU tensors: opcheck, fake tensors, torch.compile
(fullgraph), autograd's explicit refusal, and bf16 through torch (NumPy has no bfloat16).
Skipped with a reason where torch is not installed (CI); the GPU side is in test_gpu.py."""
import numpy as np
import pytest

import flashattn
from flashattn._reference import attention_numpy, attention_torch
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
    with pytest.raises(exc, match=match):
        flashattn.flash_attn_func(q, k, v, **kwargs)


# ---- registration: schema, opcheck, fake tensors ----

def test_schema():
    schema = str(torch.ops.flashattn.fwd.default._schema)
    assert schema == ("flashattn::fwd(Tensor q, Tensor k, Tensor v, float? softmax_scale, "
                      "bool causal, str backend) -> (Tensor, Tensor)")


OPCHECK_CASES = [
    ("bf16_gqa_causal", (2, 33, 47, 6, 2, 64, "bf16"), None, True, "auto"),
    ("fp16_mqa_scale", (1, 47, 33, 4, 1, 32, "fp16"), 0.3, False, "cpu-flash"),
    ("fp32_reference", (2, 17, 17, 2, 2, 16, "fp32"), None, True, "cpu-reference"),
    ("sq_gt_sk_causal", (1, 40, 8, 2, 1, 64, "bf16"), None, True, "auto"),
]


@pytest.mark.parametrize("shape, scale, causal, backend", [c[1:] for c in OPCHECK_CASES],
                         ids=[c[0] for c in OPCHECK_CASES])
def test_opcheck(shape, scale, causal, backend):
    q, k, v = make_inputs(*shape)
    torch.library.opcheck(torch.ops.flashattn.fwd.default, (q, k, v, scale, causal, backend))


def test_opcheck_strided():
    q, k, v = (x.transpose(1, 2).contiguous().transpose(1, 2)
               for x in make_inputs(2, 24, 40, 4, 2, 32, "bf16"))
    torch.library.opcheck(torch.ops.flashattn.fwd.default, (q, k, v, None, False, "auto"))


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
    out, lse = torch.ops.flashattn.fwd(q, q, q, None, False, "auto")
    assert out.device.type == "meta" and out.shape == q.shape and lse.shape == (1, 4, 10)
    with pytest.raises(ValueError, match=r"invalid_rank: q\.rank = 3"):
        torch.ops.flashattn.fwd(q[0], q, q, None, False, "auto")


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

class DLPackOnly:
    def __init__(self, tensor):
        self._tensor = tensor

    def __dlpack__(self, **kwargs):
        return self._tensor.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self._tensor.__dlpack_device__()


def test_other_dlpack_producers_bf16():
    q, k, v = make_inputs(1, 24, 40, 4, 2, 64, "bf16", seed=8)
    out = flashattn.flash_attn_func(DLPackOnly(q), DLPackOnly(k), DLPackOnly(v), causal=True)
    assert isinstance(out, torch.Tensor) and out.dtype == torch.bfloat16
    assert torch.equal(out, flashattn.flash_attn_func(q, k, v, causal=True))
