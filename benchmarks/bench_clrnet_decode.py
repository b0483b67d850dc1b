"""CLRNet decode: vectorised decode_clrnet vs a straightforward port of the official loop and CUDA kernel.

The port is tests/support/clrnet_reference.py (get_lanes, devIoU / nms_collect per pair in float32,
predictions_to_pred per lane). Both run interleaved in one process on the same [192, 78] predictions with
CULane's test parameters (conf 0.4, NMS 50 px, 4 lanes): model-like predictions with 10 / 40 / 192 priors above
the threshold, and a worst case for the vectorised NMS (all 192 above it, every lane a near-duplicate of the
best but three, which come last in score order, so the loop compares every pair). Lanes are checked to be the
same before anything is timed. Reports medians of wall and CPU time and their ratio.

    python3 benchmarks/bench_clrnet_decode.py [--repeats 300] [--loop-repeats 15]
"""
from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from pathlib import Path
from typing import Callable

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "support"))
from clrnet_reference import crafted_predictions, official_decode  # noqa: E402

from edge_deploy.lanedet import decode_clrnet  # noqa: E402

PARAMS = dict(conf_threshold=0.4, nms_threshold=50.0, top_k=4, image_size=(590, 1640), cut_fraction=270 / 590)


def worst_case() -> np.ndarray:
    pred = crafted_predictions(7, candidates=192)
    pred[:, 0], pred[:, 1] = 0.0, np.linspace(3.0, 0.5, 192)
    pred[:, 6:] = pred[0, 6:] + np.random.default_rng(1).normal(0, 0.002, (192, 72)).astype(np.float32)
    pred[:, 2], pred[:, 5] = 0.0, 0.9
    for i, offset in enumerate((0.2, -0.2, 0.4)):
        pred[-1 - i, 6:] += offset
    return pred


def ours(pred: np.ndarray) -> list:
    return decode_clrnet(pred, dataset="culane")


def reference(pred: np.ndarray) -> list:
    return official_decode(pred, **PARAMS)


def check_same(pred: np.ndarray) -> int:
    got, want = ours(pred), reference(pred)
    assert len(got) == len(want), "lane count differs"
    for lane, (score, points) in zip(got, want):
        assert abs(lane.score - score) <= 1e-6
        np.testing.assert_allclose(lane.points, points, atol=2e-3)
    return len(got)


def timed(fn: Callable[[], object]) -> tuple[float, float]:
    w0, c0 = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - w0, time.process_time() - c0


def measure(pred: np.ndarray, repeats: int, loop_repeats: int) -> tuple[np.ndarray, np.ndarray]:
    """Medians (wall, cpu) seconds of the vectorised decoder and the port, interleaved."""
    fast, slow = [], []
    every = max(1, repeats // loop_repeats)
    for i in range(repeats):
        fast.append(timed(lambda: ours(pred)))
        if i % every == 0 and len(slow) < loop_repeats:
            slow.append(timed(lambda: reference(pred)))
    return np.median(np.array(fast), axis=0), np.median(np.array(slow), axis=0)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=300, help="vectorised runs per case")
    parser.add_argument("--loop-repeats", type=int, default=15, help="runs of the port per case")
    args = parser.parse_args()
    cases = [(f"{n} above conf", crafted_predictions(n, candidates=n)) for n in (10, 40, 192)]
    cases.append(("192, worst case", worst_case()))
    print(f"python {platform.python_version()}, numpy {np.__version__}, {platform.machine()}, "
          f"{os.cpu_count()} cpus, load average {os.getloadavg()[0]:.1f}")
    print(f"{'case':<16} {'lanes':>5} {'ours wall ms':>13} {'ours cpu ms':>12} {'port wall ms':>13} "
          f"{'port cpu ms':>12} {'ratio wall':>11} {'ratio cpu':>10}")
    for name, pred in cases:
        lanes = check_same(pred)
        ours(pred)  # warm-up
        (fw, fc), (sw, sc) = measure(pred, args.repeats, args.loop_repeats)
        print(f"{name:<16} {lanes:>5} {fw * 1e3:>13.3f} {fc * 1e3:>12.3f} {sw * 1e3:>13.1f} {sc * 1e3:>12.1f} "
              f"{sw / fw:>10.0f}x {sc / max(fc, 1e-9):>9.0f}x")
    print("lanes identical to the port's in every case")
    return 0


if __name__ == "__main__":
    sys.exit(main())
