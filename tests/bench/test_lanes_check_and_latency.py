"""`bench`'s lanes-equal check and latency figures, on numbers whose answer is known (issue 44, "tests that
notice": only a different lane count, and only the order p50 <= p90 <= p99, were tested). Real lanes and the real
check; the detector is a table of lanes per (target, frame), since which lanes a server gives is not the point here."""
from __future__ import annotations

import numpy as np
import pytest

from edge_deploy.bench.lanes_check import check_lanes_equal, lanes_differ
from edge_deploy.bench.results import Latency
from edge_deploy.bench.targets import BenchTarget
from edge_deploy.errors import BenchError
from edge_deploy.lanedet.lane import Lane

RAW = BenchTarget("lane", "lane", "client-side", "laneatt")
BLS = BenchTarget("lane_pipeline", "lane", "bls", "laneatt")


def _lane(dx: float = 0.0, score: float = 0.9) -> Lane:
    return Lane(np.float32([[100.0 + dx, 0.0], [120.0 + dx, 100.0], [140.0 + dx, 200.0]]), score)


@pytest.mark.parametrize("dx, why", [(0.0, None), (0.4, None), (3.0, "lane 0 is 3.0 px away"),
                                     (-2.5, "lane 0 is 2.5 px away")])
def test_a_lane_that_moved_a_few_pixels_is_a_difference(dx, why) -> None:
    assert lanes_differ([_lane(dx)], [_lane()], tolerance_px=1.0) == why


def test_the_check_names_the_pipeline_whose_lane_moved() -> None:
    frames = [("road-000", 0), ("road-001", 1)]
    table = {(RAW.name, 0): [_lane()], (BLS.name, 0): [_lane()], (RAW.name, 1): [_lane(), _lane(300.0, 0.7)],
             (BLS.name, 1): [_lane(), _lane(303.0, 0.7)]}
    with pytest.raises(BenchError, match=r"lane_pipeline and lane give different lanes on frame road-001 "
                                         r"\(lane_pipeline: lane 1 is 3\.0 px away\)"):
        check_lanes_equal([RAW, BLS], frames, lambda target, frame: table[target.name, frame], tolerance_px=1.0)
    table[BLS.name, 1] = [_lane(), _lane(300.5, 0.7)]
    found = check_lanes_equal([RAW, BLS], frames, lambda target, frame: table[target.name, frame], tolerance_px=1.0)
    assert (found.frames, found.lanes) == (2, 3)


def test_latency_percentiles_are_the_percentiles() -> None:
    latency = Latency.of([ms / 1e3 for ms in range(1, 101)])  # 1..100 ms
    assert latency.p50_ms == pytest.approx(50.5) and latency.p90_ms == pytest.approx(90.1)
    assert latency.p99_ms == pytest.approx(99.01) and latency.mean_ms == pytest.approx(50.5)
