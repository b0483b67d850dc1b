"""A perception stack on one bundled tritonserver, measured by `edge-deploy bench --stack` (edge_deploy.bench.stack):
the demo LaneATT beside a detector-sized model kept saturated, with the settings install writes and without them;
the client CPU of one frame to two detectors on one input against one detector; PerceptionStream.latest() p99.

The server: the demo LaneATT (weights/laneatt_r18_synthetic.pt, converted by the real `convert`) installed with
`--priority high`, and a ResNet-50-class stand-in detector (a ResNet-50 backbone at 320 x 320 with a YOLO head
[B, 84, 100]: about 8 GFLOPs a frame, exported here by torch.onnx.export, converted as MODEL.onnx) installed twice
(`objects`, `objects_b`) with `--priority low --threads 1` (on the CPU the thread budget is what keeps the detector
off the lane model's core). The lane model's latency is measured beside `objects` alone, kept saturated;
"defaults" reloads both without those settings (ONNX Runtime then takes a thread per core in each). The client CPU
per frame compares `objects` alone with `objects` + `objects_b` given one frame (one input).

    python3 benchmarks/bench_stack.py [--seconds 60] [--json benchmarks/stack.json]   # ~9 min here
    python3 benchmarks/bench_stack.py --cpu-only [--json benchmarks/stack_cpu.json]   # the CPU figure alone, ~2 min
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import socket
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "support"))


def resnet50_detector(path: Path, size: int = 320) -> Path:
    """The ResNet-50-class stand-in detector, exported with torch.onnx.export (random weights: the compute is the
    point, not the boxes)."""
    import inspect
    import warnings

    import torch
    from torch import nn

    from edge_deploy.lanedet.resnet import Bottleneck, _stage

    torch.manual_seed(0)
    widths, counts = (64, 128, 256, 512), (3, 4, 6, 3)
    layers, channels = [], 64
    for i, (width, count) in enumerate(zip(widths, counts)):
        layers.append(_stage(channels, width, count, 1 if i == 0 else 2, Bottleneck))
        channels = width * 4
    backbone = nn.Sequential(nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(),
                             nn.MaxPool2d(3, 2, 1), *layers)

    class Detector(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.backbone, self.head = backbone, nn.Conv2d(channels, 84, 1)

        def forward(self, images: torch.Tensor) -> torch.Tensor:
            return self.head(self.backbone(images)).flatten(2).sigmoid()  # [B, 84, (size/32)^2]

    kwargs = {"dynamo": False} if "dynamo" in inspect.signature(torch.onnx.export).parameters else {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(Detector().eval(), (torch.zeros(1, 3, size, size),), str(path), input_names=["images"],
                          output_names=["output0"], dynamic_axes={"images": {0: "batch"}, "output0": {0: "batch"}},
                          opset_version=17, **kwargs)
    return path


def latest_p99(url: str, seconds: float) -> dict[str, float]:
    """PerceptionStream.latest() p50/p99/max (ms) while the stack's three models run."""
    import numpy as np

    from edge_deploy import DetectorClient, LaneDetClient, PerceptionStream
    from edge_deploy.synthetic.roads import road_scene

    frame = road_scene(1640, 590, seed=1)[0]
    clients = {"lanes": LaneDetClient(url, "lanedet"), "objects": DetectorClient(url, "objects"),
               "objects_b": DetectorClient(url, "objects_b")}
    times = []
    with PerceptionStream(lambda: frame, clients, max_age=2.0, fps=10) as stream:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            began = time.perf_counter()
            stream.latest()
            times.append(time.perf_counter() - began)
            time.sleep(0.001)
    for client in clients.values():
        client.close()
    array = np.asarray(times) * 1000
    return {"calls": len(times), "p50_ms": float(np.percentile(array, 50)), "p99_ms": float(np.percentile(array, 99)),
            "max_ms": float(array.max())}


def shared_input_cpu(config, names: list[str]):
    """Client CPU per frame: the first detector alone, then both given one frame (one converted input)."""
    from edge_deploy.bench.frames import load_frames
    from edge_deploy.bench.stack import cpu_per_frame
    from edge_deploy.client.detector_client import DetectorClient

    frames = [frame for _, frame in load_frames(None, 8)[1]]
    clients = {name: DetectorClient(config.url, name) for name in names}
    try:
        return cpu_per_frame(clients, frames, 200)
    finally:
        for client in clients.values():
            client.close()


