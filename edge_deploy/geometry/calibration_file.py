"""The calibration file: a ROS camera_info YAML plus a `mounting` mapping, checked key by key (Camera.from_yaml and
Camera.from_mapping build on it) and written back.

Every problem with a file is one CalibrationError line naming the file, the key and what to do.
"""
from __future__ import annotations

import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol, TypedDict

import numpy as np

from ..errors import CalibrationError, brief
from ..core.fsutil import write_text_atomic

__all__ = ["Calibrated", "CameraArguments", "CameraInfo", "MatrixBlock", "camera_arguments", "read_calibration", "write_calibration"]

class _CameraFacts(TypedDict):
    width: int
    height: int
    camera_matrix: np.ndarray  # 3x3
    distortion: np.ndarray
    mounting: dict[str, float]  # Mounting(**mounting)
    distortion_model: str


class CameraArguments(_CameraFacts, total=False):
    """A Camera's arguments, checked, from a calibration file (`name` when the file has a camera_name)."""

    name: str


class MatrixBlock(TypedDict):
    """A camera_info matrix: `rows` x `cols` numbers in `data`, row by row."""

    rows: int
    cols: int
    data: list[float]


class CameraInfo(TypedDict):
    """The calibration file's mapping as written (`Camera.to_mapping`): camera_info's keys plus `mounting`."""

    image_width: int
    image_height: int
    camera_name: str
    camera_matrix: MatrixBlock
    distortion_model: str
    distortion_coefficients: MatrixBlock
    mounting: dict[str, float]  # height_m, pitch_deg, roll_deg, yaw_deg


class Calibrated(Protocol):
    """What `write_calibration` writes: a geometry Camera (camera.py builds on this module, so it is not imported
    here)."""

    def to_mapping(self) -> CameraInfo: ...


_REQUIRED = ("image_width", "image_height", "camera_matrix", "distortion_model", "distortion_coefficients",
             "mounting")
_EXAMPLE = "see docs/geometry.md for the file's keys"


def read_calibration(path: str | os.PathLike[str]) -> tuple[Any, str]:
    """A calibration file's parsed mapping and its name for messages, or a one-line CalibrationError."""
    import yaml

    from ..core.bounded_read import special_kind

    path = Path(path)
    kind = special_kind(path)
    if kind is not None:  # never opened: a FIFO would block
        raise CalibrationError(f"calibration file {path} is {kind}, not a regular file; pass a camera_info YAML "
                               "file.")
    try:
        with open(path, "rb") as fh:
            raw = fh.read(MAX_FILE_BYTES + 1)
        if len(raw) > MAX_FILE_BYTES:
            raise CalibrationError(f"calibration file {path} is over {MAX_FILE_BYTES >> 10} KiB; a camera_info YAML is "
                                   "a few hundred bytes: pass the camera's calibration file.")
        text = raw.decode()
    except FileNotFoundError:
        raise CalibrationError(f"calibration file {path} does not exist; pass a camera_info YAML file "
                               "(edge-deploy sample writes one beside each frame).") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise CalibrationError(f"cannot read calibration file {path} ({type(exc).__name__}); pass a readable "
                               "camera_info YAML file.") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        raise CalibrationError(f"calibration file {path} is not valid YAML{where}; fix the file "
                               f"({_EXAMPLE}).") from None
    return data, str(path)


def write_calibration(path: str | os.PathLike[str], camera: Calibrated) -> Path:
    """Write `camera` as a calibration file (camera_info YAML, its `to_mapping()`) that Camera.from_yaml reads
    back; returns the path."""
    import yaml

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    text = yaml.safe_dump(camera.to_mapping(), sort_keys=False, default_flow_style=None)
    return write_text_atomic(path, text, 0o644)


