"""The bench's GPU clock telemetry (_bench_telemetry) without a GPU: nvidia-smi's CSV lines
parsed, a fake sampler's lines kept per time span, and what the tables print from them."""
import shlex
import sys
import time

import pytest

from flashattn import _bench_telemetry as bt

IDLE = "1980, 41, 120.25, 0x0000000000000001"
CAPPED = "1755, 63, 699.80, 0x0000000000000004"


def fake_smi(lines, period_s=0.01):
    """A command that prints `lines` in a loop, one per period, as `nvidia-smi -lms` would."""
    code = ("import itertools, sys, time\n"
            f"for line in itertools.cycle({list(lines)!r}):\n"
            "    print(line, flush=True)\n"
            f"    time.sleep({period_s})\n")
    return [sys.executable, "-c", code]


def test_parse_line():
    s = bt.parse_line(CAPPED, 3.0)
    assert (s.t, s.sm_mhz, s.temp_c, s.power_w, s.reasons) == (3.0, 1755.0, 63.0, 699.8, 4)
    no_power = bt.parse_line("1980, 41, [N/A], 0x0000000000000000", 0.0)
    assert no_power.power_w is None and no_power.sm_mhz == 1980.0
    for bad in ("clocks.current.sm [MHz], temperature.gpu", "", "[N/A], 41, 100, 0x0",
                "No devices were found", "1, 2, 3"):
        assert bt.parse_line(bad, 0.0) is None, bad


def test_span_summarises_only_its_samples():
    clock = {"t": 0.0}
    tel = bt.Telemetry(["unused"], clock=lambda: clock["t"])
    for t, line in [(0.5, IDLE), (1.0, CAPPED), (1.5, IDLE), (2.5, CAPPED)]:
        tel._samples.append(bt.parse_line(line, t))
    span = tel.span(0.9, 2.0)
    assert span["samples"] == 2
    assert span["sm_mhz_median"] == pytest.approx((1755 + 1980) / 2)
    assert span["sm_mhz_min"] == 1755 and span["temp_c_max"] == 63
    assert span["throttle"] == ["sw_power_cap"]  # the idle bit is not a throttle reason
    assert bt.clock_text(span) == "1868*"
    assert bt.clock_text(tel.span(1.4, 1.6)) == "1980"
    empty = tel.span(3.0, 3.1)
    assert empty["samples"] == 0 and "no sample in 100 ms" in empty["why_not"]
    assert bt.clock_text(empty) == "-"


def test_fake_sampler_end_to_end():
    tel = bt.Telemetry(fake_smi([IDLE, CAPPED])).start()
    assert tel.active
    t0 = tel.now()
    deadline = time.monotonic() + 10
    while len(tel.samples()) < 6 and time.monotonic() < deadline:
        time.sleep(0.01)
    span = tel.span(t0, tel.now())
    tel.stop()
    assert span["samples"] >= 6
    assert span["sm_mhz_min"] == 1755 and span["throttle"] == ["sw_power_cap"]
    n = len(tel.samples())
    time.sleep(0.05)
    assert len(tel.samples()) == n  # stopped: the process is gone


def test_command_choice(monkeypatch):
    monkeypatch.setenv("FLASHATTN_BENCH_SMI", "off")
    assert bt.smi_command("00000000:18:00.0", 0) is None
    fake = fake_smi([IDLE])
    monkeypatch.setenv("FLASHATTN_BENCH_SMI", shlex.join(fake))
    assert bt.smi_command(None, 0) == fake
    monkeypatch.delenv("FLASHATTN_BENCH_SMI")
    monkeypatch.setenv("PATH", "/nonexistent")
    assert bt.smi_command(None, 0) is None
    monkeypatch.setattr(bt.shutil, "which", lambda name: "/usr/bin/nvidia-smi")
    cmd = bt.smi_command("00000000:18:00.0", 3)
    assert cmd[:3] == ["/usr/bin/nvidia-smi", "-i", "00000000:18:00.0"]
    assert f"--query-gpu={bt.QUERY}" in cmd and "-lms=100" in cmd
    assert bt.smi_command(None, 3)[2] == "3"


def test_no_sampler_says_why():
    tel = bt.Telemetry(None).start()
    assert not tel.active
    span = tel.span(0.0, tel.now())
    assert span == {"samples": 0, "why_not": tel.why_not}
    rows = [{"label": "a", "gpu": span}]
    assert bt.clock_summary(rows, lambda r: r["label"]) == [
        f"GPU clock telemetry: n/a ({tel.why_not})"]
    tel.stop()  # harmless
    missing = bt.Telemetry(["/nonexistent/nvidia-smi"]).start()
    assert not missing.active and "/nonexistent/nvidia-smi" in missing.why_not


def test_clock_summary_names_the_lowest_and_throttled_rows():
    def gpu(mhz, temp, throttle=()):
        return {"sm_mhz_median": mhz, "sm_mhz_min": mhz, "temp_c_max": temp,
                "power_w_median": 500.0, "throttle": list(throttle), "samples": 4}
    rows = [{"label": "dense", "gpu": gpu(1980, 50)},
            {"label": "alibi", "gpu": gpu(1830, 66, ["sw_power_cap"])},
            {"label": "sinks", "gpu": {"samples": 0, "why_not": "no sample in 40 ms"}}]
    lines = bt.clock_summary(rows, lambda r: r["label"])
    assert lines[0].startswith("GPU clock telemetry (2 of 3 rows sampled every 100 ms)")
    assert "1830-1980 MHz (lowest: alibi), up to 66 C" in lines[0]
    assert lines[1] == "  throttle reasons active in alibi (sw_power_cap)"
    assert bt.clock_summary([], lambda r: "") == []
