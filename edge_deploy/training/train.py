"""Train LaneATT on synthetic road scenes with LaneATT's own objective (demo weights).

Pieces, following the LaneATT paper and its reference training setup (written anew here):

- `lane_targets`: ground-truth polylines -> LaneATT target rows (start, length, x at the 72
  strip ys of a 640x360 image), the way LaneATT's dataset code converts CULane labels.
- `match_anchors`: anchor <-> target assignment by the mean |dx| over the common strips
  (positive < 15 px, negative > 20 px).
- `laneatt_loss`: focal loss (alpha 0.25, gamma 2) on the two logits of positives and
  negatives, smooth-L1 on length and x offsets of positives; total = 10 * cls + reg. As in
  the reference training, proposals first go through lane NMS (threshold 15, top 3000).
- `train`: Adam (lr 3e-4), cosine schedule (over steps, or over the time to a deadline), frames drawn on the fly from
  `synthetic.scene` (training seeds only; in worker processes with `workers`), bf16 autocast + channels_last on
  CPU or a CUDA device, checkpoints with full state for exact resume, a CSV log.

torch is imported inside functions: importing this module is cheap.
"""
from __future__ import annotations

import collections
import csv
import math
import multiprocessing
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Generator, Sequence

import numpy as np

from ..errors import EdgeDeployError, one_line
from ..core.fsutil import atomic_path
from ..lanedet.laneatt import anchors as A
from ..lanedet.laneatt.decode import nms_keep
from ..synthetic.roads import EVAL_SEED_BASE, scene

N_STRIPS = A.N_OFFSETS - 1
# The 72 strip ys in 640x360 model pixels, bottom (360) to top (0).
STRIP_YS = np.linspace(A.IMG_H, 0.0, A.N_OFFSETS)
POS_THRESHOLD = 15.0
NEG_THRESHOLD = 20.0
FOCAL_ALPHA = 0.25
FOCAL_GAMMA = 2.0
CLS_WEIGHT = 10.0
TRAIN_NMS_THRESHOLD = 15.0
TRAIN_NMS_TOPK = 3000
SEEDS_PER_RUN = 50_000_000  # training seed of frame i in run r: r * SEEDS_PER_RUN + i


class TrainingError(EdgeDeployError):
    """Training cannot start or go on (bad arguments, a checkpoint that does not fit)."""


def training_seed(run_seed: int, index: int) -> int:
    """The scene seed of training frame `index` of run `run_seed`; never an evaluation seed."""
    seed = run_seed * SEEDS_PER_RUN + index
    if run_seed < 0 or index < 0 or seed >= EVAL_SEED_BASE:
        raise TrainingError(
            f"training seed {seed} (run seed {run_seed}, frame {index}) is reserved for evaluation "
            f"(>= {EVAL_SEED_BASE}); use a run seed below {EVAL_SEED_BASE // SEEDS_PER_RUN}"
        )
    return seed


def lane_targets(lanes: Sequence[np.ndarray], width: int, height: int) -> np.ndarray:
    """Polylines (x, y) in a width x height frame -> LaneATT target rows, float32 (L, 77).

    Row: [0, 1, start, x_start, length, x_0..x_71] with x in 640-px units at STRIP_YS
    (k = 0: bottom). Inside its vertical extent a lane is interpolated (linearly: the
    synthetic polylines are dense); below it, it is extended to the bottom along the line
    through its two lowest points. Strips whose x falls outside [0, 640) at the bottom are
    'outside': start = their count / 71, length = the number of inside strips. Unused x
    are -1e5. Lanes with < 2 points or no inside strip are dropped.
    """
    rows = []
    for lane in lanes:
        pts = np.asarray(lane, dtype=np.float64)
        if pts.ndim != 2 or len(pts) < 2:
            continue
        pts = pts[np.argsort(-pts[:, 1], kind="stable")]  # bottom first
        _, first = np.unique(pts[:, 1], return_index=True)  # one point per y
        pts = pts[np.sort(first)]
        if len(pts) < 2:
            continue
        x = pts[:, 0] * A.IMG_W / width
        y = pts[:, 1] * A.IMG_H / height
        inside_domain = (STRIP_YS >= y.min()) & (STRIP_YS <= y.max())
        if not inside_domain.any():
            continue
        below = STRIP_YS > y.max()
        xs = np.full(A.N_OFFSETS, np.nan)
        xs[inside_domain] = np.interp(STRIP_YS[inside_domain], y[::-1], x[::-1])
        slope = (x[1] - x[0]) / (y[1] - y[0])
        xs[below] = x[0] + slope * (STRIP_YS[below] - y[0])
        valid = ~np.isnan(xs)
        all_xs = xs[valid]  # from the bottom up to the lane's top
        inside = (all_xs >= 0) & (all_xs < A.IMG_W)
        if not inside.any():
            continue
        ordered = np.concatenate([all_xs[~inside], all_xs[inside]])
        row = np.full(A.ROW_LEN, -1e5)
        row[0], row[1] = 0.0, 1.0
        row[2] = (~inside).sum() / N_STRIPS
        row[3] = all_xs[inside][0]
        row[4] = inside.sum()
        row[5 : 5 + len(ordered)] = ordered
        rows.append(row)
    return np.asarray(rows, dtype=np.float32).reshape(-1, A.ROW_LEN)


