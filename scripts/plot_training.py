"""Plot the demo weights' training loss from the runs' log.csv files (weights/loss.png).

    python scripts/plot_training.py weights/train_log_run1.csv weights/train_log_run2.csv -o weights/loss.png

Runs are drawn one after the other on the axis of frames seen.
"""
from __future__ import annotations

import argparse
import csv
from pathlib import Path

import numpy as np

SPIKE = 20.0  # losses above this (one bad batch in run 2 logged 101) are left out to keep the scale readable


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("logs", nargs="+", type=Path, help="log.csv of each run, in training order")
    parser.add_argument("-o", "--output", type=Path, default=Path("weights/loss.png"))
    args = parser.parse_args()
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 3.6), dpi=100)
    offset = 0
    for number, path in enumerate(args.logs, start=1):
        rows = list(csv.DictReader(path.open()))
        x = np.array([int(r["images"]) for r in rows]) + offset
        y = np.array([float(r["loss"]) for r in rows])
        keep = y < SPIKE
        (line,) = ax.plot(x[keep], y[keep], lw=1, label=f"run {number} ({path.name})")
        if keep.sum() > 5:
            ax.plot(x[keep][4:], np.convolve(y[keep], np.ones(5) / 5, mode="valid"), lw=2, color=line.get_color(),
                    alpha=0.6)
        offset = int(x[-1])
    ax.set_xlabel("training frames seen (all runs)")
    ax.set_ylabel("loss (10 x focal + smooth-L1)")
    ax.set_title("LaneATT R18 on synthetic roads: training loss (thin: per 10 steps; thick: mean of 5)")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(args.output)
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
