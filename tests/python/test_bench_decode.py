"""python -m flashattn.bench --decode: the torch-free parts on any machine (the command line, the
grid, the bytes and the memory rule, rows, ratios to cuDNN, the summary, table, check text and
plot), the whole decode driver on CPU tensors (torch: cpu-flash as ours, CUDA events replaced by a
host clock, the graph runners and cuDNN n/a with their reasons), and a short real run on a GPU."""
import json
import math

import pytest

from flashattn import _bench_decode as bd
from flashattn import bench
from helpers import HostClockEvent, run_bench

try:
    import torch
except ImportError:
    torch = None


# ---- the command line ----

def test_help_lists_the_decode_options():
    r = run_bench("--help")
    assert r.returncode == 0, r.stderr
    for text in ("--decode", "--decode-batches", "--decode-cache-lens", "--decode-heads",
                 "--decode-new-tokens", "--decode-pages", "--decode-modes",
                 "python -m flashattn.bench --decode"):
        assert text in r.stdout, text


@pytest.mark.parametrize("args, message", [
    (["--decode-batches", "8"], "--decode-batches belong(s) to the decode grid: add --decode"),
    (["--decode-pages", "16", "--decode-modes", "graph"],
     "--decode-pages, --decode-modes belong(s) to the decode grid"),
    (["--decode", "--seqlens", "1k"], "--seqlens do(es) not apply to --decode"),
    (["--decode", "--causal", "yes", "--no-gqa"], "--causal, --no-gqa do(es) not apply"),
    (["--decode", "--variants"], "--variants do(es) not apply to --decode"),
    (["--decode", "--check-rows", "8"], "--check-rows do(es) not apply to --decode"),
    (["--decode", "--decode-batches", "0"], "--decode-batches: 0 must be >= 1"),
    (["--decode", "--decode-cache-lens", "1x"], "--decode-cache-lens: '1x' is not an integer"),
    (["--decode", "--decode-heads", "32/5"], "32/5: kv heads must divide heads"),
    (["--decode", "--decode-heads", "32/8/2"], "expected HEADS/KV_HEADS"),
    (["--decode", "--decode-pages", "24"], "expected 0 (contiguous) or a multiple of 16"),
    (["--decode", "--decode-pages", "512"], "a multiple of 16 from 16 to 256"),
    (["--decode", "--decode-modes", "lazy"], "unknown mode(s) lazy"),
    (["--decode", "--backends", "flash-decode,flex"], "unknown backend(s) flex for --decode"),
    (["--decode", "--decode-cache-lens", "32", "--decode-pages", "64"],
     "the decode grid is empty"),
])
def test_bad_decode_arguments_exit_2(args, message):
    r = run_bench(*args)
    assert r.returncode == 2 and message in r.stderr and "Traceback" not in r.stderr, r.stderr


@pytest.mark.skipif(torch is not None and torch.cuda.is_available(),
                    reason="a CUDA device is present: the message is for machines without one")
def test_decode_clear_message_without_cuda():
    r = run_bench("--decode", "--decode-batches", "1", "--decode-cache-lens", "1k")
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert ("no CUDA device" in r.stderr) if torch is not None else ("needs PyTorch" in r.stderr)


def test_default_decode_grid_is_issue_11s():
    args = bench.parse_args(["--decode"])
    cells = bench.build_decode_grid(args)
    assert len(cells) == 2 * 4 * 4 * 2 * 4
    assert {(c.heads, c.kv_heads) for c in cells} == {(32, 8), (64, 8)}
    assert sorted({c.batch for c in cells}) == [1, 8, 64, 128]
    assert sorted({c.cache_len for c in cells}) == [1024, 8192, 32768, 131072]
    assert sorted({c.new for c in cells}) == [1, 4]
    assert sorted({c.page for c in cells}) == [0, 16, 64, 256]
    assert {c.head_dim for c in cells} == {128}
    assert args.decode_modes == ["eager", "graph"] and args.dtype == "bf16"
    assert bench.backend_names(args) == ["flash-decode", "cudnn", "fa2"]
    # the cells of one shape follow each other (they share one K and one V buffer)
    keys = [c.shape_key() for c in cells]
    runs = [k for i, k in enumerate(keys) if i == 0 or keys[i - 1] != k]
    assert len(runs) == len(set(runs))
    assert cells[0] == bd.DecodeCell(1, 32, 8, 1024, 1, 0)
    assert [c.layout for c in cells[:4]] == ["contiguous", "paged16", "paged64", "paged256"]
    assert cells[8] == bd.DecodeCell(1, 64, 8, 1024, 1, 0)  # the same shape's other heads