def match_anchors(anchors: Any, targets: Any) -> tuple[Any, Any, Any]:
    """Assign anchors (N, 77) to targets (T, 77) (torch tensors, T >= 1).

    Distance = mean |x_anchor - x_target| over the strips both cover, from the later of the
    two starts to the target's end (infinite without overlap). Returns (positive mask,
    negative mask, index of the matched target per positive).
    """
    import torch

    n, t = anchors.shape[0], targets.shape[0]
    a_start = anchors[:, 2] * N_STRIPS
    t_start = targets[:, 2] * N_STRIPS
    starts = torch.maximum(a_start[:, None], t_start[None, :]).round().long()  # (N, T)
    ends = (t_start + targets[:, 4] - 1).round().long()[None, :].expand(n, t)
    lengths = (ends - starts + 1).clamp(min=0)
    k = torch.arange(A.N_OFFSETS, device=anchors.device)
    mask = (k[None, None, :] >= starts[..., None]) & (k[None, None, :] <= ends[..., None])  # (N, T, 72)
    diff = (anchors[:, None, 5:] - targets[None, :, 5:]).abs() * mask
    dist = diff.sum(-1) / (lengths.float() + 1e-9)
    dist[lengths == 0] = float("inf")
    best, which = dist.min(dim=1)
    positives = best < POS_THRESHOLD
    negatives = best > NEG_THRESHOLD
    return positives, negatives, which[positives]


def focal_loss(logits: Any, labels: Any) -> Any:
    """Summed softmax focal loss over rows of two logits: -alpha (1 - p_t)^gamma log p_t."""
    import torch

    log_p = torch.log_softmax(logits.float(), dim=1).gather(1, labels[:, None]).squeeze(1)
    return (-FOCAL_ALPHA * (1.0 - log_p.exp()).pow(FOCAL_GAMMA) * log_p).sum()


def train_nms_keep(rows: Any, order: Any, nms_threshold: float, top_k: int) -> Any:
    """`decode.nms_keep`'s rule for proposals on a GPU: every pair's suppression at once on the device
    (float64, as the NumPy version), then the greedy scan over that matrix. Returns kept row indices (CPU)."""
    import torch

    r = rows[order].double()
    c2, c4 = r[:, 2], r[:, 4]
    s = torch.floor(c2 * N_STRIPS + 0.5)
    e = torch.trunc(s + c4 - 1.0 + 0.5 - (c4 < 1.0).double())
    lo = s.clamp(min=0, max=N_STRIPS + 1)
    hi = e.clamp(min=-1, max=N_STRIPS)
    start = torch.maximum(lo[:, None], lo[None, :])
    end = torch.minimum(hi[:, None], hi[None, :])
    width = end - start + 1
    k = torch.arange(A.N_OFFSETS, device=r.device, dtype=torch.float64)
    x = r[:, 5:]
    dist = torch.zeros_like(width)
    for i0 in range(0, len(r), 256):  # bounded memory: 256 x M x 72 per chunk
        sl = slice(i0, i0 + 256)
        inside = (k >= start[sl, :, None]) & (k <= end[sl, :, None])
        dist[sl] = ((x[sl, None, :] - x[None, :, :]).abs() * inside).sum(-1)
    suppress = ((width > 0) & (dist < nms_threshold * width)).cpu().numpy()
    alive = np.ones(len(r), dtype=bool)
    kept: list[int] = []
    for i in range(len(r)):
        if alive[i]:
            kept.append(i)
            if len(kept) >= top_k:
                break
            alive[i + 1 :] &= ~suppress[i, i + 1 :]
    return order.cpu()[torch.as_tensor(kept, dtype=torch.long)]


