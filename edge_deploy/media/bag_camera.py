"""A recording's camera: the image topic's CameraInfo (intrinsics) and /tf_static (base_link -> the image's
frame_id: the mounting), else what `--camera CALIB.yaml` gives; one-line CalibrationErrors saying what is missing."""
from __future__ import annotations

import math
from typing import Any

from ..errors import CalibrationError
from ..core.numbers import Range
from .bag import CameraInfoRecord, Recording, Transform
from .stamped import CameraSetup
from ..geometry import Camera
from ..geometry.camera import Mounting

BASE_FRAME = "base_link"


def recording_camera(recording: Recording, calibration: Any = None) -> CameraSetup | None:
    """The camera of `recording`'s frames, or None when neither the recording nor `calibration` (a geometry Camera
    from --camera) knows it. Intrinsics: the recording's CameraInfo, else `calibration`'s. Mounting: /tf_static,
    else `calibration`'s; a CameraInfo with neither is refused. Without a CameraInfo, `calibration` as it is."""
    frame_id = recording.frame_id
    chain = _chain(recording.static_transforms, BASE_FRAME, frame_id, f"{recording.path} /tf_static")
    info = recording.camera_info
    if info is None:
        return CameraSetup(calibration, frame_id) if calibration is not None else None
    where = f"{recording.path} {info.topic}"
    if chain is None and calibration is None:
        raise CalibrationError(f"{where}: the CameraInfo gives the intrinsics but the recording has no /tf_static "
                               f"{BASE_FRAME} -> {frame_id} for the mounting; pass --camera CALIB.yaml (its mounting "
                               "is used).")
    mounting = calibration.mounting if chain is None else _mounting(chain, recording, frame_id)
    camera = _camera(info, mounting, where, Camera)
    offset = (float(chain[0][0]), float(chain[0][1])) if chain is not None else (0.0, 0.0)
    return CameraSetup(camera, frame_id, offset)


def _camera(info: CameraInfoRecord, mounting: Any, where: str, camera_class: Any) -> Any:
    import numpy as np

    model = info.distortion_model or ("plumb_bob" if info.d else "none")
    k = np.reshape(np.asarray(info.k, dtype=np.float64), (3, 3)) if len(info.k) == 9 else np.zeros((3, 3))
    if not (k[0, 0] > 0 and k[1, 1] > 0):
        raise CalibrationError(f"{where}: the CameraInfo has focal lengths fx={k[0, 0]:g} fy={k[1, 1]:g} (K "
                               f"{list(info.k)}): the camera is not calibrated; calibrate it or pass --camera "
                               "CALIB.yaml for a recording without CameraInfo.")
    try:
        return camera_class(info.width, info.height, k, np.asarray(info.d, dtype=np.float64), mounting, model)
    except CalibrationError as exc:
        raise CalibrationError(f"{where}: {exc}") from None


# A /tf_static rotation is a unit quaternion; ROS tools normalise small errors, so a length within 10 % of 1 is
# taken (and normalised). A zero or NaN quaternion (exit 70 before) is refused in one line where the chain needs it.
QUATERNION_LENGTH = Range(0.9, 1.1, "", noun="a unit quaternion's length")
TRANSLATION_M = Range(-1000, 1000, "metres")  # a camera's offset from base_link


def _chain(transforms: tuple[Transform, ...], parent: str, child: str,
           where: str = "/tf_static") -> tuple[Any, Any] | None:
    """(translation, 3x3 rotation) of `child` in `parent` composed along /tf_static, or None without a path; a
    CalibrationError in one line for a transform on the path whose rotation is no unit quaternion or whose
    translation is not finite metres."""
    import numpy as np
    from scipy.spatial.transform import Rotation

    by_child = {t.child: t for t in transforms}
    translation, rotation = np.zeros(3), np.eye(3)
    frame, seen = child.lstrip("/"), set()
    while frame != parent:
        if frame in seen or frame not in by_child:
            return None
        seen.add(frame)
        t = by_child[frame]
        name = f"{where} {t.parent} -> {t.child}"
        advice = "Fix the recording's /tf_static (or pass --camera CALIB.yaml with a recording that has none)."
        quaternion = np.asarray(t.rotation, dtype=np.float64)
        QUATERNION_LENGTH.check(f"{name}: the rotation {tuple(float(v) for v in quaternion)} has a length that",
                                float(np.linalg.norm(quaternion)), CalibrationError, advice)
        for value in t.translation:
            TRANSLATION_M.check(f"{name}: the translation {tuple(float(v) for v in t.translation)}",
                                float(value), CalibrationError, advice)
        r = Rotation.from_quat(quaternion / np.linalg.norm(quaternion)).as_matrix()
        translation = r @ translation + np.asarray(t.translation)
        rotation = r @ rotation
        frame = t.parent
    return translation, rotation


def mounting_from_pose(translation: Any, rotation: Any) -> Any:
    """The Mounting of an optical frame (z forward, x right, y down) at `translation` with `rotation` (3x3, its
    axes in base_link); base_link is taken to lie on the road (its z: the camera's height)."""
    import numpy as np


    to_camera = np.asarray(rotation).T  # vehicle vectors -> camera coordinates (Mounting.rotation's sense)
    d = to_camera[2]  # the optical axis in base_link
    pitch = math.degrees(math.asin(max(-1.0, min(1.0, -d[2]))))
    yaw = math.degrees(math.atan2(d[1], d[0]))
    level = Mounting(1.0, pitch, 0.0, yaw).rotation() if abs(pitch) <= 60 and abs(yaw) <= 60 else None
    roll = 0.0
    if level is not None:
        about_axis = to_camera @ level.T
        roll = math.degrees(math.atan2(about_axis[0, 1], about_axis[0, 0]))
    return Mounting(float(translation[2]), pitch, roll, yaw)


def _mounting(chain: tuple[Any, Any], recording: Recording, frame_id: str) -> Any:
    try:
        return mounting_from_pose(*chain)
    except CalibrationError as exc:
        raise CalibrationError(f"{recording.path} /tf_static {BASE_FRAME} -> {frame_id}: {exc} (is {frame_id} an "
                               "optical frame, z forward, and base_link on the road?)") from None

