"""edge_deploy.media.bag and bag_camera: recordings written by the `rosbags` writers (tests/support/recordings.py,
from `edge-deploy sample` frames) read back frame by frame with their header stamps, in every storage and image
encoding; the camera from CameraInfo and /tf_static; bad recordings refused in one line."""
from __future__ import annotations

import struct
import subprocess
import sys
from pathlib import Path

import cv2
import numpy as np
import pytest

pytest.importorskip("rosbags")

from cli_process import run_cli  # noqa: E402
from recordings import FRAME_ID, bayer_rggb, mono, stamp_of, write_recording  # noqa: E402

from edge_deploy.errors import CalibrationError, FrameError  # noqa: E402
from edge_deploy.geometry import Camera  # noqa: E402
from edge_deploy.geometry.camera import Mounting  # noqa: E402
from edge_deploy.media import frames_of, is_recording, open_recording  # noqa: E402
from edge_deploy.media.bag_camera import recording_camera  # noqa: E402

KINDS = {"mcap": "", "sqlite3": "", "bare-mcap": ".mcap", "ros1": ".bag"}


@pytest.fixture(scope="module")
def sample(tmp_path_factory) -> tuple[list[np.ndarray], Camera]:
    """Three frames from `edge-deploy sample` (small, to stay fast) and the first one's calibration."""
    out = tmp_path_factory.mktemp("sample")
    result = run_cli(["sample", "-o", str(out), "-n", "3", "--width", "328", "--height", "120"])
    assert result.returncode == 0, result.stderr
    frames = [cv2.imread(str(out / f"road-00{i}.png")) for i in range(3)]
    return frames, Camera.from_yaml(out / "road-000.calib.yaml")


def expected(frame: np.ndarray, encoding: str) -> np.ndarray:
    """What a reader must make of `frame` recorded in `encoding` (by OpenCV's own conversions)."""
    if encoding == "mono8":
        return cv2.cvtColor(mono(frame), cv2.COLOR_GRAY2BGR)
    if encoding == "bayer_rggb8":
        return cv2.cvtColor(bayer_rggb(frame), cv2.COLOR_BayerBG2BGR)
    if encoding == "jpeg":
        return cv2.imdecode(cv2.imencode(".jpg", frame)[1], cv2.IMREAD_COLOR)
    return frame


@pytest.mark.parametrize("kind", list(KINDS))
@pytest.mark.parametrize("encoding", ["bgr8", "rgb8", "mono8", "bayer_rggb8", "jpeg", "png"])
def test_every_storage_and_encoding_reads_back_the_frames_with_their_stamps(tmp_path, sample, kind, encoding):
    frames, _ = sample
    path = write_recording(tmp_path / f"drive{KINDS[kind]}", frames, kind=kind, encoding=encoding)
    assert is_recording(path)
    got = list(frames_of(path, topic="/front/image_raw"))
    assert [f.index for f in got] == [0, 1, 2]
    assert [f.stamp_ns for f in got] == [stamp_of(i) for i in range(3)]  # header stamps, not log times
    assert {f.frame_id for f in got} == {FRAME_ID}
    for frame, original in zip(got, frames):
        assert frame.image.dtype == np.uint8 and frame.image.shape == original.shape
        assert np.array_equal(frame.image, expected(original, encoding))
    if encoding == "bayer_rggb8":  # demosaiced, so close to the colour frame it was mosaiced from
        assert np.abs(got[0].image.astype(int) - frames[0].astype(int)).mean() < 12
    assert len(list(frames_of(path, 2))) == 2


def test_the_camera_comes_from_camera_info_and_tf_static(tmp_path, sample):
    frames, camera = sample
    mounted = Camera(camera.width, camera.height, camera.camera_matrix, camera.distortion,
                     Mounting(camera.mounting.height_m, 2.0, -1.0, 1.5), camera.distortion_model)
    path = write_recording(tmp_path / "drive", frames, camera=mounted)
    recording = open_recording(path)
    assert recording.camera_info is not None and recording.camera_info.topic == "/front/camera_info"
    setup = recording_camera(recording)
    assert setup is not None and setup.frame_id == FRAME_ID
    assert np.allclose(setup.camera.camera_matrix, camera.camera_matrix)
    got = setup.camera.mounting
    assert (got.height_m, got.pitch_deg, got.roll_deg, got.yaw_deg) == pytest.approx((mounted.mounting.height_m, 2.0,
                                                                                      -1.0, 1.5), abs=1e-9)


