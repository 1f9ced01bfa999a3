"""The torch ops torch.ops.flashattn.fwd_kvcache (which mutates k_cache and v_cache) and
torch.ops.flashattn.combine on CPU tensors: schemas, the same bits as the NumPy path, bf16
against the float64 reference, opcheck, fake and meta tensors, torch.compile(fullgraph=True)
with the cache written in place, autograd's refusal, errors through the ops, other DLPack
producers. Skipped with a reason where torch is not installed (CI)."""
import re

import numpy as np
import pytest

import flashattn
from flashattn._reference import kvcache_numpy
from helpers import DLPackOnly, kvcache_inputs
from tolerance import check_attention, round_to

try:
    import torch
except ImportError:
    torch = None

pytestmark = pytest.mark.torch

INT = r"(?:SymInt|int)"  # Python ints are SymInt in the schemas torch.library infers (>= 2.4)
PAGE_SIZES = {"contiguous": None, "paged16": 16, "paged64": 64}


def as_torch(problem, dtype=None, nan_to=None):
    """The NumPy problem as CPU tensors (copies), floats in `dtype` (default: as they are);
    NaN poison replaced by `nan_to` when given (opcheck compares with NaN != NaN)."""
    tensors = {}
    for name, x in problem.items():
        if x is None:
            tensors[name] = None
            continue
        t = torch.from_numpy(np.array(x, copy=True))
        if t.is_floating_point():
            if nan_to is not None:
                t = torch.nan_to_num(t, nan=nan_to)
            if dtype is not None:
                t = t.to(dtype)
        tensors[name] = t.contiguous()
    return tensors


def same(a, b) -> bool:
    """The same values, NaN where the other has NaN."""
    return (a.shape == b.shape and a.dtype == b.dtype and torch.equal(a.isnan(), b.isnan())
            and torch.equal(torch.nan_to_num(a), torch.nan_to_num(b)))


def run(t, **options):
    return flashattn.flash_attn_with_kvcache(
        t["q"], t["k_cache"], t["v_cache"], t["k"], t["v"], cache_seqlens=t["cache_seqlens"],
        block_table=t["block_table"], return_lse=True, **options)


def op_args(t, scale=None, causal=False, window=(-1, -1), softcap=0.0, alibi=None, sinks=None,
            num_splits=0, backend="auto"):
    """torch.ops.flashattn.fwd_kvcache's arguments, in schema order."""
    return (t["q"], t["k_cache"], t["v_cache"], t["k"], t["v"], t["cache_seqlens"],
            t["block_table"], scale, causal, window[0], window[1], softcap, alibi, sinks,
            num_splits, backend)


def problem(layout="paged16", seqlen_new=2, lens=(0, 37, 61), seed=0, **kw):
    return kvcache_inputs(list(lens), max(seqlen_new, 1), seqlen_new, 4, 2, 32, np.float32, seed,
                          capacity=64, page_size=PAGE_SIZES[layout], **kw)


# ---- schemas ----

def test_schema_marks_the_caches_mutated():
    schema = torch.ops.flashattn.fwd_kvcache.default._schema
    assert re.fullmatch(
        rf"flashattn::fwd_kvcache\(Tensor q, Tensor\((\w+)!\) k_cache, Tensor\((\w+)!\) v_cache, "
        rf"Tensor\? k, Tensor\? v, Tensor cache_seqlens, Tensor\? block_table, "
        rf"float\? softmax_scale, bool causal, {INT} window_left, {INT} window_right, "
        rf"float softcap, Tensor\? alibi_slopes, Tensor\? sinks, {INT} num_splits, "
        rf"str backend\) -> \(Tensor, Tensor\)", str(schema)), str(schema)
    written = [a.name for a in schema.arguments if a.alias_info is not None and
               a.alias_info.is_write]
    assert written == ["k_cache", "v_cache"]
    sets = [frozenset(a.alias_info.before_set) for a in schema.arguments
            if a.alias_info is not None]
    assert len(set(sets)) == 2, sets  # two alias sets: the caches are distinct tensors
    assert all(r.alias_info is None for r in schema.returns)  # fresh outputs


