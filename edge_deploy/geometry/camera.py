"""The camera: intrinsics, distortion and mounting, and the map between image pixels and the flat road.

Vehicle frame (ISO 8855): x forward, y left, z up, in metres, its origin on the road right below the
camera. Mounting angles are the camera body's rotation in that frame: yaw left positive, pitch nose
down positive, roll positive when the camera's top turns right (the picture turns anticlockwise).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import CalibrationError, GeometryError, brief, one_line
from ..core.numbers import Range, finite_points
from .calibration_file import CameraInfo, camera_arguments, read_calibration, write_calibration

__all__ = ["DISTORTION_MODELS", "Camera", "Mounting", "pitch_from_vanishing_point"]

# ROS distortion_model names -> how many coefficients each takes (plumb_bob: k1 k2 p1 p2 k3).
DISTORTION_MODELS = {"plumb_bob": (4, 5), "rational_polynomial": (8, 8), "equidistant": (4, 4), "none": (0, 0)}
_UNDISTORT_UNTIL = (3, 50, 1e-12)  # cv2 TermCriteria: COUNT | EPS, 50 steps, 1e-12
_MIN_RAY_DOWN = 1e-6  # a ray must point down at least this much (its z per unit length) to meet the road


MAX_HEIGHT_M = 100.0  # a camera on a vehicle (a truck's cab is 4 m); beyond it a height is a typo
MAX_PIXELS = 100_000  # a frame is at most this wide or high


def _real(value: Any) -> float | None:
    """`value` as a finite float, or None (not a number, NaN, inf, or an integer too big for a float)."""
    if isinstance(value, bool):
        return None
    try:
        number = float(value)
    except (TypeError, ValueError, OverflowError):
        return None
    return number if math.isfinite(number) else None


@dataclass(frozen=True)
class Mounting:
    """Where the camera sits on the vehicle: height above the road (m) and its angles (degrees)."""

    height_m: float
    pitch_deg: float = 0.0
    roll_deg: float = 0.0
    yaw_deg: float = 0.0

    def __post_init__(self) -> None:
        height = _real(self.height_m)
        if height is None or not 0 < height <= MAX_HEIGHT_M:
            raise CalibrationError(f"mounting height_m must be a positive number of metres, at most {MAX_HEIGHT_M:g} "
                                   f"(got {brief(self.height_m)}); measure the camera's height above the road.")
        for name in ("pitch_deg", "roll_deg", "yaw_deg"):
            value = _real(getattr(self, name))
            if value is None or not -60.0 <= value <= 60.0:
                raise CalibrationError(f"mounting {name} must be between -60 and 60 degrees (got "
                                       f"{brief(getattr(self, name))}); give the angle in degrees.")

    def rotation(self) -> np.ndarray:
        """3x3 rotation taking vehicle-frame vectors to OpenCV camera coordinates (x right, y down, z forward)."""
        yaw, pitch, roll = (math.radians(a) for a in (self.yaw_deg, self.pitch_deg, self.roll_deg))
        to_camera_axes = np.array([[0.0, -1.0, 0.0], [0.0, 0.0, -1.0], [1.0, 0.0, 0.0]])
        cy, sy = math.cos(yaw), math.sin(yaw)
        undo_yaw = np.array([[cy, sy, 0.0], [-sy, cy, 0.0], [0.0, 0.0, 1.0]])  # Rz(-yaw), vehicle axes
        cp, sp = math.cos(pitch), math.sin(pitch)
        undo_pitch = np.array([[1.0, 0.0, 0.0], [0.0, cp, -sp], [0.0, sp, cp]])  # nose down about camera x
        cr, sr = math.cos(roll), math.sin(roll)
        undo_roll = np.array([[cr, sr, 0.0], [-sr, cr, 0.0], [0.0, 0.0, 1.0]])  # about the optical axis
        return undo_roll @ undo_pitch @ to_camera_axes @ undo_yaw

    def to_dict(self) -> dict[str, float]:
        return {"height_m": self.height_m, "pitch_deg": self.pitch_deg, "roll_deg": self.roll_deg,
                "yaw_deg": self.yaw_deg}


@dataclass(frozen=True, eq=False)
class Camera:
    """A calibrated camera on a vehicle: K (3x3), distortion coefficients, the frame size, the mounting; `name`: its
    camera_info camera_name (kept from the file it was read from)."""

    width: int
    height: int
    camera_matrix: np.ndarray
    distortion: np.ndarray
    mounting: Mounting
    distortion_model: str = "plumb_bob"
    name: str = "edge_deploy"
    _rotation: np.ndarray = field(init=False, repr=False)
    _pixel_to_ray: np.ndarray | None = field(init=False, repr=False)

    def __post_init__(self) -> None:
        try:
            k = np.asarray(self.camera_matrix, dtype=np.float64)
            dist = np.asarray(self.distortion, dtype=np.float64).ravel()
        except (TypeError, ValueError, OverflowError) as exc:
            raise CalibrationError(f"camera_matrix and distortion must hold numbers ({type(exc).__name__}: "
                                   f"{one_line(exc, 80)}); copy them from the camera's calibration.") from None
        if k.shape != (3, 3) or not np.isfinite(k).all() or k[0, 0] <= 0 or k[1, 1] <= 0:
            got = k.tolist() if k.shape == (3, 3) else f"shape {list(k.shape)}"
            raise CalibrationError(f"camera_matrix must be 3x3 with positive focal lengths (got {got}); "
                                   "copy it from the camera's calibration.")
        if self.distortion_model not in DISTORTION_MODELS:
            raise CalibrationError(f"distortion_model {self.distortion_model!r} is not supported; use one of "
                                   f"{', '.join(DISTORTION_MODELS)}.")
        low, high = DISTORTION_MODELS[self.distortion_model]
        if not (low <= dist.size <= high) or not np.isfinite(dist).all():
            raise CalibrationError(f"distortion_model {self.distortion_model} takes {low}-{high} finite coefficients, "
                                   f"got {dist.size}; check distortion_coefficients.")
        if not all((real := _real(v)) is not None and real.is_integer() and 1 <= real <= MAX_PIXELS
                   for v in (self.width, self.height)):
            raise CalibrationError(f"image_width and image_height must be whole numbers of pixels from 1 to "
                                   f"{MAX_PIXELS} (got {brief(self.width)}x{brief(self.height)}).")
        _check_intrinsics(k, int(self.width), int(self.height))
        object.__setattr__(self, "camera_matrix", k)
        object.__setattr__(self, "distortion", dist)
        object.__setattr__(self, "_rotation", self.mounting.rotation())
        pixel_to_ray = None
        if self.distortion_model != "equidistant" and not dist.any():  # rays are then linear in (u, v, 1)
            fx, skew, cx, fy, cy = k[0, 0], k[0, 1], k[0, 2], k[1, 1], k[1, 2]
            k_inverse = np.array([[1 / fx, -skew / (fx * fy), (skew * cy / fy - cx) / fx], [0.0, 1 / fy, -cy / fy],
                                  [0.0, 0.0, 1.0]])  # K's last row taken as (0, 0, 1), as cv2 does
            pixel_to_ray = k_inverse.T @ self._rotation
        object.__setattr__(self, "_pixel_to_ray", pixel_to_ray)
        self._check_sees_road()

    # --- reading and writing ------------------------------------------------------------------------

    @classmethod
    def from_yaml(cls, path: Any) -> "Camera":
        """A camera from a ROS camera_info YAML file with a `mounting` mapping (see docs/geometry.md)."""
        return cls.from_mapping(*read_calibration(path))

    @classmethod
    def from_mapping(cls, data: Any, where: str = "calibration") -> "Camera":
        """A camera from the mapping a camera_info YAML file holds; `where` names it in messages."""
        a = camera_arguments(data, where)
        named = {"name": a["name"]} if "name" in a else {}
        try:
            return cls(a["width"], a["height"], a["camera_matrix"], a["distortion"], Mounting(**a["mounting"]),
                       a["distortion_model"], **named)
        except CalibrationError as exc:
            raise CalibrationError(f"{where}: {exc}") from None

    def to_yaml(self, path: Any) -> Any:
        """Write this camera as a calibration file that `from_yaml` reads back; returns the path."""
        return write_calibration(path, self)

    def to_mapping(self) -> CameraInfo:
        """The camera_info mapping (ROS camera_info YAML, plus `mounting`) that `from_mapping` reads back."""
        return {
            "image_width": int(self.width),
            "image_height": int(self.height),
            "camera_name": self.name,
            "camera_matrix": {"rows": 3, "cols": 3, "data": [float(v) for v in self.camera_matrix.ravel()]},
            "distortion_model": self.distortion_model,
            "distortion_coefficients": {"rows": 1, "cols": int(self.distortion.size),
                                        "data": [float(v) for v in self.distortion]},
            "mounting": self.mounting.to_dict(),
        }

    def scaled_to(self, width: int, height: int) -> "Camera":
        """The same camera for frames resized to width x height (intrinsics scaled, distortion unchanged)."""
        k = self.camera_matrix.copy()
        k[0] *= width / self.width
        k[1] *= height / self.height
        return Camera(width, height, k, self.distortion, self.mounting, self.distortion_model, self.name)

    def check_frame(self, width: int, height: int) -> None:
        """A one-line CalibrationError when frames are not of the calibrated size."""
        if (width, height) != (self.width, self.height):
            raise CalibrationError(f"the frame is {width}x{height} but the camera was calibrated at "
                                   f"{self.width}x{self.height}; pass the calibration of this camera at this "
                                   "resolution (or scale it: Camera.scaled_to).")

    # --- projection ---------------------------------------------------------------------------------

    @property
    def position(self) -> np.ndarray:
        """The camera centre in the vehicle frame."""
        return np.array([0.0, 0.0, self.mounting.height_m])

    def rays(self, pixels: np.ndarray) -> np.ndarray:
        """Unit-free viewing directions (N, 3) in the vehicle frame of image points (N, 2)."""
        pts = np.asarray(pixels, dtype=np.float64).reshape(-1, 2)
        if self._pixel_to_ray is not None:  # no distortion: one product, K^-1 and R^T folded
            with np.errstate(invalid="ignore"):  # an infinite point (strict=False) is NaN, as documented
                return pts @ self._pixel_to_ray[:2] + self._pixel_to_ray[2]
        import cv2

        if len(pts) == 0:
            return np.zeros((0, 3))
        pts = pts.reshape(-1, 1, 2)
        if self.distortion_model == "equidistant":
            normal = cv2.fisheye.undistortPoints(pts, self.camera_matrix, self.distortion)
        else:  # iterated to convergence: cv2.undistortPoints stops after 5 steps
            # cv2's stubs take no None for R and P, cv2 does (normalized points, unrotated): the ignore below
            normal = cv2.undistortPointsIter(  # type: ignore[call-overload]
                pts, self.camera_matrix, self.distortion, None, None, _UNDISTORT_UNTIL)
        return normal.reshape(-1, 2) @ self._rotation[:2] + self._rotation[2]  # [n, 1] R^T, row by row

    def image_to_ground(self, pixels: np.ndarray, *, strict: bool = True) -> np.ndarray:
        """Road points (N, 2) (x forward, y left, m) seen at image points (N, 2).

        A point on or above the horizon never meets the road: strict=True refuses it with a
        one-line GeometryError, as it does a NaN or infinite point; strict=False gives NaN for either.
        """
        if strict:
            pixels = finite_points(pixels, "image points", GeometryError)
        d = self.rays(pixels)
        down = d[:, 2] / np.sqrt(np.einsum("ij,ij->i", d, d))  # |d| >= 1: d is R^T (x, y, 1)
        below = down < -_MIN_RAY_DOWN
        if strict and not below.all():
            u, v = np.asarray(pixels, dtype=np.float64).reshape(-1, 2)[int(np.argmin(below))]
            raise GeometryError(f"image point ({u:.1f}, {v:.1f}) is on or above the horizon, so it is not on the "
                                "road; pass points below the horizon (Camera.horizon_row).")
        t = -self.mounting.height_m / np.where(below, d[:, 2], np.nan)  # NaN divides without a warning
        return d[:, :2] * t[:, None]

    def ground_to_image(self, points: np.ndarray) -> np.ndarray:
        """Image points (N, 2) of road points (N, 2) (x forward, y left, m); NaN behind the camera."""
        import cv2

        xy = finite_points(points, "road points", GeometryError)
        world = np.concatenate([xy, np.zeros((len(xy), 1))], 1) - self.position
        cam = world @ self._rotation.T
        ahead = cam[:, 2] > 1e-9
        out = np.full((len(xy), 2), np.nan)
        if not ahead.any():
            return out
        obj = cam[ahead].reshape(-1, 1, 3)
        zero = np.zeros(3)
        if self.distortion_model == "equidistant":
            img, _ = cv2.fisheye.projectPoints(obj, zero, zero, self.camera_matrix, self.distortion)
        else:
            img, _ = cv2.projectPoints(obj, zero, zero, self.camera_matrix, self.distortion)
        out[ahead] = img.reshape(-1, 2)
        return out

    def horizon_row(self, u: float | None = None) -> float:
        """The image row of the horizon at column u (the image centre by default), ignoring distortion."""
        k = self.camera_matrix
        u = k[0, 2] if u is None else u
        far = self._rotation @ np.array([1.0, 0.0, 0.0])  # the forward direction at infinity, camera axes
        left = self._rotation @ np.array([0.0, 1.0, 0.0])
        # the horizon is the image of the line at infinity of the road plane: points K(far + s*left)
        a, b = k @ far, k @ left
        # solve u = (a0 + s b0) / (a2 + s b2) for s, then the row
        s = (a[0] - u * a[2]) / (u * b[2] - b[0]) if abs(u * b[2] - b[0]) > 1e-12 else 0.0
        p = a + s * b
        return float(p[1] / p[2])

    def _check_sees_road(self) -> None:
        """The bottom centre of the frame must look at the road (a camera pointed at the sky cannot be used)."""
        bottom = self.rays(np.array([[self.width / 2.0, self.height - 1.0]]))[0]
        if bottom[2] / np.linalg.norm(bottom) >= -_MIN_RAY_DOWN:
            raise CalibrationError(
                f"this camera (pitch {self.mounting.pitch_deg:g} deg, roll {self.mounting.roll_deg:g} deg) does not "
                "see the road at the bottom of its frame: it looks at the sky; check mounting.pitch_deg (positive "
                "looks down) and the camera_matrix.")

    def __repr__(self) -> str:
        k = self.camera_matrix
        return (f"Camera({self.width}x{self.height}, f=({k[0, 0]:.1f}, {k[1, 1]:.1f}), c=({k[0, 2]:.1f}, "
                f"{k[1, 2]:.1f}), {self.distortion_model}, {self.mounting})")


# Plausible intrinsics, relative to the frame: a focal length from a twentieth of the frame's side (past any fisheye)
# to 50 times it (a 1 degree field of view), a principal point within half a frame of the frame. A CameraInfo with
# fx = 1e300 was taken and put every marker at the camera.
FOCAL_PER_SIDE = (0.05, 50.0)
PRINCIPAL_MARGIN = 0.5


def _check_intrinsics(k: np.ndarray, width: int, height: int) -> None:
    """A one-line CalibrationError when K's focal lengths or principal point are not plausible for the frame."""
    low, high = FOCAL_PER_SIDE
    for name, value, side, along in (("fx", k[0, 0], width, "wide"), ("fy", k[1, 1], height, "high"),
                                     ("cx", k[0, 2], width, "wide"), ("cy", k[1, 2], height, "high")):
        note = f"for a frame {side} pixels {along}"
        if name.startswith("f"):
            rng = Range(round(low * side, 3), high * side, "", noun="a focal length in pixels", note=note)
        else:
            rng = Range(-PRINCIPAL_MARGIN * side, (1 + PRINCIPAL_MARGIN) * side, "", noun="a principal point in "
                        "pixels", note=note)
        rng.check(f"camera_matrix {name}", float(value), CalibrationError,
                  "Copy the camera_matrix from the camera's calibration at this resolution.")


