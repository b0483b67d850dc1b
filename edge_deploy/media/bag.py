"""Recordings as a frame source: rosbag2 directories (MCAP or sqlite3 storage), bare .mcap / .db3 files with ROS 2
messages and ROS 1 .bag files, read with the `rosbags` library (the `ros` extra; imported where used).

`open_recording` checks a recording once (readable, the image topic, its first frame decodes) and reads what
describes its camera (the topic's CameraInfo, /tf_static); `read_frames` then yields its frames with their header
stamps. Every problem is one FrameError line (CalibrationError for the camera's). What a recording may cost is
bounded (bag_reader.py: regular files only, decompression capped; image_header.py: a frame's declared size).
"""
from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import FrameError
from .image_header import MAX_IMAGE_PIXELS, image_size
from ..core.numbers import whole
from .stamped import StampedFrame
from ..core.deps import require
from .video import frames_of as capture_frames

IMAGE = "sensor_msgs/msg/Image"
COMPRESSED = "sensor_msgs/msg/CompressedImage"
CAMERA_INFO = "sensor_msgs/msg/CameraInfo"
TF_MESSAGE = "tf2_msgs/msg/TFMessage"
RECORDING_SUFFIXES = (".mcap", ".db3", ".bag")
# ROS encoding -> OpenCV conversion to BGR (None: already BGR). cv_bridge's Bayer mapping: OpenCV names the
# pattern by the second row's first two pixels.
_RAW_ENCODINGS: dict[str, tuple[int, str | None]] = {
    "bgr8": (3, None), "rgb8": (3, "COLOR_RGB2BGR"), "mono8": (1, "COLOR_GRAY2BGR"),
    "bayer_rggb8": (1, "COLOR_BayerBG2BGR"), "bayer_bggr8": (1, "COLOR_BayerRG2BGR"),
    "bayer_gbrg8": (1, "COLOR_BayerGR2BGR"), "bayer_grbg8": (1, "COLOR_BayerGB2BGR"),
}
_COMPRESSED_FORMATS = ("jpeg", "png")
SUPPORTED = (f"Image {', '.join(_RAW_ENCODINGS)}; CompressedImage {', '.join(_COMPRESSED_FORMATS)}")


def is_recording(source: str | os.PathLike[str]) -> bool:
    """Whether an `infer` argument names a recording: a .mcap/.db3/.bag file or a rosbag2 directory."""
    path = Path(source)
    return path.suffix.lower() in RECORDING_SUFFIXES or (path.is_dir() and (path / "metadata.yaml").is_file())


@dataclass(frozen=True)
class CameraInfoRecord:
    """What a sensor_msgs/CameraInfo message says of the camera."""

    topic: str
    frame_id: str
    width: int
    height: int
    k: tuple[float, ...]
    d: tuple[float, ...]
    distortion_model: str


@dataclass(frozen=True)
class Transform:
    """A rigid transform parent -> child: the child frame's origin (m) and orientation (quaternion x, y, z, w) in
    the parent frame."""

    parent: str
    child: str
    translation: tuple[float, float, float]
    rotation: tuple[float, float, float, float]


@dataclass(frozen=True)
class Recording:
    """A checked recording: its image topic (and message type, count), the first frame's header frame_id and size,
    the topic's CameraInfo (None if the recording has none) and every transform on /tf_static."""

    path: Path
    topic: str
    msgtype: str
    count: int
    frame_id: str
    width: int
    height: int
    camera_info: CameraInfoRecord | None
    static_transforms: tuple[Transform, ...]
    fps: float = 30.0

    @property
    def name(self) -> str:
        return self.path.stem if self.path.is_file() else self.path.name