def camera_arguments(data: Any, where: str = "calibration") -> CameraArguments:
    """The checked arguments of a Camera from a parsed camera_info mapping; `where` names the source."""
    if not isinstance(data, dict):
        raise CalibrationError(f"{where} does not hold a mapping of camera_info keys; {_EXAMPLE}.")
    missing = [key for key in _REQUIRED if key not in data]
    if missing:
        raise CalibrationError(f"{where} lacks {', '.join(missing)}; add {'it' if len(missing) == 1 else 'them'} "
                               f"({_EXAMPLE}).")
    width = _integer(data, "image_width", where)
    height = _integer(data, "image_height", where)
    matrix = _matrix(data, "camera_matrix", where, shapes=((3, 3),))
    model = data["distortion_model"]
    if not isinstance(model, str):
        raise CalibrationError(f"{where}: distortion_model must be a name such as plumb_bob (got {brief(model)}).")
    coefficients = _matrix(data, "distortion_coefficients", where, shapes=None)
    mounting = data["mounting"]
    if not isinstance(mounting, dict) or "height_m" not in mounting:
        raise CalibrationError(f"{where}: mounting must be a mapping with height_m (and pitch_deg, roll_deg, "
                               "yaw_deg, degrees, 0 when left out).")
    unknown = sorted(set(mounting) - {"height_m", "pitch_deg", "roll_deg", "yaw_deg"}, key=brief)
    if unknown:
        raise CalibrationError(f"{where}: mounting has unknown keys {', '.join(brief(k, 30) for k in unknown[:5])}; use height_m, "
                               "pitch_deg, roll_deg, yaw_deg.")
    values = {key: _number(mounting[key], f"mounting.{key}", where) for key in mounting}
    arguments: CameraArguments = {"width": width, "height": height, "camera_matrix": np.reshape(matrix, (3, 3)),
                                  "distortion": np.asarray(coefficients), "mounting": values, "distortion_model": model}
    name = data.get("camera_name")
    if isinstance(name, str):
        arguments["name"] = name
    return arguments


# No calibration figure comes near these: focal lengths and centres are pixels, a mounting is metres and degrees, and a
# frame is at most this wide or high. Beyond them a number is a typo (or a hostile file), and arithmetic overflows.
MAX_MAGNITUDE = 1e9
MAX_PIXELS = 100_000
MAX_FILE_BYTES = 1 << 20  # a camera_info YAML is a few hundred bytes


def _number(value: Any, key: str, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or \
            (isinstance(value, float) and not math.isfinite(value)):
        raise CalibrationError(f"{where}: {key} must be a number (got {brief(value)}).")
    if not abs(value) <= MAX_MAGNITUDE:
        raise CalibrationError(f"{where}: {key} is {brief(value)}, beyond any calibration's (at most {MAX_MAGNITUDE:g} "
                               "in size); fix the file.")
    return float(value)


def _integer(data: Mapping[str, object], key: str, where: str) -> int:
    """A positive integer of the camera_info YAML mapping `data`."""
    value = data[key]
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise CalibrationError(f"{where}: {key} must be a positive whole number of pixels (got {brief(value)}).")
    if value > MAX_PIXELS:
        raise CalibrationError(f"{where}: {key} is {brief(value)} pixels; a camera frame is at most {MAX_PIXELS} "
                               "pixels across: fix the file.")
    return value


def _matrix(data: Mapping[str, object], key: str, where: str, shapes: tuple[tuple[int, int], ...] | None) -> list[float]:
    """A {rows, cols, data} mapping's data (camera_info YAML), its size checked against rows x cols (and `shapes`
    when given)."""
    block = data[key]
    if not isinstance(block, dict) or not {"rows", "cols", "data"} <= set(block):
        raise CalibrationError(f"{where}: {key} must be a mapping with rows, cols and data.")
    rows, cols, values = block["rows"], block["cols"], block["data"]
    if not isinstance(values, list) or len(values) > 64:  # 3x3 and the distortion coefficients: 14 at most
        raise CalibrationError(f"{where}: {key}.data must be a list of numbers (got {brief(values)}).")
    numbers = [_number(v, f"{key}.data", where) for v in values]
    if not all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in (rows, cols)) \
            or rows * cols != len(numbers):
        raise CalibrationError(f"{where}: {key} says {brief(rows)}x{brief(cols)} but its data holds {len(numbers)} numbers; "
                               "make them agree.")
    if shapes is not None and (rows, cols) not in shapes:
        want = " or ".join(f"{r}x{c}" for r, c in shapes)
        raise CalibrationError(f"{where}: {key} must be {want} (got {brief(rows)}x{brief(cols)}).")
    return numbers
