"""Bad calibration files through `edge-deploy infer --camera`: one line each, a non-zero exit, no traceback, and
nothing sent to a server (none runs: every check comes first). `sample` writes calibrations that read back."""
from __future__ import annotations

import subprocess
from pathlib import Path

import cv2
import numpy as np
import pytest
from cli_process import run_cli
import yaml

from edge_deploy.geometry import Camera
from edge_deploy.synthetic.roads import EVAL_SEED_BASE, scene_truth

REPO_ROOT = Path(__file__).resolve().parents[2]


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return run_cli(args, timeout=120, cwd=REPO_ROOT)


def good() -> dict:
    return scene_truth(EVAL_SEED_BASE, 640, 360).camera


def broken(**changes) -> dict:
    data = good()
    for key, value in changes.items():
        if value is None:
            del data[key]
        else:
            data[key] = value
    return data


CASES = {
    "missing keys": (broken(camera_matrix=None, mounting=None), "lacks camera_matrix, mounting"),
    "wrong matrix size": (broken(camera_matrix={"rows": 3, "cols": 3, "data": [1.0] * 8}), "holds 8 numbers"),
    "not 3x3": (broken(camera_matrix={"rows": 2, "cols": 3, "data": [1.0] * 6}), "must be 3x3"),
    "too many coefficients": (broken(distortion_coefficients={"rows": 1, "cols": 6, "data": [0.0] * 6}),
                              "takes 4-5 finite coefficients, got 6"),
    "unknown distortion model": (broken(distortion_model="fancy"), "'fancy' is not supported"),
    "looks at the sky": (broken(mounting={"height_m": 1.5, "pitch_deg": -40.0}), "looks at the sky"),
    "no height": (broken(mounting={"pitch_deg": 1.0}), "mounting must be a mapping with height_m"),
    "text for a number": (broken(image_width="wide"), "image_width must be a positive whole number"),
    "not a mapping": ([1, 2, 3], "does not hold a mapping"),
    # issue 44 item 9: absurd and 401-digit numbers (were exit 70, OverflowError, or "looks at the sky")
    "401-digit width": (broken(image_width=10 ** 400), "image_width is an integer of about 401 digits pixels; a camera "
                                                       "frame is at most 100000 pixels across"),
    "absurd width": (broken(image_width=100000000000), "image_width is 100000000000 pixels; a camera frame is at most"),
    "401-digit matrix entry": (broken(camera_matrix={"rows": 3, "cols": 3, "data": [10 ** 400] + [1.0] * 8}),
                               "camera_matrix.data is an integer of about 401 digits, beyond any calibration's"),
    "401-digit height": (broken(mounting={"height_m": 10 ** 400}), "mounting.height_m is an integer of about 401 "
                                                                   "digits, beyond any calibration's"),
    "a height of 1e6 m": (broken(mounting={"height_m": 1e6}), "height_m must be a positive number of metres, at most "
                                                              "100"),
}

# issue 44 item 8: 816 bytes whose aliases stay shared when loaded, but whose repr is 34.6 MB
BILLION_LAUGHS = "a: &a ['lol','lol','lol','lol','lol','lol','lol','lol','lol']\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 9)}]\n" for i in range(8)) + \
    "image_width: *i\nimage_height: *i\ncamera_matrix: *i\ndistortion_model: *i\ndistortion_coefficients: *i\n" \
    "mounting: *i\n"


@pytest.fixture(scope="module")
def frame_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("frames") / "road.png"
    cv2.imwrite(str(path), np.zeros((360, 640, 3), np.uint8))
    return path


def one_line(result: subprocess.CompletedProcess[str], needle: str) -> str:
    lines = result.stderr.strip().splitlines()
    assert result.returncode != 0 and "Traceback" not in result.stderr, result.stderr
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert needle in lines[0], lines[0]
    return lines[0]