def test_schema_combine():
    schema = str(torch.ops.flashattn.combine.default._schema)
    assert schema == ("flashattn::combine(Tensor[] outs, Tensor[] lses, ScalarType out_dtype) "
                      "-> (Tensor, Tensor)"), schema


# ---- the same results as the NumPy path ----

@pytest.mark.parametrize("seqlen_new", [0, 1, 3])
@pytest.mark.parametrize("layout", list(PAGE_SIZES))
def test_cpu_tensors_match_the_numpy_path(layout, seqlen_new):
    p = problem(layout, seqlen_new, seed=seqlen_new)
    t = as_torch(p)
    want_out, want_lse = flashattn.flash_attn_with_kvcache(
        p["q"], p["k_cache"], p["v_cache"], p["k"], p["v"], cache_seqlens=p["cache_seqlens"],
        block_table=p["block_table"], causal=True, return_lse=True)
    out, lse = run(t, causal=True)
    assert isinstance(out, torch.Tensor) and out.dtype == torch.float32 and out.is_contiguous()
    assert same(out, torch.from_numpy(want_out)) and same(lse, torch.from_numpy(want_lse))
    assert same(t["k_cache"], torch.from_numpy(p["k_cache"]))
    assert same(t["v_cache"], torch.from_numpy(p["v_cache"]))


@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
def test_half_tensors_match_the_reference(dtype):
    torch_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}[dtype]
    t = as_torch(problem("paged64", 3, lens=(9, 50, 0), seed=4), torch_dtype)
    arrays = {name: (None if x is None else
                     x.double().numpy() if x.is_floating_point() else x.numpy())
              for name, x in t.items()}
    ref_out, ref_lse, k_after, v_after = kvcache_numpy(**arrays, causal=True)
    base_out, base_lse, _, _ = kvcache_numpy(**arrays, causal=True, compute_dtype=np.float32)
    out, lse = run(t, causal=True)
    assert out.dtype == torch_dtype
    assert np.array_equal(t["k_cache"].double().numpy(), k_after, equal_nan=True)
    assert np.array_equal(t["v_cache"].double().numpy(), v_after, equal_nan=True)
    check_attention(out.double().numpy(), lse.numpy(), ref_out, ref_lse,
                    round_to(base_out, dtype), base_lse.astype(np.float32), dtype,
                    context=f"torch {dtype}")


def test_int_cache_seqlens_on_q_device():
    a = as_torch(problem("paged16", 1, lens=(20, 20, 20), seed=6))
    b = as_torch(problem("paged16", 1, lens=(20, 20, 20), seed=6))
    want = run(a)
    b["cache_seqlens"] = 20
    got = run(b)
    assert same(got[0], want[0]) and same(got[1], want[1])
    assert same(a["k_cache"], b["k_cache"]) and same(a["v_cache"], b["v_cache"])


# ---- registration: opcheck, fake and meta tensors ----

OPCHECK_CASES = [
    ("contiguous_new_causal", ("contiguous", 2), {"causal": True}),
    ("paged16_new", ("paged16", 3), {}),
    ("paged64_no_new", ("paged64", 0), {"causal": True}),
    ("variants_splits", ("paged16", 2), {"window": (8, 0), "causal": True, "softcap": 3.0,
                                         "alibi": "heads", "sinks": True, "num_splits": 3}),
]


