"""Frames in and out for lane detection: image files, videos, cameras and GStreamer pipelines read as BGR
frames; pictures with the lanes drawn, annotated videos and the lanes as JSON written. numpy and OpenCV only
(imported where used), so a vehicle app or the client can use it; `edge-deploy infer` maps its options onto it."""
from __future__ import annotations

from .detect import VideoResult, detect_images, detect_video, lanes_record, unique_stems
from .images import IMAGE_SUFFIXES, image_paths, read_image, read_images
from .stream import STATES, LaneResult, LaneStream, StreamStats
from .video import (
    FOURCC,
    VIDEO_SUFFIXES,
    VideoWriter,
    frames_of,
    is_live_source,
    is_video_source,
    open_video,
    source_fps,
    write_video,
)

__all__ = [
    "FOURCC", "IMAGE_SUFFIXES", "STATES", "VIDEO_SUFFIXES", "LaneResult", "LaneStream", "StreamStats", "VideoResult",
    "VideoWriter", "detect_images", "detect_video",
    "frames_of", "image_paths", "is_live_source", "is_video_source", "lanes_record", "open_video", "read_image", "read_images",
    "source_fps", "unique_stems", "write_video",
]