def infer_with(calibration: Path, frame: Path, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    return cli("infer", str(frame), "--camera", str(calibration), "--url", "127.0.0.1:9", "--out",
               str(tmp_path / "out"), "--timeout", "1")


def test_each_bad_calibration_is_one_line(tmp_path, frame_file):
    # one process for all cases, through the same reader the CLI uses; the CLI's own path is checked below
    from edge_deploy.cli import error_line
    from edge_deploy.errors import CalibrationError

    for name, (data, needle) in CASES.items():
        path = tmp_path / f"{name.replace(' ', '_')}.yaml"
        path.write_text(yaml.safe_dump(data))
        with pytest.raises(CalibrationError) as caught:
            Camera.from_yaml(path)
        message, code = error_line(caught.value)
        assert needle in message and str(path) in message and "\n" not in message and code != 0, (name, message)


def test_bad_calibrations_through_the_cli(tmp_path, frame_file):
    missing = tmp_path / "missing.yaml"
    assert "does not exist" in one_line(infer_with(missing, frame_file, tmp_path), "calibration file")
    (tmp_path / "bad.yaml").write_text("camera_matrix: [1, 2\n")
    one_line(infer_with(tmp_path / "bad.yaml", frame_file, tmp_path), "is not valid YAML at line")
    (tmp_path / "sky.yaml").write_text(yaml.safe_dump(CASES["looks at the sky"][0]))
    one_line(infer_with(tmp_path / "sky.yaml", frame_file, tmp_path), "looks at the sky")
    (tmp_path / "wrong.yaml").write_text(yaml.safe_dump(CASES["wrong matrix size"][0]))
    one_line(infer_with(tmp_path / "wrong.yaml", frame_file, tmp_path), "holds 8 numbers")
    # a good calibration for another frame size
    other = scene_truth(EVAL_SEED_BASE, 1640, 590).camera
    (tmp_path / "other.yaml").write_text(yaml.safe_dump(other))
    one_line(infer_with(tmp_path / "other.yaml", frame_file, tmp_path), "frame is 640x360 but the camera was "
                                                                        "calibrated at 1640x590")
    one_line(cli("infer", str(frame_file), "--track", "--out", str(tmp_path / "out")), "add --camera")
    # a billion laughs: one short line at once (was a 34.6 MB "line", or out of memory); a speed of inf is refused as
    # NaN is (it wrote Infinity into --json)
    (tmp_path / "laughs.yaml").write_text(BILLION_LAUGHS)
    line = one_line(infer_with(tmp_path / "laughs.yaml", frame_file, tmp_path), "image_width must be a positive whole "
                                                                                 "number of pixels (got a list of 9 items)")
    assert len(line) < 300, len(line)
    (tmp_path / "good.yaml").write_text(yaml.safe_dump(good()))
    for speed in ("inf", "1e308"):
        one_line(cli("infer", str(frame_file), "--camera", str(tmp_path / "good.yaml"), "--speed", speed, "--out",
                     str(tmp_path / "out")), "--speed must be a number of metres per second in [0, 100], not ")
    assert not (tmp_path / "out").exists()


def test_a_calibration_file_of_more_than_a_mebibyte_is_refused_unparsed(tmp_path):
    from edge_deploy.errors import CalibrationError

    path = tmp_path / "big.yaml"
    path.write_text(yaml.safe_dump(good()) + "#" * (1 << 20) + "\n")
    with pytest.raises(CalibrationError, match="is over 1024 KiB; a camera_info YAML is a few hundred bytes"):
        Camera.from_yaml(path)


def test_sample_writes_calibrations_that_read_back(tmp_path):
    result = cli("sample", "--out", str(tmp_path), "-n", "2", "--width", "640", "--height", "360")
    assert result.returncode == 0, result.stderr
    for i in range(2):
        camera = Camera.from_yaml(tmp_path / f"road-00{i}.calib.yaml")
        assert (camera.width, camera.height) == (640, 360)
        assert camera.to_mapping()["camera_matrix"] == scene_truth(EVAL_SEED_BASE + i, 640, 360).camera["camera_matrix"]
