"""Frames in and out for lane detection: image files, videos, cameras, GStreamer pipelines and ROS recordings
(rosbag2, MCAP, ROS 1 bags: bag.py, with the `ros` extra) read as BGR frames; pictures with the lanes drawn,
annotated videos and the lanes as JSON written. numpy and OpenCV only (imported where used), so a vehicle app or
the client can use it; `edge-deploy infer` maps its options onto it."""
from __future__ import annotations

from .bag import Recording, frames_of, is_recording, open_recording, read_frames
from .detect import VideoResult, detect_images, detect_recording, detect_video, lanes_record, unique_stems
from .lane_json import FrameLanes, ImageLanes, LiveFrameLanes
from .images import IMAGE_SUFFIXES, image_paths, read_image, read_images
from .stamped import CameraSetup, FrameResult, StampedFrame
from .stream import STATES, LaneResult, LaneStream, StreamStats
from .video import (
    FOURCC,
    VIDEO_SUFFIXES,
    VideoWriter,
    is_live_source,
    is_video_source,
    open_video,
    source_fps,
    write_video,
)

__all__ = [
    "FOURCC", "IMAGE_SUFFIXES", "STATES", "VIDEO_SUFFIXES", "CameraSetup", "FrameLanes", "FrameResult", "ImageLanes",
    "LaneResult", "LaneStream", "LiveFrameLanes", "Recording", "StampedFrame", "StreamStats", "VideoResult", "VideoWriter", "detect_images", "detect_recording",
    "detect_video", "frames_of", "image_paths", "is_live_source", "is_recording", "is_video_source", "lanes_record",
    "open_recording", "open_video", "read_frames", "read_image", "read_images", "source_fps", "unique_stems",
    "write_video",
]
