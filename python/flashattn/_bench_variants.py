"""The variant table of `python -m flashattn.bench --variants`, without torch: the rows
(VariantCell), their real FLOPs (exact visible-pair counts for windows, per-sequence sums for
varlen), the inputs that are plain numbers (varlen lengths, ALiBi slopes, sink logits),
FlexAttention's mask_mod and score_mod functions, the ratios between rows, and the table and
check text.

The mask and score functions use nothing but operators, indexing and the function they are given
(tanh, exp), so that they run on torch tensors inside torch.compile (captured tensors such as the
slopes or the document ids are closed over) and on NumPy arrays in the tests.

FLOPs (4 * batch * heads * head_dim * (query, key) pairs; the tanh, bias and sink are not
counted):
  dense, softcap, alibi, sinks  seqlen_q * seqlen_k pairs, halved for causal (FlashAttention's
                                convention, as the dense grid)
  window (left, right)          exactly the pairs the window keeps (bottom-right aligned; the
                                library's mask rule, common/mask_rule.h)
  varlen                        sum over the sequences of len^2, halved for causal
"""
from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

from ._bench_telemetry import clock_text

VARIANTS = ("dense", "window", "softcap", "alibi", "sinks", "varlen")
DEFAULT_VARIANT_HEAD_DIMS = [128]
DEFAULT_VARIANT_SEQLENS = [16384]
DEFAULT_WINDOW = (1024, 0)
DEFAULT_SOFTCAP = 30.0
DEFAULT_VARLEN = "32x32k"
HEAD_BUDGET = 2048  # heads = HEAD_BUDGET / head_dim, as the dense grid: 16 at d128
FLEX = "flex"

# The peers that can express each variant (torch SDPA has no window, softcap, ALiBi without a
# materialized bias, or sinks; FlexAttention expresses all of them). "fa2" on varlen rows is
# torch.nn.attention.varlen.varlen_attn (FlashAttention-2's varlen kernel), where torch has it.
VARIANT_PEERS: Dict[str, Tuple[str, ...]] = {
    "dense": ("cudnn", "fa2", "mem_eff", "flex"),
    "window": ("flex",),
    "softcap": ("flex",),
    "alibi": ("flex",),
    "sinks": ("flex",),
    "varlen": ("fa2", "flex"),
}

VARIANT_DESCRIPTIONS = {
    "dense": "no option: the reference rows (non-causal and causal)",
    "window": "window_size = (left, right), bottom-right aligned; Flex: create_block_mask with "
              "q_idx - kv_idx <= left and kv_idx - q_idx <= right (right 0: kv_idx <= q_idx)",
    "softcap": "softcap = cap: S -> cap * tanh(S / cap); Flex: score_mod cap * tanh(score / cap)",
    "alibi": "alibi_slopes = 2^(-8 i / heads), i = 1..heads; Flex: score_mod score - slope[h] * "
             "|q_idx - kv_idx|",
    "sinks": "sinks = one float32 logit per head; Flex has none: flex_attention with its LSE, "
             "then O * exp(lse) / (exp(lse) + exp(sink)) = O / (1 + exp(sink - lse)), timed as "
             "one runner with that correction (a torch.compile'd epilogue)",
    "varlen": "flash_attn_varlen_func over packed sequences of random lengths (seeded); Flex: "
              "block mask from the document ids (doc[q_idx] == doc[kv_idx], and q_idx >= kv_idx "
              "when causal); fa2: torch.nn.attention.varlen.varlen_attn",
}

VARIANT_FLOP_CONVENTION = (
    "TFLOP/s over each row's real FLOPs, 4 * batch * heads * head_dim * (query, key) pairs: "
    "dense, softcap, ALiBi and sinks count seqlen_q * seqlen_k pairs, halved for causal "
    "(FlashAttention's convention); a window counts exactly the pairs it keeps (bottom-right "
    "aligned); varlen sums len^2 over its sequences, halved for causal")