def cpu_only(work: Path, args: argparse.Namespace) -> None:
    """Only the client CPU per frame of the two detectors, on a server of their own (no lane model)."""
    from edge_deploy.bench.config import BenchConfig
    from edge_deploy.engine.convert import convert
    from edge_deploy.deploy.install import install
    from edge_deploy.deploy.options import InstallOptions
    from edge_deploy.export.settings import ExportSettings
    from edge_deploy.export.source import SourceSpec

    detector = convert(SourceSpec(str(resnet50_detector(work / "det.onnx"))), work / "det", ExportSettings(),
                       target="onnx").artifact_dir
    repo = work / "repo"
    for name in ("objects", "objects_b"):
        install(InstallOptions(detector, repo, name, runtime="python", priority="low", threads=1))
    with served(repo, work) as url:
        cpu = shared_input_cpu(BenchConfig(url=url, timeout=60), ["objects", "objects_b"])
    assert cpu is not None
    print(f"client CPU per frame: {cpu.one} alone {cpu.one_ms:.2f} ms; {len(cpu.shared)} models on one input "
          f"{cpu.shared_ms:.2f} ms ({cpu.ratio:.2f}x); load average {os.getloadavg()[0]:.1f}")
    if args.json:
        args.json.write_text(json.dumps({"client_cpu": cpu.to_dict(), "load": os.getloadavg()}, indent=1) + "\n")


@contextlib.contextmanager
def served(repo: Path, work: Path):
    """The bundled tritonserver serving `repo` on a free loopback port; yields its URL."""
    from edge_deploy.serve.argv import ServerOptions
    from edge_deploy.serve.discovery import find_tritonserver
    from edge_deploy.serve.process import TritonProcess

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    proc = TritonProcess(find_tritonserver(cache_dir=work / "cache"),
                         ServerOptions(model_repository=repo, grpc_port=port), work / "triton.log")
    proc.start()
    try:
        proc.wait_ready(300)
        yield proc.url
    finally:
        proc.stop(timeout=15)


def main() -> None:
    from edge_deploy.bench.config import BenchConfig
    from edge_deploy.bench.stack import run_stack, stack_lines
    from edge_deploy.engine.convert import convert
    from edge_deploy.deploy.install import install
    from edge_deploy.deploy.options import InstallOptions
    from edge_deploy.export.settings import ExportSettings
    from edge_deploy.export.source import SourceSpec
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=20.0, help="seconds timed per measurement")
    parser.add_argument("--json", type=Path, help="also write the report to this JSON file")
    parser.add_argument("--cpu-only", action="store_true", help="only the client CPU per frame (detectors only)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        if args.cpu_only:
            return cpu_only(work, args)
        lane = convert(SourceSpec("laneatt", backbone="resnet18", dataset="culane",
                                  checkpoint=ROOT / "weights" / "laneatt_r18_synthetic.pt"),
                       work / "lane", ExportSettings(top_k=6), target="onnx").artifact_dir
        detector = convert(SourceSpec(str(resnet50_detector(work / "det.onnx"))), work / "det", ExportSettings(),
                           target="onnx").artifact_dir
        repo = work / "repo"
        install(InstallOptions(lane, repo, "lanedet", runtime="python", priority="high"))
        for name in ("objects", "objects_b"):
            install(InstallOptions(detector, repo, name, runtime="python", priority="low", threads=1))
        with served(repo, work) as url:
            config = BenchConfig(url=url, seconds=args.seconds, warmup_seconds=3.0, max_frames=8, timeout=60)
            report = run_stack(config, "lanedet", ["objects"], cpu_frames=30)
            report = replace(report, cpu=shared_input_cpu(config, ["objects", "objects_b"]))
            latest = latest_p99(url, min(args.seconds, 10.0))
    load = os.getloadavg()
    print("\n".join(stack_lines(report)))
    print(f"PerceptionStream.latest(): p50 {latest['p50_ms']:.3f} ms, p99 {latest['p99_ms']:.3f} ms, "
          f"max {latest['max_ms']:.3f} ms over {latest['calls']} calls")
    print(f"load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}")
    if args.json:
        args.json.write_text(json.dumps({**report.to_dict(), "latest": latest, "load": load}, indent=1) + "\n")


if __name__ == "__main__":
    main()
