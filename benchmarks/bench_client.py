"""Benchmark 3: LaneDetClient.detect(frame) against a raw tritonclient infer of a ready tensor, one real
tritonserver on loopback. (Benchmark 4, the pipelines, is `edge-deploy bench`: benchmarks/bench_served.py.)

The served lane model has LaneATT's I/O (input [B, 3, 360, 640] FP32 ->
predict_lanes [B, 1000, 77]) but negligible compute (tests/support/small_artifact.py:
a global average pool and one small matmul whose bias holds real anchor rows), so
what is measured is the client and the transport. It is installed by the real
`edge-deploy install` (Python-backend model running ONNX Runtime, the runtime the
bundled tritonserver can serve) with `--pipeline`, in a temporary repository.

3. End to end: `LaneDetClient.detect(frame)` from a raw 1640x590 BGR frame,
   including preprocessing and decoding (shared memory, and plain gRPC), vs the
   seeds' client: a raw tritonclient `infer` of a ready 1x3x360x640 FP32 tensor over
   gRPC (set_data_from_numpy + infer + as_numpy, nothing else). Same server, same
   model, interleaved. Target (issue 36): detect p50 <= 0.4x raw infer p50.
Prints p50/p90 and ratios; writes benchmarks/client_latency.png. `--family ufldv2` serves a
negligible-compute model with UFLDv2's CULane I/O instead (input [B, 3, 320, 1600] -> the four
official outputs; small_artifact.make_ufldv2_artifact) and measures the same (no plot).

    python3 benchmarks/bench_client.py [--requests 300] [--no-plot] [--family ufldv2]
"""
from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "support"))  # small_artifact.py: the negligible-compute lane model

from edge_deploy.client.sync_client import LaneDetClient  # noqa: E402
from edge_deploy.lanedet.preprocess import Preprocessor  # noqa: E402
from edge_deploy.synthetic.roads import road_scene  # noqa: E402

ANCHORS = ROOT / "tests" / "data" / "laneatt" / "anchors_2784x77.npy"


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_server(work: Path, family: str = "laneatt"):
    from small_artifact import make_artifact, make_ufldv2_artifact

    from edge_deploy.deploy.install import install
    from edge_deploy.deploy.options import InstallOptions
    from edge_deploy.serve.argv import ServerOptions
    from edge_deploy.serve.discovery import find_tritonserver
    from edge_deploy.serve.process import TritonProcess

    artifact = (make_ufldv2_artifact(work / "artifact") if family == "ufldv2" else
                make_artifact(work / "artifact", ANCHORS))
    install(InstallOptions(artifact, work / "repo", "lanedet", runtime="python", pipeline=True))
    options = ServerOptions(model_repository=work / "repo", grpc_port=free_port())
    proc = TritonProcess(find_tritonserver(cache_dir=work / "cache"), options, work / "triton.log")
    proc.start()
    proc.wait_ready(120)
    return proc, artifact


def stats(samples: list[float]) -> tuple[float, float]:
    """(p50, p90) in milliseconds."""
    a = np.asarray(samples) * 1e3
    return float(np.percentile(a, 50)), float(np.percentile(a, 90))


