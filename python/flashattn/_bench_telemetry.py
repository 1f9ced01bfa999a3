"""The GPU's state while flashattn.bench times: SM clock, temperature, power and the active
clock-event (throttle) reasons, sampled every 100 ms by one `nvidia-smi -lms` process for the
whole run, read-only. Each row keeps the samples of its own time span, so a ratio between rows
timed at different clocks shows up as such (the bench's `drift` column is the other half of
that check: the same dense call timed again inside a later row).

Never required: without nvidia-smi (or with FLASHATTN_BENCH_SMI=off) every row says
"n/a" and the bench runs as before. FLASHATTN_BENCH_SMI names another command (tests put a
fake one there); its lines must be `nvidia-smi --format=csv,noheader,nounits` of QUERY.
"""
from __future__ import annotations

import os
import shlex
import shutil
import statistics
import subprocess
import threading
import time
from typing import Callable, List, Optional, Tuple

QUERY = "clocks.sm,temperature.gpu,power.draw,clocks_event_reasons.active"
PERIOD_MS = 100

# Bits of clocks_event_reasons.active (NVML's nvmlClocksEventReasons) that mean the clock was
# held below what the application asked for; idle (bit 0) and the application setting (bit 1)
# are not throttling.
REASONS = {0x4: "sw_power_cap", 0x8: "hw_slowdown", 0x20: "sw_thermal",
           0x40: "hw_thermal", 0x80: "hw_power_brake"}


class Sample:
    __slots__ = ("t", "sm_mhz", "temp_c", "power_w", "reasons")

    def __init__(self, t: float, sm_mhz: float, temp_c: float, power_w: Optional[float],
                 reasons: int):
        self.t, self.sm_mhz, self.temp_c, self.power_w, self.reasons = (t, sm_mhz, temp_c,
                                                                        power_w, reasons)


def parse_line(line: str, t: float) -> Optional[Sample]:
    """One CSV line of QUERY ("1980, 45, 312.50, 0x0000000000000000"), or None when it is not
    one (a header, an error line, "[N/A]" for the clock or temperature)."""
    parts = [p.strip() for p in line.split(",")]
    if len(parts) != 4:
        return None
    try:
        sm_mhz, temp_c = float(parts[0]), float(parts[1])
    except ValueError:
        return None
    try:
        power_w: Optional[float] = float(parts[2])
    except ValueError:
        power_w = None  # "[N/A]" on boards without a power sensor
    try:
        reasons = int(parts[3], 16)
    except ValueError:
        reasons = 0
    return Sample(t, sm_mhz, temp_c, power_w, reasons)


def smi_command(pci_bus_id: Optional[str], index: int) -> Optional[List[str]]:
    """The sampling command, or None when there is none (FLASHATTN_BENCH_SMI=off, or no
    nvidia-smi on PATH). The GPU is named by its PCI bus id when known: nvidia-smi's indices
    ignore CUDA_VISIBLE_DEVICES, torch's do not."""
    override = os.environ.get("FLASHATTN_BENCH_SMI")
    if override is not None:
        return None if override.strip().lower() in ("", "off", "0") else shlex.split(override)
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    return [smi, "-i", pci_bus_id or str(index), f"--query-gpu={QUERY}",
            "--format=csv,noheader,nounits", f"-lms={PERIOD_MS}"]


