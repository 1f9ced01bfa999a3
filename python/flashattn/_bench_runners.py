"""What flashattn.bench times: one zero-argument callable per backend for one cell's inputs.

Every runner reads the same BSHD tensors. flashattn's backends take them as they are; PyTorch's
SDPA backends and FlexAttention get BHSD views of the same memory (q.transpose(1, 2)), which is
also how FlashAttention-2 itself stores them. Causal masks coincide because seqlen_q == seqlen_k
in the benchmark (SDPA aligns top-left, flashattn bottom-right).

The decode grid (--decode) has its own: kvcache_runner (flash_attn_with_kvcache, one step),
sdpa_decode_runner (SDPA over the contiguous cache) and graph_runner, which captures any runner in
a CUDA graph and replays it.

The variant rows (--variants) add build_variant_runners: flashattn's backends with the variant's
option (window_size, softcap, alibi_slopes, sinks, or flash_attn_varlen_func on packed
sequences), FlexAttention with the matching mask_mod / score_mod (_bench_variants), and for
varlen torch's varlen_attn as "fa2". Block masks are built here, before anything is timed.
"""
from __future__ import annotations

from typing import Callable, Dict, Optional

import flashattn

# Peer names, as in /work/shared/data/peers-*.json: SDPA backend (None: FlexAttention).
PEERS = {
    "cudnn": "CUDNN_ATTENTION",
    "fa2": "FLASH_ATTENTION",
    "mem_eff": "EFFICIENT_ATTENTION",
    "flex": None,
}
PEER_DESCRIPTIONS = {
    "cudnn": "torch SDPA, cuDNN backend",
    "fa2": "torch SDPA, FlashAttention-2 backend",
    "mem_eff": "torch SDPA, memory-efficient backend",
    "flex": "torch.compile(flex_attention), Triton",
}


def flashattn_cuda_backends(include_naive: bool = False) -> list:
    """Usable CUDA backends of the library; naive is left out by default (its S matrix runs out
    of memory at the benchmark's sizes)."""
    return [b.name for b in flashattn.list_backends()
            if b.device == "cuda" and b.usable and (include_naive or b.name != "naive")]


def flashattn_runner(name: str, q, k, v, causal: bool, **options) -> Callable:
    """flash_attn_func on this backend; options: the variant's keywords (window_size, softcap,
    alibi_slopes, sinks), none for the dense grid."""
    def run():
        return flashattn.flash_attn_func(q, k, v, causal=causal, backend=name, **options)
    return run


def flashattn_varlen_runner(name: str, q, k, v, cu_seqlens, max_seqlen: int,
                            causal: bool) -> Callable:
    """flash_attn_varlen_func on packed (total, heads, head_dim) tensors, queries and keys of
    every sequence alike (cu_seqlens_q = cu_seqlens_k, an int32 tensor on q's device)."""
    max_seqlen = int(max_seqlen)

    def run():
        return flashattn.flash_attn_varlen_func(q, k, v, cu_seqlens, cu_seqlens, max_seqlen,
                                                max_seqlen, causal=causal, backend=name)
    return run


def fa2_varlen_runner(q, k, v, cu_seqlens, max_seqlen: int, causal: bool) -> Callable:
    """torch.nn.attention.varlen.varlen_attn (FlashAttention-2's varlen kernel) on the packed
    tensors. Its keywords changed between torch versions (is_causal, later window_size = (-1, 0)
    for causal): the signature decides."""
    import inspect

    try:
        from torch.nn.attention.varlen import varlen_attn
    except ImportError:
        raise RuntimeError("this torch has no torch.nn.attention.varlen.varlen_attn") from None
    params = inspect.signature(varlen_attn).parameters
    kwargs = {}
    if "is_causal" in params:
        kwargs["is_causal"] = causal
    elif "window_size" in params:
        kwargs["window_size"] = (-1, 0) if causal else (-1, -1)
    elif causal:
        raise RuntimeError("varlen_attn takes neither is_causal nor window_size here")
    max_seqlen = int(max_seqlen)

    def run():
        return varlen_attn(q, k, v, cu_seqlens, cu_seqlens, max_seqlen, max_seqlen, **kwargs)
    return run