RATIO_NOTES = (
    "t/dense = this row's time / the same backend's dense call of the row's dense shape (a window "
    "(left, 0) against the causal one, other windows against the non-causal one), that dense "
    "call timed again inside this row, alternating with it (its dense twin), so both see the "
    "GPU in the same state; TF/dense = the same for TFLOP/s; varlen rows have only TF/dense, "
    "against the dense shape of the longest seqlen (their shape differs); drift = the twin's "
    "time / the dense row's own, timed earlier (1.000: the GPU ran the dense call as fast as "
    "then); vs flex = Flex's time / ours (> 1: ours is faster)")

# A dense twin's runner name: our backend's name and this suffix ("flash-sm90 @dense").
TWIN_SUFFIX = " @dense"


def sig4(x: float) -> float:
    """Four significant digits: what the timings support."""
    return float(f"{x:.4g}")


# ---- (query, key) pairs and FLOPs ----

def clamped_sum(n: int, c: int, sk: int) -> int:
    """sum over i in [0, n) of clamp(i + c, 0, sk), in closed form (exact Python ints): 0 while
    i + c < 0, then i + c, then sk from i + c >= sk on."""
    if n <= 0 or sk <= 0:
        return 0
    lo = min(max(-c, 0), n)       # the first i with i + c >= 0 (the terms before it are 0)
    hi = min(max(sk - c, 0), n)   # the first i with i + c >= sk (the terms from it on are sk)
    middle = (hi - lo) * c + (lo + hi - 1) * (hi - lo) // 2
    return middle + (n - hi) * sk


def visible_pairs(seqlen_q: int, seqlen_k: int, left: int = -1, right: int = -1,
                  causal: bool = False) -> int:
    """The (query, key) pairs of one sequence that the library's mask rule keeps: query row i
    sees key j iff 0 <= j < seqlen_k and i + diag - left <= j <= i + diag + right, diag =
    seqlen_k - seqlen_q (bottom-right aligned), a side at -1 unbounded; causal sets right = 0
    (a right > 0 with it is refused, as by the library)."""
    for name, side in (("left", left), ("right", right)):
        if side < -1:
            raise ValueError(f"window {name} = {side}, expected -1 (unbounded) or >= 0")
    if causal:
        if right > 0:
            raise ValueError(f"window right = {right} with causal: expected -1 or 0")
        right = 0
    if seqlen_q <= 0 or seqlen_k <= 0:
        return 0
    diag = seqlen_k - seqlen_q
    ends = clamped_sum(seqlen_q, diag + right + 1, seqlen_k) if right >= 0 else seqlen_q * seqlen_k
    begins = clamped_sum(seqlen_q, diag - left, seqlen_k) if left >= 0 else 0
    return ends - begins


def dense_flops(batch: int, heads: int, head_dim: int, seqlen_q: int, seqlen_k: int,
                causal: bool) -> float:
    """FlashAttention's convention: 4 * batch * heads * seqlen_q * seqlen_k * head_dim, halved
    for causal."""
    f = 4.0 * batch * heads * seqlen_q * seqlen_k * head_dim
    return f / 2 if causal else f


def window_flops(batch: int, heads: int, head_dim: int, seqlen: int,
                 window: Tuple[int, int]) -> float:
    """4 * batch * heads * head_dim * the pairs a (left, right) window keeps (seqlen_q =
    seqlen_k = seqlen)."""
    return 4.0 * batch * heads * head_dim * visible_pairs(seqlen, seqlen, window[0], window[1])


def varlen_flops(lengths: Sequence[int], heads: int, head_dim: int, causal: bool) -> float:
    """sum over the sequences of 4 * heads * len^2 * head_dim, halved for causal (each
    sequence's seqlen_q = seqlen_k = len)."""
    pairs = sum(int(n) * int(n) for n in lengths)
    f = 4.0 * heads * head_dim * pairs
    return f / 2 if causal else f


# ---- inputs that are plain numbers ----

def random_lengths(count: int, total: int, seed: int) -> List[int]:
    """`count` sequence lengths >= 1 summing to `total`, cut at count - 1 distinct random points
    of [1, total) (random.Random(seed): the same lengths on every machine)."""
    if count < 1 or total < count:
        raise ValueError(f"{count} sequences of {total} tokens: expected 1 <= sequences <= tokens")
    cuts = sorted(random.Random(seed).sample(range(1, total), count - 1))
    bounds = [0] + cuts + [total]
    return [b - a for a, b in zip(bounds, bounds[1:])]


