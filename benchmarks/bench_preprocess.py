"""Benchmark 2: Preprocessor (LUT path) vs resize + astype, 1640x590 BGR -> 1x3x360x640.

All methods run interleaved in one process on the same synthetic road frame (medians
of many repeats; the machine is shared). The outputs are checked first: FP32 is
bit-identical to the naive path, FP16 within 1 ulp of it. "resize only" is the bicubic
cv2.resize every method starts with, i.e. the floor.

    python3 benchmarks/bench_preprocess.py [--repeats 300]
    python3 benchmarks/bench_preprocess.py --ufldv2 [--repeats 300]

--ufldv2: UFLDv2's preprocessing per data set (CULane 1640x590 -> 1600x533, TuSimple 1280x720 -> 800x400, bottom
320 rows), one OpenCV thread, interleaved: the Preprocessor with the preset's "antialiased_bilinear" against the
same spec with "area" (what older manifests say), and the antialiased resize alone with OpenCV's bilinear for
the columns where the scale allows it (the default) and with Pillow's weights for every column; each one's
difference to the official PIL transform (tests/lanedet/ufldv2) in 8-bit levels, 5 synthetic frames.
"""
from __future__ import annotations

import argparse
import os
import platform
import sys
import time

import cv2
import numpy as np

from edge_deploy.lanedet.preprocess import Preprocessor
from edge_deploy.synthetic.roads import road_scene

W, H = 640, 360


def resize(frame: np.ndarray) -> np.ndarray:
    return cv2.resize(frame, (W, H), interpolation=cv2.INTER_CUBIC)


def naive_fp32(frame: np.ndarray) -> np.ndarray:
    """LaneATT's own formulation: img / 255. (float64), to float32, HWC -> NCHW."""
    return np.ascontiguousarray((resize(frame) / 255.0).astype(np.float32).transpose(2, 0, 1)[None])


def naive_fp16(frame: np.ndarray) -> np.ndarray:
    """The same with an FP16 model input: img / 255., astype(float16), HWC -> NCHW."""
    return np.ascontiguousarray((resize(frame) / 255.0).astype(np.float16).transpose(2, 0, 1)[None])


def naive_fp16_cast_first(frame: np.ndarray) -> np.ndarray:
    """astype(float16) first, then scale in float16."""
    x = np.ascontiguousarray(resize(frame).transpose(2, 0, 1)[None]).astype(np.float16)
    x *= np.float16(1 / 255)
    return x


