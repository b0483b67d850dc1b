"""GPU load and power on a Jetson while a cell runs: jetson-stats' `jtop` API where it is installed, else the
`tegrastats` binary (/usr/bin/tegrastats) read line by line; neither elsewhere (the bench says so).

tegrastats prints one line per interval (Jetson Linux developer guide, "tegrastats Utility"), e.g. on Orin
``RAM 2448/30536MB (lfb 6x4MB) CPU [2%@729,off,...] GR3D_FREQ 12%@[305,305] ... VDD_GPU_SOC 2793mW/2793mW
VDD_CPU_CV 397mW/397mW VIN_SYS_5V0 3032mW/3032mW``: GR3D is the GPU (percent of its time busy at the
current clock; older boards print ``GR3D_FREQ 12%@1300``), each power rail ``NAME current/average`` in mW.
"""
from __future__ import annotations

import re
import shutil
import subprocess
import threading
from dataclasses import dataclass, field
from pathlib import Path

TEGRASTATS = Path("/usr/bin/tegrastats")
INTERVAL_MS = 250

_GPU = re.compile(r"\bGR3D_FREQ (\d+)%")
_RAIL = re.compile(r"\b([A-Z][A-Z0-9_]*) (\d+)mW/(\d+)mW")
_RAIL_OLD = re.compile(r"\b(POM_5V_[A-Z0-9_]+|VDD_[A-Z0-9_]+) (\d+)/(\d+)\b")  # Xavier/Nano: no unit, mW


@dataclass(frozen=True)
class TegraSample:
    """One tegrastats line: the GPU's load in percent (None when the line has no GR3D) and the current power
    of each rail in mW."""

    gpu_percent: float | None
    power_mw: dict[str, int]


def parse_tegrastats(line: str) -> TegraSample:
    gpu = _GPU.search(line)
    rails = {name: int(now) for name, now, _avg in _RAIL.findall(line)}
    if not rails:
        rails = {name: int(now) for name, now, _avg in _RAIL_OLD.findall(line)}
    return TegraSample(float(gpu.group(1)) if gpu else None, rails)


@dataclass(frozen=True)
class JetsonLoad:
    """A cell's mean GPU load and power per rail (mW), and how many samples they come from."""

    source: str
    samples: int
    gpu_percent: float | None
    power_mw: dict[str, float] = field(default_factory=dict)

    @property
    def total_mw(self) -> float | None:
        """The board's input rail when there is one (VDD_IN, VIN_SYS_5V0, POM_5V_IN), else the sum."""
        for name in ("VDD_IN", "VIN_SYS_5V0", "POM_5V_IN"):
            if name in self.power_mw:
                return self.power_mw[name]
        return sum(self.power_mw.values()) if self.power_mw else None


def summarize(source: str, samples: list[TegraSample]) -> JetsonLoad:
    gpu = [s.gpu_percent for s in samples if s.gpu_percent is not None]
    rails: dict[str, list[int]] = {}
    for s in samples:
        for name, mw in s.power_mw.items():
            rails.setdefault(name, []).append(mw)
    return JetsonLoad(source, len(samples), sum(gpu) / len(gpu) if gpu else None,
                      {name: sum(v) / len(v) for name, v in rails.items()})


class JetsonMonitor:
    """Samples the GPU and power between start() and stop(); `available` is False (with `why`) off a Jetson."""

    def __init__(self, tegrastats: Path | None = None) -> None:
        self.samples: list[TegraSample] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._proc: subprocess.Popen[str] | None = None
        binary = tegrastats or (TEGRASTATS if TEGRASTATS.exists() else None)
        found = shutil.which("tegrastats")
        self.tegrastats = binary or (Path(found) if found else None)
        self.jtop = _jtop_available() if tegrastats is None else False
        self.source = "jtop" if self.jtop else ("tegrastats" if self.tegrastats else "")

    @property
    def available(self) -> bool:
        return bool(self.source)

    @property
    def why(self) -> str:
        if self.available:
            return f"GPU load and power from {self.source}"
        return "GPU load and power not measured: neither tegrastats nor jtop (jetson-stats) is here (not a Jetson)"

    def start(self) -> None:
        self.samples = []
        self._stop.clear()
        if not self.available:
            return
        target = self._run_jtop if self.jtop else self._run_tegrastats
        if not self.jtop:
            self._proc = subprocess.Popen([str(self.tegrastats), "--interval", str(INTERVAL_MS)],
                                          stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        self._thread = threading.Thread(target=target, name="jetson-monitor", daemon=True)
        self._thread.start()

    def stop(self) -> JetsonLoad | None:
        if not self.available:
            return None
        self._stop.set()
        if self._proc is not None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self._proc.kill()
            self._proc = None
        if self._thread is not None:
            self._thread.join(timeout=5)
        return summarize(self.source, list(self.samples))

    def _run_tegrastats(self) -> None:
        assert self._proc is not None and self._proc.stdout is not None
        for line in self._proc.stdout:
            if self._stop.is_set():
                break
            self.samples.append(parse_tegrastats(line))

    def _run_jtop(self) -> None:
        from jtop import jtop  # jetson-stats

        with jtop(interval=INTERVAL_MS / 1000) as jetson:
            while jetson.ok() and not self._stop.is_set():
                stats = jetson.stats
                power = {k.removeprefix("Power ").upper(): int(v) for k, v in stats.items()
                         if k.startswith("Power ") and isinstance(v, (int, float))}
                gpu = stats.get("GPU")
                self.samples.append(TegraSample(float(gpu) if isinstance(gpu, (int, float)) else None, power))


def _jtop_available() -> bool:
    import importlib.util

    return importlib.util.find_spec("jtop") is not None