def sdpa_runner(peer: str, q, k, v, causal: bool) -> Callable:
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.nn.functional import scaled_dot_product_attention

    backend = getattr(SDPBackend, PEERS[peer])
    qt, kt, vt = (x.transpose(1, 2) for x in (q, k, v))
    gqa = q.shape[2] != k.shape[2]

    def run():
        with sdpa_kernel(backend):
            if gqa:  # the keyword exists since torch 2.5; leave it out otherwise
                return scaled_dot_product_attention(qt, kt, vt, is_causal=causal,
                                                    enable_gqa=True)
            return scaled_dot_product_attention(qt, kt, vt, is_causal=causal)
    return run


class FlexCompiler:
    """One torch.compile'd flex_attention for the whole run. dynamic=True compiles once per head
    dim and mask kind rather than once per shape (minutes saved over the grid); static=True
    compiles per shape (the variant table: a few shapes, and the constants its score_mods and
    mask_mods close over, such as the softcap or the window's edges, stay constants).

    runner() takes the variant's FlexAttention pieces: a mask_mod (made into a block mask here,
    outside the timed region), a score_mod (torch.compile-friendly: tensors it reads, such as
    the ALiBi slopes, are closed over), and sinks, which Flex does not have: it then returns the
    LSE as well and one compiled epilogue rescales O by 1 / (1 + exp(sink - lse))."""

    def __init__(self, static: bool = False):
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention

        import torch._dynamo

        # Every distinct shape or mask is a recompile; past the limit dynamo would silently run
        # flex_attention eagerly (materializing S), which is not what we want to time.
        torch._dynamo.config.cache_size_limit = max(torch._dynamo.config.cache_size_limit, 256)
        self._create_block_mask = create_block_mask
        self._flex = torch.compile(flex_attention, dynamic=not static)
        self.mode = "static shapes" if static else "dynamic=True"
        try:  # torch >= 2.9 returns the LSE through return_aux; return_lse is deprecated there
            from torch.nn.attention.flex_attention import AuxRequest
        except ImportError:
            AuxRequest = None
        self._aux_request = AuxRequest
        self._epilogue = None
        self.notes: list = []  # what the header should say (e.g. the sinks epilogue ran eagerly)

    def block_mask(self, mask_mod, q_len: int, kv_len: int, device):
        return self._create_block_mask(mask_mod, None, None, q_len, kv_len, device=device)

    def runner(self, q, k, v, causal: bool, *, mask_mod=None, score_mod=None,
               sinks=None) -> Callable:
        """BSHD q, k, v (BHSD views are taken). mask_mod, when given, is the whole mask (causal
        must then be False: put causality into it)."""
        qt, kt, vt = (x.transpose(1, 2) for x in (q, k, v))
        if mask_mod is not None and causal:
            raise ValueError("FlexCompiler.runner: a mask_mod is the whole mask; causal must be "
                             "False with it")
        block_mask = None
        if causal:
            def causal_mask(b, h, q_idx, kv_idx):
                return q_idx >= kv_idx
            block_mask = self.block_mask(causal_mask, q.shape[1], k.shape[1], q.device)
        elif mask_mod is not None:
            block_mask = self.block_mask(mask_mod, q.shape[1], k.shape[1], q.device)
        gqa = q.shape[2] != k.shape[2]
        kwargs = {"block_mask": block_mask, "enable_gqa": gqa}
        if score_mod is not None:
            kwargs["score_mod"] = score_mod
        if sinks is None:
            def run():
                return self._flex(qt, kt, vt, **kwargs)
            return run

        epilogue = self._sinks_epilogue()
        if self._aux_request is not None:
            aux = self._aux_request(lse=True)

            def run():
                out, extra = self._flex(qt, kt, vt, return_aux=aux, **kwargs)
                return epilogue(out, extra.lse, sinks)
        else:
            def run():
                out, lse = self._flex(qt, kt, vt, return_lse=True, **kwargs)
                return epilogue(out, lse, sinks)
        return run

    def _sinks_epilogue(self) -> Callable:
        """O * (1 / (1 + exp(sink - lse))) in float32, rounded once to O's dtype: torch.compile'd
        (one fused pass over O); if that compile fails, the same math eagerly (and a note)."""
        if self._epilogue is not None:
            return self._epilogue
        import torch

        from ._bench_variants import sink_factor

        def eager(out, lse, sinks):
            return (out.float() * sink_factor(lse, sinks, torch.exp).unsqueeze(-1)).to(out.dtype)

        compiled = torch.compile(eager, dynamic=False)
        state = {"fn": compiled}

        def epilogue(out, lse, sinks):
            if state["fn"] is compiled:
                try:
                    return compiled(out, lse, sinks)
                except Exception as e:  # compile trouble: the same math, eagerly; say so
                    state["fn"] = eager
                    self.notes.append("flex sinks: the epilogue did not compile, it runs "
                                      f"eagerly ({one_line(e)})")
            return state["fn"](out, lse, sinks)
        self._epilogue = epilogue
        return epilogue


