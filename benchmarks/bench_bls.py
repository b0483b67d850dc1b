"""Benchmark: the two server-side pipelines (`install --pipeline ensemble` and `--pipeline bls`) vs client-side
pre/post, in one run against one tritonserver on loopback.

The served lane model is the negligible-compute stand-in of tests/support/small_artifact.py (LaneATT's I/O:
input [B, 3, 360, 640] FP32 -> predict_lanes [B, 1000, 77]; `--family ufldv2`: UFLDv2's CULane I/O), installed
twice by the real `install` (Python-backend ONNX Runtime runner, what the bundled server can serve): as `ens` with
the ensemble `ens_pipeline` (preprocess -> model -> postprocess) and as `bls` with the BLS `bls_pipeline` (one
Python model calling `bls` itself; `bl1_pipeline`: the same with one instance instead of
install's two). Client-side pre/post is LaneDetClient on `ens`. Every variant takes the same
1640x590 BGR frames; at concurrency 1 they run interleaved, request by request; at concurrency 4
(AsyncLaneDetClient, 4 frames in flight) in alternating halves. Ratios are to client-side pre/post's p50.

    python3 benchmarks/bench_bls.py [--requests 300] [--family laneatt|ufldv2]
"""
from __future__ import annotations

import argparse
import asyncio
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "support"))  # small_artifact.py: the negligible-compute lane model
sys.path.insert(0, str(ROOT / "benchmarks"))

from bench_client import concurrent_detects  # noqa: E402

from edge_deploy.client.sync_client import LaneDetClient  # noqa: E402
from edge_deploy.training.synthetic import road_scene  # noqa: E402

ANCHORS = ROOT / "tests" / "data" / "laneatt" / "anchors_2784x77.npy"
VARIANTS = {"client-side pre/post": "ens", "ensemble pipeline": "ens_pipeline", "BLS pipeline": "bls_pipeline",
            "BLS pipeline, 1 instance": "bl1_pipeline"}


def start_server(work: Path, family: str):
    from small_artifact import make_artifact, make_ufldv2_artifact

    from edge_deploy.repository.install import install
    from edge_deploy.serve.argv import ServerOptions
    from edge_deploy.serve.discovery import find_tritonserver
    from edge_deploy.serve.process import TritonProcess

    artifact = (make_ufldv2_artifact(work / "artifact") if family == "ufldv2" else
                make_artifact(work / "artifact", ANCHORS))
    install(artifact, work / "repo", "ens", runtime="python", pipeline="ensemble")
    install(artifact, work / "repo", "bls", runtime="python", pipeline="bls")
    install(artifact, work / "repo", "bl1", runtime="python", pipeline="bls")
    from edge_deploy.repository import model_config as mc
    from edge_deploy.repository.versions import read_config

    config = read_config(work / "repo", "bl1_pipeline")  # what install writes, with one instance instead
    config.instance_group[0].count = 1
    (work / "repo" / "bl1_pipeline" / "config.pbtxt").write_text(mc.config_text(config))
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    proc = TritonProcess(find_tritonserver(cache_dir=work / "cache"),
                         ServerOptions(model_repository=work / "repo", grpc_port=port), work / "triton.log")
    proc.start()
    proc.wait_ready(120)
    return proc


def p50(samples: list[float]) -> float:
    return float(np.percentile(np.asarray(samples) * 1e3, 50))


def p90(samples: list[float]) -> float:
    return float(np.percentile(np.asarray(samples) * 1e3, 90))


def concurrency_1(url: str, frames: list[np.ndarray], n: int) -> dict[str, tuple[list[float], float]]:
    clients = {name: LaneDetClient(url, model) for name, model in VARIANTS.items()}
    lat: dict[str, list[float]] = {k: [] for k in clients}
    try:
        for c in clients.values():  # warm-up
            for f in frames[:5]:
                c.detect(f)
        for i in range(n):
            for name, c in clients.items():
                t = time.perf_counter()
                c.detect(frames[i % len(frames)])
                lat[name].append(time.perf_counter() - t)
    finally:
        for c in clients.values():
            c.close()
    return {k: (v, sum(v)) for k, v in lat.items()}


def concurrency_4(url: str, frames: list[np.ndarray], n: int) -> dict[str, tuple[list[float], float]]:
    results: dict[str, tuple[list[float], float]] = {}
    for _ in range(2):  # alternating halves, to share any drift of the machine's load
        for name, model in VARIANTS.items():
            got, secs = asyncio.run(concurrent_detects(url, model, frames, n // 2, 4))
            prev = results.get(name, ([], 0.0))
            results[name] = (prev[0] + got, prev[1] + secs)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=300, help="requests per variant and concurrency")
    parser.add_argument("--family", choices=("laneatt", "ufldv2"), default="laneatt")
    args = parser.parse_args()
    frames = [road_scene(1640, 590, seed=s)[0] for s in range(8)]
    print(f"python {platform.python_version()}, {platform.machine()}, {os.cpu_count()} CPUs, "
          f"load average {os.getloadavg()[0]:.1f}; family {args.family}, {args.requests} requests per variant")
    with tempfile.TemporaryDirectory(prefix="bench_bls_") as tmp:
        proc = start_server(Path(tmp), args.family)
        try:
            runs = {1: concurrency_1(proc.url, frames, args.requests), 4: concurrency_4(proc.url, frames, args.requests)}
        finally:
            proc.stop(timeout=15)
    print(f"\n{'variant':<26} {'conc.':>5} {'p50 ms':>8} {'p90 ms':>8} {'frames/s':>9} {'p50 / client-side':>18}")
    for width, results in runs.items():
        base = p50(results["client-side pre/post"][0])
        for name, (lat, wall) in results.items():
            print(f"{name:<26} {width:>5} {p50(lat):>8.2f} {p90(lat):>8.2f} {len(lat) / wall:>9.1f} "
                  f"{p50(lat) / base:>18.2f}")
    for width, results in runs.items():
        ens, bls = p50(results["ensemble pipeline"][0]), p50(results["BLS pipeline"][0])
        print(f"concurrency {width}: BLS p50 / ensemble p50 = {bls / ens:.2f}")


if __name__ == "__main__":
    main()
