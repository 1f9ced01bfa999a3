"""flashattn.combine on NumPy arrays: the keys of a reference problem split into 1 to 4 disjoint
parts (contiguous slices, an empty one, a random partition), each part computed with
flash_attn_func(return_lse=True) on every CPU backend, merged, and judged against the float64
reference of the whole problem with the tolerance rule of docs/testing.md (tolerance.py); the
merge itself against combine_numpy (float64) to one float32 ulp; parts with LSE = -inf (their O
never read), rows where every part is -inf; bad inputs with the library's message naming the
part. Runs everywhere, torch or not; the torch op is in test_torch_kvcache.py."""
import numpy as np
import pytest

import flashattn
from flashattn._reference import attention_numpy, combine_numpy
from helpers import (aligned_copy, aligned_empty, as_float64, attention_inputs, cpu_backends,
                     numpy_dtype)
from tolerance import check_attention, dtype_spacing, naive_float32

BATCH, SEQLEN_Q, SEQLEN_K, HEADS, KV_HEADS, HEAD_DIM = 2, 37, 150, 4, 2, 64

# (id, key counts per part, summing to SEQLEN_K): contiguous slices, one of them empty.
SPLITS = [
    ("one", [150]),
    ("two", [70, 80]),
    ("three_with_empty", [75, 0, 75]),
    ("four_ragged", [10, 40, 1, 99]),
]


def problem(seed=0):
    q, k, v = attention_inputs(BATCH, SEQLEN_Q, SEQLEN_K, HEADS, KV_HEADS, HEAD_DIM, np.float32,
                               seed)
    return q, k, v


def parts_over(q, k, v, key_sets, backend="auto"):
    """(outs, lses): flash_attn_func over each key set (an index array) of k and v."""
    outs, lses = [], []
    for keys in key_sets:
        out, lse = flashattn.flash_attn_func(q, aligned_copy(k[:, keys]), aligned_copy(v[:, keys]),
                                             return_lse=True, backend=backend)
        outs.append(out)
        lses.append(lse)
    return outs, lses


def slices(counts):
    bounds = np.concatenate([[0], np.cumsum(counts)])
    return [np.arange(bounds[i], bounds[i + 1]) for i in range(len(counts))]


def judge_whole(q, k, v, out, lse, dtype, context):
    """The merged result against the float64 reference of the whole problem."""
    qf, kf, vf = (as_float64(x) for x in (q, k, v))
    ref_out, ref_lse = attention_numpy(qf, kf, vf)
    base_out, base_lse = naive_float32(qf, kf, vf, None, False, dtype)
    check_attention(as_float64(out), lse, ref_out, ref_lse, base_out, base_lse, dtype,
                    context=context)


def assert_merge_exact(outs, lses, out, lse, context):
    """out, lse against combine_numpy of the same float32 parts: the library merges in float64
    and rounds once, so within one float32 spacing (ulp) of the float64 merge, elementwise;
    -inf rows exactly."""
    ref_out, ref_lse = combine_numpy(outs, lses)
    out, lse = as_float64(out), as_float64(lse)
    assert np.array_equal(np.isneginf(lse), np.isneginf(ref_lse)), context
    finite = np.isfinite(ref_lse)
    assert np.all(np.abs(lse[finite] - ref_lse[finite])
                  <= dtype_spacing(ref_lse[finite], "fp32")), context
    assert np.all(np.abs(out - ref_out) <= dtype_spacing(ref_out, "fp32")), context


@pytest.mark.parametrize("backend", cpu_backends())
@pytest.mark.parametrize("name", [c[0] for c in SPLITS])
def test_split_keys_merge_to_the_whole(name, backend):
    q, k, v = problem(seed=len(name))
    outs, lses = parts_over(q, k, v, slices(dict(SPLITS)[name]), backend)
    out, lse = flashattn.combine(outs, lses, return_lse=True)
    assert out.shape == q.shape and out.dtype == np.float32
    assert lse.shape == (BATCH, HEADS, SEQLEN_Q) and lse.dtype == np.float32
    judge_whole(q, k, v, out, lse, "fp32", f"{name} {backend}")
    assert_merge_exact(outs, lses, out, lse, name)