def build_runners(names, q, k, v, causal: bool, flex: Optional[FlexCompiler]) -> tuple:
    """({name: runner}, {name: why not}) for the requested backend names."""
    runners: Dict[str, Callable] = {}
    not_available: Dict[str, str] = {}
    for name in names:
        try:
            if name == "flex":
                if flex is None:
                    raise RuntimeError("FlexAttention did not compile (see the header)")
                runners[name] = flex.runner(q, k, v, causal)
            elif name in PEERS:
                runners[name] = sdpa_runner(name, q, k, v, causal)
            else:
                runners[name] = flashattn_runner(name, q, k, v, causal)
        except Exception as e:  # a backend that cannot be set up for this cell: say why
            not_available[name] = one_line(e)
    return runners, not_available


def variant_options(cell, side: dict) -> dict:
    """flash_attn_func's keywords for a VariantCell (dense: none); side: the device tensors
    alibi_slopes and sinks."""
    if cell.variant == "window":
        return {"window_size": tuple(cell.window)}
    if cell.variant == "softcap":
        return {"softcap": float(cell.softcap)}
    if cell.variant == "alibi":
        return {"alibi_slopes": side["alibi_slopes"]}
    if cell.variant == "sinks":
        return {"sinks": side["sinks"]}
    return {}


def build_variant_runners(cell, ours, peers, inputs: dict, side: dict,
                          flex: Optional[FlexCompiler]) -> tuple:
    """({name: runner}, {name: why not}, {name: output layout}) for one VariantCell. inputs:
    {"q", "k", "v"} BSHD, or for varlen packed (total, heads, head_dim) with "cu_seqlens" (int32
    on the device), "max_seqlen" and "doc" (the token -> sequence ids, int32 on the device).
    Layouts: "bshd" (ours and fa2 dense), "bhsd" (SDPA and Flex), "packed" (ours and fa2 varlen),
    "bhsd-packed" (Flex on the packed tokens as one sequence)."""
    import torch

    from . import _bench_variants as bv

    runners: Dict[str, Callable] = {}
    not_available: Dict[str, str] = {}
    layouts: Dict[str, str] = {}
    q, k, v = inputs["q"], inputs["k"], inputs["v"]
    varlen = cell.variant == "varlen"
    for name in list(ours) + list(peers):
        try:
            if name in ours:
                if varlen:
                    runners[name] = flashattn_varlen_runner(
                        name, q, k, v, inputs["cu_seqlens"], inputs["max_seqlen"], cell.causal)
                    layouts[name] = "packed"
                else:
                    runners[name] = flashattn_runner(name, q, k, v, cell.causal,
                                                     **variant_options(cell, side))
                    layouts[name] = "bshd"
            elif name == bv.FLEX:
                if flex is None:
                    raise RuntimeError("FlexAttention did not compile (see the header)")
                if cell.variant == "dense":
                    runners[name] = flex.runner(q, k, v, cell.causal)
                elif cell.variant == "window":
                    runners[name] = flex.runner(q, k, v, False,
                                                mask_mod=bv.window_mask_mod(*cell.window))
                elif cell.variant == "softcap":
                    runners[name] = flex.runner(
                        q, k, v, cell.causal, score_mod=bv.softcap_score_mod(cell.softcap,
                                                                             torch.tanh))
                elif cell.variant == "alibi":
                    runners[name] = flex.runner(
                        q, k, v, cell.causal, score_mod=bv.alibi_score_mod(side["alibi_slopes"]))
                elif cell.variant == "sinks":
                    runners[name] = flex.runner(q, k, v, cell.causal, sinks=side["sinks"])
                elif varlen:
                    runners[name] = flex.runner(
                        q[None], k[None], v[None], False,
                        mask_mod=bv.document_mask_mod(inputs["doc"], cell.causal))
                layouts[name] = "bhsd-packed" if varlen else "bhsd"
            elif varlen and name == "fa2":
                runners[name] = fa2_varlen_runner(q, k, v, inputs["cu_seqlens"],
                                                  inputs["max_seqlen"], cell.causal)
                layouts[name] = "packed"
            elif cell.variant == "dense" and name in PEERS:
                runners[name] = sdpa_runner(name, q, k, v, cell.causal)
                layouts[name] = "bhsd"
            else:
                raise RuntimeError(f"{name} cannot express the {cell.variant} variant")
        except Exception as e:  # a backend that cannot be set up for this row: say why
            not_available[name] = one_line(e)
    return runners, not_available, layouts