def test_decode_grid_options():
    args = bench.parse_args(["--decode", "--decode-batches", "8,64", "--decode-cache-lens",
                             "8k,32k", "--decode-heads", "32/8,16", "--decode-pages",
                             "contiguous,64", "--decode-new-tokens", "4", "--decode-modes",
                             "graph", "--head-dims", "64", "--backends", "flash-decode"])
    cells = bench.build_decode_grid(args)
    assert len(cells) == 2 * 2 * 2 * 2
    assert cells[0] == bd.DecodeCell(8, 32, 8, 8192, 4, 0, 64)
    assert cells[1] == bd.DecodeCell(8, 32, 8, 8192, 4, 64, 64)
    assert cells[2] == bd.DecodeCell(8, 16, 16, 8192, 4, 0, 64)  # kv_heads 8 before 16
    assert {(c.heads, c.kv_heads) for c in cells} == {(32, 8), (16, 16)}
    assert args.decode_modes == ["graph"] and bench.backend_names(args) == ["flash-decode"]
    # a page size that does not divide the cache length, or a cache shorter than the new tokens,
    # makes no cell
    assert bd.build_decode_cells([(8, 8)], [1], [48, 64, 2], [4], [0, 32]) == [
        bd.DecodeCell(1, 8, 8, 48, 4, 0), bd.DecodeCell(1, 8, 8, 64, 4, 0),
        bd.DecodeCell(1, 8, 8, 64, 4, 32)]


def test_dense_and_variant_defaults_unchanged():
    args = bench.parse_args([])
    assert not args.decode and args.head_dims == [64, 128, 256]
    assert len(bench.build_grid(args)) == 36 + 6
    assert bench.parse_args(["--variants"]).head_dims == [128]


def test_parse_helpers():
    assert bd.parse_int_list("1, 8,1K", "x") == [1, 8, 1024]
    assert bd.parse_heads("32/8,64/8,16") == [(32, 8), (64, 8), (16, 16)]
    assert bd.parse_pages("0,16,contiguous,256") == [0, 16, 0, 256]
    assert bd.parse_modes("graph,eager") == ["eager", "graph"]
    assert bd.runner_names(["flash-decode"], ["cudnn"], ["eager", "graph"]) == [
        "flash-decode", "flash-decode+graph", "cudnn", "cudnn+graph"]
    assert bd.runner_names(["a"], ["cudnn"], ["graph"]) == ["a+graph", "cudnn+graph"]
    assert bd.base_name("cudnn+graph") == ("cudnn", "graph")
    assert bd.base_name("flash-decode") == ("flash-decode", "eager")
    with pytest.raises(ValueError, match="unknown mode"):
        bd.parse_modes("")


def test_bytes_and_memory_rule():
    cell = bd.DecodeCell(batch=128, heads=64, kv_heads=8, cache_len=131072, new=1, page=0)
    assert cell.kv_bytes() == 2 * 128 * 131072 * 8 * 128 * 2  # 68.7 GB: fits an H200's 60%
    assert bd.fits(cell, 140 * 10**9) is None
    why = bd.fits(cell, 100 * 10**9)
    assert why == "K+V cache 68.7 GB > 60% of 100.0 GB available"
    assert bd.DecodeCell(8, 32, 8, 1024, 4, 64).label() == "H32/8 B=8 cache=1k new=4 paged64"
    assert not bd.DecodeCell(8, 32, 8, 1024, 4, 64).peers_apply()


# ---- rows, ratios, summary, text ----

RUNNERS = ["flash-decode", "flash-decode+graph", "cudnn", "cudnn+graph", "fa2", "fa2+graph"]