def open_recording(path: str | os.PathLike[str], topic: str | None = None) -> Recording:
    """The recording at `path`, checked (see the module's docstring); `topic` None takes its one image topic."""
    path = Path(path)
    if not path.exists():
        raise FrameError(f"recording {path} does not exist; pass a rosbag2 directory, a .mcap file or a ROS 1 .bag.")
    with _reader(path) as reader:  # a FIFO, socket or device is refused there, never opened
        chosen, msgtype, count = _image_topic(reader, path, topic)
        first = next(_decoded(reader, path, chosen, msgtype, 1), None)
        if first is None:
            raise FrameError(f"{path}: no message on {chosen} could be read; check the recording (ros2 bag info).")
        info = _camera_info(reader, path, chosen)
        transforms = _static_transforms(reader, path)
        fps = _rate(reader, chosen)
    return Recording(path, chosen, msgtype, count, first.frame_id, first.image.shape[1], first.image.shape[0], info,
                     transforms, fps)


def read_frames(recording: Recording, max_frames: int = 0) -> Iterator[StampedFrame]:
    """The recording's frames in order (BGR, with their header stamps and frame_id); `max_frames` 0: all."""
    with _reader(recording.path) as reader:
        yield from _decoded(reader, recording.path, recording.topic, recording.msgtype, max_frames)


def frames_of(source: Any, max_frames: int = 0, *, topic: str | None = None) -> Iterator[Any]:
    """Frames of a source: for a recording (a path: `open_recording`) its StampedFrames on `topic`; for an opened
    cv2.VideoCapture (`open_video`) its BGR frames, as before recordings were a source."""
    if isinstance(source, (str, os.PathLike)):
        return read_frames(open_recording(source, topic), max_frames)

    return capture_frames(source, max_frames)


# --- reading -----------------------------------------------------------------------------------------------


class _reader:
    """An opened bag_reader.RecordingReader (rosbags, bounded), its failures as one FrameError line."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.reader: Any = None

    def __enter__(self) -> Any:
        require("rosbags.highlevel", "reading a ROS recording")
        from .bag_reader import RecordingReader

        self.reader = RecordingReader(self.path)
        try:
            return self.reader.__enter__()
        except Exception as exc:  # noqa: BLE001 - rosbags' readers raise many kinds; each is a damaged recording
            raise _unreadable(self.path, exc) from None

    def __exit__(self, *exc: object) -> None:
        self.reader.__exit__(*exc)


def _unreadable(path: Path, exc: BaseException) -> FrameError:
    from .bag_reader import RecordingProblem

    if isinstance(exc, RecordingProblem):
        return FrameError(f"{path}: {exc}")
    if isinstance(exc, FrameError):  # bounded_read's, naming the file
        return exc
    if isinstance(exc, MemoryError):
        return FrameError(f"{path} declares a record larger than memory allows; the recording is damaged or "
                          "hostile: check it with `ros2 bag info` or `mcap doctor`.")
    reason = " ".join(str(exc).split()) or type(exc).__name__
    return FrameError(f"cannot read recording {path} ({reason[:200]}); it is truncated, damaged or not a rosbag2 "
                      "directory, .mcap or ROS 1 .bag: check it with `ros2 bag info` or `mcap doctor`.")


def _messages(reader: Any, path: Path, topic: str) -> Iterator[tuple[int, Any]]:
    """(log time, deserialized message) on `topic`, damage as one FrameError line."""
    connections = [c for c in reader.connections if c.topic == topic]
    try:
        for connection, timestamp, raw in reader.messages(connections):
            yield timestamp, reader.deserialize(raw, connection)
    except Exception as exc:  # noqa: BLE001 - see _reader
        raise _unreadable(path, exc) from None


def _image_topic(reader: Any, path: Path, topic: str | None) -> tuple[str, str, int]:
    topics: dict[str, tuple[str, int]] = {}
    for c in reader.connections:
        if c.msgtype in (IMAGE, COMPRESSED):
            _, count = topics.get(c.topic, (c.msgtype, 0))
            topics[c.topic] = (c.msgtype, count + (c.msgcount or 0))
    listed = ", ".join(f"{t} ({n} messages)" for t, (_, n) in sorted(topics.items())) or "none"
    if not topics:
        raise FrameError(f"{path} has no image topic (sensor_msgs/Image or CompressedImage); its topics: "
                         f"{_all_topics(reader)}; record the camera's image topic.")
    if topic is None:
        if len(topics) != 1:
            raise FrameError(f"{path} has several image topics (sensor_msgs/Image or CompressedImage: {listed}); "
                             "pass one with --topic.")
        topic = next(iter(topics))
    if topic not in topics:
        found = next((c.msgtype for c in reader.connections if c.topic == topic), None)
        why = f"is a {found} topic" if found else "has no topic"
        raise FrameError(f"{path} {why} {topic}; its image topics: {listed}; pass one of them with --topic.")
    msgtype, count = topics[topic]
    if count == 0:
        raise FrameError(f"{path} has no messages on {topic}; pass a topic that has some ({listed}).")
    return topic, msgtype, count


def _all_topics(reader: Any, shown: int = 12) -> str:
    """A recording's topics with their types, the first `shown` of them (a hostile file may have thousands)."""
    types: dict[str, str] = {}
    for c in reader.connections:
        types.setdefault(c.topic, c.msgtype)
    items = [f"{t} ({m})" for t, m in sorted(types.items())]
    more = f" and {len(items) - shown} more" if len(items) > shown else ""
    return (", ".join(items[:shown]) + more) if items else "none"


