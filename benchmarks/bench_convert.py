"""Benchmark `edge-deploy convert` against a bare torch.onnx.export of the same model.

In one process, alternating runs: a bare `torch.onnx.export` of LaneATT
(same model, example input and export settings as convert) and a full
`convert` (export plus load, check, simplify, parity, FP16 report, manifest).
Reports min and median time of every convert stage and the ratio of
convert's export stage to the bare export (target: <= 1.2x).

    python3 benchmarks/bench_convert.py [--backbone resnet34] [--repeats 5]
"""
from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backbone", default="resnet34", choices=["resnet18", "resnet34"])
    parser.add_argument("--repeats", type=int, default=5, help="runs of each, alternating")
    parser.add_argument("--target-ratio", type=float, default=1.2)
    args = parser.parse_args(argv)

    import torch

    from edge_deploy.engine.convert import convert
    from edge_deploy.export.onnx_export import build_bare_export, trace_batch
    from edge_deploy.export.settings import ExportSettings
    from edge_deploy.export.source import SourceSpec
    from edge_deploy.lanedet.laneatt.model import build_laneatt
    from edge_deploy.core.progress import Reporter

    settings = ExportSettings()  # convert's defaults: opset 17, dynamic batch 1..4
    source = SourceSpec("laneatt", backbone=args.backbone, seed=0)
    model = build_laneatt(args.backbone, seed=0)
    # convert traces with this example (batch and seed); the bare export gets the same one.
    generator = torch.Generator().manual_seed(settings.seed + 1)
    example = torch.rand((trace_batch(settings.batch), 3, 360, 640), generator=generator)

    bare_times: list[float] = []
    stage_times: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-convert-") as tmp:
        # warm-up: first-call costs (lazy imports, allocator) belong to neither side
        build_bare_export(model, example, Path(tmp) / "warmup.onnx", settings, ["predict_lanes"])()
        for index in range(args.repeats):
            # convert builds its model afresh each run; so does the bare side (untimed), to the same path shape
            bare = build_bare_export(build_laneatt(args.backbone, seed=0), example, Path(tmp) / f"bare{index}.onnx",
                                     settings, ["predict_lanes"])
            start = time.perf_counter()
            bare()
            bare_times.append(time.perf_counter() - start)

            reporter = Reporter()
            result = convert(source, Path(tmp) / f"art{index}", settings, target="onnx", reporter=reporter)
            for stage, seconds in result.timings.items():
                stage_times.setdefault(stage, []).append(seconds)
            print(f"run {index + 1}/{args.repeats}: bare export {bare_times[-1]:.2f} s, "
                  f"convert export stage {stage_times['export ONNX'][-1]:.2f} s, "
                  f"convert total {stage_times['total'][-1]:.2f} s", file=sys.stderr)

    # The machine is shared: min is the least-disturbed run, median the typical one.
    ratio_min = min(stage_times["export ONNX"]) / min(bare_times)
    ratio_median = statistics.median(stage_times["export ONNX"]) / statistics.median(bare_times)
    print(f"## convert (LaneATT {args.backbone}, 2784 anchors)\n")
    print(f"Machine: {platform.machine()}, {os.cpu_count()} CPUs, torch {torch.__version__}; "
          f"{args.repeats} alternating runs of each.\n")
    print("| stage | min s | median s |")
    print("|---|---|---|")
    print(f"| bare torch.onnx.export (same model, settings, example) | {min(bare_times):.2f} | "
          f"{statistics.median(bare_times):.2f} |")
    for stage, values in stage_times.items():
        print(f"| convert: {stage} | {min(values):.2f} | {statistics.median(values):.2f} |")
    verdict = "within" if ratio_min <= args.target_ratio else "ABOVE"
    print(f"\nexport stage / bare export: {ratio_min:.2f}x (min), {ratio_median:.2f}x (median); "
          f"{verdict} the {args.target_ratio:g}x target")
    return 0


if __name__ == "__main__":
    sys.exit(main())