def test_random_partition_of_the_keys():
    # Disjoint but interleaved key sets: attention without a mask is a function of the key set,
    # whatever its order.
    q, k, v = problem(seed=7)
    owner = np.random.default_rng(7).integers(0, 3, SEQLEN_K)
    key_sets = [np.flatnonzero(owner == i) for i in range(3)]
    outs, lses = parts_over(q, k, v, key_sets)
    out, lse = flashattn.combine(outs, lses, return_lse=True)
    judge_whole(q, k, v, out, lse, "fp32", "random partition")


def test_one_part_is_returned_as_it_is():
    # exp(lse - LSE) = exp(0) = 1 exactly, so one part merges to itself, bit for bit.
    q, k, v = problem(seed=3)
    (part,), (part_lse,) = parts_over(q, k, v, slices([150]))
    out, lse = flashattn.combine([part], (part_lse,), return_lse=True)
    assert np.array_equal(out, part) and np.array_equal(lse, part_lse)


@pytest.mark.parametrize("dtype", ["bf16", "fp16", "fp32"])
def test_out_dtype(dtype):
    q, k, v = problem(seed=11)
    outs, lses = parts_over(q, k, v, slices([50, 100]))
    out = flashattn.combine(outs, lses, out_dtype=numpy_dtype(dtype))
    assert out.dtype == numpy_dtype(dtype) and out.shape == q.shape
    _, lse = flashattn.combine(outs, lses, return_lse=True)
    judge_whole(q, k, v, out, lse, dtype, f"out_dtype {dtype}")


def test_parts_without_keys_have_weight_zero():
    # A part whose LSE is -inf (no key) is not read: its O may hold anything, NaN included.
    q, k, v = problem(seed=5)
    outs, lses = parts_over(q, k, v, slices([60, 90]))
    garbage = aligned_empty(outs[0].shape, np.float32)
    garbage[...] = np.nan
    no_keys = aligned_empty(lses[0].shape, np.float32)
    no_keys[...] = -np.inf
    want, want_lse = flashattn.combine(outs, lses, return_lse=True)
    got, got_lse = flashattn.combine([garbage, outs[0], garbage, outs[1]],
                                     [no_keys, lses[0], no_keys, lses[1]], return_lse=True)
    assert np.array_equal(got, want) and np.array_equal(got_lse, want_lse)


def test_rows_where_every_part_is_empty():
    # Row by row: where every part has -inf, O = 0 and LSE = -inf (never NaN); elsewhere the
    # parts that have keys.
    rng = np.random.default_rng(9)
    shape, lse_shape = (BATCH, SEQLEN_Q, HEADS, HEAD_DIM), (BATCH, HEADS, SEQLEN_Q)
    outs, lses = [], []
    for _ in range(3):
        o = aligned_empty(shape, np.float32)
        o[...] = rng.standard_normal(shape)
        lse = aligned_empty(lse_shape, np.float32)
        lse[...] = rng.normal(0.0, 5.0, lse_shape)
        lse[rng.random(lse_shape) < 0.5] = -np.inf
        o[np.transpose(np.isneginf(lse), (0, 2, 1))] = np.nan  # never read
        outs.append(o)
        lses.append(lse)
    for lse in lses:
        lse[:, :, :5] = -np.inf  # rows 0..4: no part has a key
    out, lse = flashattn.combine(outs, lses, return_lse=True)
    assert np.all(out[:, :5] == 0) and np.all(np.isneginf(lse[:, :, :5]))
    assert np.all(np.isfinite(out))
    assert_merge_exact(outs, lses, out, lse, "random -inf rows")


def test_all_parts_empty():
    outs = [aligned_empty((1, 3, 2, 16), np.float32) for _ in range(2)]
    lses = [aligned_empty((1, 2, 3), np.float32) for _ in range(2)]
    for o, lse in zip(outs, lses):
        o[...] = np.nan
        lse[...] = -np.inf
    out, lse = flashattn.combine(outs, lses, return_lse=True, out_dtype=np.float16)
    assert np.all(out == 0) and np.all(np.isneginf(lse))


