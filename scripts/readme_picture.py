"""Draw the README's picture: the held-out synthetic frame at the median F1 of N evaluation frames.

Scores MODEL (an artifact directory, in ONNX Runtime, or grpc://HOST:PORT/NAME) on the first N
evaluation frames (`evaluate --synthetic N`: seeds training refuses), picks the frame whose F1 is
the median of the N (the lower middle one for an even N), and draws the truth (green) and the lanes
found (red) with the frame's F1 in the caption. Representative, not the best or the worst frame.

    python scripts/readme_picture.py ARTIFACT [--frames 200] [--out docs/demo_lanes.png]
"""
from __future__ import annotations

import argparse
from pathlib import Path

from edge_deploy.evaluate.datasets import synthetic_frames
from edge_deploy.evaluate.run import evaluate, worst_frames_grid
from edge_deploy.evaluate.runners import open_runner


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model", help="an artifact directory or grpc://HOST:PORT/NAME")
    parser.add_argument("--frames", type=int, default=200)
    parser.add_argument("--out", type=Path, default=Path("docs/demo_lanes.png"))
    args = parser.parse_args()
    runner = open_runner(args.model, None)
    try:
        report, _ = evaluate(runner, synthetic_frames(args.frames))
        ranked = sorted(report.records, key=lambda r: (r.f1, r.name))
        median = ranked[(len(ranked) - 1) // 2]
        name, frame, truth, _ = next(item for item in synthetic_frames(args.frames) if item[0] == median.name)
        lanes = runner.detect(frame)
    finally:
        runner.close()
    median.name = f"median of {len(ranked)} held-out frames ({median.name.removeprefix('synthetic-')})"
    path = worst_frames_grid([(median, frame, lanes, truth)], args.out, columns=1, width=frame.shape[1])
    print(f"{path}: {median.name} F1 {median.f1:.2f} (all {len(ranked)}: F1 {report.culane[0].f1:.3f})")


if __name__ == "__main__":
    main()