def alibi_slopes(heads: int) -> List[float]:
    """ALiBi's geometric slopes 2^(-8 i / heads), i = 1..heads (BLOOM, MPT)."""
    return [2.0 ** (-8.0 * i / heads) for i in range(1, heads + 1)]


def sink_logits(heads: int, seqlen_k: int, seed: int) -> List[float]:
    """One logit per head: log(seqlen_k) + 2 + N(0, 1) (random.Random(seed)). With the
    benchmark's inputs (normal + 0.5) the rows' log-sum-exp is about log(seqlen_k) + 3.5 at d128,
    so the sink takes a visible share of every row (about 20%): the check then tests it."""
    rng = random.Random(seed)
    base = math.log(max(seqlen_k, 1)) + 2.0
    return [base + rng.gauss(0.0, 1.0) for _ in range(heads)]


def document_ids(lengths: Sequence[int]) -> List[int]:
    """Token t's sequence index in the packed layout: [0] * len0 + [1] * len1 + ..."""
    ids: List[int] = []
    for b, n in enumerate(lengths):
        ids.extend([b] * int(n))
    return ids


def cu_seqlens(lengths: Sequence[int]) -> List[int]:
    """Offsets (batch + 1), starting at 0."""
    out = [0]
    for n in lengths:
        out.append(out[-1] + int(n))
    return out


# ---- FlexAttention's mask_mod and score_mod (operators only: torch tensors or NumPy arrays) ----

def causal_mask_mod(b, h, q_idx, kv_idx):
    return q_idx >= kv_idx


def window_mask_mod(left: int, right: int):
    """The window (left, right) for seqlen_q == seqlen_k (the diagonal is q_idx == kv_idx): key
    kv_idx is visible iff q_idx - kv_idx <= left and kv_idx - q_idx <= right, a side at -1
    unbounded."""
    if left >= 0 and right >= 0:
        def mask_mod(b, h, q_idx, kv_idx):
            return (q_idx - kv_idx <= left) & (kv_idx - q_idx <= right)
    elif left >= 0:
        def mask_mod(b, h, q_idx, kv_idx):
            return q_idx - kv_idx <= left
    elif right >= 0:
        def mask_mod(b, h, q_idx, kv_idx):
            return kv_idx - q_idx <= right
    else:
        raise ValueError("window (-1, -1) masks nothing: it is no window")
    return mask_mod


def document_mask_mod(doc, causal: bool):
    """Packed sequences: a query sees the keys of its own sequence (doc: token -> sequence id, a
    tensor closed over), and with causal only those up to itself (each sequence has as many
    queries as keys, so the global q_idx >= kv_idx is the sequence's bottom-right rule)."""
    if causal:
        def mask_mod(b, h, q_idx, kv_idx):
            return (doc[q_idx] == doc[kv_idx]) & (q_idx >= kv_idx)
    else:
        def mask_mod(b, h, q_idx, kv_idx):
            return doc[q_idx] == doc[kv_idx]
    return mask_mod


def softcap_score_mod(cap: float, tanh):
    """score -> cap * tanh(score / cap) (score is already scaled by softmax_scale, as the
    library's S)."""
    cap = float(cap)

    def score_mod(score, b, h, q_idx, kv_idx):
        return cap * tanh(score / cap)
    return score_mod


def alibi_score_mod(slopes):
    """score -> score - slopes[h] * |q_idx - kv_idx| (slopes: a float32 tensor per head, closed
    over); the library's bias with diag = 0."""
    def score_mod(score, b, h, q_idx, kv_idx):
        return score - slopes[h] * abs(q_idx - kv_idx)
    return score_mod


def sink_factor(lse, sinks, exp):
    """What the sink leaves of each row's output: exp(lse) / (exp(lse) + exp(sink)) =
    1 / (1 + exp(sink - lse)), for lse (batch, heads, seqlen) and sinks (heads). 1 / (1 + inf)
    is 0: no overflow to NaN."""
    return 1.0 / (1.0 + exp(sinks[None, :, None] - lse))


# ---- the rows ----

