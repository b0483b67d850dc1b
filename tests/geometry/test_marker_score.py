"""`evaluate --camera`: markers scored against the synthetic truth, through evaluate() with a runner that returns
the truth itself (every ego lane found, no error), the truth moved sideways, or nothing."""
from __future__ import annotations

import numpy as np
import pytest

from edge_deploy.errors import EvaluationError
from edge_deploy.evaluate.datasets import evaluation_frames, synthetic_frames
from edge_deploy.evaluate.run import evaluate
from edge_deploy.lanedet.lane import Lane


class TruthRunner:
    """Returns each frame's true lanes, shifted `dx` pixels sideways."""

    name = "truth"

    def __init__(self, frames: list, dx: float = 0.0) -> None:
        self._truth = {id(item[1]): item[2] for item in frames}
        self.dx = dx

    def detect(self, frame: np.ndarray) -> list[Lane]:
        return [Lane(points + np.array([self.dx, 0.0], np.float32), 1.0) for points in self._truth[id(frame)]]


@pytest.fixture(scope="module")
def frames() -> list:
    return list(synthetic_frames(4, seed=1, width=820, height=295, marker_truth=True))


def test_the_truth_scores_perfectly(frames):
    report, _ = evaluate(TruthRunner(frames), frames, camera="scene")
    score = report.markers
    assert score.frames == 4 and score.both_visible >= 3 and score.ego_found == score.both_visible
    assert score.c0_error_m["p95"] < 0.01 and score.heading_error_deg["p95"] < 0.05
    assert set(score.by_condition) == {tag for item in frames for tag in item[3]}
    assert report.to_dict()["markers"]["ego_found_rate"] == 1.0


def test_lanes_moved_sideways_turn_the_heading_and_missing_lanes_are_not_found(frames):
    # the whole picture moved sideways is the camera turned: the same c0, another heading
    moved, _ = evaluate(TruthRunner(frames, dx=120.0), frames, camera="scene")
    assert moved.markers.c0_error_m["p50"] < 0.01 and moved.markers.heading_error_deg["p50"] > 5.0
    nothing, _ = evaluate(TruthRunner([(None, item[1], []) for item in frames]), frames, camera="scene")
    assert nothing.markers.ego_found == 0 and nothing.markers.c0_error_m["p50"] is None


def test_markers_need_the_synthetic_truth(tmp_path):
    with pytest.raises(EvaluationError, match="only they have"):
        evaluation_frames(data=tmp_path / "list.txt", marker_truth=True)
