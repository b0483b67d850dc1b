#!/usr/bin/env python3
"""LaneStream in threads vs LaneStream(process=True) (issue 54): what the app's own thread sees while the worker
decodes, side by side in one run, in alternating blocks.

    nice -n 5 python3 benchmarks/bench_stream_process.py [--seconds 10] [--blocks 4] [--json stream_process.json]

The bundled tritonserver serves `tiny` (tests/support/small_artifact.py: LaneATT's I/O, negligible compute, so
the client's decode is most of each frame's work); a 30 frames/s video file of synthetic roads plays through the
stream; the app's loop ticks at 500 Hz and measures each `latest()` call and how late each tick woke (its sleep's
overshoot: the time the app's thread waited for the interpreter). Reported per mode: latest() p50/p99/p99.9/max,
tick lateness p99/p99.9/max, frames processed.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
from bench_stream import free_port, make_repo, start  # noqa: E402

from edge_deploy.client.sync_client import LaneDetClient  # noqa: E402
from edge_deploy.media.stream import LaneStream  # noqa: E402
from edge_deploy.synthetic.roads import road_scene  # noqa: E402

TICK = 0.002


def write_video(path: Path, seconds: float) -> Path:
    import cv2

    frames = [road_scene(1640, 590, seed=seed)[0] for seed in range(10)]
    writer = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"mp4v"), 30.0, (1640, 590))
    for index in range(int(30 * seconds)):
        writer.write(frames[index % len(frames)])
    writer.release()
    return path


def block(url: str, video: Path, process: bool, seconds: float) -> dict:
    with LaneDetClient(url, "tiny", connect=False) as client:
        stream = LaneStream(client, str(video), max_age=0.5, process=process).start()
        end = time.monotonic() + 60
        while stream.latest().state != "ok" and time.monotonic() < end:
            time.sleep(0.05)
        calls, late = [], []
        end = time.monotonic() + seconds
        due = time.monotonic()
        while time.monotonic() < end:
            now = time.monotonic()
            late.append(max(0.0, now - due))
            stream.latest()
            calls.append(time.monotonic() - now)
            due = time.monotonic() + TICK
            time.sleep(TICK)
        stats = stream.stop()
    return {"calls": calls, "late": late, "processed": stats.frames_processed}


def summary(runs: list[dict]) -> dict:
    calls = np.concatenate([np.asarray(r["calls"]) for r in runs]) * 1000
    late = np.concatenate([np.asarray(r["late"]) for r in runs]) * 1000
    return {"latest_ms": {q: round(float(np.percentile(calls, p)), 3) for q, p in
                          (("p50", 50), ("p99", 99), ("p99.9", 99.9))} | {"max": round(float(calls.max()), 3)},
            "tick_late_ms": {q: round(float(np.percentile(late, p)), 3) for q, p in
                             (("p99", 99), ("p99.9", 99.9))} | {"max": round(float(late.max()), 3)},
            "frames_processed": sum(r["processed"] for r in runs), "ticks": int(calls.size)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=10.0, help="seconds of the app loop per block")
    ap.add_argument("--blocks", type=int, default=4, help="blocks per mode, alternating")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        proc = start(make_repo(work), work, free_port())
        try:
            video = write_video(work / "drive.mp4", args.seconds + 70)
            runs: dict[str, list[dict]] = {"threads": [], "process": []}
            for index in range(args.blocks):
                for mode in (("threads", "process") if index % 2 == 0 else ("process", "threads")):
                    runs[mode].append(block(proc.url, video, mode == "process", args.seconds))
                    print(f"block {index + 1} {mode}: done", file=sys.stderr)
        finally:
            proc.stop(timeout=15)
    report = {mode: summary(r) for mode, r in runs.items()}
    print(json.dumps(report, indent=2))
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
