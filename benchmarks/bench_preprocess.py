"""Benchmark 2: Preprocessor (LUT path) vs resize + astype, 1640x590 BGR -> 1x3x360x640.

All methods run interleaved in one process on the same synthetic road frame (medians
of many repeats; the machine is shared). The outputs are checked first: FP32 is
bit-identical to the naive path, FP16 within 1 ulp of it. "resize only" is the bicubic
cv2.resize every method starts with, i.e. the floor.

    python3 benchmarks/bench_preprocess.py [--repeats 300]
    python3 benchmarks/bench_preprocess.py --ufldv2-pil-trial [--repeats 300]

--ufldv2-pil-trial: a trial, not in the client: UFLDv2 CULane's resize (1640x590 -> 1600x533, bottom 320 rows) with
Pillow's own antialiased-bilinear weights for the rows (8.8 fixed point on uint16 with OpenCV) after OpenCV's
bilinear for the columns, against the client's Preprocessor (area resize of the kept rows), one OpenCV thread,
interleaved; and each one's difference to the official PIL transform in 8-bit levels.
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
from edge_deploy.training.synthetic import road_scene

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


def pil_bilinear_weights(in_size: int, out_size: int) -> list[tuple[int, np.ndarray]]:
    """Pillow's precompute_coeffs for its bilinear filter (support 1, widened by the scale when shrinking):
    (first input index, normalised weights) per output index."""
    scale = in_size / out_size
    filter_scale = max(scale, 1.0)
    support = filter_scale
    out = []
    for xx in range(out_size):
        center = (xx + 0.5) * scale
        xmin = max(int(center - support + 0.5), 0)
        xmax = min(int(center + support + 0.5), in_size)
        d = (np.arange(xmin, xmax) - center + 0.5) / filter_scale
        w = np.clip(1.0 - np.abs(d), 0.0, None)
        out.append((xmin, w / w.sum()))
    return out


class PilRowsTrial:
    """UFLDv2's resize to (width, resized_height), bottom `height` rows: OpenCV bilinear for the columns, Pillow's
    weights for the rows (8.8 fixed point, uint16), then the Preprocessor's per-byte tables."""

    def __init__(self, pre: Preprocessor, frame_height: int) -> None:
        spec = pre.spec
        rows = pil_bilinear_weights(frame_height, spec.resized_height)[spec.resized_height - spec.height:]
        taps = max(len(w) for _, w in rows)
        self.first = rows[0][0]
        last = max(x + len(w) for x, w in rows)
        self.index, self.weights = [], []
        for t in range(taps):
            self.index.append(np.array([min(x + t, x + len(w) - 1) - self.first for x, w in rows]))
            q = []
            for _, w in rows:
                wq = np.round(np.pad(w, (0, taps - len(w))) * 256).astype(np.int64)
                wq[np.argmax(w)] += 256 - wq.sum()  # each row's weights sum to 1.0 exactly
                q.append(wq[t])
            self.weights.append(np.ascontiguousarray(np.repeat(np.array(q, np.uint16)[:, None], spec.width * 3, 1)))
        self.rows = last - self.first
        self.pre = pre
        self.planes = [np.empty((spec.height, spec.width), np.uint8) for _ in range(3)]

    def __call__(self, frame: np.ndarray) -> np.ndarray:
        spec = self.pre.spec
        src = frame[self.first:self.first + self.rows]
        wide = cv2.resize(src, (spec.width, self.rows), interpolation=cv2.INTER_LINEAR).reshape(self.rows, -1)
        wide = wide.astype(np.uint16)
        acc = cv2.multiply(wide[self.index[0]], self.weights[0])
        for index, weights in zip(self.index[1:], self.weights[1:]):
            cv2.add(acc, cv2.multiply(wide[index], weights), dst=acc)
        resized = cv2.convertScaleAbs(acc, alpha=1 / 256).reshape(spec.height, spec.width, 3)
        cv2.split(resized, self.planes)
        out = self.pre.output
        for c in range(3):
            cv2.LUT(self.planes[2 - c] if spec.color == "rgb" else self.planes[c], self.pre._luts[c], dst=out[0, c])
        return out


def ufldv2_pil_trial(repeats: int) -> int:
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "families"))
    from test_ufldv2_preprocess import STD, official_transform  # noqa: E402  (PIL: the official transform)

    from edge_deploy.lanedet.ufldv2 import PRESETS, preset_preprocess
    from edge_deploy.training.synthetic import scene

    cv2.setNumThreads(1)
    frames = [scene(1_000_000_000 + i, 1640, 590).frame for i in range(5)]
    client = Preprocessor(preset_preprocess(PRESETS["culane"]))
    trial = PilRowsTrial(Preprocessor(preset_preprocess(PRESETS["culane"])), 590)
    print(f"OpenCV {cv2.__version__} (1 thread), NumPy {np.__version__}, load average {os.getloadavg()[0]:.1f}")
    for name, fn in (("client (area)", client), ("trial (Pillow rows)", trial)):
        levels = [np.abs(fn(f)[0] - official_transform(f, "culane")) * STD * 255 for f in frames]
        print(f"{name}: {np.mean([lv.mean() for lv in levels]):.3f} mean / {max(lv.max() for lv in levels):.0f} max "
              "levels from the official transform")
    times: dict[str, list[float]] = {"client (area)": [], "trial (Pillow rows)": []}
    for i in range(repeats):
        frame = frames[i % len(frames)]
        for name, fn in (("client (area)", client), ("trial (Pillow rows)", trial))[:: 1 if i % 2 else -1]:
            start = time.perf_counter()
            fn(frame)
            times[name].append((time.perf_counter() - start) * 1000.0)
    for name, values in times.items():
        print(f"{name}: p50 {np.median(values):.3f} ms")
    print(f"load average at the end {os.getloadavg()[0]:.1f}")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=300)
    parser.add_argument("--ufldv2-pil-trial", action="store_true", help="the UFLDv2 CULane resize trial (see above)")
    args = parser.parse_args()
    if args.ufldv2_pil_trial:
        return ufldv2_pil_trial(args.repeats)

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