def test_an_lse_of_inf_or_nan_gives_nan():
    # Not a valid LSE (combine.h): the row comes out NaN, not a silently wrong number.
    outs = [aligned_empty((1, 2, 1, 8), np.float32) for _ in range(2)]
    lses = [aligned_empty((1, 1, 2), np.float32) for _ in range(2)]
    for o, lse in zip(outs, lses):
        o[...] = 1.0
        lse[...] = 0.0
    lses[1][0, 0] = [np.inf, np.nan]
    out, lse = flashattn.combine(outs, lses, return_lse=True)
    assert np.all(np.isnan(out)) and np.all(np.isnan(lse))


def test_parts_may_be_strided_views():
    # Each part is read through its own strides: BHSD storage seen as BSHD, and LSEs that are
    # slices of a larger array.
    q, k, v = problem(seed=13)
    outs, lses = parts_over(q, k, v, slices([80, 70]))
    want = flashattn.combine(outs, lses)
    bhsd = []
    for o in outs:
        storage = aligned_empty((BATCH, HEADS, SEQLEN_Q, HEAD_DIM), np.float32)
        storage[...] = o.transpose(0, 2, 1, 3)
        bhsd.append(storage.transpose(0, 2, 1, 3))
    wide = aligned_empty((BATCH, HEADS, 2 * SEQLEN_Q), np.float32)
    wide[..., :SEQLEN_Q] = lses[0]
    got = flashattn.combine(bhsd, [wide[..., :SEQLEN_Q], lses[1]])
    assert np.array_equal(got, want)


def test_read_only_parts():
    q, k, v = problem(seed=2)
    outs, lses = parts_over(q, k, v, slices([75, 75]))
    want = flashattn.combine(outs, lses)
    for x in outs + lses:
        x.flags.writeable = False
    assert np.array_equal(flashattn.combine(tuple(outs), tuple(lses)), want)


# ---- bad inputs ----

def parts(n=2, shape=(2, 6, 4, 32), dtype=np.float32, lse_dtype=np.float32):
    outs = [aligned_empty(shape, dtype) for _ in range(n)]
    lses = [aligned_empty((shape[0], shape[2], shape[1]), lse_dtype) for _ in range(n)]
    for o, lse in zip(outs, lses):
        o[...] = 0.5
        lse[...] = 0.0
    return outs, lses


def misaligned(x):
    y = aligned_empty(x.shape, x.dtype, offset_bytes=4)
    y[...] = x
    return y


def strided_last_dim(x):
    wide = aligned_empty(x.shape[:-1] + (2 * x.shape[-1],), x.dtype)
    wide[...] = 0.5
    return wide[..., ::2]


def replace(which, index, make):
    def change(outs, lses):
        target = outs if which == "outs" else lses
        target[index] = make(target[index])
    return change