@pytest.mark.parametrize("case", OPCHECK_CASES, ids=[c[0] for c in OPCHECK_CASES])
def test_opcheck(case):
    _, (layout, seqlen_new), options = case
    t = as_torch(problem(layout, seqlen_new, seed=seqlen_new), nan_to=0.0)
    g = torch.Generator().manual_seed(0)
    options = dict(options)
    if options.get("alibi") == "heads":
        options["alibi"] = torch.rand(4, generator=g)
    if options.get("sinks"):
        options["sinks"] = torch.randn(4, generator=g)
    torch.library.opcheck(torch.ops.flashattn.fwd_kvcache.default, op_args(t, **options))


def test_opcheck_bf16_strided_cache():
    # A cache that is a view of a larger buffer (room for more kv heads): written in place.
    t = as_torch(problem("paged16", 2, seed=9), torch.bfloat16, nan_to=0.0)
    for name in ("k_cache", "v_cache"):
        wide = torch.zeros(t[name].shape[:2] + (4, 32), dtype=torch.bfloat16)
        wide[:, :, :2] = t[name]
        t[name] = wide[:, :, :2]
    torch.library.opcheck(torch.ops.flashattn.fwd_kvcache.default, op_args(t, causal=True))


def test_fake_tensor_mode():
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        q = torch.empty(3, 1, 8, 128, dtype=torch.bfloat16)
        cache = torch.empty(40, 16, 2, 128, dtype=torch.bfloat16)
        new = torch.empty(3, 1, 2, 128, dtype=torch.bfloat16)
        lens = torch.empty(3, dtype=torch.int32)
        table = torch.empty(3, 8, dtype=torch.int32)
        out, lse = flashattn.flash_attn_with_kvcache(q, cache, cache, new, new,
                                                     cache_seqlens=lens, block_table=table,
                                                     causal=True, return_lse=True)
        assert out.shape == q.shape and out.dtype == torch.bfloat16
        assert out.stride() == (8 * 128, 8 * 128, 128, 1)
        assert lse.shape == (3, 8, 1) and lse.dtype == torch.float32
        outs = [torch.empty(3, 1, 8, 128) for _ in range(2)]
        lses = [torch.empty(3, 8, 1) for _ in range(2)]
        merged, merged_lse = flashattn.combine(outs, lses, out_dtype=torch.float16,
                                               return_lse=True)
        assert merged.shape == (3, 1, 8, 128) and merged.dtype == torch.float16
        assert merged_lse.shape == (3, 8, 1) and merged_lse.dtype == torch.float32


def test_meta_tensors_and_fake_rank_error():
    t = {name: (None if x is None else x.to("meta"))
         for name, x in as_torch(problem("paged16", 1)).items()}
    out, lse = torch.ops.flashattn.fwd_kvcache(*op_args(t))
    assert out.device.type == "meta" and out.shape == t["q"].shape and lse.shape == (3, 4, 1)
    t["q"] = t["q"][0]
    with pytest.raises(ValueError, match=r"invalid_rank: q\.rank = 3"):
        torch.ops.flashattn.fwd_kvcache(*op_args(t))
    part = torch.empty(2, 5, 4, 32, device="meta")
    with pytest.raises(ValueError, match=r"invalid_rank: outs\[0\]\.rank = 3"):
        torch.ops.flashattn.combine([part[0]], [part[0, 0]], torch.float32)


# ---- torch.compile: the cache is written in place through the compiled graph ----

def decode_step(q, k_cache, v_cache, k, v, cache_seqlens, block_table):
    out, lse = flashattn.flash_attn_with_kvcache(q * 2.0, k_cache, v_cache, k, v,
                                                 cache_seqlens=cache_seqlens,
                                                 block_table=block_table, causal=True,
                                                 softmax_scale=0.125, return_lse=True)
    return out.float().sum(-1) + lse.transpose(1, 2)


def decode_args(t):
    return (t["q"], t["k_cache"], t["v_cache"], t["k"], t["v"], t["cache_seqlens"],
            t["block_table"])


