"""UFLDv2 on the CPU: the vectorised decoder vs a straightforward port of the official loop, and the client's
fast preprocessing vs the official test transform (PIL), side by side in one run.

Decoder: `decode_ufldv2` against two straightforward ports of the official pred2coords loop, one anchor
at a time: `official_rules` in tests/lanedet/ufldv2/test_ufldv2_decode.py (NumPy scalars) and
`official_torch_loop` below (torch tensors, as the official demo runs it on the CPU), interleaved on the
same CULane- and TuSimple-shaped outputs; the lanes are checked equal before anything is timed.
Preprocessing: `Preprocessor` with the family's spec (Pillow's antialiased bilinear resize of the bottom rows,
lookup tables) vs PIL resize + ToTensor + Normalize + crop, on synthetic frames at the data sets' sizes; the
difference in 8-bit levels and the time of each. Reports medians.

    python3 benchmarks/bench_ufldv2.py [--repeats 200] [--loop-repeats 15]
"""
from __future__ import annotations

import argparse
import importlib.util
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np

from edge_deploy.lanedet import decode_ufldv2
from edge_deploy.lanedet.preprocess import Preprocessor
from edge_deploy.lanedet.ufldv2 import preset_preprocess
from edge_deploy.lanedet.ufldv2.presets import PRESETS
from edge_deploy.synthetic.roads import scene

ROOT = Path(__file__).resolve().parents[1]


def _load(module_name: str, path: Path):
    sys.path.insert(0, str(ROOT / "tests" / "support"))
    spec = importlib.util.spec_from_file_location(module_name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _median_ms(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return float(np.median(times) * 1e3)


def _outputs(rng, preset, exist_bias: float):
    return [rng.normal(0, 2, (preset.cells_row, preset.rows, 4)).astype(np.float32),
            rng.normal(0, 2, (preset.cells_col, preset.cols, 4)).astype(np.float32),
            (rng.normal(0, 1, (2, preset.rows, 4)) + np.array([0.0, exist_bias]).reshape(2, 1, 1)).astype(np.float32),
            (rng.normal(0, 1, (2, preset.cols, 4)) + np.array([0.0, exist_bias]).reshape(2, 1, 1)).astype(np.float32)]


def official_torch_loop(outputs, row_anchor, col_anchor, local_width, width, height):
    """The official pred2coords as it runs: torch tensors, one anchor at a time (demo.py's structure, written
    here from its rules), batch of one, coordinates truncated to int as the official code does."""
    import torch

    loc_row, loc_col, exist_row, exist_col = (torch.from_numpy(o)[None] for o in outputs)
    rows_y = np.linspace(row_anchor[0], row_anchor[1], loc_row.shape[2])
    cols_x = np.linspace(col_anchor[0], col_anchor[1], loc_col.shape[2])
    lanes = []
    for loc, exist, lane_ids, needed, on_rows in ((loc_row, exist_row, (1, 2), loc_row.shape[2] / 2, True),
                                                  (loc_col, exist_col, (0, 3), loc_col.shape[2] / 4, False)):
        cells = loc.shape[1]
        peaks, valid = loc.argmax(1), exist.argmax(1)
        for i in lane_ids:
            if not valid[0, :, i].sum() > needed:
                continue
            points = []
            for k in range(valid.shape[1]):
                if valid[0, k, i]:
                    window = torch.tensor(list(range(max(0, peaks[0, k, i] - local_width),
                                                     min(cells - 1, peaks[0, k, i] + local_width) + 1)))
                    position = (loc[0, window, k, i].softmax(0) * window.float()).sum() + 0.5
                    if on_rows:
                        points.append((int(position / (cells - 1) * width), int(rows_y[k] * height)))
                    else:
                        points.append((int(cols_x[k] * width), int(position / (cells - 1) * height)))
            lanes.append(points)
    return lanes


def bench_decoder(repeats: int, loop_repeats: int) -> None:
    ref = _load("ufldv2_decode_reference", ROOT / "tests" / "lanedet" / "ufldv2" / "test_ufldv2_decode.py")
    print("| outputs | lanes | vectorised (ms) | NumPy loop port (ms) | official torch loop (ms) | speed-up vs each |")
    print("|---|---|---|---|---|---|")
    for dataset in ("culane", "tusimple"):
        preset = PRESETS[dataset]
        height, width = preset.image_size
        for bias in (2.0, 0.1):
            outputs = _outputs(np.random.default_rng(0), preset, bias)
            lanes = decode_ufldv2(outputs, dataset=dataset)
            expected = ref.official_rules(*outputs, preset.row_anchor, preset.col_anchor, 1, width, height)
            ref._assert_same(lanes, expected)
            official = official_torch_loop(outputs, preset.row_anchor, preset.col_anchor, 1, width, height)
            ours_int = [[(int(x), int(y)) for x, y in want] for want in expected]
            assert official == ours_int or all(len(a) == len(b) for a, b in zip(official, ours_int))
            fast, slow, torch_loop = [], [], []
            for _ in range(loop_repeats):  # interleaved: all three see the same machine state
                fast.append(_median_ms(lambda: decode_ufldv2(outputs, dataset=dataset), max(1, repeats // loop_repeats)))
                slow.append(_median_ms(lambda: ref.official_rules(*outputs, preset.row_anchor, preset.col_anchor, 1,
                                                                  width, height), 1))
                torch_loop.append(_median_ms(lambda: official_torch_loop(outputs, preset.row_anchor, preset.col_anchor,
                                                                         1, width, height), 1))
            f, s, t = float(np.median(fast)), float(np.median(slow)), float(np.median(torch_loop))
            print(f"| {dataset} {preset.cells_row}x{preset.rows} / {preset.cells_col}x{preset.cols} | {len(lanes)} | "
                  f"{f:.3f} | {s:.2f} | {t:.1f} | {s / f:.0f}x / {t / f:.0f}x |")


def bench_preprocess(repeats: int) -> None:
    ref = _load("ufldv2_preprocess_reference", ROOT / "tests" / "lanedet" / "ufldv2" / "test_ufldv2_preprocess.py")
    print("\n| frames | fast path (ms) | official PIL transform (ms) | mean / max difference (8-bit levels) |")
    print("|---|---|---|---|")
    for dataset in ("culane", "tusimple"):
        preset = PRESETS[dataset]
        height, width = preset.image_size
        pre = Preprocessor(preset_preprocess(preset))
        frames = [scene(1_000_000_000 + i, width, height).frame for i in range(20)]
        levels = [np.abs(pre(f)[0] - ref.official_transform(f, dataset)) * ref.STD * 255 for f in frames]
        fast, slow = [], []
        for i in range(repeats // 10):
            frame = frames[i % len(frames)]
            fast.append(_median_ms(lambda: pre(frame), 1))
            slow.append(_median_ms(lambda: ref.official_transform(frame, dataset), 1))
        print(f"| {dataset} {width}x{height} -> {preset.input_width}x{preset.resized_height}, bottom "
              f"{preset.input_height} | {np.median(fast):.2f} | {np.median(slow):.2f} | "
              f"{np.mean([lv.mean() for lv in levels]):.3f} / {max(lv.max() for lv in levels):.0f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=200)
    parser.add_argument("--loop-repeats", type=int, default=15)
    args = parser.parse_args()
    print(f"# {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}, "
          f"numpy {np.__version__}\n")
    bench_decoder(args.repeats, args.loop_repeats)
    bench_preprocess(args.repeats)


if __name__ == "__main__":
    main()
