#!/usr/bin/env python3
"""FP16 lanes on a real GPU against convert's FP16 check (ONNX Runtime on the CPU), per lane family.

convert checks model_fp16.onnx with ONNX Runtime on the CPU, which inserts FP32 casts around the kernels it
lacks in FP16, so it sees less of FP16's rounding than a GPU does. This script measures how much less:

    # on a CUDA machine (torch only): the torch model of each artifact in FP32 and FP16 on the GPU
    python3 benchmarks/fp16_gpu_lanes.py --side gpu --out gpu.json ART_LANEATT ART_UFLDV2 ART_CLRNET
    # here: ONNX Runtime (CPU) model.onnx vs model_fp16.onnx on the very same feeds
    python3 benchmarks/fp16_gpu_lanes.py --side cpu --out cpu.json ART_LANEATT ART_UFLDV2 ART_CLRNET

Each ARTIFACT is a directory made by `edge-deploy convert` with --precision fp16; the GPU side needs only its
manifest.json (the torch model is rebuilt from the manifest's source: checkpoint path or seed). Two sets of
feeds per artifact: convert's own (`parity_feeds`: the seeded noise batches and 4 held-out road frames) and
48 held-out synthetic road frames (`--road-frames`). For each, FP16 vs FP32 of the same runtime: lanes per
side, mean |dx| of matched lanes (at the width convert's check holds, 640 for LaneATT, 1640 for UFLDv2/CLRNet
on CULane), and the raw outputs' max abs/rel error. GPU FP16 is measured two ways: the whole model in half
(`module.half()`, what a strongly typed FP16 plan computes, bar the nodes convert keeps in FP32) and
autocast (FP16 where torch deems it safe). TF32 is off so the FP32 reference is FP32.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from edge_deploy.artifact.manifest import Manifest  # noqa: E402
from edge_deploy.export.parity import LaneCheck, compare_to_reference, parity_feeds  # noqa: E402

ROAD_FRAMES = 48


def road_feeds(manifest: Manifest, count: int) -> list[dict[str, np.ndarray]]:
    """`count` held-out synthetic road frames (the seeds convert's check starts with), preprocessed as the client
    does, in batches the model takes."""
    from edge_deploy.lanedet.preprocess import Preprocessor
    from edge_deploy.synthetic.roads import EVAL_SEED_BASE, scene

    name = manifest.io.inputs[0].name
    batch = max(1, manifest.io.batch.max)
    feeds = []
    for start in range(0, count, batch):
        size = min(batch, count - start)
        pre = Preprocessor(manifest.preprocess, np.float32, size)
        for i in range(size):
            pre(scene(EVAL_SEED_BASE + start + i, 1640, 590).frame, index=i)
        feeds.append({name: pre.output.copy()})
    return feeds


def source_spec(manifest: Manifest):
    """The SourceSpec convert built this artifact's torch model from (family, backbone, checkpoint, data set, seed,
    the family's own options)."""
    from edge_deploy.lanedet.family import SourceSpec

    source = manifest.source
    checkpoint = source.get("checkpoint")
    options = {}
    if manifest.family == "laneatt":
        options = {"topk_anchors": source.get("topk_anchors")} if source.get("topk_anchors") else {}
    return SourceSpec(model=manifest.family, backbone=source.get("backbone"),
                      checkpoint=checkpoint_path(checkpoint["path"]) if isinstance(checkpoint, dict) else None,
                      dataset=source.get("dataset"), options=options, seed=int(source.get("seed") or 0))


def checkpoint_path(recorded: str) -> Path:
    """The manifest's checkpoint, or a file of that name in this checkout's weights/ (another machine's path)."""
    path = Path(recorded)
    here = Path(__file__).resolve().parent.parent / "weights" / path.name
    return path if path.is_file() else here


def run_torch(module, feeds, output_names, device, mode):
    import torch

    outs = []
    with torch.inference_mode():
        for feed in feeds:
            (array,) = feed.values()
            x = torch.from_numpy(np.ascontiguousarray(array)).to(device)
            if mode == "half":
                x = x.half()
            if mode == "autocast":
                with torch.autocast(torch.device(device).type, dtype=torch.float16):
                    result = module(x)
            else:
                result = module(x)
            result = result if isinstance(result, (tuple, list)) else (result,)
            outs.append({n: r.float().cpu().numpy() for n, r in zip(output_names, result)})
    return outs


def summary(comparison) -> dict:
    lanes = comparison.lanes
    worst = comparison.worst()
    return {"lanes_reference": lanes.lanes_onnxruntime if lanes else None,
            "lanes_candidate": lanes.lanes_plan if lanes else None,
            "images": lanes.images if lanes else None,
            "mean_dx_px": lanes.mean_dx_px if lanes else None, "dx_width_px": lanes.dx_width_px if lanes else None,
            "max_abs": worst.max_abs, "max_rel": worst.max_rel, "problems": list(comparison.problems or ())}


def gpu_side(artifact: Path, feeds_by_set: dict, device: str = "cuda") -> dict:
    import copy

    import torch

    from edge_deploy.export.source import load_source

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    manifest = Manifest.read(artifact)
    loaded = load_source(source_spec(manifest))
    names = [t.name for t in manifest.io.outputs]
    cpu_module = copy.deepcopy(loaded.module).eval().float()
    fp32 = loaded.module.eval().to(device)
    half = copy.deepcopy(loaded.module).eval().half().to(device)
    check = LaneCheck.of(manifest)
    result = {"device": torch.cuda.get_device_name(0) if device.startswith("cuda") else device,
              "torch": torch.__version__}
    for set_name, feeds in feeds_by_set.items():
        reference = run_torch(fp32, feeds, names, device, "fp32")
        for mode, module in (("half", half), ("autocast", fp32)):
            actual = run_torch(module, feeds, names, device, mode)
            result[f"{set_name}/{mode}"] = summary(compare_to_reference(reference, actual, check, max_dx_px=1.0,
                                                                        subject=f"GPU FP16 ({mode})"))
        if set_name == "convert_check":  # the GPU's FP32 against the CPU's: the reference itself is sound
            cpu32 = run_torch(cpu_module, feeds, names, "cpu", "fp32")
            result[f"{set_name}/gpu_fp32_vs_cpu_fp32"] = summary(compare_to_reference(
                cpu32, reference, check, max_dx_px=1.0, subject="GPU FP32"))
    return result


def cpu_side(artifact: Path, feeds_by_set: dict) -> dict:
    from edge_deploy.export.parity import ort_session

    manifest = Manifest.read(artifact)
    fp32 = ort_session(artifact / "model.onnx")
    fp16 = ort_session(artifact / "model_fp16.onnx")
    dtypes = {i.name: np.float16 if i.type == "tensor(float16)" else np.float32 for i in fp16.get_inputs()}
    names = [o.name for o in fp32.get_outputs()]
    check = LaneCheck.of(manifest)
    result = {"device": "ONNX Runtime (CPU)"}
    for set_name, feeds in feeds_by_set.items():
        reference = [dict(zip(names, fp32.run(None, f))) for f in feeds]
        actual = [dict(zip(names, fp16.run(None, {k: v.astype(dtypes.get(k, v.dtype)) for k, v in f.items()})))
                  for f in feeds]
        result[f"{set_name}/ort"] = summary(compare_to_reference(reference, actual, check, max_dx_px=1.0,
                                                                 subject="ONNX Runtime FP16"))
    return result


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("artifacts", nargs="+", type=Path)
    ap.add_argument("--side", choices=["gpu", "cpu"], required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--road-frames", type=int, default=ROAD_FRAMES)
    ap.add_argument("--torch-device", default="cuda", help="the GPU side's device (cpu: a dry run of the script)")
    args = ap.parse_args()
    report = {}
    for artifact in args.artifacts:
        started = time.perf_counter()
        manifest = Manifest.read(artifact)
        feeds = {"convert_check": parity_feeds(manifest), f"road{args.road_frames}": road_feeds(manifest,
                                                                                                 args.road_frames)}
        if args.side == "gpu":
            report[manifest.family] = gpu_side(artifact, feeds, args.torch_device)
        else:
            report[manifest.family] = cpu_side(artifact, feeds)
        report[manifest.family]["seconds"] = round(time.perf_counter() - started, 1)
        print(manifest.family, json.dumps(report[manifest.family], indent=1), flush=True)
    args.out.write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
