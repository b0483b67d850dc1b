"""The one number validator (edge_deploy/core/numbers.py) and the library calls that take numbers through it (issue 54,
class 4): each refuses NaN, infinities and values past its documented range in one line of the error family, naming
the range; values inside are taken."""
from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from edge_deploy.errors import (BenchError, CalibrationError, ClientError, EdgeDeployError, GeometryError,
                                NumberError)
from edge_deploy.core.numbers import FPS, MAX_AGE_S, THREADS, Range, finite_points, whole

REPO_ROOT = Path(__file__).resolve().parents[1]


def one_line(exc: pytest.ExceptionInfo[BaseException], *fragments: str) -> str:
    message = str(exc.value)
    assert "\n" not in message and all(f in message for f in fragments), message
    return message


# ---------------------------------------------------------------------------------------------- Range itself

@pytest.mark.parametrize("value, taken", [
    (0, False), (0.0, False), (5e-324, True), (30, True), (1000, True), (math.nextafter(1000, math.inf), False),
    (-30, False), (math.nan, False), (math.inf, False), (-math.inf, False), (1e308, False), (True, False),
    ("30", False), (None, False), (np.float32(30.0), True), (np.int64(30), True),
])
def test_an_open_low_bound_and_a_closed_high_bound(value, taken) -> None:
    assert FPS.contains(value) is taken
    if taken:
        assert FPS.check("--fps", value) == float(value)
    else:
        with pytest.raises(NumberError) as refused:
            FPS.check("--fps", value)
        one_line(refused, "--fps must be a number of frames/s in (0, 1000], not ")


def test_the_named_message_and_its_exit_code() -> None:
    with pytest.raises(NumberError) as refused:
        FPS.check("--fps", math.inf)
    assert str(refused.value) == "--fps must be a number of frames/s in (0, 1000], not inf."
    assert refused.value.exit_code == 2 and isinstance(refused.value, (EdgeDeployError, ValueError))
    with pytest.raises(BenchError):  # the caller's class of the family
        FPS.check("--fps", -1, BenchError)


def test_a_whole_range_takes_whole_numbers_only_and_names_a_huge_one_briefly() -> None:
    count = whole(1, 64, "threads")
    assert count.check("n", 64) == 64 and count.check("n", 2.0) == 2 and isinstance(count.check("n", 2.0), int)
    for bad in (0, 65, 2.5, 10**400):
        with pytest.raises(NumberError) as refused:
            count.check("n", bad)
        message = one_line(refused, "n must be a whole number of threads in [1, 64], not ")
        assert len(message) < 120  # 10**400 as "an integer of about 401 digits", not its digits


def test_text_is_parsed_then_checked() -> None:
    assert THREADS.parse("X", " 4 ") == 4 and THREADS.parse("X", "1e1") == 10
    for text in ("", "two", "1.5", "nan", "inf", "100000", "-1", "0x10"):
        with pytest.raises(NumberError) as refused:
            THREADS.parse("X", text)
        one_line(refused, f"X={text!r} is not a whole number of threads in [1, 64]")
    assert whole(1, 64, "frames").parse_list("--c", "1, 2,2,64") == (1, 2, 64)
    for text in ("", ",", "1,65", "0", "nan", "1,x"):
        with pytest.raises(NumberError) as refused:
            whole(1, 64, "frames").parse_list("--c", text)
        one_line(refused, "--c ", "is not a list of comma-separated values, each a whole number of frames in [1, 64]")


@settings(derandomize=True, max_examples=300, deadline=None)
@given(st.floats(min_value=-1e9, max_value=1e9), st.floats(min_value=0, max_value=1e9),
       st.booleans(), st.booleans(), st.one_of(st.floats(), st.integers()))
def test_check_agrees_with_the_bounds_as_written(low, width, low_open, high_open, value) -> None:
    rng = Range(low, low + width, "units", low_open=low_open, high_open=high_open)
    inside = math.isfinite(value) and (value > rng.low if low_open else value >= rng.low) and \
        (value < rng.high if high_open else value <= rng.high)
    assert rng.contains(value) is inside
    text = str(rng)
    assert text[0] == ("(" if low_open else "[") and text[-1] == (")" if high_open else "]")


def test_a_range_needs_finite_ordered_bounds() -> None:
    for low, high in ((0, math.inf), (math.nan, 1), (2, 1)):
        with pytest.raises(ValueError):
            Range(low, high, "x")