@pytest.mark.parametrize("layout", ["contiguous", "paged16"])
@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_compile_fullgraph_writes_the_cache(backend, layout):
    torch._dynamo.reset()
    compiled = torch.compile(decode_step, fullgraph=True, backend=backend)
    eager, traced = (as_torch(problem(layout, 2, seed=21)) for _ in range(2))
    want = decode_step(*decode_args(eager))
    got = compiled(*decode_args(traced))
    assert torch.allclose(got, want, atol=1e-5)
    assert same(traced["k_cache"], eager["k_cache"]) and same(traced["v_cache"], eager["v_cache"])
    assert not same(traced["k_cache"], as_torch(problem(layout, 2, seed=21))["k_cache"])


def int_decode_step(q, k_cache, v_cache, k, v, cache_len: int):
    return flashattn.flash_attn_with_kvcache(q, k_cache, v_cache, k, v, cache_seqlens=cache_len,
                                             causal=True)


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
def test_compile_int_cache_seqlens(dynamic):
    # An int cache_seqlens becomes torch.full on q's device inside the graph (a SymInt with
    # dynamic shapes: not specialized, so one graph serves every step).
    torch._dynamo.reset()
    compiled = torch.compile(int_decode_step, fullgraph=True, dynamic=dynamic,
                             backend="aot_eager")
    for step, n in enumerate((5, 6, 30)):
        eager, traced = (as_torch(problem("contiguous", 1, lens=(n, n), seed=step))
                         for _ in range(2))
        args = ("q", "k_cache", "v_cache", "k", "v")
        want = int_decode_step(*(eager[a] for a in args), n)
        got = compiled(*(traced[a] for a in args), n)
        assert torch.equal(got, want)
        assert same(traced["k_cache"], eager["k_cache"])


def split_kv_block(q, k, v):
    # Split-KV by hand: two key halves, merged (what num_splits does inside a GPU kernel).
    half = k.shape[1] // 2
    o1, l1 = flashattn.flash_attn_func(q, k[:, :half], v[:, :half], return_lse=True)
    o2, l2 = flashattn.flash_attn_func(q, k[:, half:], v[:, half:], return_lse=True)
    return flashattn.combine([o1, o2], [l1, l2], out_dtype=torch.bfloat16)


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_compile_fullgraph_combine(backend):
    torch._dynamo.reset()
    g = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(s, generator=g) for s in ((2, 9, 4, 32), (2, 64, 2, 32),
                                                      (2, 64, 2, 32)))
    compiled = torch.compile(split_kv_block, fullgraph=True, backend=backend)
    got, want = compiled(q, k, v), split_kv_block(q, k, v)
    assert got.dtype == torch.bfloat16 and torch.equal(got, want)
    whole = flashattn.flash_attn_func(q, k, v)
    assert torch.allclose(got.float(), whole, atol=1e-2)


# ---- combine through torch ----

def test_combine_matches_the_numpy_path():
    g = torch.Generator().manual_seed(1)
    outs = [torch.randn(2, 7, 4, 64, generator=g) for _ in range(3)]
    lses = [torch.randn(2, 4, 7, generator=g) * 3 for _ in range(3)]
    lses[1][0, 0] = float("-inf")
    out, lse = flashattn.combine(outs, lses, return_lse=True)
    want, want_lse = flashattn.combine([x.numpy() for x in outs], [x.numpy() for x in lses],
                                       return_lse=True)
    assert torch.equal(out, torch.from_numpy(want)) and torch.equal(lse, torch.from_numpy(want_lse))
    half = flashattn.combine(outs, lses, out_dtype=torch.float16)
    assert half.dtype == torch.float16 and torch.equal(half, out.half())


def test_opcheck_combine():
    g = torch.Generator().manual_seed(2)
    outs = [torch.randn(2, 7, 4, 64, generator=g) for _ in range(3)]
    lses = [torch.randn(2, 4, 7, generator=g) for _ in range(3)]
    torch.library.opcheck(torch.ops.flashattn.combine.default, (outs, lses, torch.bfloat16))


