"""The camera model: image <-> ground round trips, distortion read from the YAML, the horizon, the mounting
conventions, the pitch from a vanishing point."""
from __future__ import annotations

import math

import numpy as np
import pytest

from edge_deploy.errors import CalibrationError, GeometryError
from edge_deploy.geometry import Camera, Mounting, pitch_from_vanishing_point


def make_camera(*, pitch: float = 2.0, roll: float = 0.0, yaw: float = 0.0, height: float = 1.5,
                distortion: list[float] | None = None, model: str = "plumb_bob") -> Camera:
    k = np.array([[1000.0, 0.0, 640.0], [0.0, 1000.0, 360.0], [0.0, 0.0, 1.0]])
    return Camera(1280, 720, k, np.array(distortion or [0.0] * 5), Mounting(height, pitch, roll, yaw), model)


GROUND = np.array([[5.0, 0.0], [8.0, 1.8], [12.0, -1.7], [30.0, 3.5], [60.0, -5.0], [100.0, 0.3]])


@pytest.mark.parametrize("pitch, roll, yaw", [(0.0, 0.0, 0.0), (2.0, 0.0, 0.0), (3.0, -2.5, 1.0), (-1.0, 4.0, -2.0)])
def test_ground_to_image_to_ground_round_trip(pitch, roll, yaw):
    camera = make_camera(pitch=pitch, roll=roll, yaw=yaw)
    pixels = camera.ground_to_image(GROUND)
    np.testing.assert_allclose(camera.image_to_ground(pixels), GROUND, atol=1e-6)


def test_image_to_ground_to_image_round_trip_with_distortion_read_from_yaml(tmp_path):
    camera = make_camera(distortion=[-0.28, 0.07, 0.001, -0.0005, 0.0])
    camera.to_yaml(tmp_path / "calib.yaml")
    again = Camera.from_yaml(tmp_path / "calib.yaml")
    assert again.distortion.tolist() == [-0.28, 0.07, 0.001, -0.0005, 0.0]
    pixels = np.array([[640.0, 700.0], [200.0, 650.0], [1100.0, 500.0], [640.0, 420.0]])
    ground = again.image_to_ground(pixels)
    np.testing.assert_allclose(again.ground_to_image(ground), pixels, atol=1e-3)
    # the distortion matters: the same pixels without it land elsewhere on the road
    plain = make_camera()
    assert np.abs(plain.image_to_ground(pixels[:3]) - ground[:3]).max() > 0.05


def test_fisheye_round_trip():
    camera = make_camera(distortion=[0.05, -0.01, 0.002, 0.0], model="equidistant")
    np.testing.assert_allclose(camera.image_to_ground(camera.ground_to_image(GROUND)), GROUND, atol=1e-4)


def test_conventions_forward_left_and_the_mounting_angles():
    level = make_camera(pitch=0.0)
    # straight ahead on the road: below the principal point; left of the vehicle: left in the picture
    (u0, v0), (u_left, _) = level.ground_to_image(np.array([[10.0, 0.0], [10.0, 2.0]]))
    assert u0 == pytest.approx(640.0) and v0 == pytest.approx(360.0 + 1000.0 * 1.5 / 10.0)
    assert u_left < u0
    assert level.horizon_row() == pytest.approx(360.0)
    # pitched down: the horizon moves up; yawed left: the road ahead moves right in the picture
    assert make_camera(pitch=3.0).horizon_row() == pytest.approx(360.0 - 1000.0 * math.tan(math.radians(3.0)))
    (u_yawed, _), = make_camera(pitch=0.0, yaw=2.0).ground_to_image(np.array([[50.0, 0.0]]))
    assert u_yawed > 640.0 + 1000.0 * math.tan(math.radians(1.9))
    # rolled (top to the right): the picture turns anticlockwise, so the right side of the road rises
    rolled = make_camera(pitch=0.0, roll=3.0)
    (_, v_left), (_, v_right) = rolled.ground_to_image(np.array([[10.0, 3.0], [10.0, -3.0]]))
    assert v_right < v_left


def test_points_above_the_horizon_are_refused_in_one_line():
    camera = make_camera(pitch=2.0)
    horizon = camera.horizon_row()
    with pytest.raises(GeometryError, match="above the horizon") as caught:
        camera.image_to_ground(np.array([[640.0, 700.0], [640.0, horizon - 5.0]]))
    assert "\n" not in str(caught.value) and f"{horizon - 5.0:.1f}" in str(caught.value)
    lenient = camera.image_to_ground(np.array([[640.0, 700.0], [640.0, horizon - 5.0]]), strict=False)
    assert np.isfinite(lenient[0]).all() and np.isnan(lenient[1]).all()


def test_a_camera_looking_at_the_sky_is_refused():
    with pytest.raises(CalibrationError, match="looks at the sky"):
        make_camera(pitch=-30.0)


def test_scaled_to_another_frame_size_sees_the_same_road():
    camera = make_camera()
    half = camera.scaled_to(640, 360)
    np.testing.assert_allclose(half.ground_to_image(GROUND), camera.ground_to_image(GROUND) / 2, atol=1e-6)
    with pytest.raises(CalibrationError, match="calibrated at 640x360"):
        half.check_frame(1280, 720)


def test_pitch_from_the_vanishing_point_of_two_straight_lines():
    camera = make_camera(pitch=2.7, roll=0.0)
    xs = np.linspace(6.0, 60.0, 10)
    left = camera.ground_to_image(np.stack([xs, np.full_like(xs, 1.7)], 1))
    right = camera.ground_to_image(np.stack([xs, np.full_like(xs, -1.9)], 1))
    guess = make_camera(pitch=0.0)  # the pitch is what we are after
    assert pitch_from_vanishing_point(guess, left, right) == pytest.approx(2.7, abs=1e-6)
    with pytest.raises(GeometryError, match="parallel"):
        pitch_from_vanishing_point(guess, np.array([[0.0, 0.0], [0.0, 10.0]]), np.array([[5.0, 0.0], [5.0, 10.0]]))


def test_a_camera_is_written_back_as_the_mapping_it_was_read_from(tmp_path):
    """`sample` writes the generator's camera through Camera: the YAML is the generator's mapping, camera_name
    included (a file's camera_name is kept too)."""
    import yaml

    from edge_deploy.geometry.calibration_file import write_calibration
    from edge_deploy.synthetic.roads import EVAL_SEED_BASE, scene_truth

    mapping = scene_truth(EVAL_SEED_BASE, 640, 360).camera
    path = write_calibration(tmp_path / "road.calib.yaml", Camera.from_mapping(mapping))
    assert path.read_text() == yaml.safe_dump(mapping, sort_keys=False, default_flow_style=None)
    front = Camera.from_mapping({**mapping, "camera_name": "front"}).scaled_to(320, 180)
    assert Camera.from_yaml(front.to_yaml(tmp_path / "front.yaml")).name == "front"
    assert make_camera().to_mapping()["camera_name"] == "edge_deploy"  # a camera made in code
