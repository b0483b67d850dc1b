"""Run a bench: the targets, the lanes-equal check, then every (model, concurrency) cell for a fixed time."""
from __future__ import annotations

import asyncio
import os
import platform
import time
from dataclasses import dataclass
from typing import Any, Callable

from .config import BenchConfig
from .frames import load_frames
from .jetson import JetsonLoad, JetsonMonitor
from .lanes_check import check_lanes_equal
from .process_cpu import ServerCPU, client_seconds, find_server_pid
from .results import BenchReport, CellResult, ClientSplit, Latency, MachineInfo
from .server_stats import ServerTimes, server_times, settled_counters
from .targets import BenchTarget, grpc_client, live_targets
from ..client.async_client import AsyncLaneDetClient
from ..client.sync_client import LaneDetClient

# on_progress(cell label, cells done before this one, cells in all, fraction of this cell done)
Progress = Callable[[str, int, int, float], None]


@dataclass
class _Measured:
    server: dict[str, ServerTimes]
    client_cpu_s: float
    server_cpu_s: float | None
    jetson: JetsonLoad | None


class _CellMeter:
    """The readings around a cell's timed part: Triton's statistics, CPU times, the Jetson monitor."""

    def __init__(self, stats_client: Any, server_cpu: ServerCPU | None, monitor: JetsonMonitor, timeout: float) -> None:
        self.stats_client, self.server_cpu, self.monitor, self.timeout = stats_client, server_cpu, monitor, timeout

    def begin(self) -> None:
        self._counters = settled_counters(self.stats_client, self.timeout)
        if self.server_cpu is not None:
            self.server_cpu.refresh()
        self._server = self.server_cpu.seconds() if self.server_cpu is not None else None
        self.monitor.start()
        self._client = client_seconds()

    def end(self) -> _Measured:
        client = client_seconds() - self._client
        jetson = self.monitor.stop()
        server_now = self.server_cpu.seconds() if self.server_cpu is not None else None
        server = server_now - self._server if server_now is not None and self._server is not None else None
        return _Measured(server_times(self._counters, settled_counters(self.stats_client, self.timeout)), client,
                         server, jetson)


def _sync_cell(client: Any, frames: list[Any], config: BenchConfig, meter: _CellMeter,
               tick: Callable[[float], None]) -> tuple[list[float], float, list[Any], _Measured]:
    def loop(seconds: float, latencies: list[float] | None) -> float:
        start = time.perf_counter()
        deadline, i = start + seconds, 0
        while (now := time.perf_counter()) < deadline:
            client.detect(frames[i % len(frames)])
            i += 1
            if latencies is not None:
                latencies.append(time.perf_counter() - now)
                tick((time.perf_counter() - start) / seconds)
        return time.perf_counter() - start

    loop(config.warmup_seconds, None)
    latencies: list[float] = []
    client.stage_log = []
    meter.begin()
    wall = loop(config.seconds, latencies)
    measured = meter.end()
    stages, client.stage_log = client.stage_log, None
    return latencies, wall, stages, measured


async def _async_cell(target: BenchTarget, width: int, frames: list[Any], config: BenchConfig, meter: _CellMeter,
                      tick: Callable[[float], None]) -> tuple[list[float], float, list[Any], _Measured]:
    async def loop(client: Any, seconds: float, latencies: list[float] | None) -> float:
        start = time.perf_counter()
        deadline = start + seconds

        async def worker(first: int) -> None:
            i = first
            while (now := time.perf_counter()) < deadline:
                await client.detect(frames[i % len(frames)])
                i += width
                if latencies is not None:
                    latencies.append(time.perf_counter() - now)
                    tick((time.perf_counter() - start) / seconds)

        await asyncio.gather(*(worker(k) for k in range(width)))
        return time.perf_counter() - start

    async with AsyncLaneDetClient(config.url, target.name, transport=config.transport, max_in_flight=width,
                                  client_timeout=config.timeout, tls=config.tls) as client:
        await loop(client, max(config.warmup_seconds, 1e-3), None)  # at least one frame per worker: the slots made
        latencies: list[float] = []
        client.stage_log = []
        meter.begin()
        wall = await loop(client, config.seconds, latencies)
        measured = meter.end()
        return latencies, wall, client.stage_log, measured


def machine_info() -> MachineInfo:
    return {"python": platform.python_version(), "machine": platform.machine(), "cpus": os.cpu_count(),
            "load_average_start": round(os.getloadavg()[0], 2)}


def run_bench(config: BenchConfig, on_progress: Progress | None = None) -> BenchReport:
    """Measure every served lane model (or those named) at every concurrency; BenchError when it cannot."""
    source, named_frames = load_frames(config.frames, config.max_frames)
    frames = [frame for _name, frame in named_frames]
    stats_client = grpc_client(config.url, config.tls)
    clients: dict[str, LaneDetClient] = {}
    try:
        targets = live_targets(stats_client, config)
        for target in targets:
            clients[target.name] = LaneDetClient(config.url, target.name, transport=config.transport,
                                                 client_timeout=config.timeout, tls=config.tls)
        check = "lanes-equal check skipped (--no-check)"
        if config.check_lanes:
            check = check_lanes_equal(targets, named_frames, lambda t, f: clients[t.name].detect(f),
                                      config.tolerance_px).describe()
        pid = find_server_pid(config.url)
        server_cpu = ServerCPU(pid) if pid is not None else None
        monitor = JetsonMonitor()
        meter = _CellMeter(stats_client, server_cpu, monitor, config.timeout)
        report = BenchReport(
            url=config.url, frames=source, seconds=config.seconds, warmup_seconds=config.warmup_seconds,
            concurrency=list(config.concurrency), lanes_check=check,
            server_cpu=(f"tritonserver PID {pid} and its backend stubs" if pid is not None else
                        "tritonserver CPU not measured: the server is not a process on this host"),
            jetson=monitor.why, machine=machine_info())
        cells = [(t, w) for t in targets for w in config.concurrency]
        for done, (target, width) in enumerate(cells):
            label = f"{target.name} x{width}"

            def tick(fraction: float, label: str = label, done: int = done) -> None:
                if on_progress is not None:
                    on_progress(label, done, len(cells), min(1.0, fraction))

            tick(0.0)
            if width == 1:
                measured = _sync_cell(clients[target.name], frames, config, meter, tick)
            else:
                measured = asyncio.run(_async_cell(target, width, frames, config, meter, tick))
            report.cells.append(_cell(target, width, *measured))
            tick(1.0)
        report.machine["load_average_end"] = round(os.getloadavg()[0], 2)
        return report
    finally:
        for client in clients.values():
            client.close()
        stats_client.close()


def _cell(target: BenchTarget, width: int, latencies: list[float], wall: float, stages: list[Any],
          measured: _Measured) -> CellResult:
    n = len(latencies)
    return CellResult(
        model=target.name, lane_model=target.model, pipeline=target.pipeline, family=target.family,
        concurrency=width, client="LaneDetClient" if width == 1 else "AsyncLaneDetClient", frames=n,
        seconds=wall, frames_per_s=n / wall if wall > 0 else 0.0, latency=Latency.of(latencies),
        client_split=ClientSplit.of(stages), server=measured.server,
        client_cpu_ms_per_frame=measured.client_cpu_s / max(n, 1) * 1e3,
        server_cpu_ms_per_frame=(measured.server_cpu_s / max(n, 1) * 1e3
                                 if measured.server_cpu_s is not None else None),
        jetson=measured.jetson)
