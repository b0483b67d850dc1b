"""ROS recordings for the tests, written by the `rosbags` writers (never by the code under test): rosbag2
directories (mcap or sqlite3 storage), a bare .mcap file and ROS 1 .bag files holding frames as sensor_msgs Image
(bgr8, rgb8, mono8, bayer) or CompressedImage (jpeg, png), with or without CameraInfo and /tf_static."""
from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import cv2
import numpy as np
from rosbags.typesys import Stores, get_typestore
from rosbags.interfaces import Nodetype
from scipy.spatial.transform import Rotation

T0_NS = 1_700_000_000_123_456_789  # the first frame's stamp
PERIOD_NS = 100_000_000  # 10 frames per second
FRAME_ID = "front_camera_optical_frame"


def fill(store: Any, msgtype: str, **given: Any) -> Any:
    """A message of `msgtype` from `store` with the given fields, every other one zero/empty."""
    values = {}
    for name, (kind, desc) in store.fielddefs[msgtype][1]:
        if name in given:
            values[name] = given[name]
        elif kind == Nodetype.NAME:
            values[name] = fill(store, desc)
        elif kind == Nodetype.BASE:
            values[name] = "" if desc[0] == "string" else 0
        elif kind == Nodetype.ARRAY:
            values[name] = np.zeros(desc[1], dtype=np.float64)
        else:
            sub_kind, sub = desc[0]
            values[name] = np.zeros(0, np.float64 if sub != ("uint8", 0) else np.uint8) if sub_kind == Nodetype.BASE else []
    return store.types[msgtype](**values)


def image_message(store: Any, frame: np.ndarray, encoding: str, header: Any) -> tuple[str, Any]:
    """(msgtype, message) of a BGR frame in `encoding` (bgr8 rgb8 mono8 bayer_rggb8 jpeg png, or anything else
    as a raw Image claiming that encoding)."""
    if encoding in ("jpeg", "png"):
        ok, data = cv2.imencode(".jpg" if encoding == "jpeg" else ".png", frame)
        assert ok
        return "sensor_msgs/msg/CompressedImage", fill(store, "sensor_msgs/msg/CompressedImage", header=header,
                                                       format=encoding, data=data.ravel())
    h, w = frame.shape[:2]
    if encoding == "rgb8":
        pixels = cv2.cvtColor(frame, cv2.COLOR_BGR2RGB)
    elif encoding in ("mono8", "bayer_rggb8"):
        pixels = mono(frame) if encoding == "mono8" else bayer_rggb(frame)
    else:
        pixels = frame
    step = pixels.size // h
    return "sensor_msgs/msg/Image", fill(store, "sensor_msgs/msg/Image", header=header, height=h, width=w,
                                         encoding=encoding, step=step, data=pixels.ravel().copy())


def mono(frame: np.ndarray) -> np.ndarray:
    return cv2.cvtColor(frame, cv2.COLOR_BGR2GRAY)


def bayer_rggb(frame: np.ndarray) -> np.ndarray:
    """The RGGB mosaic a sensor would record of `frame` (R at even rows/even columns)."""
    out = frame[:, :, 1].copy()
    out[0::2, 0::2] = frame[0::2, 0::2, 2]
    out[1::2, 1::2] = frame[1::2, 1::2, 0]
    return out


def camera_info(store: Any, camera: Any, header: Any, fx: float | None = None) -> Any:
    k = np.asarray(camera.camera_matrix, dtype=np.float64).ravel().copy()
    if fx is not None:
        k[0] = fx
    ros1 = "K" in dict(store.fielddefs["sensor_msgs/msg/CameraInfo"][1])
    fields = {("K" if ros1 else "k"): k, ("D" if ros1 else "d"): np.asarray(camera.distortion, np.float64).ravel()}
    return fill(store, "sensor_msgs/msg/CameraInfo", header=header, height=camera.height, width=camera.width,
                distortion_model=camera.distortion_model, **fields)