@dataclass(frozen=True)
class VariantCell:
    variant: str               # one of VARIANTS
    hd: int
    causal: bool               # window rows: False (the window carries its own right edge)
    L: int                     # seqlen_q = seqlen_k; varlen: the longest sequence
    B: int                     # batch; varlen: the number of sequences
    H: int
    KVH: int
    window: Tuple[int, int] = (-1, -1)
    softcap: float = 0.0
    lengths: Tuple[int, ...] = ()   # varlen only

    @property
    def total(self) -> int:
        """Tokens: batch * seqlen, or the sum of the varlen lengths."""
        return sum(self.lengths) if self.variant == "varlen" else self.B * self.L

    def name(self) -> str:
        """"window (1024, 0)", "softcap 30", "varlen 32 seqs", "alibi", ..."""
        if self.variant == "window":
            return f"window ({self.window[0]}, {self.window[1]})"
        if self.variant == "softcap":
            return f"softcap {self.softcap:g}"
        if self.variant == "varlen":
            return f"varlen {len(self.lengths)} seqs"
        return self.variant

    def causal_text(self) -> str:
        return "-" if self.variant == "window" else ("yes" if self.causal else "no")

    def shape_text(self) -> str:
        heads = f"H{self.H}" if self.H == self.KVH else f"H{self.H}/{self.KVH}"
        if self.variant == "varlen":
            return f"T={self.total} {heads} d{self.hd}"
        return f"{self.B}x{self.L} {heads} d{self.hd}"

    def label(self) -> str:
        """One line that names the row: "softcap 30 causal 1x16384 H16 d128"."""
        causal = " causal" if self.causal and self.variant != "window" else ""
        return f"{self.name()}{causal} {self.shape_text()}"

    def flops(self) -> float:
        if self.variant == "window":
            return window_flops(self.B, self.H, self.hd, self.L, self.window)
        if self.variant == "varlen":
            return varlen_flops(self.lengths, self.H, self.hd, self.causal)
        return dense_flops(self.B, self.H, self.hd, self.L, self.L, self.causal)

    def flop_rule(self) -> str:
        if self.variant == "window":
            pairs = visible_pairs(self.L, self.L, *self.window)
            return f"4 * {self.B} * {self.H} * {self.hd} * {pairs} visible (query, key) pairs"
        if self.variant == "varlen":
            half = " / 2" if self.causal else ""
            return f"4 * {self.H} * {self.hd} * sum(len^2){half}"
        half = " / 2" if self.causal else ""
        return f"4 * {self.B} * {self.H} * {self.L} * {self.L} * {self.hd}{half}"

    def params(self) -> dict:
        """The variant's options, for the JSON (the slope and sink values are added by the run)."""
        if self.variant == "window":
            return {"window_size": list(self.window)}
        if self.variant == "softcap":
            return {"softcap": self.softcap}
        if self.variant == "alibi":
            return {"alibi_slopes_rule": "2^(-8 i / heads), i = 1..heads"}
        if self.variant == "sinks":
            return {"sinks_rule": "log(seqlen_k) + 2 + N(0, 1) per head, random.Random(seed)"}
        if self.variant == "varlen":
            return {"lengths": list(self.lengths), "total": self.total,
                    "max_seqlen": max(self.lengths)}
        return {}

    def shape_key(self) -> tuple:
        """Rows with equal keys share one set of inputs."""
        if self.variant == "varlen":
            return ("varlen", self.hd, self.H, self.KVH, self.lengths)
        return ("dense", self.hd, self.L, self.B, self.H, self.KVH)

    def dense_causal(self) -> bool:
        """Which dense row this one is compared with: a window (left, 0) with the causal one."""
        return self.window[1] == 0 if self.variant == "window" else self.causal