def laneatt_loss(
    proposals: Any, anchors: Any, targets: Sequence[Any], *, train_nms: bool = True
) -> tuple[Any, dict[str, float]]:
    """LaneATT loss of a batch: proposals (B, N, 77) from the model, anchors (N, 77), targets one
    (T_b, 77) tensor per image. Returns (10 * cls + reg, parts for logging)."""
    import torch
    import torch.nn.functional as F

    cls_total = proposals.new_zeros(())
    reg_total = proposals.new_zeros(())
    positives_total = 0
    batch = proposals.shape[0]
    for b in range(batch):
        props = proposals[b].float()
        keep = None
        if train_nms:
            with torch.no_grad():
                scores = torch.softmax(props[:, :2], dim=1)[:, 1]
                order = torch.argsort(scores, descending=True, stable=True)
                if props.is_cuda:
                    keep = train_nms_keep(props.detach(), order, TRAIN_NMS_THRESHOLD, TRAIN_NMS_TOPK)
                else:
                    keep = torch.from_numpy(
                        nms_keep(props.detach().cpu().numpy(), order=order.numpy(), nms_threshold=TRAIN_NMS_THRESHOLD,
                                 top_k=TRAIN_NMS_TOPK)
                    )
                keep = keep.to(props.device)
            props = props[keep]
            anc = anchors[keep]
        else:
            anc = anchors
        target = targets[b]
        dev = props.device
        zeros = torch.zeros(len(props), dtype=torch.long, device=dev)
        if len(target) == 0:
            cls_total = cls_total + focal_loss(props[:, :2], zeros)
            continue
        with torch.no_grad():
            pos_mask, neg_mask, which = match_anchors(anc, target)
        n_pos = int(pos_mask.sum())
        if n_pos == 0:
            cls_total = cls_total + focal_loss(props[:, :2], zeros)
            continue
        positives_total += n_pos
        pos, neg = props[pos_mask], props[neg_mask]
        logits = torch.cat([pos[:, :2], neg[:, :2]])
        labels = torch.cat([torch.ones(n_pos, dtype=torch.long, device=dev),
                            torch.zeros(len(neg), dtype=torch.long, device=dev)])
        cls_total = cls_total + focal_loss(logits, labels) / n_pos

        reg_pred = pos[:, 4:]  # length, then the 72 x
        with torch.no_grad():
            tgt = target[which].clone()
            pos_start = (pos[:, 2] * N_STRIPS).round().long()
            tgt_start = (tgt[:, 2] * N_STRIPS).round().long()
            tgt[:, 4] -= (pos_start - tgt_start).float()  # length counted from the anchor's start
            ends = (pos_start + tgt[:, 4] - 1).round().long()
            k = torch.arange(A.N_OFFSETS, device=dev)
            valid = (k[None, :] >= pos_start[:, None]) & (k[None, :] <= ends[:, None])
            valid = torch.cat([torch.ones(n_pos, 1, dtype=torch.bool, device=dev), valid], dim=1)
            reg_target = torch.where(valid, tgt[:, 4:], reg_pred.detach())
        reg_total = reg_total + F.smooth_l1_loss(reg_pred, reg_target)
    cls_total = cls_total / batch
    reg_total = reg_total / batch
    loss = CLS_WEIGHT * cls_total + reg_total
    parts = {"cls_loss": float(cls_total.detach()), "reg_loss": float(reg_total.detach()), "positives": positives_total}
    return loss, parts


