"""Lanes a vehicle can steer by: the camera model (image <-> flat road), lane markers as cubics in the vehicle
frame with the ego lane's left and right, the figures a controller reads, and a tracker across frames.

numpy, OpenCV and PyYAML only (the client imports it): see docs/geometry.md.
"""
from __future__ import annotations

from .camera import Camera, Mounting, pitch_from_vanishing_point
from .figures import LaneFigures
from .frame_markers import FrameMarkers, LaneGeometry
from .markers import LaneMarker, LaneMarkers, to_markers
from .plausibility import Plausibility, PlausibilityLimits, PlausibilityReason, StreamPlausibility, frame_plausibility
from .tracker import MarkerTracker

__all__ = ["Camera", "FrameMarkers", "LaneFigures", "LaneGeometry", "LaneMarker", "LaneMarkers", "MarkerTracker", "Mounting",
           "Plausibility", "PlausibilityLimits", "PlausibilityReason", "StreamPlausibility", "frame_plausibility",
           "pitch_from_vanishing_point", "to_markers"]
