"""Property-based tests of the readers of outside data (issue 54, "Tests that find classes, not cases"): whatever
bytes a recording, an image, a calibration file, a CameraInfo, a manifest, a config.pbtxt or a JSON option holds
(a valid one truncated, with bytes flipped, with a declared size made huge), its reader either reads it or raises one
error of the project's family whose message is one line: never another exception (which the CLI shows as a
traceback and exit 70), and nothing is written (no file beside it, nothing left in $TMPDIR).

Hypothesis, derandomized (the same examples every run) and few examples each, so each test takes seconds.
"""
from __future__ import annotations

import json
import shutil
import struct
import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from edge_deploy.errors import EdgeDeployError

SETTINGS = settings(derandomize=True, max_examples=40, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


def mutations(size: int) -> st.SearchStrategy:
    """Ways to damage `size` bytes: cut at a point, flip bytes, write a huge or zero u64/u32 (a declared size)."""
    at = st.integers(0, max(size - 1, 0))
    return st.one_of(
        st.tuples(st.just("cut"), at, st.just(0)),
        st.tuples(st.just("flip"), at, st.integers(1, 255)),
        st.tuples(st.just("u64"), at, st.sampled_from([0, 1, 2**31, 2**40, 2**63 - 1, 2**64 - 1])),
        st.tuples(st.just("u32"), at, st.sampled_from([0, 1, 2**20, 2**31, 2**32 - 1])),
    )


def damage(data: bytes, steps: list[tuple[str, int, int]]) -> bytes:
    out = bytearray(data)
    for kind, at, value in steps:
        at = min(at, max(len(out) - 1, 0))
        if kind == "cut":
            del out[at:]
        elif kind == "flip" and out:
            out[at] ^= value
        elif kind in ("u64", "u32"):
            width = 8 if kind == "u64" else 4
            if at + width <= len(out):
                struct.pack_into("<Q" if width == 8 else "<I", out, at, value)
    return bytes(out)


def one_line_error(call, *args, allowed=EdgeDeployError):
    """Run `call`; an error must be of `allowed` with a one-line message. Returns the error or None."""
    try:
        call(*args)
    except allowed as exc:
        assert "\n" not in str(exc) and str(exc).strip(), repr(exc)
        return exc
    return None


@pytest.fixture
def quiet_tmp(tmp_path, monkeypatch):
    """A fresh $TMPDIR for the code under test; the test asserts it is empty afterwards."""
    tmp = tmp_path / "tmpdir"
    tmp.mkdir()
    monkeypatch.setenv("TMPDIR", str(tmp))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    return tmp


# --- recordings ------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def small_recordings(tmp_path_factory):
    pytest.importorskip("rosbags")
    from recordings import write_recording

    base = tmp_path_factory.mktemp("recordings")
    frames = [np.full((12, 16, 3), 50 * i, np.uint8) for i in range(2)]
    return {kind: (write_recording(base / f"drive{suffix}", frames, kind=kind, encoding=encoding)).read_bytes()
            for kind, suffix, encoding in (("bare-mcap", ".mcap", "png"), ("ros1", ".bag", "jpeg"))}


@pytest.mark.parametrize("kind", ["bare-mcap", "ros1"])
def test_a_damaged_recording_is_read_or_refused_in_one_line(tmp_path, quiet_tmp, small_recordings, kind):
    from edge_deploy.errors import FrameError
    from edge_deploy.media import open_recording, read_frames

    original = small_recordings[kind]
    suffix = ".mcap" if kind == "bare-mcap" else ".bag"
    folder = tmp_path / "in"
    folder.mkdir()

    @SETTINGS
    @given(st.lists(mutations(len(original)), min_size=1, max_size=3))
    def check(steps):
        path = folder / f"drive{suffix}"
        path.write_bytes(damage(original, steps))
        one_line_error(lambda: list(read_frames(open_recording(path))), allowed=FrameError)
        assert sorted(p.name for p in folder.iterdir()) == [path.name]
        assert list(quiet_tmp.iterdir()) == []

    check()


def test_a_damaged_rosbag2_metadata_is_read_or_refused_in_one_line(tmp_path, quiet_tmp):
    pytest.importorskip("rosbags")
    from recordings import write_recording

    from edge_deploy.errors import FrameError
    from edge_deploy.media import open_recording, read_frames

    bag = write_recording(tmp_path / "bag", [np.zeros((8, 8, 3), np.uint8)])
    original = (bag / "metadata.yaml").read_text()
    names = sorted(p.name for p in bag.iterdir())

    @SETTINGS
    @given(st.lists(st.tuples(st.integers(0, len(original)), st.integers(0, 40),
                              st.sampled_from(["", "x", ":", "- ", "{", "]", "9" * 30, "file", "message", "\n  "])),
                    min_size=1, max_size=3))
    def check(edits):
        text = original
        for at, cut, insert in edits:
            text = text[:at] + insert + text[at + cut:]
        (bag / "metadata.yaml").write_text(text)
        one_line_error(lambda: list(read_frames(open_recording(bag))), allowed=FrameError)
        assert sorted(p.name for p in bag.iterdir()) == names and list(quiet_tmp.iterdir()) == []

    check()


# --- images ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("ext", [".png", ".jpg", ".bmp"])
def test_a_damaged_image_is_read_or_refused_in_one_line(tmp_path, ext):
    import cv2

    from edge_deploy.errors import FrameError
    from edge_deploy.media import read_image

    original = cv2.imencode(ext, np.random.default_rng(0).integers(0, 255, (20, 30, 3), np.uint8))[1].tobytes()

    @SETTINGS
    @given(st.lists(mutations(len(original)), min_size=1, max_size=3))
    def check(steps):
        path = tmp_path / f"x{ext}"
        path.write_bytes(damage(original, steps))
        one_line_error(read_image, path, allowed=FrameError)

    check()


def test_any_bytes_after_an_image_signature_give_a_size_or_one_line():
    """The header readers themselves: a signature and then anything (short, cut, huge numbers)."""
    from edge_deploy.errors import FrameError
    from edge_deploy.media.image_header import image_size

    signatures = [b"\x89PNG\r\n\x1a\n", b"\xff\xd8\xff", b"BM", b"RIFF\x00\x00\x00\x00WEBPVP8X",
                  b"RIFF\x00\x00\x00\x00WEBPVP8L", b"RIFF\x00\x00\x00\x00WEBPVP8 ", b"II*\x00", b"MM\x00*"]

    @SETTINGS
    @given(st.sampled_from(signatures), st.binary(max_size=48))
    def check(signature, rest):
        one_line_error(image_size, signature + rest, "x", allowed=FrameError)

    check()


# --- calibration files and CameraInfo --------------------------------------------------------------------------


def test_a_damaged_calibration_file_is_read_or_refused_in_one_line(tmp_path):
    from edge_deploy.geometry import Camera
    from edge_deploy.geometry.camera import Mounting

    camera = Camera(640, 360, np.array([[500.0, 0, 320], [0, 500.0, 180], [0, 0, 1]]), np.zeros(5), Mounting(1.5, 2.0))
    good = tmp_path / "good.yaml"
    from edge_deploy.geometry.calibration_file import write_calibration

    write_calibration(good, camera)
    original = good.read_text()

    @SETTINGS
    @given(st.lists(st.tuples(st.integers(0, len(original)), st.integers(0, 12),
                              st.sampled_from(["", "nan", "-1", "1e308", "inf", "0", "[", "]", "&a", "*a", ": ",
                                               "\t", "'", "- x", "1e-308"])),
                    min_size=1, max_size=3))
    def check(edits):
        text = original
        for at, cut, insert in edits:
            text = text[:at] + insert + text[at + cut:]
        path = tmp_path / "calib.yaml"
        path.write_text(text)
        one_line_error(Camera.from_yaml, path)

    check()


def test_any_camera_info_makes_a_camera_or_one_line(tmp_path):
    pytest.importorskip("rosbags")
    from edge_deploy.geometry.camera import Mounting
    from edge_deploy.media.bag import CameraInfoRecord, Recording, Transform
    from edge_deploy.media.bag_camera import recording_camera

    number = st.one_of(st.sampled_from([0.0, -1.0, float("nan"), float("inf"), -float("inf"), 1e308, 1e-308, 1e300]),
                       st.floats(-1e4, 1e4))

    @SETTINGS
    @given(st.lists(number, min_size=0, max_size=10), st.lists(number, max_size=6), st.integers(-5, 10_000),
           st.integers(-5, 10_000), st.lists(number, min_size=4, max_size=4))
    def check(k, d, width, height, quaternion):
        info = CameraInfoRecord("/cam/camera_info", "cam", width, height, tuple(k), tuple(d), "plumb_bob")
        tf = Transform("base_link", "cam", (0.0, 0.0, 1.5), tuple(quaternion))
        recording = Recording(tmp_path, "/cam/image_raw", "sensor_msgs/msg/Image", 1, "cam", 640, 360, info, (tf,))
        one_line_error(recording_camera, recording)

    check()


# --- manifests, config.pbtxt, JSON options ---------------------------------------------------------------------


def test_a_damaged_manifest_is_read_or_refused_in_one_line(tmp_path):
    from edge_deploy.artifact.manifest import Manifest

    source = Path(__file__).parent / "data" / "format1" / "tiny_fp16"
    artifact = tmp_path / "artifact"
    shutil.copytree(source, artifact)
    original = (artifact / "manifest.json").read_bytes()

    @SETTINGS
    @given(st.lists(mutations(len(original)), min_size=1, max_size=3))
    def check(steps):
        (artifact / "manifest.json").write_bytes(damage(original, steps))
        one_line_error(Manifest.read, artifact)
        assert sorted(p.name for p in artifact.iterdir()) == ["manifest.json", "model.onnx", "model_fp16.onnx"]

    check()


def test_a_damaged_config_pbtxt_is_read_or_refused_in_one_line(tmp_path):
    from edge_deploy.errors import RepositoryError
    from edge_deploy.core.triton_layout import read_config

    original = ('name: "lanes"\nplatform: "onnxruntime_onnx"\nmax_batch_size: 4\ninput [ { name: "images" '
                'data_type: TYPE_FP32 dims: [ 3, 320, 800 ] } ]\nversion_policy: { latest: { num_versions: 2 } }\n')
    (tmp_path / "lanes").mkdir()

    @SETTINGS
    @given(st.lists(st.tuples(st.integers(0, len(original)), st.integers(0, 8),
                              st.sampled_from(["", "{", "}", "[", "\"", "\\", "1e308", "-1", "\x00", "\xff",
                                               "9" * 40, "#", "\n"])),
                    min_size=1, max_size=3))
    def check(edits):
        text = original
        for at, cut, insert in edits:
            text = text[:at] + insert + text[at + cut:]
        (tmp_path / "lanes" / "config.pbtxt").write_bytes(text.encode("utf-8", "surrogatepass"))
        one_line_error(read_config, tmp_path, "lanes", allowed=RepositoryError)

    check()


def test_any_extra_vars_option_is_read_or_refused_in_one_line(tmp_path):
    from edge_deploy.fleet.policy import FleetError
    from edge_deploy.fleet.role_vars import parse_extra_vars

    json_values = st.recursive(st.one_of(st.none(), st.booleans(), st.floats(allow_nan=True), st.text(max_size=5)),
                               lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner,
                                                                                            max_size=3), max_leaves=8)
    option = st.one_of(
        json_values.map(lambda v: "edge_deploy_install_args=" + json.dumps(v)),
        json_values.map(lambda v: json.dumps({"edge_deploy_environment": v})),
        st.integers(1, 50_000).map(lambda n: "[" * n),
        st.integers(1, 50_000).map(lambda n: "x=" + "{\"a\":" * n),
        st.text(max_size=30),
    )

    @SETTINGS
    @given(st.lists(option, min_size=1, max_size=2))
    def check(items):
        one_line_error(parse_extra_vars, items, allowed=FleetError)

    check()
    fifo = tmp_path / "vars.json"
    import os

    os.mkfifo(fifo)
    with pytest.raises(FleetError, match="is a FIFO"):
        parse_extra_vars([f"@{fifo}"])
