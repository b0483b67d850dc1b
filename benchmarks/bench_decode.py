"""Benchmark 1: vectorised decode_lanes vs the per-pair/per-point Python loop of the same rules.

The loop is the reference implementation in tests/lanedet/laneatt/test_decode.py. Both run side by
side (interleaved) on the same LaneATT-shaped outputs: synthetic (2784 rows, 50 / 500 /
2784 of them above conf_threshold), the official anchor table plus noise with every row
above threshold (the anchor table the package generates), and a worst case for the
vectorised NMS (one tight cluster, the other kept lanes last in score order). Kept rows
and lane points are checked to be identical before anything is timed. Reports medians;
writes benchmarks/decode.png. `--baseline REV` also times decode.py as it was at git revision REV, interleaved
(its kept rows and points checked equal first): a "before" column.

    python3 benchmarks/bench_decode.py [--repeats 200] [--loop-repeats 11] [--no-plot] [--baseline bfdda86]
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

from edge_deploy.lanedet.laneatt.decode import decode_lanes, select_rows
from edge_deploy.synthetic.roads import raw_output

ROOT = Path(__file__).resolve().parents[1]
IMAGE_SIZE = (590, 1640)


def load_reference():
    sys.path.insert(0, str(ROOT / "tests" / "support"))  # the test module's helpers
    spec = importlib.util.spec_from_file_location("decode_reference", ROOT / "tests" / "lanedet" / "laneatt" / "test_decode.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def worst_case(rows: int = 2784) -> np.ndarray:
    """Every row in one tight cluster except the 3 lowest-scoring: NMS must scan all rows."""
    raw = raw_output(rows, candidates=rows, seed=11, lanes=1)
    raw[:, 5:] = raw[0, 5:] + np.random.default_rng(0).normal(0, 3, (rows, 72)).astype(np.float32)
    raw[:, 2], raw[:, 4] = 0.0, 60.0
    raw[:, 0], raw[:, 1] = 0.0, np.linspace(6, 0.1, rows)
    for i, offset in enumerate((200, -200, 400)):
        raw[-1 - i, 5:] += offset
    return raw


def official_anchors() -> np.ndarray | None:
    """The 2784-anchor table (equal to the official one, see tests/lanedet) with model-like noise, all rows above threshold."""
    from edge_deploy.lanedet.laneatt.anchors import generate_anchors

    raw = generate_anchors().astype(np.float32)
    rng = np.random.default_rng(0)
    raw[:, 0], raw[:, 1] = 0.0, rng.uniform(0.5, 6, len(raw))
    raw[:, 4] = np.clip(rng.normal(40, 25, len(raw)), -2, 90)
    raw[:, 5:] += rng.normal(0, 8, (len(raw), 72)).astype(np.float32)
    return raw


def check_identical(ref, raw: np.ndarray) -> int:
    kept, scores, lanes = ref.ref_decode(raw, 0.5, 50.0, 4, IMAGE_SIZE)
    got_kept, _ = select_rows(raw)
    got = decode_lanes(raw, image_size=IMAGE_SIZE)
    assert got_kept.tolist() == kept, "kept rows differ"
    assert len(got) == len(lanes), "lane count differs"
    for lane, (_, score, pts) in zip(got, lanes):
        np.testing.assert_array_equal(lane.points[:, 0], np.float32([p[0] for p in pts]))
        np.testing.assert_allclose(lane.points[:, 1], np.float32([p[1] for p in pts]), rtol=1e-6)
        assert abs(lane.score - score) <= 1e-12 * score
    return len(kept)


def timed(fn) -> tuple[float, float]:
    """(wall seconds, CPU seconds of this process) of one call."""
    w0, c0 = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - w0, time.process_time() - c0


def measure(ref, raw: np.ndarray, repeats: int, loop_repeats: int, before=None) -> dict[str, float]:
    """Medians (wall and CPU seconds) of the vectorised decoder, the loop and `before` (an earlier decode module),
    interleaved."""
    fast, slow, old = [], [], []
    every = max(1, repeats // loop_repeats)
    for i in range(repeats):
        fast.append(timed(lambda: decode_lanes(raw, image_size=IMAGE_SIZE)))
        if before is not None:
            old.append(timed(lambda: before.decode_lanes(raw, image_size=IMAGE_SIZE)))
        if i % every == 0 and len(slow) < loop_repeats:
            slow.append(timed(lambda: ref.ref_decode(raw, 0.5, 50.0, 4, IMAGE_SIZE)))
    fast_w, fast_c = np.median(np.array(fast), axis=0)
    slow_w, slow_c = np.median(np.array(slow), axis=0)
    old_w, old_c = np.median(np.array(old), axis=0) if old else (np.nan, np.nan)
    return {"fast": fast_w, "slow": slow_w, "fast_cpu": fast_c, "slow_cpu": slow_c, "before": old_w,
            "before_cpu": old_c}


def plot(rows: list[tuple[str, float, float]], path: Path) -> None:
    """Bars of (name, vectorised s, loop s) per case, log scale."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = [r[0].replace(", ", "\n").replace(" candidates", "\ncandidates") for r in rows]
    x = np.arange(len(rows))
    fig, ax = plt.subplots(figsize=(8.5, 4.5))
    ax.bar(x - 0.2, [r[2] * 1e3 for r in rows], 0.4, label="per-pair Python loop")
    ax.bar(x + 0.2, [r[1] * 1e3 for r in rows], 0.4, label="decode_lanes (NumPy)")
    for i, (_, fast, slow) in enumerate(rows):
        ax.text(i, slow * 1e3 * 1.1, f"{slow / fast:.0f}x faster", ha="center", va="bottom")
    ax.axhline(1.0, color="grey", linestyle="--", linewidth=1, label="1 ms target")
    ax.set_yscale("log")
    ax.set_ylim(top=max(r[2] for r in rows) * 1e3 * 20)
    ax.set_xticks(x, labels)
    ax.set_ylabel("median CPU ms per image (log)")
    ax.set_title("LaneATT decode: 2784 rows, candidates above conf 0.5, top_k 4")
    ax.legend(loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=200, help="vectorised runs per case")
    parser.add_argument("--loop-repeats", type=int, default=11, help="Python-loop runs per case")
    parser.add_argument("--no-plot", action="store_true", help="do not write benchmarks/decode.png")
    parser.add_argument("--baseline", help="git revision whose decode.py to time beside today's")
    args = parser.parse_args()
    before = None
    if args.baseline:
        sys.path.insert(0, str(ROOT / "benchmarks"))
        from baseline import load_at

        before = load_at(args.baseline, "edge_deploy/lanedet/laneatt/decode.py")

    ref = load_reference()
    cases = [(f"{n} candidates", raw_output(candidates=n, seed=n)) for n in (50, 500, 2784)]
    anchors = official_anchors()
    if anchors is not None:
        cases.append(("2784, real anchors", anchors))
    cases.append(("2784, worst case", worst_case()))
    results = []
    print(f"python {platform.python_version()}, numpy {np.__version__}, {platform.machine()}, "
          f"{os.cpu_count()} cpus, load average {os.getloadavg()[0]:.1f}")
    print("medians; wall = elapsed time, cpu = CPU time of this process (less disturbed by other jobs)")
    print(f"{'case':<18} {'kept':>4} {'vec wall ms':>12} {'vec cpu ms':>11} {'loop wall ms':>13} "
          f"{'loop cpu ms':>12} {'speed-up wall':>14} {'speed-up cpu':>13}"
          + (f" {'before wall / cpu ms':>21}" if before else ""))
    for name, raw in cases:
        kept = check_identical(ref, raw)
        decode_lanes(raw)  # warm-up
        if before is not None:
            assert before.select_rows(raw)[0].tolist() == select_rows(raw)[0].tolist(), "kept rows differ from before"
        m = measure(ref, raw, args.repeats, args.loop_repeats, before)
        results.append((name, m["fast_cpu"], m["slow_cpu"]))
        print(f"{name:<18} {kept:>4} {m['fast'] * 1e3:>12.3f} {m['fast_cpu'] * 1e3:>11.3f} "
              f"{m['slow'] * 1e3:>13.1f} {m['slow_cpu'] * 1e3:>12.1f} {m['slow'] / m['fast']:>13.0f}x "
              f"{m['slow_cpu'] / m['fast_cpu']:>12.0f}x"
              + (f" {m['before'] * 1e3:>11.3f} / {m['before_cpu'] * 1e3:.3f}" if before else ""))
    print("kept rows and lane points identical to the loop in every case")
    if not args.no_plot:
        try:
            plot(results, ROOT / "benchmarks" / "decode.png")
            print("plot: benchmarks/decode.png")
        except ImportError:
            print("matplotlib not installed: no plot")
    return 0


if __name__ == "__main__":
    sys.exit(main())
