"""Training pieces for the demo weights: targets, matching, loss, seeds, checkpoints."""
from __future__ import annotations

import csv

import numpy as np
import pytest
from needs import torch_or_skip

torch = torch_or_skip()

from edge_deploy.lanedet.laneatt import anchors as A  # noqa: E402
from edge_deploy.lanedet.laneatt.model import LaneATT, load_checkpoint  # noqa: E402
from edge_deploy.synthetic.roads import EVAL_SEED_BASE  # noqa: E402
from edge_deploy.training.train import (  # noqa: E402
    STRIP_YS,
    TrainConfig,
    TrainingError,
    export_fp16,
    lane_targets,
    laneatt_loss,
    batches,
    make_batch,
    match_anchors,
    train,
    train_nms_keep,
    training_seed,
)
from edge_deploy.lanedet.laneatt.decode import nms_keep  # noqa: E402

IDX = np.arange(0, A.N_ANCHORS, 14)[:200]  # a spread of anchors, enough for matching


def test_training_refuses_evaluation_seeds():
    assert training_seed(0, 5) == 5
    assert training_seed(3, 7) == 3 * 50_000_000 + 7
    with pytest.raises(TrainingError):
        training_seed(EVAL_SEED_BASE // 50_000_000, 0)
    with pytest.raises(TrainingError):
        training_seed(19, 50_000_000)  # would reach EVAL_SEED_BASE


def test_lane_targets_from_the_bottom():
    # a straight lane from (100, 359) up to (300, 100) in a 640x360 frame
    lane = np.array([[300.0, 100.0], [200.0, 229.5], [100.0, 359.0]], dtype=np.float32)
    (row,) = lane_targets([lane], 640, 360)
    x_at = lambda y: 100.0 + (359.0 - y) * 200.0 / 259.0  # noqa: E731
    covered = STRIP_YS >= 100.0
    assert row[:3].tolist() == [0.0, 1.0, 0.0]  # starts at the bottom strip
    assert row[4] == covered.sum()
    np.testing.assert_allclose(row[5 : 5 + covered.sum()], x_at(STRIP_YS[covered]), atol=1e-3)
    assert row[3] == pytest.approx(x_at(360.0), abs=1e-3)
    assert (row[5 + covered.sum() :] == -1e5).all()


def test_lane_targets_scale_and_count_outside_strips():
    # in a 1640x590 frame, a lane entering from the left edge: extended below, it leaves the image
    lane = np.array([[1640 * 300 / 640, 100 * 590 / 360], [1640 * 50 / 640, 200 * 590 / 360]], dtype=np.float32)
    (row,) = lane_targets([lane], 1640, 590)
    xs = 50.0 + (200.0 - STRIP_YS) * 250.0 / 100.0  # the line in 640x360 pixels, every strip
    top = STRIP_YS >= 100.0 - 1e-6
    outside = top & (xs < 0)
    n_out = int(outside.sum())
    assert n_out > 0 and row[2] == pytest.approx(n_out / 71)
    assert row[4] == int((top & (xs >= 0)).sum())
    np.testing.assert_allclose(row[5 : 5 + top.sum()], xs[top], atol=1e-2)
    assert row[3] == pytest.approx(xs[n_out], abs=1e-2)
    assert lane_targets([lane[:1], np.zeros((0, 2))], 1640, 590).shape == (0, 77)


def _anchor_rows() -> np.ndarray:
    return A.generate_anchors()[IDX]


def _lane_of(anchor_row: np.ndarray) -> np.ndarray:
    xs = anchor_row[5:]
    ok = (xs >= 0) & (xs < 640)
    return np.stack([xs[ok], STRIP_YS[ok]], 1)[::-1].astype(np.float32)


def test_match_anchors_takes_the_anchor_a_lane_lies_on():
    table = _anchor_rows()
    k = 70
    target = torch.from_numpy(lane_targets([_lane_of(table[k])], 640, 360))
    pos, neg, which = match_anchors(torch.from_numpy(table), target)
    assert pos[k] and not neg[k] and which.tolist() == [0] * int(pos.sum())
    assert pos.sum() < 20 and neg.sum() > 150
    # shifting the lane by 30 px makes the anchor a negative
    moved = _lane_of(table[k]) + np.array([30.0, 0.0], dtype=np.float32)
    pos, neg, _ = match_anchors(torch.from_numpy(table), torch.from_numpy(lane_targets([moved], 640, 360)))
    assert not pos[k] and neg[k]


def test_loss_rewards_the_right_answer():
    table = torch.from_numpy(_anchor_rows())
    k = 70
    target = torch.from_numpy(lane_targets([_lane_of(table[k].numpy())], 640, 360))
    pos, _, _ = match_anchors(table, target)

    def proposals(score_right: bool, offset: float) -> torch.Tensor:
        p = table.clone()[None]
        p[0, :, 4] = target[0, 4] if score_right else 0.0
        p[0, pos, 5:] += offset
        p[0, :, 1] = torch.where(pos, 4.0, -4.0) if score_right else torch.where(pos, -4.0, 4.0)
        return p.requires_grad_()

    good, parts = laneatt_loss(proposals(True, 0.0), table, [target])
    bad, _ = laneatt_loss(proposals(False, 8.0), table, [target])
    assert torch.isfinite(good) and good < 0.1 * bad and parts["positives"] >= 1
    assert parts["cls_loss"] < 1e-3 and parts["reg_loss"] < 1e-6  # confident and exact: next to nothing
    p = proposals(False, 8.0)
    loss, _ = laneatt_loss(p, table, [target], train_nms=False)
    loss.backward()
    assert p.grad[0, pos, 5:].abs().sum() > 0 and p.grad[0, :, :2].abs().sum() > 0
    assert p.grad[0, :, 2:4].abs().sum() == 0  # start_y/start_x are the anchor's, not learned
    empty, parts = laneatt_loss(proposals(True, 0.0), table, [target[:0]])
    assert parts["reg_loss"] == 0.0 and empty > 0  # no lanes: every proposal should score negative


def test_make_batch_is_seeded_and_mirrors_half():
    frames, targets, seeds = make_batch(0, 0, 2)
    again, targets_again, _ = make_batch(0, 0, 2)
    assert frames.shape == (2, 360, 640, 3) and frames.dtype == np.uint8 and seeds == [0, 1]
    np.testing.assert_array_equal(frames, again)
    assert all(np.array_equal(a, b) for a, b in zip(targets, targets_again))
    plain, _, _ = make_batch(0, 1, 1, flip=False)
    np.testing.assert_array_equal(frames[1], plain[0][:, ::-1])  # seed 1 is odd: mirrored


def test_favoured_conditions_are_drawn_more_often_from_two_candidates():
    # frame i of a favouring run is the first of candidates 2i, 2i+1 that shows a favoured tag, else 2i
    from edge_deploy.synthetic.roads import scene

    favour = ("curve", "s_curve", "worn")
    shows = {}
    for candidate in range(24):
        shows[candidate] = bool(set(scene(candidate, 640, 360).conditions) & set(favour))
    frames, _, seeds = make_batch(0, 0, 12, flip=False, favour=favour)
    expected = [2 * i if shows[2 * i] or not shows[2 * i + 1] else 2 * i + 1 for i in range(12)]
    assert seeds == expected
    assert sum(shows[s] for s in seeds) > sum(shows[i] for i in range(12))  # more favoured frames than plain
    np.testing.assert_array_equal(frames[0], scene(seeds[0], 640, 360).frame)
    mirrored, _, _ = make_batch(0, 1, 1, favour=favour)  # frame 1: mirrored by its index, whichever seed drew it
    np.testing.assert_array_equal(mirrored[0], frames[1][:, ::-1])


def test_frames_drawn_in_workers_are_the_same_frames():
    direct = [make_batch(0, 3, 2), make_batch(0, 5, 2)]
    drawn = batches(0, 3, 2, workers=2)
    try:
        for (frames, targets, seeds), (f2, t2, s2) in zip(direct, [next(drawn), next(drawn)]):
            assert seeds == s2
            np.testing.assert_array_equal(frames, f2)
            assert all(np.array_equal(a, b) for a, b in zip(targets, t2))
    finally:
        drawn.close()


def test_gpu_training_nms_keeps_what_the_decoder_nms_keeps():
    # train_nms_keep is what training runs on a CUDA device (the pairwise matrix on the device); it runs
    # on CPU tensors too, so it is checked here against decode.nms_keep on proposal-like rows.
    rng = np.random.default_rng(3)
    rows = A.generate_anchors()[:600].astype(np.float32)
    rows[:, 5:] += rng.normal(0, 20, rows[:, 5:].shape).astype(np.float32)
    rows[:, 4] = rng.uniform(0, 80, len(rows)).astype(np.float32)
    rows[:, 2] = rng.uniform(-0.1, 1.1, len(rows)).astype(np.float32)
    order = torch.argsort(torch.from_numpy(rng.uniform(size=len(rows))), descending=True, stable=True)
    for threshold, top_k in ((15.0, 3000), (50.0, 4), (15.0, 37)):
        want = nms_keep(rows, order=order.numpy(), nms_threshold=threshold, top_k=top_k)
        got = train_nms_keep(torch.from_numpy(rows), order, threshold, top_k).numpy()
        assert 0 < len(want) <= top_k and len(want) < len(rows)
        np.testing.assert_array_equal(got, want)


@pytest.mark.slow
def test_train_resumes_and_exports_fp16_weights(tmp_path):
    cfg = dict(out=str(tmp_path), anchor_indices=IDX.tolist(), batch=1, max_steps=1, schedule_steps=4,
               checkpoint_every_s=1e9)
    ckpt = train(TrainConfig(**cfg), log=lambda m: None)
    state = torch.load(ckpt, weights_only=False)
    assert state["step"] == 1 and state["images"] == 1
    train(TrainConfig(**{**cfg, "max_steps": 2}), resume=True, log=lambda m: None)
    state2 = torch.load(ckpt, weights_only=False)
    assert state2["step"] == 2 and state2["images"] == 2
    assert any(not torch.equal(state["model"][k], state2["model"][k]) for k in state["model"])
    with pytest.raises(TrainingError):
        train(TrainConfig(**{**cfg, "anchor_indices": IDX[:100].tolist()}), resume=True, log=lambda m: None)

    dest = export_fp16(ckpt, tmp_path / "w.pt")
    saved = torch.load(dest, weights_only=True)
    assert set(saved) == {"model"}
    assert {v.dtype for v in saved["model"].values() if v.is_floating_point()} == {torch.float16}
    model = load_checkpoint(LaneATT("resnet18", IDX), dest)  # strict, cast to the model's FP32
    for k, v in model.state_dict().items():
        torch.testing.assert_close(v.float(), state2["model"][k].float(), atol=2e-3, rtol=1e-3)
    with open(tmp_path / "log.csv") as f:
        assert next(csv.reader(f))[:2] == ["step", "images"]


def test_length_target_counts_from_the_anchor_start():
    # a lane entering from the left edge; anchors from lower down that follow it are positives too,
    # and their length target is the lane's length counted from their own start
    table = torch.from_numpy(A.generate_anchors())
    side = 20 * len(A.LEFT_ANGLES)  # left edge, 20 strips up, the steepest angle: neighbours stay close
    target = torch.from_numpy(lane_targets([_lane_of(table[side].numpy())], 640, 360))
    pos, _, which = match_anchors(table, target)
    starts = (table[pos, 2] * 71).round()
    t_start = (target[0, 2] * 71).round()
    assert (starts != t_start).any()
    p = table.clone()[None]
    p[0, :, 1] = torch.where(pos, 9.0, -9.0)
    p[0, pos, 5:] = target[0, 5:]
    p[0, pos, 4] = target[0, 4] - (starts - t_start)
    _, parts = laneatt_loss(p, table, [target], train_nms=False)
    assert parts["reg_loss"] < 1e-6


def test_cosine_schedule_by_steps_or_by_training_time():
    from edge_deploy.training.train import _lr_at

    by_steps = TrainConfig(out="x", anchor_indices=[], lr=1e-3, schedule_steps=100, schedule_seconds=10.0)
    assert _lr_at(0, 99.0, by_steps) == pytest.approx(1e-3)
    assert _lr_at(50, 0.0, by_steps) == pytest.approx(5e-4)
    assert _lr_at(150, 0.0, by_steps) == pytest.approx(0.0)
    by_time = TrainConfig(out="x", anchor_indices=[], lr=1e-3, schedule_seconds=600.0)
    assert _lr_at(7, 150.0, by_time) == pytest.approx(0.5e-3 * (1 + np.cos(np.pi / 4)))
    assert _lr_at(7, 900.0, by_time) == pytest.approx(0.0)
    assert _lr_at(7, 900.0, TrainConfig(out="x", anchor_indices=[], lr=1e-3)) == 1e-3