def make_example(run_seed: int, index: int, flip: bool = True,
                 favour: tuple[str, ...] = ()) -> tuple[np.ndarray, np.ndarray, int]:
    """Training frame `index` of a run: (uint8 [360, 640, 3] BGR, its target rows, its seed).

    Half of the frames (chosen by the seed) are mirrored, like LaneATT's horizontal-flip augmentation.
    With `favour` (condition tags, e.g. ("curve", "worn")), frame `index` is drawn from two candidate seeds
    (2·index and 2·index + 1) and the first that shows a favoured condition is taken (else the first): frames
    of those conditions become about 1 - (1 - p)² of the run instead of p, at most twice the drawing cost.
    """
    candidates = (2 * index, 2 * index + 1) if favour else (index,)
    for k, candidate in enumerate(candidates):
        seed = training_seed(run_seed, candidate)
        s = scene(seed, A.IMG_W, A.IMG_H)
        if k == 0:
            first = (seed, s)
        if set(s.conditions) & set(favour):
            break
    else:
        seed, s = first
    frame, lanes = s.frame, s.lanes
    if flip and training_seed(run_seed, index) % 2 == 1:  # the frame's own index decides, favoured or not
        frame = np.ascontiguousarray(frame[:, ::-1])
        lanes = [np.stack([A.IMG_W - 1 - lane[:, 0], lane[:, 1]], 1) for lane in lanes]
    return frame, lane_targets(lanes, A.IMG_W, A.IMG_H), seed


def make_batch(
    run_seed: int, first: int, size: int, *, flip: bool = True, favour: tuple[str, ...] = ()
) -> tuple[np.ndarray, list[np.ndarray], list[int]]:
    """Frames first..first+size-1 of a run: (uint8 [B, 360, 640, 3] BGR, target rows per image, seeds)."""
    return _stacked([make_example(run_seed, i, flip, favour) for i in range(first, first + size)])


def _stacked(examples: list[tuple[np.ndarray, np.ndarray, int]]) -> tuple[np.ndarray, list[np.ndarray], list[int]]:
    return np.stack([e[0] for e in examples]), [e[1] for e in examples], [e[2] for e in examples]


def _quiet_worker() -> None:
    import cv2

    cv2.setNumThreads(1)


def batches(
    run_seed: int, first: int, size: int, *, flip: bool = True, workers: int = 0, favour: tuple[str, ...] = ()
) -> Generator[tuple[np.ndarray, list[np.ndarray], list[int]], None, None]:
    """`make_batch` for first, first + size, ... without end; with `workers`, frames are drawn ahead in
    that many processes (the same frames, in the same order: each is a function of its seed)."""
    if workers <= 0:
        while True:
            yield make_batch(run_seed, first, size, flip=flip, favour=favour)
            first += size
    # spawn: the parent may hold CUDA and OpenMP threads, which forked children must not inherit
    with multiprocessing.get_context("spawn").Pool(workers, initializer=_quiet_worker) as pool:
        pending: collections.deque[Any] = collections.deque()
        ahead = first
        while True:
            while len(pending) < max(4 * workers, 2 * size):
                pending.append(pool.apply_async(make_example, (run_seed, ahead, flip, favour)))
                ahead += 1
            yield _stacked([pending.popleft().get() for _ in range(size)])


def to_input(frames: np.ndarray, device: Any = None) -> Any:
    """uint8 [B, H, W, 3] BGR -> float32 [B, 3, H, W] in [0, 1], channels_last memory, on `device`.

    The uint8 frames travel to the device first (a quarter of the bytes) and are converted there:
    on a GPU that takes the conversion off the training process's CPU."""
    import torch

    x = torch.from_numpy(frames)
    if device is not None:
        x = x.to(device, non_blocking=True)
    x = x.permute(0, 3, 1, 2).float().div_(255.0)
    return x.contiguous(memory_format=torch.channels_last)


@dataclass
class TrainConfig:
    """What a run does; saved in its checkpoints."""

    out: str
    anchor_indices: list[int]
    backbone: str = "resnet18"
    batch: int = 8
    lr: float = 3e-4
    seed: int = 0
    schedule_steps: int = 0  # cosine T_max in steps (reproducible); 0: use schedule_seconds
    schedule_seconds: float = 0.0  # cosine over training time (to the deadline when 0 and one is set)
    deadline: float = 0.0  # time.time() at which to stop (0: none)
    max_steps: int = 0  # stop after this many steps (0: none)
    bf16: bool = False  # bf16 autocast pays only on CPUs with AMX / avx512_bf16, or on a GPU
    channels_last: bool = True
    threads: int = 2
    device: str = "cpu"  # where the model trains: "cpu" or a CUDA device ("cuda", "cuda:1")
    workers: int = 0  # processes drawing frames ahead (0: drawn in the training process)
    checkpoint_every_s: float = 300.0
    train_nms: bool = True
    flip: bool = True
    favour: tuple[str, ...] = ()  # condition tags drawn more often (make_example)
    init: str = ""  # warm start: weights of this checkpoint (a run's last.pt or official format), fresh optimizer
    extra: dict[str, object] = field(default_factory=dict)  # free-form notes, saved in the checkpoint's "config"


