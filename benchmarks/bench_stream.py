#!/usr/bin/env python3
"""Lanes in the control loop (issue 42): LaneStream and per-call deadlines against the real bundled tritonserver.

    nice -n 5 python3 benchmarks/bench_stream.py [--seconds 10] [--outages 5] [--json stream.json]

Serves tests/support/small_artifact.py's negligible-compute LaneATT-I/O model (`tiny`: what remains is the
client's and the server's own overhead, the Orin case) and the same model with a 50 ms sleep in its model.py
(`slow`: slower than the camera), then measures, all in one run on 1640x590 frames from a 30 frames/s camera
stand-in (a thread):

1. plain `detect(frame)` p50 of the same frame (the reference), then a stream on `tiny`: capture -> lanes
   p50/p99 (target: p99 <= 2 x the plain detect p50), and `latest()` p50/p99 from a 500 Hz app loop (target p99
   <= 1 ms);
2. a stream on `slow`: frames dropped, latency p50/p99 and the first vs the last third (it must not grow);
3. outages: the server SIGKILLed mid-stream, restarted (`serve --foreground` style: the benchmark starts it
   again): kill -> "unavailable" (target <= max_age + one frame period), ready -> first "ok" (target <= 1 s), the
   longest latest() call, /dev/shm and the server's registrations after stop();
4. `detect(frame, deadline=0.05)` against a stopped server: p50/p99 of the time to LanesUnavailable (target p99
   <= 60 ms);
5. 1, 2 and 4 streams in one process on `tiny`: frames/s per stream and this process's CPU per frame.

The systemd-unit restart (Restart=always) is not measured here: it needs a systemd user manager; the
unit tests of serve/ start one.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "support"))  # small_artifact.py (the negligible-compute model), camera_stub.py
sys.path.insert(0, str(ROOT))

from camera_stub import Camera  # noqa: E402  (tests/support: a thread pushing frames at 30/s)

from edge_deploy.client.shm import leftover_regions  # noqa: E402
from edge_deploy.client.sync_client import LaneDetClient  # noqa: E402
from edge_deploy.errors import LanesUnavailable  # noqa: E402
from edge_deploy.media.stream import LaneStream  # noqa: E402
from edge_deploy.synthetic.roads import road_scene  # noqa: E402

ANCHORS = ROOT / "tests" / "data" / "laneatt" / "anchors_2784x77.npy"
FPS = 30.0
MAX_AGE = 0.1


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def make_repo(work: Path) -> Path:
    from small_artifact import make_artifact

    from edge_deploy.deploy.install import install
    from edge_deploy.deploy.options import InstallOptions

    artifact = make_artifact(work / "artifact", ANCHORS)
    repo = work / "repo"
    install(InstallOptions(artifact, repo, "tiny", runtime="python"))
    install(InstallOptions(artifact, repo, "slow", runtime="python"))
    (model_py,) = (repo / "slow").glob("*/model.py")
    model_py.write_text(model_py.read_text().replace(
        "    def execute(self, requests):\n", "    def execute(self, requests):\n        import time; time.sleep(0.05)\n"))
    return repo


def start(repo: Path, work: Path, port: int):
    from edge_deploy.serve.argv import ServerOptions
    from edge_deploy.serve.discovery import find_tritonserver
    from edge_deploy.serve.process import TritonProcess

    proc = TritonProcess(find_tritonserver(cache_dir=work / "cache"),
                         ServerOptions(model_repository=repo, grpc_port=port), work / "triton.log")
    proc.start().wait_ready(120)
    return proc


def sigkill(proc) -> None:
    os.killpg(proc.proc.pid, signal.SIGKILL)
    proc.proc.wait(timeout=15)


def ms(values, q: float) -> float:
    return float(np.percentile(np.asarray(values) * 1000, q))


def app_loop(stream: LaneStream, seconds: float, on_tick=None) -> tuple[list[float], list[tuple[float, str]]]:
    """A 500 Hz control loop: latest() durations and (time, state) of each tick."""
    calls, timeline = [], []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        t = time.monotonic()
        result = stream.latest()
        calls.append(time.monotonic() - t)
        timeline.append((t, result.state))
        if on_tick is not None:
            on_tick(t)
        time.sleep(0.002)
    return calls, timeline


class TimedClient:
    """The client with each detect's start and end noted: a result's latency splits into the wait for the worker
    (capture -> detect starts) and the detect itself."""

    def __init__(self, client: LaneDetClient) -> None:
        self.client, self.calls = client, {}

    def detect(self, frame: np.ndarray, *, deadline: float | None = None):
        start = time.monotonic()
        try:
            return self.client.detect(frame, deadline=deadline)
        finally:
            self.calls[id(frame), start] = time.monotonic() - start

    def release(self) -> None:
        self.client.release()


def steady(url: str, model: str, seconds: float) -> dict:
    with LaneDetClient(url, model) as client:
        camera = Camera()
        results = []
        timed = TimedClient(client)
        stream = LaneStream(timed, camera, max_age=MAX_AGE, on_result=results.append).start()
        try:
            time.sleep(1.0)  # connect and warm up
            since = time.monotonic()
            calls, _ = app_loop(stream, seconds)
        finally:
            stats = stream.stop()
            camera.close()
    latencies = [r.latency_s for r in results if r.latency_s is not None and r.captured_at >= since]
    detects = [d for (_, start), d in timed.calls.items() if start >= since]
    third = len(latencies) // 3
    return {"model": model, "latency_p50_ms": ms(latencies, 50), "latency_p99_ms": ms(latencies, 99),
            "first_third_p50_ms": ms(latencies[:third], 50), "last_third_p50_ms": ms(latencies[-third:], 50),
            "detect_in_stream_p50_ms": ms(detects, 50), "detect_in_stream_p99_ms": ms(detects, 99),
            "latest_p50_ms": ms(calls, 50), "latest_p99_ms": ms(calls, 99), "latest_max_ms": ms(calls, 100),
            "frames_read": stats.frames_read, "frames_processed": stats.frames_processed,
            "frames_dropped": stats.frames_dropped, "frames_failed": stats.frames_failed,
            "states": stats.states}


def plain_detect(url: str, frame: np.ndarray, n: int = 300) -> dict:
    """detect(frame) back to back (the target's reference), and one call per camera period (what a stream does:
    the server and its Python-backend stub idle between frames)."""
    with LaneDetClient(url, "tiny") as client:
        for _ in range(20):
            client.detect(frame)
        tight, paced = [], []
        for _ in range(n):
            t = time.perf_counter()
            client.detect(frame)
            tight.append(time.perf_counter() - t)
        for _ in range(n):
            time.sleep(1.0 / FPS)
            t = time.perf_counter()
            client.detect(frame)
            paced.append(time.perf_counter() - t)
    return {"back_to_back_p50_ms": ms(tight, 50), "back_to_back_p99_ms": ms(tight, 99),
            "one_per_frame_p50_ms": ms(paced, 50), "one_per_frame_p99_ms": ms(paced, 99)}


def outage(proc) -> dict:
    import tritonclient.grpc as grpcclient

    ready: list[float] = []
    state = {"killed": None}

    def restart() -> None:
        proc.start().wait_ready(120)
        ready.append(time.monotonic())

    restarter = threading.Thread(target=restart)

    def on_tick(now: float) -> None:
        if state["killed"] is None and now - started > 1.0:
            sigkill(proc)
            state["killed"] = time.monotonic()
        elif state["killed"] is not None and not restarter.is_alive() and not ready and now - state["killed"] > 1.0:
            restarter.start()

    with LaneDetClient(proc.url, "tiny") as client:
        camera = Camera()
        stream = LaneStream(client, camera, max_age=MAX_AGE).start()
        time.sleep(1.0)
        started = time.monotonic()
        try:
            calls, timeline = [], []
            while not ready or time.monotonic() - ready[0] < 2.0:
                c, t = app_loop(stream, 0.1, on_tick)
                calls += c
                timeline += t
        finally:
            t = time.monotonic()
            stream.stop()
            stop_s = time.monotonic() - t
            camera.close()
        regions = grpcclient.InferenceServerClient(proc.url).get_system_shared_memory_status(as_json=True)
        leftover = leftover_regions(os.getpid())
    killed = state["killed"]
    unavailable = next(t for t, s in timeline if t > killed and s == "unavailable")
    back = next((t for t, s in timeline if t > ready[0] and s == "ok"), None)
    return {"kill_to_unavailable_ms": (unavailable - killed) * 1000,
            "ready_to_first_ok_ms": None if back is None else (back - ready[0]) * 1000,
            "longest_latest_ms": max(calls) * 1000, "stop_ms": stop_s * 1000,
            "dev_shm_left": len(leftover), "server_registrations_left": len(regions.get("regions", {}))}


def deadline_against_stopped(proc, frame: np.ndarray, n: int = 200) -> dict:
    with LaneDetClient(proc.url, "tiny") as client:
        client.detect(frame)
        proc.stop(timeout=15)
        times = []
        for _ in range(n):
            t = time.perf_counter()
            try:
                client.detect(frame, deadline=0.05)
            except LanesUnavailable:
                pass
            times.append(time.perf_counter() - t)
    proc.start().wait_ready(120)
    return {"p50_ms": ms(times, 50), "p99_ms": ms(times, 99), "max_ms": ms(times, 100), "calls": n}


def streams_at_once(url: str, seconds: float) -> list[dict]:
    from edge_deploy.bench.config import BenchConfig
    from edge_deploy.bench.realtime import run_realtime

    config = BenchConfig(url=url, models=("tiny",), seconds=seconds, warmup_seconds=1.0, max_frames=8)
    report = run_realtime(config, FPS, (1, 2, 4), MAX_AGE)
    return [{"cameras": cell.cameras, "client_cpu_ms_per_frame": cell.client_cpu_ms_per_frame,
             "frames_per_s": [round(s.frames_per_s, 1) for s in cell.streams],
             "latency_p50_ms": [round(s.latency_p50_ms or 0, 2) for s in cell.streams],
             "latency_p99_ms": [round(s.latency_p99_ms or 0, 2) for s in cell.streams],
             "dropped": [s.frames_dropped for s in cell.streams]} for cell in report.cells]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=10.0, help="seconds per steady stream")
    ap.add_argument("--outages", type=int, default=5)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    frame = road_scene(1640, 590, seed=1)[0]
    report: dict = {"load_average_start": os.getloadavg()[0]}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        repo = make_repo(work)
        proc = start(repo, work, free_port())
        try:
            report["plain_detect"] = plain_detect(proc.url, frame)
            report["stream_tiny"] = steady(proc.url, "tiny", args.seconds)
            report["stream_slow"] = steady(proc.url, "slow", args.seconds)
            report["streams_at_once"] = streams_at_once(proc.url, args.seconds)
            report["deadline_0.05_stopped_server"] = deadline_against_stopped(proc, frame)
            report["outages"] = [outage(proc) for _ in range(args.outages)]
        finally:
            proc.stop(timeout=15)
    report["load_average_end"] = os.getloadavg()[0]
    text = json.dumps(report, indent=1)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