def _rate(reader: Any, topic: str, default: float = 30.0) -> float:
    """Frames per second of `topic` from its first two log times (the annotated video's rate), else `default`."""
    times: list[int] = []
    try:
        for _, timestamp, _ in reader.messages([c for c in reader.connections if c.topic == topic]):
            times.append(timestamp)
            if len(times) == 2:
                break
    except Exception:  # noqa: BLE001 - only an estimate: reading the frames says what is damaged
        return default
    fps = 1e9 / (times[1] - times[0]) if len(times) == 2 and times[1] > times[0] else default
    return fps if 1 <= fps <= 240 else default


# A header stamp: ns since 1970, 0 to 2**63 - 1 (what an MCAP log time, unsigned, and the JSON lines hold); a negative
# one (a clock before 1970: a damaged or hand-made recording) made `--mcap` fail with an internal error.
STAMP_NS = whole(0, 2**63 - 1, "nanoseconds since 1970")


def _decoded(reader: Any, path: Path, topic: str, msgtype: str, max_frames: int) -> Iterator[StampedFrame]:
    index = 0
    for _, msg in _messages(reader, path, topic):
        image = decode_image(msg, msgtype, f"{path} {topic}")
        stamp = int(msg.header.stamp.sec) * 1_000_000_000 + int(msg.header.stamp.nanosec)
        STAMP_NS.check(f"{path} {topic}: frame {index}'s header stamp", stamp, FrameError,
                       "Fix the recording's clock (ros2 bag info shows its times).")
        # republished as they are only when they are a JPEG, whatever the format field says (a "jpeg" holding a
        # PNG is encoded again as a JPEG, as the republished message says)
        jpeg = bytes(msg.data) if msgtype == COMPRESSED and _held_format(msg) == "jpeg" else None
        yield StampedFrame(image, stamp, msg.header.frame_id or "camera", index, jpeg)
        index += 1
        if 0 < max_frames <= index:
            return


