"""`edge-deploy bench --realtime`: lanes as a control loop gets them. Per served model, N camera streams
(`LaneStream`, one LaneDetClient each) in this one process, each fed the bench frames at a fixed frame rate: capture
-> lanes latency, frames dropped, the states seen, frames/s per stream, and this process's CPU per detected frame."""
from __future__ import annotations

import itertools
import os
import threading
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Iterator

from ..errors import BenchError
from ..core.numbers import FPS, MAX_AGE_S
from .config import BenchConfig
from .frames import load_frames
from .process_cpu import client_seconds
from .results import MachineInfo
from .runner import machine_info
from .targets import grpc_client, live_targets
from ..client.sync_client import LaneDetClient
from ..media.stream import LaneStream


@dataclass(frozen=True)
class StreamRow:
    """One stream's figures over the timed seconds."""

    camera: int
    frames_read: int
    frames_processed: int
    frames_dropped: int
    frames_failed: int
    frames_per_s: float
    latency_p50_ms: float | None
    latency_p99_ms: float | None
    states: dict[str, int]


@dataclass(frozen=True)
class RealtimeCell:
    """One served model with `cameras` streams at once."""

    model: str
    cameras: int
    fps: float
    max_age_s: float
    seconds: float
    streams: list[StreamRow]
    client_cpu_ms_per_frame: float | None  # this process's CPU time over all streams / frames detected


@dataclass
class RealtimeReport:
    url: str
    frames: str
    cells: list[RealtimeCell] = field(default_factory=list)
    machine: MachineInfo = field(default_factory=MachineInfo)

    def to_dict(self) -> dict[str, Any]:
        return {"mode": "realtime", **asdict(self)}


def _frames_at(frames: list[Any], stop: threading.Event) -> Iterator[Any]:
    """The bench frames round robin, until `stop` (the stream paces them at its fps)."""
    for frame in itertools.cycle(frames):
        if stop.is_set():
            return
        yield frame


def run_realtime(config: BenchConfig, fps: float, cameras: tuple[int, ...], max_age: float) -> RealtimeReport:
    """Every served lane model (or those named) with each count of cameras; BenchError when it cannot."""
    FPS.check("--fps", fps, BenchError)  # inf made a period of 0 and no frame, then an UnboundLocalError
    MAX_AGE_S.check("--max-age", max_age, BenchError)
    source, named = load_frames(config.frames, config.max_frames)
    frames = [frame for _name, frame in named]
    stats_client = grpc_client(config.url, config.tls)
    try:
        targets = live_targets(stats_client, config)
    finally:
        stats_client.close()
    report = RealtimeReport(url=config.url, frames=source, machine=machine_info())
    for target in targets:
        for count in cameras:
            clients = [LaneDetClient(config.url, target.name, transport=config.transport,
                                     client_timeout=config.timeout, tls=config.tls) for _ in range(count)]
            stop = threading.Event()
            try:
                streams = [LaneStream(client, _frames_at(frames, stop), fps=fps, max_age=max_age)
                           for client in clients]
                for stream in streams:
                    stream.start()
                time.sleep(config.warmup_seconds)
                before = [stream.stats() for stream in streams]
                cpu, wall = client_seconds(), time.monotonic()
                since = wall
                time.sleep(config.seconds)
                after = [stream.stats(since) for stream in streams]
                cpu, wall = client_seconds() - cpu, time.monotonic() - wall
            finally:
                stop.set()
                for stream in streams:
                    stream.stop()
                for client in clients:
                    client.close()
            rows = [_row(i, b, a, wall) for i, (b, a) in enumerate(zip(before, after))]
            done = sum(row.frames_processed for row in rows)
            report.cells.append(RealtimeCell(target.name, count, fps, max_age, wall, rows,
                                             cpu / done * 1000 if done else None))
    report.machine["load_average_end"] = round(os.getloadavg()[0], 2)
    return report


def _row(camera: int, before: Any, after: Any, wall: float) -> StreamRow:
    """The timed part of a stream: the differences of its counters, the latencies of the frames it captured."""
    processed = after.frames_processed - before.frames_processed
    states = {k: after.states.get(k, 0) - before.states.get(k, 0) for k in after.states}
    return StreamRow(
        camera=camera, frames_read=after.frames_read - before.frames_read, frames_processed=processed,
        frames_dropped=after.frames_dropped - before.frames_dropped,
        frames_failed=after.frames_failed - before.frames_failed, frames_per_s=processed / wall if wall else 0.0,
        latency_p50_ms=None if after.latency_p50_s is None else after.latency_p50_s * 1000,
        latency_p99_ms=None if after.latency_p99_s is None else after.latency_p99_s * 1000,
        states={k: v for k, v in states.items() if v})


def print_realtime(report: RealtimeReport, console: Any) -> None:
    """The report as a table (tables.narrow_table) when it fits the console's width, else one line per stream
    (wrapped at words): nothing is cut."""
    from ..core.tables import fits, narrow_table

    title = f"realtime: {report.url}, {report.frames}"
    table = narrow_table("model", "cam", "frames/s", "p50 ms", "p99 ms", "dropped", "states", "CPU ms/frame",
                         title=title)
    lines = [title]
    for cell in report.cells:
        for row in cell.streams:
            states = " ".join(f"{k} {v}" for k, v in sorted(row.states.items()))
            cpu = _ms(cell.client_cpu_ms_per_frame) if row.camera == 0 else ""
            table.add_row(cell.model if row.camera == 0 else "", f"{row.camera + 1}/{cell.cameras}",
                          f"{row.frames_per_s:.1f}", _ms(row.latency_p50_ms), _ms(row.latency_p99_ms),
                          f"{row.frames_dropped}/{row.frames_read}", states, cpu)
            lines.append(f"{cell.model} camera {row.camera + 1}/{cell.cameras}: {row.frames_per_s:.1f} frames/s, "
                         f"p50 {_ms(row.latency_p50_ms)} ms, p99 {_ms(row.latency_p99_ms)} ms, dropped "
                         f"{row.frames_dropped}/{row.frames_read}, states {states}"
                         + (f", CPU {cpu} ms/frame" if cpu else ""))
    if fits(console, table):
        console.print(table)
    else:
        for line in lines:
            console.print(line, highlight=False)


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"
