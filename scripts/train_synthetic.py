#!/usr/bin/env python3
"""Train the LaneATT demo weights on synthetic road scenes (see edge_deploy/lanedet/train.py).

    python scripts/train_synthetic.py --out RUN --until 15:45 --anchor-indices idx.npy
    python scripts/train_synthetic.py --out RUN --resume --minutes 30
    python scripts/train_synthetic.py --out RUN2 --init RUN/last.pt --seed 1 --lr 1.5e-4 --minutes 120
    python scripts/train_synthetic.py --out RUN --export weights_fp16.pt   # no training
    python scripts/train_synthetic.py --out RUN --device cuda --bf16 --workers 15 --batch 32 --minutes 9

Stops at --until (local wall clock, HH:MM) or after --minutes or --steps, whichever comes
first; writes RUN/last.pt (full state, every --checkpoint-minutes), RUN/log.csv, and at the
end RUN/laneatt_r18_synthetic_fp16.pt (official format, FP16).
"""
from __future__ import annotations

import argparse
import datetime as dt
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from edge_deploy.errors import EdgeDeployError  # noqa: E402
from edge_deploy.training.train import (  # noqa: E402
    CHECKPOINT,
    TrainConfig,
    TrainingError,
    export_fp16,
    train,
)

EXPORT_NAME = "laneatt_r18_synthetic_fp16.pt"


def default_anchor_indices() -> np.ndarray:
    """The 1000 most frequent CULane anchors in the torch-1.6 order (what the official checkpoints use)."""
    from edge_deploy.lanedet.laneatt.anchor_order import dataset_frequency, topk_anchor_indices

    return topk_anchor_indices(dataset_frequency("culane"), 1000)


def deadline_from(until: str | None, minutes: float | None) -> float:
    ends = []
    if minutes is not None:
        ends.append(time.time() + 60.0 * minutes)
    if until is not None:
        try:
            hh, mm = (int(v) for v in until.split(":"))
            at = dt.datetime.now().replace(hour=hh, minute=mm, second=0, microsecond=0)
        except ValueError as exc:
            raise TrainingError(f"--until {until!r} is not a wall-clock time HH:MM") from exc
        if at.timestamp() <= time.time():
            raise TrainingError(f"--until {until} is already past; give a later time")
        ends.append(at.timestamp())
    return min(ends) if ends else 0.0


def favour_tags(text: str) -> tuple[str, ...]:
    from edge_deploy.synthetic.roads import CONDITIONS

    tags = tuple(t.strip() for t in text.split(",") if t.strip())
    unknown = [t for t in tags if t not in CONDITIONS]
    if unknown:
        raise TrainingError(f"--favour {', '.join(unknown)}: not a condition tag; choose from {', '.join(CONDITIONS)}")
    return tags


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, type=Path, help="run directory (checkpoint, log, export)")
    ap.add_argument("--minutes", type=float, help="stop after this many minutes")
    ap.add_argument("--until", help="stop at this local wall-clock time, HH:MM")
    ap.add_argument("--steps", type=int, default=0, help="stop after this many steps (0: no limit)")
    ap.add_argument("--resume", action="store_true", help="continue from OUT/last.pt")
    ap.add_argument("--init", type=Path, metavar="CHECKPOINT",
                    help="start from these weights (a run's last.pt or official format) with a fresh optimizer/schedule")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--lr", type=float, default=3e-4)
    ap.add_argument("--seed", type=int, default=0, help="run seed: weight init and the training frames")
    ap.add_argument("--schedule-steps", type=int, default=0,
                    help="cosine schedule length in steps (0: anneal over the time to --until/--minutes)")
    ap.add_argument("--anchor-indices", type=Path, help=".npy of anchor indices (default: 1000 top CULane, torch-1.6 order)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--device", default="cpu", help="cpu, or a CUDA device (cuda, cuda:1)")
    ap.add_argument("--workers", type=int, default=0, help="processes drawing frames ahead (0: none)")
    ap.add_argument("--bf16", action="store_true", help="bf16 autocast (faster only on CPUs with AMX or avx512_bf16)")
    ap.add_argument("--no-train-nms", action="store_true", help="skip the NMS before the loss (not the reference setup)")
    ap.add_argument("--favour", default="", metavar="TAGS",
                    help="condition tags to draw more often, comma-separated (e.g. curve,s_curve,worn): each frame is "
                         "the first of two candidate scenes that shows one")
    ap.add_argument("--checkpoint-minutes", type=float, default=5.0)
    ap.add_argument("--export", type=Path, metavar="FILE", help="only write OUT/last.pt as FP16 official weights to FILE")
    args = ap.parse_args(argv)
    try:
        if args.export:
            dest = export_fp16(args.out / CHECKPOINT, args.export)
            print(f"wrote {dest} ({dest.stat().st_size / 1e6:.1f} MB)")
            return 0
        if args.batch < 1 or args.lr <= 0:
            raise TrainingError("--batch must be >= 1 and --lr > 0")
        idx = np.load(args.anchor_indices) if args.anchor_indices else default_anchor_indices()
        cfg = TrainConfig(
            out=str(args.out), anchor_indices=[int(i) for i in np.asarray(idx).reshape(-1)], batch=args.batch,
            lr=args.lr, seed=args.seed, schedule_steps=args.schedule_steps,
            deadline=deadline_from(args.until, args.minutes), max_steps=args.steps, bf16=args.bf16,
            threads=args.threads, device=args.device, workers=args.workers, checkpoint_every_s=60.0 * args.checkpoint_minutes, train_nms=not args.no_train_nms,
            init=str(args.init or ""), favour=favour_tags(args.favour),
        )
        print(f"training LaneATT-resnet18 with {len(cfg.anchor_indices)} anchors into {args.out}", flush=True)
        ckpt = train(cfg, resume=args.resume, log=lambda m: print(m, flush=True))
        dest = export_fp16(ckpt, args.out / EXPORT_NAME)
        print(f"exported {dest} ({dest.stat().st_size / 1e6:.1f} MB)", flush=True)
    except EdgeDeployError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
