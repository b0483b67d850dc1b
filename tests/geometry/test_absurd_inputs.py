"""Absurd numbers through the API as through the files (issue 44 items 9 and 11): 401-digit integers and speeds of
inf are refused in one line, a NaN lane score gives a quality of 0, and what edge-deploy writes as JSON is strict
JSON (no NaN or Infinity, which strict parsers refuse)."""
from __future__ import annotations

import json
import math

import numpy as np
import pytest

from edge_deploy.errors import CalibrationError, GeometryError
from edge_deploy.geometry import Camera, LaneGeometry, Mounting
from edge_deploy.geometry.figures import lane_figures
from edge_deploy.geometry.markers import fit_marker
from edge_deploy.synthetic.roads import EVAL_SEED_BASE, scene_truth

HUGE = 10 ** 400


def _refuse_constants(name: str) -> None:
    raise ValueError(f"{name} is not strict JSON")


@pytest.fixture(scope="module")
def camera() -> Camera:
    return Camera.from_mapping(scene_truth(EVAL_SEED_BASE, 640, 360).camera)


def test_huge_numbers_given_to_the_api_are_one_line_errors(camera) -> None:
    k = camera.camera_matrix
    for make, needle in (
        (lambda: Mounting(height_m=HUGE), "height_m must be a positive number of metres, at most 100 (got an integer"),
        (lambda: Mounting(height_m=1.5, pitch_deg=HUGE), "pitch_deg must be between -60 and 60 degrees"),
        (lambda: Camera(HUGE, 360, k, camera.distortion, camera.mounting), "from 1 to 100000 (got an integer of about"),
        (lambda: Camera(640, 360, [[HUGE, 0, 1], [0, 1, 1], [0, 0, 1]], camera.distortion, camera.mounting),
         "camera_matrix and distortion must hold numbers"),
    ):
        with pytest.raises(CalibrationError) as caught:
            make()
        assert needle in str(caught.value) and len(str(caught.value)) < 300, str(caught.value)


@pytest.mark.parametrize("speed", [math.inf, 1e308, math.nan, -1.0, HUGE])
def test_a_speed_a_vehicle_cannot_drive_is_refused(camera, speed) -> None:
    with pytest.raises(GeometryError, match="speed_mps must be 0 to 100 metres per second"):
        LaneGeometry(camera, speed_mps=speed)
    with pytest.raises(GeometryError, match="speed_mps must be 0 to 100"):
        lane_figures(None, speed)


def test_a_nan_lane_score_gives_quality_0_and_output_json_is_strict(tmp_path) -> None:
    from edge_deploy.core.fsutil import write_json_atomic
    from edge_deploy.core.strict_json import dumps

    x = np.linspace(5.0, 40.0, 20)
    found = fit_marker(np.stack([x, 1.8 + 0.001 * x ** 2], axis=1), score=math.nan)
    assert found is not None and found.quality == 0.0
    data = {"offset_m": math.nan, "ttc_s": [math.inf, 1.5, np.float32(-np.inf)], "n": 3}
    assert json.loads(dumps(data), parse_constant=_refuse_constants) == {"offset_m": None, "ttc_s": [None, 1.5, None],
                                                                         "n": 3}
    write_json_atomic(tmp_path / "out.json", data)
    assert json.loads((tmp_path / "out.json").read_text(), parse_constant=_refuse_constants)["offset_m"] is None