class Telemetry:
    """Samples in the background from start() to stop(); span(t0, t1) summarises the samples
    taken between two time.monotonic() readings."""

    def __init__(self, command: Optional[List[str]], clock: Callable[[], float] = time.monotonic):
        self._command = command
        self._clock = clock
        self._samples: List[Sample] = []
        self._lock = threading.Lock()
        self._proc: Optional[subprocess.Popen] = None
        self._thread: Optional[threading.Thread] = None
        self.why_not = "" if command else "nvidia-smi not found (or FLASHATTN_BENCH_SMI=off)"

    @property
    def active(self) -> bool:
        return self._proc is not None

    def start(self) -> "Telemetry":
        if not self._command:
            return self
        try:
            self._proc = subprocess.Popen(self._command, stdout=subprocess.PIPE,
                                          stderr=subprocess.DEVNULL, text=True, bufsize=1)
        except OSError as e:
            self.why_not = f"{self._command[0]}: {e.strerror or e}"
            return self
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()
        return self

    def _read(self) -> None:
        assert self._proc is not None and self._proc.stdout is not None
        for line in self._proc.stdout:
            sample = parse_line(line, self._clock())
            if sample is not None:
                with self._lock:
                    self._samples.append(sample)

    def stop(self) -> None:
        if self._proc is None:
            return
        if self._proc.poll() is None:
            self._proc.terminate()
        try:
            self._proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def now(self) -> float:
        return self._clock()

    def samples(self) -> List[Sample]:
        with self._lock:
            return list(self._samples)

    def span(self, t0: float, t1: float) -> dict:
        """{"sm_mhz_median", "sm_mhz_min", "temp_c_max", "power_w_median", "throttle",
        "samples"} over [t0, t1]; {"samples": 0, "why_not": ...} when none fell there."""
        with self._lock:
            inside = [s for s in self._samples if t0 <= s.t <= t1]
        if not inside:
            why = self.why_not or f"no sample in {1e3 * (t1 - t0):.0f} ms"
            return {"samples": 0, "why_not": why}
        powers = [s.power_w for s in inside if s.power_w is not None]
        bits = 0
        for s in inside:
            bits |= s.reasons
        return {"sm_mhz_median": statistics.median(s.sm_mhz for s in inside),
                "sm_mhz_min": min(s.sm_mhz for s in inside),
                "temp_c_max": max(s.temp_c for s in inside),
                "power_w_median": statistics.median(powers) if powers else None,
                "throttle": [name for bit, name in REASONS.items() if bits & bit],
                "samples": len(inside)}


def start_for(device) -> Telemetry:
    """A started Telemetry for a torch CUDA device."""
    import torch

    props = torch.cuda.get_device_properties(device)
    bus_id = None
    if all(hasattr(props, a) for a in ("pci_domain_id", "pci_bus_id", "pci_device_id")):
        bus_id = f"{props.pci_domain_id:08X}:{props.pci_bus_id:02X}:{props.pci_device_id:02X}.0"
    index = device.index if device.index is not None else torch.cuda.current_device()
    return Telemetry(smi_command(bus_id, index)).start()


def clock_text(gpu: Optional[dict]) -> str:
    """The table's MHz column: the span's median SM clock, "*" after it when a throttle reason
    was active; "-" without samples."""
    if not gpu or not gpu.get("samples"):
        return "-"
    return f"{gpu['sm_mhz_median']:.0f}" + ("*" if gpu.get("throttle") else "")


def clock_summary(rows: List[dict], label: Callable[[dict], str]) -> List[str]:
    """Lines after a table: the spread of the rows' median SM clocks, the hottest span, and
    the rows where a throttle reason was active; nothing when no row has samples."""
    spans: List[Tuple[dict, dict]] = [(r, r["gpu"]) for r in rows
                                      if r.get("gpu", {}).get("samples")]
    if not spans:
        why = next((r["gpu"].get("why_not") for r in rows if r.get("gpu")), None)
        return [f"GPU clock telemetry: n/a ({why})"] if why else []
    clocks = [g["sm_mhz_median"] for _, g in spans]
    low_row, low = min(spans, key=lambda rg: rg[1]["sm_mhz_median"])
    hot = max(g["temp_c_max"] for _, g in spans)
    lines = [f"GPU clock telemetry ({len(spans)} of {len(rows)} rows sampled every {PERIOD_MS} "
             f"ms): median SM clock per row {min(clocks):.0f}-{max(clocks):.0f} MHz (lowest: "
             f"{label(low_row)}), up to {hot:.0f} C"]
    throttled = [(r, g) for r, g in spans if g["throttle"]]
    if throttled:
        lines.append("  throttle reasons active in " + "; ".join(
            f"{label(r)} ({', '.join(g['throttle'])})" for r, g in throttled))
    return lines