def pitch_from_vanishing_point(camera: Camera, left: np.ndarray, right: np.ndarray) -> float:
    """The pitch (degrees, nose down positive) that puts the vanishing point of two straight ego lines on the
    horizon. `left`, `right`: (N, 2) image points of each line; the camera's own pitch is ignored, its roll and
    yaw kept."""
    def line(points: np.ndarray) -> np.ndarray:
        pts = finite_points(points, "a line's image points", GeometryError)  # NaN: numpy's "SVD did not converge"
        if len(pts) < 2:
            raise GeometryError("a line for the vanishing point needs at least 2 image points; pass both ego lines.")
        centre = pts.mean(0)
        direction = np.linalg.svd(pts - centre)[2][0]
        return np.cross([*centre, 1.0], [*(centre + direction), 1.0])

    vp = np.cross(line(left), line(right))
    if abs(vp[2]) < 1e-9:
        raise GeometryError("the two lines are parallel in the image, so they have no vanishing point; pass the "
                            "left and right lines of the ego lane on a straight road.")
    level = Camera(camera.width, camera.height, camera.camera_matrix, camera.distortion,
                   Mounting(camera.mounting.height_m, 0.0, camera.mounting.roll_deg, camera.mounting.yaw_deg),
                   camera.distortion_model)
    ray = level.rays(np.array([vp[:2] / vp[2]]))[0]
    # the lines run level along the road: a level camera sees their direction raised by the true pitch
    return float(math.degrees(math.atan2(ray[2], math.hypot(ray[0], ray[1]))))