CHECKPOINT = "last.pt"
LOG = "log.csv"
LOG_FIELDS = ("step", "images", "elapsed_s", "lr", "loss", "cls_loss", "reg_loss", "positives", "images_per_s")


def build_model(backbone: str, anchor_indices: Sequence[int], seed: int) -> Any:
    """A LaneATT in training mode, initialised from torch.manual_seed(seed) (no pretrained weights)."""
    import torch

    from ..lanedet.laneatt.model import LaneATT

    torch.manual_seed(seed)
    model = LaneATT(backbone, np.asarray(anchor_indices, dtype=np.int64))
    return model.to(memory_format=torch.channels_last).train()  # type: ignore[call-overload]  # torch stubs lack it


def _save(path: Path, obj: dict[str, object]) -> None:
    """torch.save `obj` (a checkpoint mapping, torch's format) atomically."""
    import torch

    with atomic_path(path) as tmp:
        torch.save(obj, tmp)


def _lr_at(step: int, elapsed_s: float, cfg: TrainConfig) -> float:
    """Cosine annealing from cfg.lr to 0 over schedule_steps steps, else over schedule_seconds of
    training time (a run that must stop at a wall-clock time anneals fully whatever its speed)."""
    if cfg.schedule_steps > 0:
        t = min(step / cfg.schedule_steps, 1.0)
    elif cfg.schedule_seconds > 0:
        t = min(elapsed_s / cfg.schedule_seconds, 1.0)
    else:
        return cfg.lr
    return 0.5 * cfg.lr * (1.0 + math.cos(math.pi * t))