def build_variant_cells(variants: Iterable[str], head_dims: Sequence[int], seqlens: Sequence[int],
                        modes: Sequence[bool], windows: Sequence[Tuple[int, int]],
                        softcaps: Sequence[float], varlen_lengths: Optional[Sequence[int]],
                        batch: Optional[int], tokens: int, heads: Optional[int],
                        kv_heads: Optional[int]) -> List[VariantCell]:
    """The rows, in order: per head dim and seqlen the dense rows (the causal modes asked for,
    plus the ones the windows are compared with), the windows, softcaps, ALiBi and sinks (each in
    every mode); then per head dim the varlen rows. batch = batch or tokens // seqlen; heads =
    heads or 2048 / head_dim; kv_heads = kv_heads or heads."""
    chosen = set(variants)
    cells: List[VariantCell] = []
    for hd in head_dims:
        H = heads or max(1, HEAD_BUDGET // hd)
        KVH = kv_heads or H
        for L in seqlens:
            B = batch or max(1, tokens // L)
            dense_modes = set(modes)
            if "window" in chosen:
                dense_modes.update(w[1] == 0 for w in windows)
            for causal in sorted(dense_modes):
                cells.append(VariantCell("dense", hd, causal, L, B, H, KVH))
            if "window" in chosen:
                for w in windows:
                    cells.append(VariantCell("window", hd, False, L, B, H, KVH, window=tuple(w)))
            if "softcap" in chosen:
                for cap in softcaps:
                    for causal in modes:
                        cells.append(VariantCell("softcap", hd, causal, L, B, H, KVH,
                                                 softcap=float(cap)))
            for variant in ("alibi", "sinks"):
                if variant in chosen:
                    for causal in modes:
                        cells.append(VariantCell(variant, hd, causal, L, B, H, KVH))
        if "varlen" in chosen and varlen_lengths:
            lengths = tuple(int(n) for n in varlen_lengths)
            for causal in modes:
                cells.append(VariantCell("varlen", hd, causal, max(lengths), len(lengths), H, KVH,
                                         lengths=lengths))
    return cells


# ---- arguments (the text of --variants, --window, --softcap, --varlen) ----

def parse_count(item: str) -> int:
    """"16k" -> 16384, "-1" -> -1."""
    item = item.strip().lower()
    scale = 1024 if item.endswith("k") else 1
    try:
        return int(item[:-1] if scale > 1 else item) * scale
    except ValueError:
        raise ValueError(f"not an integer: {item!r}") from None


def parse_variants(text: str) -> List[str]:
    """"all" or a comma list of VARIANTS; dense comes first and always (the reference rows)."""
    names = [n.strip().lower() for n in text.split(",") if n.strip()]
    if not names or names == ["all"]:
        return list(VARIANTS)
    unknown = [n for n in names if n not in VARIANTS]
    if unknown:
        raise ValueError(f"unknown variant(s) {', '.join(unknown)}; known: all, "
                         f"{', '.join(VARIANTS)}")
    return [v for v in VARIANTS if v == "dense" or v in names]


def parse_window(text: str) -> Tuple[int, int]:
    """"1024,0" -> (1024, 0); each side -1 (unbounded) or >= 0, not both -1."""
    parts = text.split(",")
    if len(parts) != 2:
        raise ValueError(f"window {text!r}: expected LEFT,RIGHT (e.g. 1024,0; -1 unbounded)")
    left, right = (parse_count(p) for p in parts)
    if left < -1 or right < -1:
        raise ValueError(f"window {text!r}: each side must be -1 (unbounded) or >= 0")
    if left == -1 and right == -1:
        raise ValueError(f"window {text!r} masks nothing (that is the dense row)")
    return left, right


def parse_softcaps(text: str) -> List[float]:
    """"30" or "30,50": finite values > 0."""
    caps = []
    for item in text.split(","):
        try:
            cap = float(item)
        except ValueError:
            raise ValueError(f"softcap {item.strip()!r} is not a number") from None
        if not (math.isfinite(cap) and cap > 0):
            raise ValueError(f"softcap {item.strip()!r}: expected a finite value > 0")
        caps.append(cap)
    return caps


INT32_MAX = 2 ** 31 - 1


def parse_varlen(text: str, seed: int) -> List[int]:
    """"COUNTxTOTAL" (random_lengths(COUNT, TOTAL, seed), e.g. 32x32k) or an explicit comma list
    of lengths (1k,3k,500); lengths >= 1, the total within int32 (the offsets' type)."""
    text = text.strip().lower()
    if "x" in text:
        count_text, _, total_text = text.partition("x")
        count, total = parse_count(count_text), parse_count(total_text)
        if count < 1 or total < count:
            raise ValueError(f"varlen {text!r}: expected 1 <= COUNT <= TOTAL")
        lengths = random_lengths(count, total, seed)
    else:
        lengths = [parse_count(item) for item in text.split(",")]
        if any(n < 1 for n in lengths):
            raise ValueError(f"varlen {text!r}: every length must be >= 1")
    if sum(lengths) > INT32_MAX:
        raise ValueError(f"varlen {text!r}: {sum(lengths)} tokens do not fit the int32 offsets")
    return lengths


# ---- ratios, summary ----

def status_of(reason: str) -> str:
    """"unsupported" when the library refused the variant, else "n/a"."""
    return "unsupported" if "unsupported:" in reason else "n/a"


def na_text(reason: str) -> str:
    """What a table cell shows for a runner that did not run: the library's "unsupported:
    <reason>" without the exception type, else "n/a: <reason>"."""
    at = reason.find("unsupported:")
    if at >= 0:
        return reason[at:]
    return f"n/a: {reason}"


def row_record(cell: VariantCell, backends: List[str], ms: Dict[str, float],
               na: Dict[str, str]) -> dict:
    """The JSON row of a timed cell (before ratios): every backend in `backends` is either in
    ms (timed) or in na (why not)."""
    flops = cell.flops()
    row = {"variant": cell.variant, "name": cell.name(), "label": cell.label(),
           "causal": cell.causal, "hd": cell.hd, "L": cell.L, "B": cell.B, "H": cell.H,
           "KVH": cell.KVH, "tokens": cell.total, "params": cell.params(), "flops": flops,
           "flop_rule": cell.flop_rule(), "backends": list(backends),
           "ms": {n: sig4(ms[n]) for n in backends if n in ms},
           "tflops": {n: sig4(flops / (ms[n] * 1e-3) / 1e12) for n in backends
                      if n in ms and ms[n] > 0},
           "na": {n: na[n] for n in backends if n in na and n not in ms},
           "dense_causal": cell.dense_causal()}
    row["status"] = {n: "ok" if n in row["ms"] else status_of(row["na"].get(n, "not run"))
                     for n in backends}
    return row


def dense_twin_cell(cell: VariantCell, cells: Sequence[VariantCell]) -> Optional[VariantCell]:
    """The dense shape a non-dense row is timed against (its dense twin): the same shape with
    the row's dense causal mode; for varlen the dense row of the longest seqlen among `cells`
    with the same head dim, heads and causal mode (None when the table has none). None for a
    dense row (it is its own reference)."""
    if cell.variant == "dense":
        return None
    causal = cell.dense_causal()
    if cell.variant != "varlen":
        return VariantCell("dense", cell.hd, causal, cell.L, cell.B, cell.H, cell.KVH)
    same = [c for c in cells if c.variant == "dense" and c.hd == cell.hd and c.H == cell.H and
            c.KVH == cell.KVH and c.causal == causal]
    return max(same, key=lambda c: c.L) if same else None


def add_paired_ratios(row: dict, twin: Optional[VariantCell], twin_ms: Dict[str, float],
                      dense_rows: List[dict]) -> dict:
    """Adds the dense twin's figures to a row (after add_ratios): "paired_dense" {label, ms},
    ratio_time_to_paired_dense (not for varlen) and ratio_tflops_to_paired_dense per backend of
    ours timed with its twin, and dense_drift = the twin's time / the same backend's time in the
    dense row of the twin's shape (timed earlier in the table). Returns the row."""
    row["ratio_time_to_paired_dense"] = {}
    row["ratio_tflops_to_paired_dense"] = {}
    row["dense_drift"] = {}
    if twin is None or not twin_ms:
        return row
    label = twin.label()
    row["paired_dense"] = {"label": label, "ms": {n: sig4(t) for n, t in twin_ms.items()}}
    earlier = next((d for d in dense_rows if d["variant"] == "dense" and d["label"] == label),
                   None)
    flops = twin.flops()
    for name, t_twin in twin_ms.items():
        t = row["ms"].get(name)
        if not t or t_twin <= 0:
            continue
        if row["variant"] != "varlen":
            row["ratio_time_to_paired_dense"][name] = round(t / t_twin, 3)
        if name in row["tflops"]:
            row["ratio_tflops_to_paired_dense"][name] = round(
                row["tflops"][name] / (flops / (t_twin * 1e-3) / 1e12), 3)
        if earlier is not None and earlier["ms"].get(name):
            row["dense_drift"][name] = round(t_twin / earlier["ms"][name], 3)
    return row


def dense_reference(row: dict, dense_rows: List[dict]) -> Optional[dict]:
    """The dense row this row is compared with: same head dim, heads and causal mode as
    row["dense_causal"], and the same seqlen and batch; for varlen the longest seqlen there."""
    same = [d for d in dense_rows if d["variant"] == "dense" and d["hd"] == row["hd"] and
            d["H"] == row["H"] and d["KVH"] == row["KVH"] and d["causal"] == row["dense_causal"]]
    if row["variant"] == "varlen":
        return max(same, key=lambda d: d["L"]) if same else None
    for d in same:
        if d["L"] == row["L"] and d["B"] == row["B"]:
            return d
    return None


def add_ratios(row: dict, dense_rows: List[dict], ours: List[str]) -> dict:
    """Adds dense_ref (its label), ratio_time_to_dense and ratio_tflops_to_dense (per backend,
    against the same backend's dense row, found among dense_rows; a dense row is its own: 1;
    varlen: TFLOP/s only), speedup_vs_flex (ours: Flex's time / ours). Returns the row."""
    ref = row if row["variant"] == "dense" else dense_reference(row, dense_rows)
    row["dense_ref"] = ref["label"] if ref else None
    row["ratio_time_to_dense"] = {}
    row["ratio_tflops_to_dense"] = {}
    if ref is not None:
        for name, t in row["ms"].items():
            if row["variant"] != "varlen" and ref["ms"].get(name):
                row["ratio_time_to_dense"][name] = round(t / ref["ms"][name], 3)
            if name in row["tflops"] and ref["tflops"].get(name):
                row["ratio_tflops_to_dense"][name] = round(row["tflops"][name] /
                                                           ref["tflops"][name], 3)
    flex = row["ms"].get(FLEX)
    row["speedup_vs_flex"] = {n: round(flex / row["ms"][n], 3) for n in ours
                              if flex and row["ms"].get(n)}
    return row


def geomean(values: Iterable[Optional[float]]) -> Optional[float]:
    values = [x for x in values if x is not None and x > 0]
    return math.exp(sum(math.log(x) for x in values) / len(values)) if values else None


def variant_summary(rows: List[dict], ours: List[str]) -> dict:
    """Per backend of ours: the geometric mean of its speedup over Flex on the variant rows
    (dense left out) and on all rows, with the row counts."""
    out = {}
    for n in ours:
        variant = [r["speedup_vs_flex"].get(n) for r in rows if r["variant"] != "dense"]
        every = [r["speedup_vs_flex"].get(n) for r in rows]
        g_var, g_all = geomean(variant), geomean(every)
        out[n] = {"geomean_speedup_vs_flex_variants": g_var and round(g_var, 3),
                  "variant_rows": sum(x is not None for x in variant),
                  "geomean_speedup_vs_flex_all": g_all and round(g_all, 3),
                  "rows": sum(x is not None for x in every),
                  "unsupported": [r["label"] for r in rows
                                  if r["status"].get(n) == "unsupported"]}
    return out


# ---- text ----

def _tflops_text(x: float) -> str:
    return f"{x:.1f}" if x >= 1 else f"{x:.2g}"


def _ratio_text(x: Optional[float], speedup: bool = False) -> str:
    """"0.136" for a ratio, "1.23x" for a speedup, "-" for none."""
    if x is None:
        return "-"
    return f"{x:.2f}x" if speedup else f"{x:.3f}"


TABLE_HEADER = (f"{'variant':<18} {'causal':>6} {'shape':<20} {'TFLOP':>9}  {'backend':<14}"
                f"{'ms':>9} {'TFLOP/s':>9} {'t/dense':>8} {'TF/dense':>9} {'drift':>6} "
                f"{'vs flex':>8} {'MHz':>5}")


def table_lines(row: dict) -> List[str]:
    """One line per backend of the row; the first names the row and ends with the median SM
    clock while it was timed (_bench_telemetry.clock_text). A backend that did not run
    shows why in place of its numbers ("unsupported: backend flash-sm80 does not implement
    softcap")."""
    lines = []
    causal = "-" if row["variant"] == "window" else ("yes" if row["causal"] else "no")
    head = (f"{row['name']:<18} {causal:>6} {_shape_text(row):<20} "
            f"{row['flops'] / 1e12:>9.4g}  ")
    blank = " " * len(head)
    for i, name in enumerate(row["backends"]):
        prefix = head if i == 0 else blank
        if name in row["ms"]:
            tf = row["tflops"].get(name)
            t_ratio, tf_ratio = paired_or_unpaired(row, name)
            drift = row.get("dense_drift", {}).get(name)
            lines.append(
                prefix + f"{name:<14}{row['ms'][name]:>9.4g} "
                f"{(_tflops_text(tf) if tf is not None else '-'):>9} "
                f"{_ratio_text(t_ratio):>8} {_ratio_text(tf_ratio):>9} "
                f"{(f'{drift:.3f}' if drift is not None else '-'):>6} "
                f"{_ratio_text(row['speedup_vs_flex'].get(name), speedup=True):>8}"
                + (f" {clock_text(row.get('gpu')):>5}" if i == 0 else ""))
        else:
            lines.append(prefix + f"{name:<14} {na_text(row['na'].get(name, 'not run'))}")
    return lines


def paired_or_unpaired(row: dict, name: str) -> Tuple[Optional[float], Optional[float]]:
    """(time ratio, TFLOP/s ratio) to dense for the table: against the dense twin timed in the
    row when it ran, else against the earlier dense row."""
    paired_tf = row.get("ratio_tflops_to_paired_dense", {}).get(name)
    if paired_tf is not None:
        return row.get("ratio_time_to_paired_dense", {}).get(name), paired_tf
    return row["ratio_time_to_dense"].get(name), row["ratio_tflops_to_dense"].get(name)


def _shape_text(row: dict) -> str:
    heads = f"H{row['H']}" if row["H"] == row["KVH"] else f"H{row['H']}/{row['KVH']}"
    if row["variant"] == "varlen":
        return f"T={row['tokens']} {heads} d{row['hd']}"
    return f"{row['B']}x{row['L']} {heads} d{row['hd']}"


def summary_lines(summary: dict) -> List[str]:
    lines = []
    for name, s in summary.items():
        g_var, g_all = (s["geomean_speedup_vs_flex_variants"], s["geomean_speedup_vs_flex_all"])
        text = (f"  {name}: vs flex, geometric mean {_ratio_text(g_var, True)} over "
                f"{s['variant_rows']} variant rows, {_ratio_text(g_all, True)} over {s['rows']} "
                "rows with dense")
        if s["unsupported"]:
            text += f"; unsupported in {len(s['unsupported'])} rows"
        lines.append(text)
    return lines


def check_lines(rows: List[dict], check_rows: int) -> List[str]:
    """The --check table: per row and backend max|O - O_ref| against float64 (the library's
    reference, _reference.attention_numpy, on the checked rows), the dtype's rounding floor, and
    max|O - O_flex| for ours."""
    lines = [f"max|O - O_ref| against float64 on the last {check_rows} query rows (batch 0, every "
             "head; varlen: of the longest sequence); floor = the dtype's rounding of O_ref; "
             "[flex: max|O - O_flex|]"]
    for r in rows:
        c = r.get("check") or {}
        if "error" in c:
            lines.append(f"  {r['label']}: check failed: {c['error']}")
            continue
        errs = c.get("max_abs_err", {})
        parts = []
        for name in r["backends"]:
            if name not in errs:
                continue
            text = f"{name} {errs[name]:.3g}"
            if name in c.get("vs_flex", {}):
                text += f" [flex: {c['vs_flex'][name]:.3g}]"
            parts.append(text)
        floor = c.get("floor")
        floor_text = f"{floor:.3g}" if floor is not None else "n/a"
        lines.append(f"  {r['label']:<40} floor {floor_text:>9} | " + ", ".join(parts))
    return lines