def ufldv2(repeats: int) -> int:
    from dataclasses import replace
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "lanedet" / "ufldv2"))
    from test_ufldv2_preprocess import STD, official_transform  # noqa: E402  (PIL: the official transform)

    from edge_deploy.lanedet.preprocess import AntialiasedBilinear
    from edge_deploy.lanedet.ufldv2 import PRESETS, preset_preprocess
    from edge_deploy.synthetic.roads import scene

    cv2.setNumThreads(1)
    print(f"OpenCV {cv2.__version__} (1 thread), NumPy {np.__version__}, load average {os.getloadavg()[0]:.1f}, "
          f"{repeats} repeats")
    for dataset, (width, height) in (("culane", (1640, 590)), ("tusimple", (1280, 720))):
        spec = preset_preprocess(PRESETS[dataset])
        frames = [scene(1_000_000_000 + i, width, height).frame for i in range(5)]
        size, keep = (spec.resized_height, spec.width), spec.height
        default, exact = AntialiasedBilinear((height, width), size, keep), \
            AntialiasedBilinear((height, width), size, keep, bilinear_up_to_scale=1.0)
        methods = {
            "Preprocessor antialiased_bilinear": Preprocessor(spec),
            "Preprocessor area (older manifests)": Preprocessor(replace(spec, interpolation="area")),
            "resize only, antialiased_bilinear": default,
            "resize only, Pillow weights for the columns too": exact,
        }
        print(f"{dataset} {width}x{height} -> {spec.width}x{spec.resized_height}, bottom {keep} rows "
              f"(columns by {'OpenCV bilinear' if default.bilinear_columns else 'Pillow weights'})")
        for name, fn in methods.items():
            if name.startswith("Preprocessor"):
                levels = [np.abs(fn(f)[0] - official_transform(f, dataset)) * STD * 255 for f in frames]
            else:
                levels = [np.abs(fn(f)[:, :, ::-1].transpose(2, 0, 1).astype(np.float32) / 255
                                 - (official_transform(f, dataset) * STD + np.array([0.485, 0.456, 0.406],
                                    np.float32).reshape(3, 1, 1))) * 255 for f in frames]
            print(f"  {name}: {np.mean([lv.mean() for lv in levels]):.3f} mean / "
                  f"{max(lv.max() for lv in levels):.0f} max levels from the official transform")
        times: dict[str, list[float]] = {name: [] for name in methods}
        names = list(methods)
        for i in range(repeats):
            frame = frames[i % len(frames)]
            for name in names[i % len(names):] + names[:i % len(names)]:  # rotate the order
                start = time.perf_counter()
                methods[name](frame)
                times[name].append((time.perf_counter() - start) * 1000.0)
        for name, values in times.items():
            print(f"  {name}: p50 {np.median(values):.3f} ms")
    print(f"load average at the end {os.getloadavg()[0]:.1f}")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=300)
    parser.add_argument("--ufldv2", action="store_true", help="UFLDv2's preprocessing (see above)")
    args = parser.parse_args()
    if args.ufldv2:
        return ufldv2(args.repeats)

    frame, _ = road_scene(1640, 590, seed=0)
    pre32, pre16 = Preprocessor(dtype=np.float32), Preprocessor(dtype=np.float16)
    buf = np.empty((H, W, 3), np.uint8)
    methods = {
        "resize only (floor)": lambda: cv2.resize(frame, (W, H), dst=buf, interpolation=cv2.INTER_CUBIC),
        "Preprocessor FP32": lambda: pre32(frame),
        "Preprocessor FP16": lambda: pre16(frame),
        "naive FP32 (/255., astype)": lambda: naive_fp32(frame),
        "naive FP16 (/255., astype)": lambda: naive_fp16(frame),
        "naive FP16 (astype, *1/255)": lambda: naive_fp16_cast_first(frame),
    }

    ref32 = naive_fp32(frame)
    np.testing.assert_array_equal(pre32(frame), ref32)
    got16 = pre16(frame).astype(np.float32)
    ref16 = naive_fp16(frame)
    ulp = (np.nextafter(ref16, np.float16(np.inf)) - ref16).astype(np.float32)
    assert np.all(np.abs(got16 - ref16.astype(np.float32)) <= ulp), "FP16 differs by more than 1 ulp"
    print(f"outputs checked: FP32 bit-identical, FP16 within 1 ulp "
          f"({int((got16 != ref16.astype(np.float32)).sum())} of {ref16.size} values differ by 1 ulp)")

    wall: dict[str, list[float]] = {name: [] for name in methods}
    cpu: dict[str, list[float]] = {name: [] for name in methods}
    names = list(methods)
    for fn in methods.values():  # warm-up
        fn()
    for i in range(args.repeats):
        for name in names[i % len(names) :] + names[: i % len(names)]:  # rotate the order
            w0, c0 = time.perf_counter(), time.process_time()
            methods[name]()
            wall[name].append(time.perf_counter() - w0)
            cpu[name].append(time.process_time() - c0)

    print(f"python {platform.python_version()}, numpy {np.__version__}, opencv {cv2.__version__}, "
          f"{platform.machine()}, {os.cpu_count()} cpus, cv2 threads {cv2.getNumThreads()}, "
          f"load average {os.getloadavg()[0]:.1f}, {args.repeats} repeats")
    print("medians; wall = elapsed time, cpu = CPU time of this process, all threads (cv2 may use several)")
    med = {kind: {n: float(np.median(t)) * 1e3 for n, t in d.items()} for kind, d in (("wall", wall), ("cpu", cpu))}
    print(f"{'method':<30} {'wall ms':>8} {'cpu ms':>8} {'wall after resize':>18}")
    for name in names:
        after = max(med["wall"][name] - med["wall"]["resize only (floor)"], 0)
        print(f"{name:<30} {med['wall'][name]:>8.3f} {med['cpu'][name]:>8.3f} {after:>18.3f}")
    for mine, naive in (
        ("Preprocessor FP16", "naive FP16 (/255., astype)"),
        ("Preprocessor FP16", "naive FP16 (astype, *1/255)"),
        ("Preprocessor FP32", "naive FP32 (/255., astype)"),
    ):
        ratios = []
        for kind in ("wall", "cpu"):
            m, floor = med[kind], med[kind]["resize only (floor)"]
            after = (m[naive] - floor) / max(m[mine] - floor, 1e-9)
            ratios.append(f"{kind} {m[naive] / m[mine]:.1f}x ({after:.1f}x after the resize)")
        print(f"{mine} vs {naive}: " + ", ".join(ratios))
    return 0


if __name__ == "__main__":
    sys.exit(main())