# (id, change(outs, lses) in place, kwargs, exception, message regex)
BAD = [
    ("count_mismatch", lambda outs, lses: lses.pop(), {}, ValueError,
     r"^invalid_argument: lses has 1 parts but outs has 2: expected one LSE per partial output$"),
    ("part_fp16", replace("outs", 1, lambda x: x.astype(np.float16)), {}, TypeError,
     r"^invalid_dtype: outs\[1\]\.dtype = fp16, expected fp32 \(partial results are float32\)$"),
    ("lse_float64", replace("lses", 0, lambda x: x.astype(np.float64)), {}, TypeError,
     r"^invalid_dtype: lses\[0\]\.dtype = float64, expected float32$"),
    ("part_seqlen", replace("outs", 1, lambda x: aligned_copy(x[:, :5])), {}, ValueError,
     r"^invalid_shape: outs\[1\]\.shape\[1\] \(seqlen_q\) = 5 must equal out\.shape\[1\] = 6$"),
    ("lse_heads", replace("lses", 1, lambda x: aligned_copy(x[:, :3])), {}, ValueError,
     r"^invalid_shape: lses\[1\]\.shape\[1\] \(heads\) = 3 must equal out\.shape\[2\] = 4$"),
    ("part_rank3", replace("outs", 1, lambda x: x[0]), {}, ValueError,
     r"^invalid_rank: outs\[1\]\.rank = 3, expected 4 \(batch, seqlen_q, heads, head_dim\)$"),
    ("first_part_rank3", replace("outs", 0, lambda x: x[0]), {}, ValueError,
     r"^invalid_rank: outs\[0\]\.rank = 3, expected 4 \(batch, seqlen_q, heads, head_dim\)$"),
    ("lse_rank2", replace("lses", 0, lambda x: x[0]), {}, ValueError,
     r"^invalid_rank: lses\[0\]\.rank = 2, expected 3 \(batch, heads, seqlen_q\)$"),
    ("head_dim_12", lambda outs, lses: outs.__setitem__(
        slice(None), parts(shape=(2, 6, 4, 12))[0]), {}, ValueError,
     r"^unsupported_head_dim: out\.shape\[3\] \(head_dim\) = 12 is not supported"),
    ("part_misaligned", replace("outs", 1, misaligned), {}, ValueError,
     r"^misaligned: outs\[1\]\.data = \d+ is not 16-byte aligned"),
    ("part_last_dim_strided", replace("outs", 0, strided_last_dim), {}, ValueError,
     r"^invalid_stride: outs\[0\]\.stride\[3\] = 2, expected 1"),
    ("out_dtype_float64", lambda outs, lses: None, {"out_dtype": np.float64}, TypeError,
     r"^invalid_dtype: out\.dtype = float64 is not supported, expected bfloat16, float16 or "
     r"float32$"),
    ("out_dtype_nonsense", lambda outs, lses: None, {"out_dtype": "nonsense"}, TypeError,
     r"^out_dtype must be a NumPy dtype"),
    ("part_not_an_array", replace("outs", 1, lambda x: x.tolist()), {}, TypeError,
     r"^outs\[1\] is a builtins\.list but outs\[0\] is a numpy\.ndarray: every part must be an "
     r"array of one framework$"),
    ("lse_not_an_array", replace("lses", 0, lambda x: 0.0), {}, TypeError,
     r"^lses\[0\] is a builtins\.float but outs\[0\] is a numpy\.ndarray"),
    ("return_lse_int", lambda outs, lses: None, {"return_lse": 1}, TypeError,
     r"^return_lse must be a bool, got int$"),
]


@pytest.mark.parametrize("case", BAD, ids=[c[0] for c in BAD])
def test_bad_input(case):
    _, change, kwargs, exc, match = case
    outs, lses = parts()
    change(outs, lses)
    with pytest.raises(exc, match=match):
        flashattn.combine(outs, lses, **kwargs)


@pytest.mark.parametrize("outs, lses, match", [
    ("array", "list", r"^outs must be a list \(or tuple\) of arrays, one per part, got "
                      r"numpy\.ndarray$"),
    ("list", "array", r"^lses must be a list \(or tuple\) of arrays"),
    ("list", "none", r"^lses must be a list \(or tuple\) of arrays, one per part, got None$"),
    ("string", "list", r"^outs must be a list \(or tuple\) of arrays"),
])
def test_parts_must_be_lists(outs, lses, match):
    o, lse = parts()
    make = {"array": lambda xs: np.stack(xs), "list": list, "none": lambda xs: None,
            "string": lambda xs: "outs"}
    with pytest.raises(TypeError, match=match):
        flashattn.combine(make[outs](o), make[lses](lse))


def test_empty_list():
    with pytest.raises(ValueError, match=r"^invalid_argument: outs is empty: combine\(\) "
                                         r"allocates out in the parts' shape, expected at least "
                                         r"one part$"):
        flashattn.combine([], [])


def test_options_are_keyword_only():
    outs, lses = parts()
    with pytest.raises(TypeError, match=r"positional"):
        flashattn.combine(outs, lses, np.float16)