def decode_image(msg: Any, msgtype: str, where: str) -> Any:
    """A sensor_msgs Image or CompressedImage as an HxWx3 uint8 BGR array, or a one-line FrameError."""
    import cv2
    import numpy as np

    data = np.asarray(msg.data, dtype=np.uint8)
    if msgtype == COMPRESSED:
        fmt = msg.format.lower()
        if not any(name in fmt for name in _COMPRESSED_FORMATS) or "compresseddepth" in fmt:
            raise FrameError(f"{where}: CompressedImage format {msg.format!r} is not supported; supported: "
                             f"{SUPPORTED}.")
        if not data.size:
            raise FrameError(f"{where}: a CompressedImage ({msg.format}) holds no bytes; the recording is damaged.")
        image_size(data.tobytes(), f"{where}: a CompressedImage ({msg.format[:40]})")  # declared size, before decoding
        try:
            frame = cv2.imdecode(data, cv2.IMREAD_COLOR)
        except cv2.error:
            frame = None
        if frame is None:
            raise FrameError(f"{where}: a CompressedImage ({msg.format}) does not decode; the recording is damaged.")
        return frame
    encoding = msg.encoding.lower()
    if encoding not in _RAW_ENCODINGS:
        raise FrameError(f"{where}: image encoding {msg.encoding!r} is not supported; supported: {SUPPORTED}.")
    channels, conversion = _RAW_ENCODINGS[encoding]
    h, w, step = int(msg.height), int(msg.width), int(msg.step)
    if w * h > MAX_IMAGE_PIXELS:
        raise FrameError(f"{where}: an Image says {w}x{h} pixels, over the {MAX_IMAGE_PIXELS // 1_000_000} Mpx "
                         "edge-deploy decodes (8192x8192); the recording is damaged or hostile.")
    if h < 1 or w < 1 or step < w * channels or data.size < step * h:
        raise FrameError(f"{where}: an Image says {w}x{h} {msg.encoding} with step {step} but holds {data.size} "
                         "bytes; the recording is damaged.")
    rows = data[: step * h].reshape(h, step)[:, : w * channels]
    image = rows.reshape(h, w, channels) if channels == 3 else rows.reshape(h, w)
    if conversion is None:
        return np.ascontiguousarray(image)
    return cv2.cvtColor(np.ascontiguousarray(image), getattr(cv2, conversion))


def _held_format(msg: Any) -> str | None:
    """The format a CompressedImage's bytes are in (from their signature), whatever its format field says."""
    from .image_header import sniff_format

    return sniff_format(bytes(msg.data[:12]))


def _camera_info(reader: Any, path: Path, image_topic: str) -> CameraInfoRecord | None:
    """The first CameraInfo of the image topic's camera: on <namespace>/camera_info, else the recording's only
    CameraInfo topic."""
    topics = sorted({c.topic for c in reader.connections if c.msgtype == CAMERA_INFO})
    base = image_topic.removesuffix("/compressed").rsplit("/", 1)[0]
    topic = f"{base}/camera_info" if f"{base}/camera_info" in topics else (topics[0] if len(topics) == 1 else None)
    if topic is None:
        return None
    for _, msg in _messages(reader, path, topic):
        return CameraInfoRecord(topic, msg.header.frame_id, int(msg.width), int(msg.height),
                                tuple(float(v) for v in _field(msg, "k")), tuple(float(v) for v in _field(msg, "d")),
                                msg.distortion_model)
    return None


def _field(msg: Any, name: str) -> Any:
    """A CameraInfo field: lower case in ROS 2 (k, d), upper case in ROS 1 (K, D)."""
    return getattr(msg, name) if hasattr(msg, name) else getattr(msg, name.upper())


def _static_transforms(reader: Any, path: Path) -> tuple[Transform, ...]:
    found: dict[str, Transform] = {}
    if not any(c.topic == "/tf_static" and c.msgtype == TF_MESSAGE for c in reader.connections):
        return ()
    for _, msg in _messages(reader, path, "/tf_static"):
        for t in msg.transforms:
            tr, q = t.transform.translation, t.transform.rotation
            child = t.child_frame_id.lstrip("/")
            found[child] = Transform(t.header.frame_id.lstrip("/"), child, (tr.x, tr.y, tr.z), (q.x, q.y, q.z, q.w))
    return tuple(found.values())
