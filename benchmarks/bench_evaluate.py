"""Evaluate's frames/s through the served model vs in-process ONNX Runtime, on the same frames, in one run.

Converts the demo weights (weights/laneatt_r18_synthetic.pt) unless --artifact is given, installs
the artifact in a temporary repository (Python-backend ONNX Runtime model, the bundled
tritonserver), serves it with `serve --foreground`, and runs `evaluate` once with the served
model as MODEL and the artifact as --against: both see every frame, interleaved, so the
machine's load hits both alike. Prints F1 per model, lane-count agreement, and frames/s.

    nice -n 5 python3 benchmarks/bench_evaluate.py --frames 200 [--artifact out/demo/lanedet]
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Iterator

ROOT = Path(__file__).resolve().parents[1]


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    result = subprocess.run([sys.executable, "-m", "edge_deploy", *args], capture_output=True, text=True, cwd=ROOT,
                            env=env)
    if result.returncode != 0:
        sys.exit(f"edge-deploy {args[0]} failed: {result.stderr.strip()}")
    return result


@contextlib.contextmanager
def served_demo_model(work: Path, artifact: Path | None = None) -> Iterator[tuple[str, Path]]:
    """The demo weights (or `artifact`) served as `lanedet` by the bundled tritonserver (Python-backend ONNX
    Runtime) from a repository in `work`: yields (url, artifact); stops the server at the end."""
    if artifact is None:
        artifact = work / "artifact"
        cli("convert", "laneatt", "--checkpoint", str(ROOT / "weights" / "laneatt_r18_synthetic.pt"),
            "--backbone", "resnet18", "--dataset", "culane", "--top-k", "6", "--output", str(artifact),
            "--target", "onnx")
    # the server's record, key and log in `work`, not in this machine's /etc/edge-deploy or ~/.config/edge-deploy
    env = {**os.environ, "EDGE_DEPLOY_STATE_DIR": str(work / "state")}
    cli("install", str(artifact), "--repository", str(work / "repo"), "--runtime", "python", env=env)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    log = open(work / "server.log", "w")  # noqa: SIM115 - lives as long as the server
    server = subprocess.Popen([sys.executable, "-m", "edge_deploy", "serve", "--foreground", "--repository",
                               str(work / "repo"), "--grpc-port", str(port)], stdout=log, stderr=log, cwd=ROOT,
                              env=env)
    try:
        cli("health", "--wait", "180", "--url", f"127.0.0.1:{port}", "--model", "lanedet", env=env)
        yield f"127.0.0.1:{port}", artifact
    finally:
        server.terminate()
        server.wait(60)
        log.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--frames", type=int, default=200)
    parser.add_argument("--artifact", type=Path, help="an artifact to use instead of converting the demo weights")
    parser.add_argument("--json", type=Path, help="write the evaluate report here")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-evaluate-") as tmp, \
            served_demo_model(Path(tmp), args.artifact) as (url, artifact):
        report_path = args.json or Path(tmp) / "report.json"
        started = time.perf_counter()
        cli("evaluate", "--url", url, "--model", "lanedet", "--synthetic", str(args.frames),
            "--against", str(artifact), "--json", str(report_path))
        wall = time.perf_counter() - started
        report = json.loads(report_path.read_text())
    served_ms, local_ms = report["latency_ms"]["mean"], report["against_latency_ms"]["mean"]
    at05 = report["retention"][0]
    print(json.dumps({
        "frames": report["frames"],
        "served": {"f1@0.5": at05["reference"]["f1"], "ms_per_frame": round(served_ms, 1),
                   "frames_per_s": round(1000.0 / served_ms, 2)},
        "onnxruntime_in_process": {"f1@0.5": at05["candidate"]["f1"], "ms_per_frame": round(local_ms, 1),
                                   "frames_per_s": round(1000.0 / local_ms, 2)},
        "served_over_in_process_time": round(served_ms / local_ms, 3),
        "lane_count_agreement": at05["lane_count_agreement"],
        "mean_abs_dx_between_models_px": at05["agreement"]["mean_abs_dx"] if at05.get("agreement") else None,
        "evaluate_wall_s": round(wall, 1),
    }, indent=1))


if __name__ == "__main__":
    main()