# ---- autograd: forward only ----

def test_backward_raises():
    t = as_torch(problem("paged16", 1))
    t["q"].requires_grad_(True)
    out = run(t)[0]
    assert out.requires_grad
    with pytest.raises(RuntimeError, match=r"fwd_kvcache"):
        out.sum().backward()
    with torch.no_grad():
        assert not run(as_torch(problem("paged16", 1)))[0].requires_grad
    part = torch.randn(1, 3, 2, 16, requires_grad=True)
    merged = flashattn.combine([part], [torch.zeros(1, 2, 3)])
    with pytest.raises(RuntimeError, match=r"no backward pass yet"):
        merged.sum().backward()


# ---- errors through the ops ----

def test_errors_keep_their_type_and_write_nothing():
    t = as_torch(problem("paged16", 2))
    before = {name: t[name].clone() for name in ("k_cache", "v_cache")}
    t["block_table"][1, 0] = 99
    with pytest.raises(ValueError, match=r"^invalid_argument: block_table\[1, 0\] = 99, "
                                         r"expected a page index from 0 to 13"):
        run(t)
    t["block_table"][1, 0] = 0
    with pytest.raises(ValueError, match=r"^invalid_argument: num_splits = 300"):
        run(t, num_splits=300)
    with pytest.raises(TypeError, match=r"^invalid_dtype: k_cache\.dtype = bf16 must equal "
                                        r"q\.dtype = fp32$"):
        run({**t, "k_cache": t["k_cache"].bfloat16()})
    for name in ("k_cache", "v_cache"):
        assert same(t[name], before[name]), f"{name} written despite the error"


@pytest.mark.parametrize("name", ["k_cache", "v", "cache_seqlens", "block_table"])
def test_numpy_array_with_torch_q(name):
    t = as_torch(problem("paged16", 2))
    t[name] = t[name].numpy()
    with pytest.raises(TypeError, match=rf"^{name} is a numpy\.ndarray but q is a torch\.Tensor: "
                                        r"the caches, the new tokens and the side inputs must "
                                        r"be arrays of q's framework \(or None\)$"):
        run(t)


def test_combine_errors_through_torch():
    outs = [torch.zeros(1, 3, 2, 16) for _ in range(2)]
    lses = [torch.zeros(1, 2, 3) for _ in range(2)]
    with pytest.raises(TypeError, match=r"^out_dtype must be a torch\.dtype"):
        flashattn.combine(outs, lses, out_dtype=np.float16)
    with pytest.raises(TypeError, match=r"^lses\[1\] is a numpy\.ndarray but outs\[0\] is a "
                                        r"torch\.Tensor"):
        flashattn.combine(outs, [lses[0], lses[1].numpy()])
    with pytest.raises(TypeError, match=r"^invalid_dtype: outs\[1\]\.dtype = bf16, expected fp32"):
        flashattn.combine([outs[0], outs[1].bfloat16()], lses)
    with pytest.raises(ValueError, match=r"^invalid_argument: lses has 1 parts but outs has 2"):
        flashattn.combine(outs, lses[:1])


# ---- other DLPack producers: zero-copy, so the new tokens land in the producer's cache ----

def test_other_dlpack_producers_write_their_cache():
    a, b = as_torch(problem("paged16", 2, seed=12)), as_torch(problem("paged16", 2, seed=12))
    want = run(a, causal=True)[0]
    wrapped = {name: (None if x is None else DLPackOnly(x)) for name, x in b.items()}
    got = run(wrapped, causal=True)[0]
    assert isinstance(got, torch.Tensor) and torch.equal(got, want)
    assert same(b["k_cache"], a["k_cache"]) and same(b["v_cache"], a["v_cache"])
    merged = flashattn.combine([DLPackOnly(got.float())], [DLPackOnly(torch.zeros(3, 4, 2))])
    assert torch.equal(merged, got.float())