def synthetic_rows():
    """A contiguous cell (every runner, fa2+graph failed), a paged one (peers do not apply), a
    skipped one."""
    a = bd.DecodeCell(64, 32, 8, 8192, 1, 0)
    b = bd.DecodeCell(64, 32, 8, 8192, 1, 64)
    c = bd.DecodeCell(128, 64, 8, 131072, 4, 0)
    row_a = bd.row_record(a, RUNNERS, {"flash-decode": 100.0, "flash-decode+graph": 80.0,
                                       "cudnn": 120.0, "cudnn+graph": 100.0, "fa2": 200.0},
                          {"fa2+graph": "RuntimeError: capture failed"})
    row_b = bd.row_record(b, RUNNERS, {"flash-decode": 110.0, "flash-decode+graph": 90.0},
                          {n: "-" for n in RUNNERS if n.startswith(("cudnn", "fa2"))})
    row_c = bd.skipped_record(c, bd.fits(c, 100 * 10**9))
    return [row_a, row_b, row_c]


def test_rows_and_ratios():
    a, b, c = synthetic_rows()
    assert a["kv_bytes"] == 2 * 64 * 8192 * 8 * 128 * 2
    assert math.isclose(a["tbs"]["flash-decode"], a["kv_bytes"] / 100e-6 / 1e12, rel_tol=1e-3)
    assert a["vs_cudnn"] == {"flash-decode": 1.2, "flash-decode+graph": 1.25}
    assert a["na"] == {"fa2+graph": "RuntimeError: capture failed"}
    assert b["vs_cudnn"] == {} and b["na"]["cudnn"] == "-"
    assert c["skipped"] == "K+V cache 68.7 GB > 60% of 100.0 GB available" and c["us"] == {}
    json.dumps([a, b, c])


def test_summary_and_text():
    rows = synthetic_rows()
    summary = bd.decode_summary(rows, RUNNERS)
    s = summary["runners"]["flash-decode"]
    assert s == {"cells": 2, "geomean_vs_cudnn": 1.2, "cells_vs_cudnn": 1}
    assert summary["runners"]["flash-decode+graph"]["geomean_vs_cudnn"] == 1.25
    assert summary["skipped_cells"] == 1
    lines = bd.summary_lines(summary, RUNNERS)
    assert "  flash-decode: ours/cuDNN geometric mean 1.20x over the 1 cells where cuDNN ran " \
           "(2 cells run)" in lines
    assert any("1 cells skipped" in line for line in lines)
    assert not any(line.startswith("  cudnn") for line in lines)
    header, units = bd.header_lines(RUNNERS)
    line_a, line_b, line_c = (bd.row_line(r, RUNNERS) for r in rows)
    # every value sits under its column
    for name in RUNNERS:
        end = header.index(f"{name} |") + len(name)
        assert units[end - 4:end] == "TB/s"
    end = header.index("flash-decode |") + len("flash-decode")
    assert line_a[:end - 6].endswith(" 100.0") and line_a[:end].endswith(" 21.47")
    assert "n/a" in line_a and "1.20x" in line_a and "1.25x" in line_a
    assert line_b.count(" - |") == 4 and "n/a" not in line_b
    assert "skipped: K+V cache 68.7 GB" in line_c
    notes = bd.not_available_lines(rows)
    assert notes == ["  n/a fa2+graph (H32/8 B=64 cache=8k new=1 contiguous): RuntimeError: "
                     "capture failed"]


def test_check_text():
    rows = synthetic_rows()
    rows[0]["check"] = {"floor": 0.0039, "max_abs_err": {"flash-decode": 0.0041, "cudnn": 0.0045},
                        "vs_cudnn": {"flash-decode": 0.0078},
                        "graph_equals_eager": {"flash-decode": True}}
    rows[1]["check"] = {"error": "MemoryError: no"}
    lines = bd.check_lines(rows)
    assert len(lines) == 3
    assert "flash-decode 0.0041, cudnn 0.0045, flash-decode vs cuDNN 0.0078" in lines[1]
    assert "flash-decode graph = eager: yes" in lines[1]
    assert "check failed: MemoryError: no" in lines[2]


def test_plot(tmp_path):
    pytest.importorskip("matplotlib", reason="matplotlib is not installed")
    from flashattn._bench_plot import plot_decode

    path = tmp_path / "decode.png"
    plot_decode(synthetic_rows(), RUNNERS, str(path), "synthetic")
    assert path.stat().st_size > 10_000


# ---- the decode driver on CPU tensors (torch), and a short GPU run ----