def test_without_tf_static_the_mounting_comes_from_the_calibration_or_is_asked_for(tmp_path, sample):
    frames, camera = sample
    recording = open_recording(write_recording(tmp_path / "drive", frames, camera=camera, with_tf=False))
    with pytest.raises(CalibrationError, match=r"no /tf_static base_link -> front_camera_optical_frame.*--camera"):
        recording_camera(recording)
    other = Camera(camera.width, camera.height, camera.camera_matrix * [[2], [2], [1]], camera.distortion,
                   Mounting(1.2, 4.0), camera.distortion_model)
    setup = recording_camera(recording, other)
    assert setup.camera.mounting == Mounting(1.2, 4.0)  # the mounting from --camera,
    assert np.allclose(setup.camera.camera_matrix, camera.camera_matrix)  # the intrinsics from the CameraInfo


def test_without_camera_info_the_calibration_is_the_camera(tmp_path, sample):
    frames, camera = sample
    recording = open_recording(write_recording(tmp_path / "drive", frames))
    assert recording.camera_info is None and recording_camera(recording) is None
    assert recording_camera(recording, camera).camera is camera


# --- bad recordings: one line each ---------------------------------------------------------------------------


def one_line(exc: pytest.ExceptionInfo) -> str:
    text = str(exc.value)
    assert "\n" not in text
    return text


def test_topics_are_listed_when_missing_or_ambiguous(tmp_path, sample):
    frames, _ = sample
    path = write_recording(tmp_path / "drive", frames, extra_topics=("/rear/image_raw",))
    with pytest.raises(FrameError) as exc:
        open_recording(path)
    assert "several image topics" in one_line(exc) and "/front/image_raw (3 messages)" in one_line(exc)
    assert "/rear/image_raw (1 messages)" in one_line(exc) and "--topic" in one_line(exc)
    with pytest.raises(FrameError) as exc:
        open_recording(path, "/front/image_rect")
    assert "has no topic /front/image_rect" in one_line(exc) and "/rear/image_raw" in one_line(exc)
    assert open_recording(path, "/rear/image_raw").count == 1


def test_an_unsupported_encoding_is_refused_naming_the_supported_ones(tmp_path, sample):
    frames, _ = sample
    path = write_recording(tmp_path / "drive", frames, encoding="yuv422")
    with pytest.raises(FrameError) as exc:
        open_recording(path)
    assert "encoding 'yuv422' is not supported" in one_line(exc)
    assert "bgr8, rgb8, mono8, bayer_rggb8" in one_line(exc) and "jpeg, png" in one_line(exc)


def test_a_topic_with_no_messages_is_refused(tmp_path, sample):
    frames, camera = sample
    path = write_recording(tmp_path / "drive", frames, camera=camera)
    with pytest.raises(FrameError) as exc:
        open_recording(path, "/front/camera_info")
    assert "is a sensor_msgs/msg/CameraInfo topic /front/camera_info" in one_line(exc)
    from rosbags.rosbag2 import Writer
    from rosbags.typesys import Stores, get_typestore

    empty = tmp_path / "empty"
    with Writer(empty, version=9) as writer:
        writer.add_connection("/front/image_raw", "sensor_msgs/msg/Image", typestore=get_typestore(Stores.ROS2_HUMBLE))
    with pytest.raises(FrameError) as exc:
        open_recording(empty)
    assert "no messages on /front/image_raw" in one_line(exc)