def test_the_environment_is_read_through_a_range(monkeypatch) -> None:
    monkeypatch.setenv("EDGE_DEPLOY_TEST_N", "100000")
    with pytest.raises(NumberError) as refused:
        THREADS.env("EDGE_DEPLOY_TEST_N", advice="unset it.")
    one_line(refused, "EDGE_DEPLOY_TEST_N='100000' is not a whole number of threads in [1, 64]; unset it.")
    monkeypatch.setenv("EDGE_DEPLOY_TEST_N", " ")
    assert THREADS.env("EDGE_DEPLOY_TEST_N", 7) == 7


def test_finite_points() -> None:
    assert finite_points([[1, 2], [3, 4]]).shape == (2, 2)
    for bad in ([[1.0, math.nan]], [[math.inf, 0.0]], "abc", [[1, 2, 3]]):
        with pytest.raises(NumberError) as refused:
            finite_points(bad, "points")
        one_line(refused, "points must be")


# ---------------------------------------------------------------------------------------------- the library's calls

@pytest.fixture(scope="module")
def camera():
    from edge_deploy.geometry import Camera
    from edge_deploy.synthetic.roads import EVAL_SEED_BASE, scene_truth

    return Camera.from_mapping(scene_truth(EVAL_SEED_BASE, 1640, 590).camera)


@pytest.mark.parametrize("fps", [-30, 0, math.nan, math.inf, 1e308])
def test_lane_geometry_refuses_a_frame_rate_outside_its_range(camera, fps) -> None:
    from edge_deploy.geometry import LaneGeometry

    with pytest.raises(GeometryError) as refused:
        LaneGeometry(camera, fps=fps)
    one_line(refused, "fps must be a number of frames/s in (0, 1000], not ")
    assert LaneGeometry(camera, fps=30).fps == 30.0


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_nan_or_infinite_image_points_are_one_geometry_error_not_numpys(camera, bad) -> None:
    from edge_deploy.geometry.camera import pitch_from_vanishing_point

    left, right = np.array([[bad, 500.0], [700.0, 580.0]]), np.array([[900.0, 500.0], [1000.0, 580.0]])
    with pytest.raises(GeometryError) as refused:  # numpy's LinAlgError "SVD did not converge" before
        pitch_from_vanishing_point(camera, left, right)
    one_line(refused, "a line's image points must be finite (x, y) pairs, but point 0 is")
    with pytest.raises(GeometryError) as refused:  # "on or above the horizon" before
        camera.image_to_ground(np.array([[800.0, 580.0], [bad, 500.0]]))
    one_line(refused, "image points must be finite (x, y) pairs, but point 1 is")
    assert np.isnan(camera.image_to_ground(np.array([[bad, 500.0]]), strict=False)).all()  # as documented
    with pytest.raises(GeometryError):
        camera.ground_to_image(np.array([[bad, 0.0]]))


@pytest.mark.parametrize("entry, value", [((0, 0), 1e300), ((0, 0), 1e8), ((1, 1), 5.0), ((0, 2), -2000.0),
                                          ((1, 2), 1e9)])
def test_implausible_intrinsics_are_refused_naming_their_range(camera, entry, value) -> None:
    from edge_deploy.geometry import Camera

    k = camera.camera_matrix.copy()
    k[entry] = value
    with pytest.raises(CalibrationError) as refused:
        Camera(camera.width, camera.height, k, camera.distortion, camera.mounting)
    name = {(0, 0): "fx", (1, 1): "fy", (0, 2): "cx", (1, 2): "cy"}[entry]
    one_line(refused, f"camera_matrix {name} must be a ", " in [", "(for a frame ")


def test_client_settings_refuse_numbers_outside_their_ranges(camera) -> None:
    from edge_deploy.client.base import ClientSettings

    for kwargs, says in (({"client_timeout": math.inf}, "client_timeout must be a number of seconds in (0, 86400]"),
                         ({"client_timeout": 0}, "client_timeout must be"),
                         ({"retry_deadline": math.nan}, "retry_deadline must be a number of seconds in [0, 86400]"),
                         ({"camera": camera, "fps": 1e308}, "a number of frames/s in (0, 1000]")):
        with pytest.raises(ClientError) as refused:
            ClientSettings.of(transport="grpc", **kwargs)
        one_line(refused, says)


class _Detects:
    """LaneStream takes any object with detect(frame, deadline=) (docs/client.md); its numbers are refused before
    it is used, so this one is never called."""

    def detect(self, frame, deadline=None):  # noqa: ANN001, ANN201
        raise AssertionError("not called")


