"""CPU frame budget per lane-model family: what the client does per frame on its CPU (preprocessing and decoding),
on one core, for every family in the registry (`known_families()`: a family registered later is measured too).

For each family with a model builder and each of its data sets: the family's model (untrained, seeded: its
outputs have the shapes and value ranges of the real one) runs once on the preprocessed synthetic frame to get
real-shaped outputs; then the client's preprocessing (`Preprocessor` with the model's spec, from a frame of the
data set's size) and the family's decoder (its decode defaults) are timed, interleaved, with OpenCV on one thread.
`--baseline REV` also times preprocess.py and the family's decoder as they were at git revision REV, in the same
run (interleaved), with the decoders' lanes checked to agree and the largest preprocessing difference printed (an
interpolation REV does not know, "antialiased_bilinear", is timed there as "area", UFLDv2's before it). Budget: preprocessing + decoding <= 1 ms per frame.

The "fused" columns are the client's work per frame against a `convert --fuse-preprocess` model, where the
resize and normalisation run inside the model (on the Orin's GPU): the frame copied into the request's uint8
buffer as the client does it (client/request.py, `_fused_request`), then the same decoder.

    python3 benchmarks/bench_frame_budget.py [--repeats 200] [--baseline bfdda86]
"""
from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

BUDGET_MS = 1.0


def cases():
    """(family, dataset, preprocess spec, decode params, frame, outputs) for every family that builds a model."""
    import torch

    from edge_deploy.errors import EdgeDeployError
    from edge_deploy.lanedet.family import SourceSpec, TensorSpec, known_families
    from edge_deploy.lanedet.preprocess import Preprocessor
    from edge_deploy.synthetic.roads import EVAL_SEED_BASE, scene

    for family in known_families():
        for dataset in list(family.datasets) or [None]:
            try:
                loaded = family.load(SourceSpec(model=family.name, dataset=dataset))
            except EdgeDeployError as exc:
                print(f"{family.name}: not measured ({exc})")
                break
            spec = loaded.preprocess or replace(family.preprocess, height=loaded.sample_shape[1],
                                                width=loaded.sample_shape[2])
            params = loaded.decode or family.decode_defaults
            height, width = family.check_image_size(dataset, params) or (590, 1640)
            frame = scene(EVAL_SEED_BASE, width, height).frame
            with torch.no_grad():
                out = loaded.module.eval()(torch.from_numpy(Preprocessor(spec)(frame).copy()))
            out = [o.numpy() for o in (out if isinstance(out, (tuple, list)) else (out,))]
            names = loaded.output_names or tuple(f"output_{i}" for i in range(len(out)))
            specs = [TensorSpec(n, "FP32", tuple(o.shape)) for n, o in zip(names, out)]
            by_name = dict(zip(names, out))
            outputs = [by_name[t.name][0] for t in family.lane_outputs(specs, True)]
            yield family, dataset, spec, params, frame, outputs


def median_ms(samples: list[float]) -> float:
    return float(np.median(samples)) * 1e3


def _verdict(ms: float) -> str:
    return "met" if ms <= BUDGET_MS else "not met"


def main() -> None:
    import cv2

    from edge_deploy.lanedet.preprocess import Preprocessor

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=200)
    parser.add_argument("--baseline", help="git revision whose preprocess.py and decoders to time beside today's")
    args = parser.parse_args()
    cv2.setNumThreads(1)  # one core: the budget is per core
    print(f"python {platform.python_version()}, numpy {np.__version__}, OpenCV {cv2.__version__} (1 thread), "
          f"{platform.machine()}, {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}")
    print("\n| family | data set | frame | preprocess ms | decode ms | lanes | total ms | budget 1 ms "
          "| fused: frame copy ms | fused total ms | budget 1 ms |"
          + (" before: preprocess / decode ms |" if args.baseline else ""))
    print("|---|---|---|---:|---:|---:|---:|---|---:|---:|---|" + ("---:|" if args.baseline else ""))
    old_pre = None
    if args.baseline:
        from baseline import load_at

        old_pre = load_at(args.baseline, "edge_deploy/lanedet/preprocess.py")
    for family, dataset, spec, params, frame, outputs in cases():
        image_size, model_width = frame.shape[:2], spec.width
        pre = Preprocessor(spec)
        decode = lambda: family.decode(outputs, params, image_size, model_width)  # noqa: E731
        fused_input = np.empty_like(frame)  # a fused request's uint8 buffer (BGR frames: copied as they are)
        runs = {"pre": lambda: pre(frame), "dec": decode, "copy": lambda: np.copyto(fused_input, frame)}
        if old_pre is not None:
            from baseline import load_at

            old_spec = spec.to_dict()
            if old_spec["interpolation"] not in old_pre.INTERPOLATIONS:  # antialiased_bilinear: UFLDv2 had "area"
                old_spec["interpolation"] = "area"
            old = old_pre.Preprocessor(old_pre.PreprocessSpec.from_dict(old_spec))
            decoder = load_at(args.baseline, family.decoder_module.replace(".", "/") + ".py")
            kwargs = params.to_dict()
            runs["old_pre"] = lambda: old(frame)
            runs["old_dec"] = lambda: decoder.decode_outputs(outputs, image_size=image_size, model_width=model_width,
                                                            **kwargs)
            level = float(np.abs(old(frame) - pre(frame)).max() * max(spec.std) / spec.scale)
            lanes_old, lanes = runs["old_dec"](), decode()
            assert len(lanes_old) == len(lanes) and all(np.array_equal(a.points, b.points)
                                                        for a, b in zip(lanes_old, lanes)), "decoders differ"
        samples: dict[str, list[float]] = {k: [] for k in runs}
        for fn in runs.values():
            fn()
        for i in range(args.repeats):
            for name in list(runs)[i % len(runs):] + list(runs)[:i % len(runs)]:  # order rotated every repeat
                t = time.perf_counter()
                runs[name]()
                samples[name].append(time.perf_counter() - t)
        p, d, c = median_ms(samples["pre"]), median_ms(samples["dec"]), median_ms(samples["copy"])
        row = (f"| {family.title} | {dataset or '-'} | {frame.shape[1]}x{frame.shape[0]} | {p:.3f} | {d:.3f} | "
               f"{len(decode())} | {p + d:.3f} | {_verdict(p + d)} | {c:.3f} | {c + d:.3f} | {_verdict(c + d)} |")
        if old_pre is not None:
            row += f" {median_ms(samples['old_pre']):.3f} / {median_ms(samples['old_dec']):.3f} (max {level:.0f} levels) |"
        print(row)
    print(f"\nload average at the end {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