@pytest.mark.torch
def test_decode_driver_on_cpu(monkeypatch, tmp_path, capsys):
    """run_decode end to end on CPU tensors: cpu-flash (ours here) runs every cell and matches
    the float64 reference; cuDNN and the CUDA graphs are n/a with a reason; the peers show "-"
    on the paged cells; a shape beyond the memory rule is skipped and says so; the table, the
    summary, the check table, the JSON and the plot come out."""
    from flashattn import _bench_timing
    from flashattn._bench_decode_run import run_decode

    monkeypatch.setattr(torch.cuda, "Event", HostClockEvent)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a, **k: None)
    path = tmp_path / "decode.json"
    args = bench.parse_args(["--decode", "--decode-batches", "1,3", "--decode-cache-lens",
                             "256,1k", "--decode-heads", "8/2", "--decode-pages", "0,16",
                             "--head-dims", "64", "--repeats", "2", "--warmup", "1", "--check",
                             "--json", str(path)])
    meta = {"device": "cpu", "torch": torch.__version__, "cudnn": None, "flashattn": "test"}
    flusher = _bench_timing.L2Flusher(torch.device("cpu"), nbytes=1 << 20)
    cells = bench.build_decode_grid(args)
    # B=3 x 1k: K + V = 1.5 MiB, beyond 60% of 1 MiB; the others fit
    rc = run_decode(args, cells, ["cpu-flash"], ["cudnn", "fa2"], torch.bfloat16,
                    torch.device("cpu"), meta, flusher, available=lambda: 1 << 20)
    assert rc == 0
    out = capsys.readouterr().out
    assert "flashattn.bench --decode: cpu" in out and "max|O - O_ref|" in out
    data = json.loads(path.read_text())
    rows = data["rows"]
    assert len(rows) == len(cells) == 16
    skipped = [r for r in rows if "skipped" in r]
    assert {(r["batch"], r["cache_len"]) for r in skipped} == {(3, 1024)} and len(skipped) == 4
    assert data["summary"]["skipped_cells"] == 4 and "4 cells skipped" in out
    for r in rows:
        if "skipped" in r:
            continue
        assert r["us"]["cpu-flash"] > 0 and r["tbs"]["cpu-flash"] > 0, r
        c = r["check"]
        assert c["max_abs_err"]["cpu-flash"] <= 2 * c["floor"] + 1e-2, (r["label"], c)
        assert "cudnn" in r["na"] and r["na"]["cpu-flash+graph"] != "-"
        if r["page"]:
            assert r["na"]["cudnn"] == r["na"]["fa2"] == "-"
        elif "fa2" in r["us"]:  # torch's CPU flash kernel, where this torch has one
            assert c["max_abs_err"]["fa2"] <= 2 * c["floor"] + 1e-2, (r["label"], c)
    assert data["meta"]["mode"] == "decode" and data["meta"]["runners"] == [
        "cpu-flash", "cpu-flash+graph", "cudnn", "cudnn+graph", "fa2", "fa2+graph"]


@pytest.mark.gpu
def test_short_decode_run_on_gpu(tmp_path):
    """A few decode cells on the GPU: flash-decode runs eager and from a CUDA graph (num_splits=0
    under capture), matches float64 and replays the eager bits; cuDNN and FA2 run the contiguous
    cells or say why not; the paged cells leave them out."""
    path = tmp_path / "decode.json"
    r = run_bench("--decode", "--decode-batches", "2", "--decode-cache-lens", "4k",
                  "--decode-heads", "32/8", "--decode-pages", "0,64", "--decode-new-tokens",
                  "1,4", "--repeats", "3", "--warmup", "1", "--check", "--json", str(path))
    assert r.returncode == 0, r.stdout + r.stderr
    data = json.loads(path.read_text())
    rows = data["rows"]
    assert len(rows) == 4
    for row in rows:
        for runner in ("flash-decode", "flash-decode+graph"):
            assert row["us"].get(runner, 0) > 0, (row["label"], row["na"])
        c = row["check"]
        assert c["max_abs_err"]["flash-decode"] < 4 * c["floor"] + 1e-3, (row["label"], c)
        assert c["graph_equals_eager"] == {"flash-decode": True}, (row["label"], c)
        for peer in ("cudnn", "cudnn+graph", "fa2", "fa2+graph"):
            if row["page"]:
                assert row["na"][peer] == "-"
            else:
                assert row["us"].get(peer) or row["na"].get(peer), (peer, row)
    assert "ours/cuDNN" in r.stdout