def tf_static(store: Any, camera: Any, offset_xy: tuple[float, float] = (0.0, 0.0)) -> Any:
    """base_link -> a camera_link -> the optical frame (two hops, as a URDF has them), from the camera's mounting."""
    m = camera.mounting
    body = Rotation.from_euler("ZYX", [m.yaw_deg, m.pitch_deg, m.roll_deg], degrees=True)  # camera_link: x forward
    optical = Rotation.from_matrix([[0, 0, 1], [-1, 0, 0], [0, -1, 0]])  # z forward, x right, y down in camera_link

    def stamped(parent: str, child: str, xyz: tuple[float, float, float], rotation: Rotation) -> Any:
        q = rotation.as_quat()
        header = fill(store, "std_msgs/msg/Header", stamp=fill(store, "builtin_interfaces/msg/Time", sec=1), frame_id=parent)
        transform = fill(store, "geometry_msgs/msg/Transform",
                         translation=fill(store, "geometry_msgs/msg/Vector3", x=xyz[0], y=xyz[1], z=xyz[2]),
                         rotation=fill(store, "geometry_msgs/msg/Quaternion", x=q[0], y=q[1], z=q[2], w=q[3]))
        return fill(store, "geometry_msgs/msg/TransformStamped", header=header, child_frame_id=child,
                    transform=transform)

    return fill(store, "tf2_msgs/msg/TFMessage", transforms=[
        stamped("base_link", "front_camera_link", (offset_xy[0], offset_xy[1], m.height_m), body),
        stamped("front_camera_link", FRAME_ID, (0.0, 0.0, 0.0), optical)])


def stamp_of(index: int) -> int:
    return T0_NS + index * PERIOD_NS


def write_recording(path: Path, frames: list[np.ndarray], *, kind: str = "mcap", encoding: str = "bgr8",
                    topic: str = "/front/image_raw", camera: Any = None, with_tf: bool = True, fx: float | None = None,
                    extra_topics: tuple[str, ...] = ()) -> Path:
    """A recording of `frames` (stamps T0_NS + i * PERIOD_NS) on `topic`; kind: mcap | sqlite3 (rosbag2
    directories), bare-mcap (the .mcap file alone), ros1 (.bag). With `camera` (a geometry Camera) its CameraInfo on
    /front/camera_info and (with_tf) /tf_static. `extra_topics`: more image topics, one frame each."""
    ros1 = kind == "ros1"
    store = get_typestore(Stores.ROS1_NOETIC if ros1 else Stores.ROS2_HUMBLE)
    if ros1:  # the noetic store lacks tf2_msgs
        from rosbags.typesys import get_types_from_msg

        store.register(get_types_from_msg("geometry_msgs/TransformStamped[] transforms", "tf2_msgs/msg/TFMessage"))
    serialize = store.serialize_ros1 if ros1 else store.serialize_cdr

    def header(ns: int) -> Any:
        time = fill(store, "builtin_interfaces/msg/Time", sec=ns // 10**9, nanosec=ns % 10**9)
        return fill(store, "std_msgs/msg/Header", stamp=time, frame_id=FRAME_ID)

    if ros1:
        from rosbags.rosbag1 import Writer

        writer = Writer(path)
    else:
        from rosbags.rosbag2 import StoragePlugin, Writer

        plugin = StoragePlugin.SQLITE3 if kind == "sqlite3" else StoragePlugin.MCAP
        directory = path.with_suffix("") if kind == "bare-mcap" else path
        writer = Writer(directory, version=9, storage_plugin=plugin)
    connections: dict[str, Any] = {}

    def put(name: str, msgtype: str, msg: Any, ns: int) -> None:
        if name not in connections:
            connections[name] = writer.add_connection(name, msgtype, typestore=store)
        writer.write(connections[name], ns, bytes(serialize(msg, msgtype)))

    with writer:
        if camera is not None and with_tf:
            put("/tf_static", "tf2_msgs/msg/TFMessage", tf_static(store, camera), stamp_of(0) - 1)
        for i, frame in enumerate(frames):
            ns = stamp_of(i)
            if camera is not None:
                put("/front/camera_info", "sensor_msgs/msg/CameraInfo", camera_info(store, camera, header(ns), fx), ns)
            msgtype, msg = image_message(store, frame, encoding, header(ns))
            put(topic, msgtype, msg, ns + 1000)  # logged just after it was stamped, as a driver does
        for extra in extra_topics:
            msgtype, msg = image_message(store, frames[0], "bgr8", header(stamp_of(0)))
            put(extra, msgtype, msg, stamp_of(0))
    if kind == "bare-mcap":
        directory = path.with_suffix("")
        (mcap,) = directory.glob("*.mcap")
        shutil.move(mcap, path)
        shutil.rmtree(directory)
    return path
