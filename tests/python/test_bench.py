"""python -m flashattn.bench: its command line on any machine, the grid and the FLOP convention,
the whole cell pipeline on CPU tensors (CUDA events replaced by a host clock), and a short real run
on a GPU."""
import json
import math

import pytest

from flashattn import bench
from helpers import HostClockEvent, run_bench

try:
    import torch
except ImportError:
    torch = None


def test_help_without_gpu():
    r = run_bench("--help")
    assert r.returncode == 0, r.stderr
    assert "halved for causal" in r.stdout and "--backends" in r.stdout


@pytest.mark.skipif(torch is not None and torch.cuda.is_available(),
                    reason="a CUDA device is present: the message is for machines without one")
def test_clear_message_without_cuda():
    r = run_bench("--seqlens", "512")
    assert r.returncode == 1
    assert "Traceback" not in r.stderr
    assert ("no CUDA device" in r.stderr) if torch is not None else ("needs PyTorch" in r.stderr)


@pytest.mark.parametrize("args, message", [
    (["--backends", "fastest"], "unknown backend(s) fastest"),
    (["--seqlens", "1x"], "not an integer list"),
    (["--repeats", "0"], "--repeats must be >= 1"),
    (["--causal", "maybe"], "invalid choice"),
])
def test_bad_arguments_exit_2(args, message):
    r = run_bench(*args)
    assert r.returncode == 2 and message in r.stderr and "Traceback" not in r.stderr


def test_int_list():
    assert bench.int_list("512,1k, 16K") == [512, 1024, 16384]


def test_default_grid_is_flashattentions():
    cells = bench.build_grid(bench.parse_args([]))
    main = [c for c in cells if c.H == c.KVH]
    gqa = [c for c in cells if c.H != c.KVH]
    assert len(main) == 3 * 2 * 6 and len(gqa) == 2 * 3
    for c in main:
        assert c.B * c.L == 16384 and c.H * c.hd == 2048
    assert sorted({c.L for c in main}) == [512, 1024, 2048, 4096, 8192, 16384]
    assert {(c.H, c.KVH, c.hd, c.B) for c in gqa} == {(64, 8, 128, 1)}
    assert sorted({c.L for c in gqa}) == [8192, 16384, 32768]


def test_grid_overrides():
    args = bench.parse_args(["--head-dims", "96", "--seqlens", "4k", "--batch", "3", "--heads",
                             "12", "--kv-heads", "4", "--causal", "yes", "--no-gqa"])
    assert bench.build_grid(args) == [bench.Cell(96, True, 4096, 3, 12, 4)]


def test_flop_convention():
    cell = bench.Cell(hd=128, causal=False, L=2048, B=8, H=16, KVH=16)
    assert cell.flops() == 4 * 8 * 16 * 2048 * 2048 * 128
    assert bench.Cell(128, True, 2048, 8, 16, 16).flops() == cell.flops() / 2


def synthetic_rows():
    rows = []
    for causal in (False, True):
        for L in (512, 1024):
            row = {"hd": 64, "causal": causal, "L": L, "B": 16384 // L, "H": 32, "KVH": 32,
                   "flash": 100.0 * L / 512, "cudnn": 400.0, "fa2": None, "ms": {},
                   "na": {"fa2": "RuntimeError: no kernel"}}
            row["ratio_to_cudnn"] = {"flash": row["flash"] / 400.0, "cudnn": 1.0}
            rows.append(row)
    return rows


def test_summary_geometric_means():
    s = bench.summary(synthetic_rows(), ["flash", "cudnn", "fa2"])
    assert math.isclose(s["flash"]["geomean_tflops"], math.sqrt(100 * 200), rel_tol=1e-3)
    assert math.isclose(s["flash"]["geomean_ratio_to_cudnn"], math.sqrt(0.25 * 0.5), rel_tol=1e-2)
    assert s["fa2"]["geomean_tflops"] is None and s["fa2"]["cells"] == 0
    line = bench.summary_line(s, ["flash", "cudnn", "fa2"])
    assert "0.35x" in line and "n/a" in line
    notes = bench.not_available_notes(synthetic_rows())
    assert notes == ["  n/a fa2 (4 cells, e.g. d64 full L=512 B=32 H=32/32): RuntimeError: no "
                     "kernel"]


def test_plot(tmp_path):
    pytest.importorskip("matplotlib", reason="matplotlib is not installed")
    from flashattn._bench_plot import plot

    path = tmp_path / "bench.png"
    plot(synthetic_rows(), ["flash", "cudnn", "fa2"], str(path), "synthetic")
    assert path.stat().st_size > 10_000


@pytest.mark.torch
def test_cell_pipeline_on_cpu(monkeypatch, tmp_path):
    """build_runners -> warm_up -> time_round_robin -> check_errors -> table and JSON, on CPU
    tensors: cpu-flash runs, the SDPA backends that have no CPU kernel are reported n/a."""
    from flashattn import _bench_timing

    monkeypatch.setattr(torch.cuda, "Event", HostClockEvent)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a, **k: None)
    args = bench.parse_args(["--head-dims", "64", "--seqlens", "128", "--heads", "2",
                             "--kv-heads", "1", "--tokens", "256", "--no-gqa", "--causal", "yes",
                             "--check", "--repeats", "3", "--warmup", "1"])
    names = ["cpu-flash", "cudnn", "flash"]
    flusher = _bench_timing.L2Flusher(torch.device("cpu"), nbytes=1 << 20)
    (cell,) = bench.build_grid(args)
    row = bench.run_cell(cell, names, args, torch.bfloat16, torch.device("cpu"), flusher, None, 0)
    assert row["cpu-flash"] > 0 and row["ms"]["cpu-flash"] > 0
    assert row["cudnn"] is None and "cudnn" in row["na"]
    assert row["flash"] is None and "invalid_device" in row["na"]["flash"]
    assert row["check"]["cpu-flash"] <= 2 * row["check"]["floor"] + 1e-2
    assert "n/a" in bench.row_line(row, names)
    json.dumps(row)


@pytest.mark.gpu
def test_short_run_on_gpu(tmp_path):
    path = tmp_path / "bench.json"
    r = run_bench("--head-dims", "128", "--seqlens", "1k", "--causal", "yes", "--gqa-seqlens",
                  "2k", "--repeats", "3", "--warmup", "1", "--check", "--json", str(path))
    assert r.returncode == 0, r.stdout + r.stderr
    data = json.loads(path.read_text())
    assert len(data["rows"]) == 2
    for row in data["rows"]:
        assert row["flash"] and row["flash"] > 0, row["na"]
        assert row["check"]["flash"] < 4 * row["check"]["floor"] + 1e-3
        for peer in ("cudnn", "fa2", "mem_eff", "flex"):  # a number, or n/a with a reason
            assert (row[peer] or 0) > 0 or row["na"].get(peer), (peer, row)
    assert data["rows"][0]["cudnn"] > 0, data["rows"][0]["na"]  # not GQA: cuDNN runs it
    assert "geometric mean" in r.stdout
    assert "query" in data["meta"]["gpu_telemetry"], data["meta"]["gpu_telemetry"]
    assert all("gpu" in row for row in data["rows"]) and "GPU clock telemetry" in r.stdout