# ---- the decode grid (--decode) ----

def kvcache_runner(name: str, step: dict) -> Callable:
    """One decode step on this backend: flash_attn_with_kvcache appending step["k"], step["v"]
    at the fixed step["cache_seqlens"] (the same rows every run, so runs repeat exactly), then
    attending bottom-right causal; num_splits 0 (the backend picks)."""
    def run():
        return flashattn.flash_attn_with_kvcache(
            step["q"], step["k_cache"], step["v_cache"], step["k"], step["v"],
            cache_seqlens=step["cache_seqlens"], block_table=step["block_table"], causal=True,
            backend=name)
    return run


def sdpa_decode_runner(peer: str, step: dict) -> Callable:
    """torch SDPA with this peer over the contiguous cache (BHSD views of the same memory,
    enable_gqa: no copy of K and V per query head), every sequence's cache_len keys; it does not
    append (ours already wrote the new tokens there). One new token sees every key, so it runs
    unmasked. More are causal bottom-right, which SDPA's is_causal (top-left) is not: cuDNN gets
    the additive mask (1, 1, new, cache_len), made once here; FA2 takes no tensor mask, so it
    gets torch's lower-right CausalBias, which runs FlashAttention-2's own bottom-right causal."""
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.nn.functional import scaled_dot_product_attention

    backend = getattr(SDPBackend, PEERS[peer])
    q, kc, vc = (step[n].transpose(1, 2) for n in ("q", "k_cache", "v_cache"))
    new, keys = q.shape[2], kc.shape[2]
    mask = None
    if new > 1:
        if peer == "cudnn":
            i = torch.arange(new, device=q.device)[:, None]
            j = torch.arange(keys, device=q.device)[None, :]
            mask = torch.zeros((1, 1, new, keys), dtype=q.dtype, device=q.device)
            mask.masked_fill_(j > i + (keys - new), float("-inf"))
        else:
            from torch.nn.attention.bias import causal_lower_right

            mask = causal_lower_right(new, keys)

    def run():
        with sdpa_kernel(backend):
            return scaled_dot_product_attention(q, kc, vc, attn_mask=mask, enable_gqa=True)
    return run


def graph_runner(run: Callable, warmup: int = 2) -> Callable:
    """`run` captured once in a CUDA graph and replayed: the returned callable replays it and
    returns the captured call's output (the graph's own tensor, rewritten by each replay).
    Warm-up first on a side stream, as torch's docs advise (lazy initialization, cuBLAS / cuDNN
    plans). Raises what the capture raised (a runner that allocates with cudaMalloc or
    synchronizes cannot be captured)."""
    import torch

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(warmup):
            run()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = run()

    def replay():
        graph.replay()
        return out
    return replay


def one_line(e: BaseException, limit: int = 160) -> str:
    """The first line of an exception message, shortened: what a table cell can hold."""
    text = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    text = f"{type(e).__name__}: {text}"
    return text if len(text) <= limit else text[:limit - 3] + "..."
