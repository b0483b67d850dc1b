"""Benchmark 5: preprocessing fused into the model (`convert --fuse-preprocess`) vs client-side.

One real tritonserver (the bundled 2.51) serves, all installed by the real `install`
(Python-backend model running ONNX Runtime on the CPU, the runtime the bundled server has):

- ``lanedet`` (+ ``_pipeline``): tests/support/small_artifact.py, LaneATT's I/O with negligible
  compute; LaneDetClient resizes and converts each 1640x590 frame (today's client-side path);
- ``fused`` (+ ``_pipeline``): the same weights with the preprocessing fused in by the
  product (`fuse_artifact`, what `convert --fuse-preprocess` runs): FRAME uint8 [B, 590, 1640, 3].

Measured, interleaved in blocks in one process, shared memory transport:

1. client CPU time per detect (time.process_time of the client process: every thread of it,
   gRPC's included, not wall time), fused vs client-side;
2. end-to-end wall p50/p90 of detect, fused vs client-side;
3. NAME_pipeline at concurrency 1 vs client-side: today's pipeline (preprocess -> model ->
   postprocess) and the fused one (model -> postprocess).

ONNX Runtime's CPU Resize(cubic) does the fused resize here, so 2. and 3. carry its cost;
the rows "model alone" time the same ONNX files in ONNX Runtime in this process to show it.

    python3 benchmarks/bench_fused.py [--requests 200]
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
sys.path.insert(0, str(ROOT / "tests" / "support"))  # small_artifact.py

from edge_deploy.client.sync_client import LaneDetClient  # noqa: E402
from edge_deploy.synthetic.roads import road_scene  # noqa: E402

ANCHORS = ROOT / "tests" / "data" / "laneatt" / "anchors_2784x77.npy"


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_server(work: Path):
    from small_artifact import make_artifact, make_fused_artifact

    from edge_deploy.deploy.install import install
    from edge_deploy.deploy.options import InstallOptions
    from edge_deploy.serve.argv import ServerOptions
    from edge_deploy.serve.discovery import find_tritonserver
    from edge_deploy.serve.process import TritonProcess

    plain = make_artifact(work / "plain", ANCHORS)
    fused = make_fused_artifact(work / "fused", ANCHORS)
    install(InstallOptions(plain, work / "repo", "lanedet", runtime="python", pipeline=True))
    install(InstallOptions(fused, work / "repo", "fused", runtime="python", pipeline=True))
    install(InstallOptions(linear_stand_in(fused, work / "fusedlin"), work / "repo", "fusedlin", runtime="python", pipeline=True))
    options = ServerOptions(model_repository=work / "repo", grpc_port=free_port())
    proc = TritonProcess(find_tritonserver(cache_dir=work / "cache"), options, work / "triton.log")
    proc.start()
    proc.wait_ready(120)
    return proc, plain, fused


def linear_stand_in(fused: Path, out: Path) -> Path:
    """A copy of the fused artifact whose Resize is linear: ONNX Runtime runs it in ~15 ms instead of ~0.5 s.

    Benchmark only: it stands in for a server that resizes fast (a GPU), so that the client's
    CPU time is measured at a realistic wait; the client does exactly the same work for it.
    """
    import shutil

    import onnx

    from edge_deploy.artifact.manifest import Manifest, file_entry

    shutil.copytree(fused, out)
    model = onnx.load(str(out / "model.onnx"))
    for node in model.graph.node:
        if node.op_type == "Resize":
            for attribute in node.attribute:
                if attribute.name == "mode":
                    attribute.s = b"linear"
    onnx.save(model, str(out / "model.onnx"))
    manifest = Manifest.read(out)
    manifest.files["model.onnx"] = file_entry(out / "model.onnx")
    manifest.write(out)
    return out


def pct(samples: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(samples) * 1e3, q))


def measure(url: str, models: list[str], frames: list[np.ndarray], n: int, block: int = 10) -> dict[str, dict]:
    """Per model: wall times and process CPU times of detect, interleaved in blocks of `block` calls."""
    clients = {m: LaneDetClient(url, m) for m in models}
    out = {m: {"wall": [], "cpu": [], "thread": []} for m in models}
    try:
        for m, client in clients.items():  # warm-up: regions registered, sessions hot
            for frame in frames[:3]:
                client.detect(frame)
        done = 0
        while done < n:
            for m, client in clients.items():
                for i in range(block):
                    frame = frames[(done + i) % len(frames)]
                    c0, h0, t0 = time.process_time(), time.thread_time(), time.perf_counter()
                    client.detect(frame)
                    out[m]["wall"].append(time.perf_counter() - t0)
                    out[m]["thread"].append(time.thread_time() - h0)
                    out[m]["cpu"].append(time.process_time() - c0)
            done += block
    finally:
        for client in clients.values():
            client.close()
    return out


def model_alone(plain: Path, fused: Path, frames: list[np.ndarray], n: int = 10) -> dict[str, float]:
    """ms per frame of each model.onnx in ONNX Runtime (CPU) here: the fused one includes its cubic Resize."""
    from edge_deploy.lanedet.preprocess import Preprocessor
    from edge_deploy.export.parity import ort_session

    pre = Preprocessor()
    sessions = {"client-side model.onnx (preprocessed input)": (ort_session(plain / "model.onnx"), "input"),
                "fused model.onnx (frame input)": (ort_session(fused / "model.onnx"), "FRAME")}
    res = {}
    for label, (session, name) in sessions.items():
        times = []
        for i in range(n):
            frame = frames[i % len(frames)]
            feed = pre(frame) if name == "input" else frame[None]
            t0 = time.perf_counter()
            session.run(None, {name: feed})
            times.append(time.perf_counter() - t0)
        res[label] = float(np.median(times) * 1e3)
    return res


def client_work(frames: list[np.ndarray], n: int = 300) -> dict[str, float]:
    """CPU ms of the per-frame client work alone, in this process: what fusing removes and what stays."""
    from edge_deploy.lanedet.laneatt.decode import decode_lanes
    from edge_deploy.lanedet.preprocess import Preprocessor

    pre = Preprocessor()
    region = np.empty((1, 590, 1640, 3), np.uint8)
    rows = np.load(ANCHORS)[np.linspace(0, 2783, 1000).astype(int)].astype(np.float32)
    rows[:, 1] = np.linspace(-3, 3, len(rows))
    rows[:, 4] = 40.0
    steps = {"client-side preprocessing (resize + FP32 tables into the buffer)": lambda f: pre(f),
             "fused: copy of the uint8 frame into the buffer": lambda f: np.copyto(region[0], f),
             "decode of 1000 rows (both)": lambda f: decode_lanes(rows, image_size=(590, 1640))}
    res = {}
    for label, step in steps.items():
        c0 = time.process_time()
        for i in range(n):
            step(frames[i % len(frames)])
        res[label] = (time.process_time() - c0) / n * 1e3
    return res


def report(res: dict[str, dict], fused: str, labels: dict[str, str]) -> None:
    """The table and the ratios of one measurement (`fused`: the fused model's name in it)."""
    names = {"lanedet": labels["lanedet"], fused: labels["fused"], "lanedet_pipeline": labels["lanedet_pipeline"],
             f"{fused}_pipeline": labels["fused_pipeline"]}
    print("\n| variant | process CPU ms/detect | calling thread CPU ms/detect | wall p50 ms | wall p90 ms |\n"
          "|---|---:|---:|---:|---:|")
    for m, label in names.items():
        cpu = float(np.mean(res[m]["cpu"]) * 1e3)
        thread = float(np.mean(res[m]["thread"]) * 1e3)
        print(f"| {label} | {cpu:.3f} | {thread:.3f} | {pct(res[m]['wall'], 50):.2f} | {pct(res[m]['wall'], 90):.2f} |")
    cpu = {m: float(np.mean(res[m]["cpu"])) for m in res}
    thread = {m: float(np.mean(res[m]["thread"])) for m in res}
    p50 = {m: pct(res[m]["wall"], 50) for m in res}
    print(f"\nclient process CPU per detect, fused / client-side: {cpu[fused] / cpu['lanedet']:.2f} (goal <= 0.3)")
    print(f"calling thread CPU per detect, fused / client-side: {thread[fused] / thread['lanedet']:.2f}")
    print(f"end-to-end p50, fused / client-side: {p50[fused] / p50['lanedet']:.2f}")
    print(f"pipeline p50 / client-side p50 at concurrency 1: today {p50['lanedet_pipeline'] / p50['lanedet']:.2f}, "
          f"fused pipeline {p50[fused + '_pipeline'] / p50['lanedet']:.2f} (goal <= 1.2); fused pipeline / fused "
          f"{p50[fused + '_pipeline'] / p50[fused]:.2f}")
    print(f"pipeline's extra p50 over its model alone: today {p50['lanedet_pipeline'] - p50['lanedet']:.2f} ms "
          f"(two Python-backend hops), fused {p50[fused + '_pipeline'] - p50[fused]:.2f} ms (one)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=200, help="detect calls per variant (default 200)")
    parser.add_argument("--cubic-requests", type=int, default=40,
                        help="detect calls of the fused models with ONNX Runtime's slow cubic Resize (default 40)")
    args = parser.parse_args()
    frames = [road_scene(1640, 590, seed=s)[0] for s in range(8)]
    import cv2
    import onnxruntime

    print(f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; {platform.machine()}, {os.cpu_count()} CPUs, "
          f"load average {os.getloadavg()[0]:.1f}; OpenCV {cv2.__version__} ({cv2.getNumThreads()} threads), "
          f"ONNX Runtime {onnxruntime.__version__}")
    with tempfile.TemporaryDirectory(prefix="bench_fused_") as tmp:
        proc, plain, fused = start_server(Path(tmp))
        try:
            res = measure(proc.url, ["lanedet", "fusedlin", "lanedet_pipeline", "fusedlin_pipeline"], frames,
                          args.requests)
            cubic = measure(proc.url, ["lanedet", "fused", "lanedet_pipeline", "fused_pipeline"], frames,
                            args.cubic_requests)
        finally:
            proc.stop(timeout=15)
        alone = model_alone(plain, fused, frames)
    work = client_work(frames)
    labels = {"lanedet": "client-side preprocessing (today)", "fused": "fused preprocessing",
              "lanedet_pipeline": "`--pipeline`, preprocess step (today)",
              "fused_pipeline": "`--pipeline` of the fused model"}
    print("\nA. fused models served with a linear-Resize stand-in (server time ~15 ms, as a fast resize would "
          f"leave it), {args.requests} calls each")
    report(res, "fusedlin", labels)
    print(f"\nB. the fused models as converted (ONNX Runtime's cubic Resize on the CPU), {args.cubic_requests} calls each")
    report(cubic, "fused", labels)
    print("\nclient work alone, CPU ms per frame:")
    for label, ms in work.items():
        print(f"- {label}: {ms:.3f}")
    print("\nONNX Runtime in this process, median ms per frame:")
    for label, ms in alone.items():
        print(f"- {label}: {ms:.2f}")


if __name__ == "__main__":
    main()