@pytest.mark.parametrize("kind", ["bare-mcap", "ros1", "sqlite3"])
def test_truncated_and_corrupt_recordings_are_one_line(tmp_path, sample, kind):
    frames, _ = sample
    path = write_recording(tmp_path / f"drive{KINDS[kind]}", frames, kind=kind)
    file = next(path.glob("*.db3")) if path.is_dir() else path
    data = file.read_bytes()
    file.write_bytes(data[: len(data) // 2])
    with pytest.raises(FrameError) as exc:
        list(frames_of(path))
    assert "truncated, damaged" in one_line(exc) or "damaged" in one_line(exc)
    file.write_bytes(b"\x00garbage" * 64)
    with pytest.raises(FrameError) as exc:
        list(frames_of(path))
    assert str(path) in one_line(exc)


def test_a_missing_recording_is_one_line(tmp_path):
    with pytest.raises(FrameError, match="does not exist"):
        open_recording(tmp_path / "nowhere.mcap")


def test_a_camera_info_with_zero_focal_length_is_refused(tmp_path, sample):
    frames, camera = sample
    recording = open_recording(write_recording(tmp_path / "drive", frames, camera=camera, fx=0.0))
    with pytest.raises(CalibrationError) as exc:
        recording_camera(recording)
    assert "/front/camera_info: the CameraInfo has focal lengths fx=0" in one_line(exc)
    assert "not calibrated" in one_line(exc)


def _hostile_mcap(src: Path, out: Path) -> Path:
    """`src` (a bare MCAP file) with each chunk index declaring its chunk 1 TiB long, uncompressed."""
    data = bytearray(src.read_bytes())
    pos = 8
    while pos + 9 <= len(data) - 8:
        op, (length,) = data[pos], struct.unpack_from("<Q", data, pos + 1)
        if op == 0x08:  # ChunkIndex: 4 u64, a map (u32 byte length), u64, a string, compressed, uncompressed size
            p = pos + 9 + 32
            p += 4 + struct.unpack_from("<I", data, p)[0] + 8
            p += 4 + struct.unpack_from("<I", data, p)[0]
            struct.pack_into("<QQ", data, p, 2**40, 2**40)
        pos += 9 + length
    out.write_bytes(bytes(data))
    return out


def _hostile_bag(src: Path, out: Path) -> Path:
    """`src` (a ROS 1 bag) with its first chunk record declaring 4 GiB of data."""
    data = bytearray(src.read_bytes())
    pos = data.index(b"\n") + 1  # after "#ROSBAG V2.0"
    while pos + 4 <= len(data):
        (header_len,) = struct.unpack_from("<I", data, pos)
        header, data_at = bytes(data[pos + 4: pos + 4 + header_len]), pos + 4 + header_len
        if b"op=\x05" in header:  # a chunk
            struct.pack_into("<I", data, data_at, 0xFFFFFF00)
            break
        pos = data_at + 4 + struct.unpack_from("<I", data, data_at)[0]
    out.write_bytes(bytes(data))
    return out


@pytest.mark.parametrize("kind", ["bare-mcap", "ros1"])
def test_a_hostile_recording_does_not_exhaust_memory(tmp_path, sample, kind):
    """A recording that declares a huge record (an MCAP chunk of 1 TiB, a ROS 1 chunk of 4 GiB), read in a process
    limited to 3 GiB of address space (a vehicle's budget): one line, and the process never holds more than a few
    hundred MB."""
    frames, _ = sample
    src = write_recording(tmp_path / f"src{KINDS[kind]}", frames, kind=kind)
    path = (_hostile_mcap if kind == "bare-mcap" else _hostile_bag)(src, tmp_path / f"hostile{KINDS[kind]}")
    script = (
        "import resource, sys\n"
        "resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))\n"
        "from edge_deploy.errors import FrameError\n"
        "from edge_deploy.media import frames_of\n"
        "try:\n"
        f"    list(frames_of({str(path)!r}))\n"
        "except FrameError as exc:\n"
        "    print(exc)\n"
        # VmHWM, not ru_maxrss: Linux keeps ru_maxrss across fork and exec, so it would report the test runner's own
        # peak (gigabytes in a full suite run), not this process's
        "print(next(line.split()[1] for line in open('/proc/self/status') if line.startswith('VmHWM:')))\n"
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stderr
    message, peak_kib = result.stdout.strip().splitlines()
    assert str(path) in message
    assert ("declares a record larger than memory allows" in message or "truncated, damaged" in message
            or "a chunk may hold (MAX_CHUNK_BYTES)" in message)
    assert int(peak_kib) < 600 * 1024