@pytest.mark.parametrize("kwargs", [{"max_age": 1e308}, {"max_age": math.nan}, {"fps": math.inf}, {"fps": -30},
                                    {"deadline": 1e308}])
def test_lane_stream_refuses_numbers_outside_their_ranges(kwargs) -> None:
    from edge_deploy.media.stream import LaneStream

    with pytest.raises(ClientError) as refused:
        LaneStream(_Detects(), [], **kwargs)
    name = next(iter(kwargs))
    one_line(refused, f"{name} must be a positive number of ", " in (0, ")


@pytest.mark.parametrize("fps, max_age, says", [(math.inf, 0.1, "--fps must be a number of frames/s in (0, 1000]"),
                                                (30.0, 1e308, "--max-age must be a number of seconds in (0, 60]")])
def test_bench_realtime_refuses_before_any_request(fps, max_age, says) -> None:
    from edge_deploy.bench.config import BenchConfig
    from edge_deploy.bench.realtime import run_realtime

    with pytest.raises(BenchError) as refused:  # an UnboundLocalError for fps=inf before
        run_realtime(BenchConfig(url="127.0.0.1:1"), fps, (1,), max_age)
    one_line(refused, says)


def test_bench_concurrency_is_bounded() -> None:
    from edge_deploy.bench.config import parse_concurrency

    assert parse_concurrency("1,2,4") == (1, 2, 4)
    with pytest.raises(BenchError) as refused:  # exit 70 before
        parse_concurrency("100000")
    one_line(refused, "--concurrency '100000' is not a list", "in [1, 64]")


@pytest.mark.parametrize("text", ["nan", "inf", "1e308", "-1", "101%", "nan%", "200000"])
def test_a_rollout_amount_outside_its_range_is_refused(text) -> None:
    from edge_deploy.fleet.policy import Amount, FleetError

    with pytest.raises(FleetError) as refused:
        Amount.parse(text, "--batch")
    one_line(refused, f"--batch {text!r} is neither a count", "in [0, 100000]", "in [0, 100]")


def test_a_family_number_option_takes_its_range() -> None:
    from edge_deploy.lanedet.laneatt import LaneATTOptions
    from edge_deploy.lanedet.source import family_options

    (topk,) = [o for o in family_options(LaneATTOptions) if o.name == "topk_anchors"]
    assert topk.range is not None and topk.value(1000) == 1000
    with pytest.raises(ValueError, match=r"--topk-anchors must be a whole number of anchors in \[1, 100000\]"):
        topk.value(0)


# ---------------------------------------------------------------------------------------------- the environment

@pytest.mark.parametrize("value", ["100000", "65", "0", "nan"])
def test_ort_threads_outside_the_range_are_refused_before_onnx_runtime_sees_them(monkeypatch, value) -> None:
    pytest.importorskip("onnxruntime")
    from edge_deploy.export.parity import ORT_THREADS_ENV, ort_session

    monkeypatch.setenv(ORT_THREADS_ENV, value)
    with pytest.raises(EdgeDeployError) as refused:
        ort_session(b"not read")
    one_line(refused, f"{ORT_THREADS_ENV}={value!r} is not a whole number of threads in [1, 64]", "unset it")


def test_a_convert_with_100000_ort_threads_is_one_line_not_a_crash(tmp_path) -> None:
    """EDGE_DEPLOY_ORT_THREADS=100000 made ONNX Runtime crash (SIGSEGV) or spin for minutes making its pool: a real
    `edge-deploy convert` in its own process, refused in one line, exit 2, nothing written."""
    pytest.importorskip("onnx")
    pytest.importorskip("onnxruntime")
    from edge_deploy.export.stand_in_detector import write_stand_in_detector

    model = write_stand_in_detector(tmp_path / "detector.onnx")
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "PYTHONPATH": str(REPO_ROOT),
           "EDGE_DEPLOY_ORT_THREADS": "100000", "EDGE_DEPLOY_STATE_DIR": str(tmp_path / "state")}
    done = subprocess.run([sys.executable, "-m", "edge_deploy", "convert", str(model), "-o", str(tmp_path / "art"),
                           "--target", "onnx"], env=env, capture_output=True, text=True, timeout=90, cwd=tmp_path)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2, (done.returncode, done.stderr[-2000:])
    assert lines == ["error: EDGE_DEPLOY_ORT_THREADS='100000' is not a whole number of threads in [1, 64]; set it in "
                     "that range, or unset it for one thread per core."], done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["detector.onnx"]