def bench_end_to_end(url: str, frames: list[np.ndarray], n: int, artifact: Path) -> dict[str, list[float]]:
    """Benchmark 3: interleaved detect (shm, grpc) and the seeds' raw infer, n requests each."""
    import tritonclient.grpc as grpcclient

    from edge_deploy.artifact.manifest import Manifest

    manifest = Manifest.read(artifact)
    ready = Preprocessor(manifest.preprocess)(frames[0]).copy()  # the seeds' client gets a preprocessed tensor
    raw = grpcclient.InferenceServerClient(url)
    names = [t.name for t in manifest.io.outputs]
    out = [grpcclient.InferRequestedOutput(name) for name in names]
    inp = [grpcclient.InferInput("input", list(ready.shape), "FP32")]

    def seed_infer(_frame: np.ndarray) -> None:
        inp[0].set_data_from_numpy(ready)
        result = raw.infer("lanedet", inputs=inp, outputs=out)
        for name in names:
            result.as_numpy(name)

    shm = LaneDetClient(url, "lanedet", transport="shm")
    grpc = LaneDetClient(url, "lanedet", transport="grpc")
    runs = {"raw tritonclient infer (ready tensor, gRPC)": seed_infer,
            "detect(frame), shared memory": shm.detect,
            "detect(frame), gRPC": grpc.detect}
    samples: dict[str, list[float]] = {name: [] for name in runs}
    for name, fn in runs.items():  # warm-up
        for f in frames[:5]:
            fn(f)
    for i in range(n):
        frame = frames[i % len(frames)]
        for name, fn in runs.items():
            t = time.perf_counter()
            fn(frame)
            samples[name].append(time.perf_counter() - t)
    shm.close()
    grpc.close()
    raw.close()
    return samples


def plot(e2e: dict[str, list[float]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.5, 4.8))
    names = list(e2e)
    values = [np.asarray(e2e[k]) * 1e3 for k in names]
    ax.violinplot(values, showmedians=True, showextrema=False)
    ax.boxplot(values, showfliers=False, widths=0.15)
    ax.set_xticks(range(1, len(names) + 1), [k.replace(", ", ",\n") for k in names], fontsize=7.5)
    ax.set_ylabel("latency per request (ms)")
    ax.set_title("end to end, 1640x590 frame (negligible model)", fontsize=10)
    ax.set_ylim(0, max(np.percentile(v, 97) for v in values) * 1.15)
    ax.grid(axis="y", alpha=0.3)
    fig.suptitle("LaneDetClient vs tritonserver 2.51 on loopback (violin: distribution, box: quartiles)", fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=300, help="requests per variant")
    parser.add_argument("--no-plot", action="store_true", help="do not write benchmarks/client_latency.png")
    parser.add_argument("--family", choices=("laneatt", "ufldv2"), default="laneatt",
                        help="the served model's I/O: LaneATT's, or UFLDv2's (CULane preset)")
    args = parser.parse_args()
    frames = [road_scene(1640, 590, seed=s)[0] for s in range(8)]
    print(f"python {platform.python_version()}, {platform.machine()}, {os.cpu_count()} CPUs, "
          f"load average {os.getloadavg()[0]:.1f}")
    with tempfile.TemporaryDirectory(prefix="bench_client_") as tmp:
        t0 = time.perf_counter()
        proc, artifact = start_server(Path(tmp), args.family)
        print(f"tritonserver ready in {time.perf_counter() - t0:.1f} s at {proc.url}")
        try:
            e2e = bench_end_to_end(proc.url, frames, args.requests, artifact)
        finally:
            proc.stop(timeout=15)

    print(f"\n3. end to end ({args.requests} requests each, interleaved)")
    print(f"{'variant':<46} {'p50 ms':>8} {'p90 ms':>8}")
    for name, s in e2e.items():
        p50, p90 = stats(s)
        print(f"{name:<46} {p50:>8.2f} {p90:>8.2f}")
    seed = stats(e2e["raw tritonclient infer (ready tensor, gRPC)"])[0]
    shm = stats(e2e["detect(frame), shared memory"])[0]
    grpc = stats(e2e["detect(frame), gRPC"])[0]
    print(f"detect (shm) p50 / raw infer p50 = {shm / seed:.2f}  (target <= 1: {'met' if shm <= seed else 'NOT met'})")
    print(f"detect (gRPC) p50 / raw infer p50 = {grpc / seed:.2f}")

    if not args.no_plot and args.family == "laneatt":
        try:
            plot(e2e, ROOT / "benchmarks" / "client_latency.png")
            print("plot: benchmarks/client_latency.png")
        except ImportError:
            print("matplotlib not installed: no plot")


if __name__ == "__main__":
    main()