def train(cfg: TrainConfig, *, resume: bool = False, log: Callable[[str], None] = print) -> Path:
    """Run (or resume) training into cfg.out; returns the checkpoint path.

    Stops at cfg.deadline / cfg.max_steps, checkpointing every cfg.checkpoint_every_s and at the end.
    """
    import torch

    torch.set_num_threads(cfg.threads)
    try:
        device = torch.device(cfg.device)
        if device.type == "cuda" and not torch.cuda.is_available():
            raise RuntimeError("this torch sees no CUDA device")
    except RuntimeError as exc:
        raise TrainingError(f"cannot train on {cfg.device!r}: {exc}; use --device cpu") from None
    torch.backends.cudnn.benchmark = True
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    ckpt_path = out / CHECKPOINT
    model = build_model(cfg.backbone, cfg.anchor_indices, cfg.seed).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=cfg.lr)
    step, images, elapsed = 0, 0, 0.0
    if resume:
        if not ckpt_path.is_file():
            raise TrainingError(f"cannot resume: {ckpt_path} not found; start without --resume")
        state = torch.load(ckpt_path, map_location="cpu", weights_only=False)
        saved = state["config"]
        if list(saved["anchor_indices"]) != list(cfg.anchor_indices) or saved["backbone"] != cfg.backbone:
            raise TrainingError(f"cannot resume from {ckpt_path}: it was trained with other anchors or backbone")
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        torch.set_rng_state(state["torch_rng"])
        step, images, elapsed = state["step"], state["images"], state["elapsed_s"]
        cfg.seed, cfg.batch, cfg.lr = saved["seed"], saved["batch"], saved["lr"]
        cfg.favour = tuple(cfg.favour or saved.get("favour") or ())
        if not cfg.schedule_steps:
            cfg.schedule_steps = saved["schedule_steps"]
        if not cfg.schedule_steps:  # time schedule: stretched to end at the new deadline, if one is given
            cfg.schedule_seconds = elapsed + (cfg.deadline - time.time()) if cfg.deadline else saved["schedule_seconds"]
        log(f"resumed from {ckpt_path} at step {step} ({images} images)")
    else:
        if cfg.init:
            weights = torch.load(cfg.init, map_location="cpu", weights_only=False)["model"]
            try:
                model.load_state_dict({k: v.float() if v.is_floating_point() else v for k, v in weights.items()})
            except RuntimeError as exc:
                raise TrainingError(f"cannot start from {cfg.init}: {one_line(exc, first_line=True)}") from None
            log(f"weights from {cfg.init}")
        if not cfg.schedule_steps and not cfg.schedule_seconds and cfg.deadline:
            cfg.schedule_seconds = cfg.deadline - time.time()
    if cfg.schedule_steps:
        log(f"cosine schedule over {cfg.schedule_steps} steps")
    elif cfg.schedule_seconds:
        log(f"cosine schedule over {cfg.schedule_seconds / 60:.1f} min of training time")
    anchors = model.anchors.detach().clone()

    def checkpoint() -> None:
        _save(ckpt_path, {
            "model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": step, "images": images,
            "elapsed_s": elapsed, "torch_rng": torch.get_rng_state(), "config": asdict(cfg),
        })

    log_path = out / LOG
    new_log = not log_path.exists() or not resume
    log_file = open(log_path, "w" if new_log else "a", newline="")
    writer = csv.writer(log_file)
    if new_log:
        writer.writerow(LOG_FIELDS)
    start_wall = time.time()
    start_elapsed = elapsed
    last_ckpt = time.time()
    window_t, window_n = time.perf_counter(), 0
    frames_ahead = batches(cfg.seed, images, cfg.batch, flip=cfg.flip, workers=cfg.workers,
                           favour=tuple(cfg.favour))
    try:
        while True:
            if cfg.max_steps and step >= cfg.max_steps:
                break
            if cfg.deadline and time.time() >= cfg.deadline:
                break
            lr = _lr_at(step, elapsed, cfg)
            for group in optimizer.param_groups:
                group["lr"] = lr
            frames, targets, _ = next(frames_ahead)
            x = to_input(frames, device)
            tgts = [torch.from_numpy(t).to(device) for t in targets]
            with torch.autocast(device.type, dtype=torch.bfloat16, enabled=cfg.bf16):
                proposals = model(x)
            loss, parts = laneatt_loss(proposals.float(), anchors, tgts, train_nms=cfg.train_nms)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            if not math.isfinite(float(loss.detach())):
                raise TrainingError(f"loss became {float(loss.detach())} at step {step}; lower --lr and resume from the checkpoint")
            step += 1
            images += cfg.batch
            window_n += cfg.batch
            elapsed = start_elapsed + (time.time() - start_wall)
            now = time.perf_counter()
            ips = window_n / max(now - window_t, 1e-9)
            if step % 10 == 0:
                writer.writerow([step, images, f"{elapsed:.1f}", f"{lr:.3e}", f"{float(loss.detach()):.5f}",
                                 f"{parts['cls_loss']:.5f}", f"{parts['reg_loss']:.5f}", parts["positives"], f"{ips:.2f}"])
                log_file.flush()
                log(f"step {step} images {images} loss {float(loss.detach()):.4f} cls {parts['cls_loss']:.4f} "
                    f"reg {parts['reg_loss']:.4f} pos {parts['positives']} lr {lr:.2e} {ips:.2f} img/s")
                window_t, window_n = now, 0
            if time.time() - last_ckpt >= cfg.checkpoint_every_s:
                checkpoint()
                last_ckpt = time.time()
                log(f"checkpoint {ckpt_path} (step {step})")
    finally:
        frames_ahead.close()
        log_file.close()
    checkpoint()
    log(f"stopped at step {step} ({images} images); checkpoint {ckpt_path}")
    return ckpt_path


def export_fp16(checkpoint: Path | str, dest: Path | str) -> Path:
    """Training checkpoint -> official-format LaneATT weights `{'model': state_dict}`, floats as FP16."""
    import torch

    state = torch.load(checkpoint, map_location="cpu", weights_only=False)
    weights = {k: (v.half() if v.is_floating_point() else v) for k, v in state["model"].items()}
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    _save(dest, {"model": weights})
    return dest
