"""Video in, lanes out: frames from a video file, a camera device or a GStreamer pipeline (as OpenCV
opens them), an annotated video and one JSON line per frame written beside it."""
from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import FrameError

VIDEO_SUFFIXES = (".mp4", ".avi", ".mkv", ".mov", ".webm", ".m4v")
FOURCC = "mp4v"  # MPEG-4 part 2: written by every OpenCV build with FFmpeg, read by common players


def is_video_source(text: str) -> bool:
    """Whether an `infer` argument names a video: a video file, a camera device, or a GStreamer pipeline."""
    return (text.lower().endswith(VIDEO_SUFFIXES) or text.startswith("/dev/video") or text.isdigit()
            or "!" in text)


def open_video(source: str) -> Any:
    """An opened cv2.VideoCapture, or a one-line FrameError."""
    # FFmpeg and OpenCV print their own complaints on stderr; the FrameError below says it in one line.
    os.environ.setdefault("OPENCV_FFMPEG_LOGLEVEL", "-8")  # AV_LOG_QUIET; read when FFmpeg is first used
    os.environ.setdefault("OPENCV_LOG_LEVEL", "OFF")  # read when cv2 is first imported
    import cv2

    if hasattr(cv2, "setLogLevel"):  # cv2 may be imported already (images were read first)
        cv2.setLogLevel(0)  # LOG_LEVEL_SILENT

    if "!" in source:
        capture, what = cv2.VideoCapture(source, cv2.CAP_GSTREAMER), "GStreamer pipeline"
    elif source.isdigit() or source.startswith("/dev/video"):
        index = int(source) if source.isdigit() else source
        capture, what = cv2.VideoCapture(index), "camera"
    else:
        if not Path(source).is_file():
            raise FrameError(f"video {source} does not exist; pass a video file, a camera (/dev/video0) or a "
                             "GStreamer pipeline ending in appsink.")
        capture, what = cv2.VideoCapture(source), "video"
    if not capture.isOpened():
        if what == "GStreamer pipeline" and "GStreamer:                   YES" not in cv2.getBuildInformation():
            hint = ("this OpenCV build has no GStreamer (cv2.getBuildInformation()); on a Jetson use the system "
                    "python3-opencv")
        elif what == "video":  # a file: neither device permissions nor a camera are the matter
            size = Path(source).stat().st_size
            hint = (f"the file ({size} bytes) is empty, damaged or not a video this OpenCV build decodes; check it "
                    f"with `ffprobe {source}`, or make a sample video with `edge-deploy sample --video`")
        else:
            hint = "check the device permissions (group video), that the camera is connected, and the pipeline"
        raise FrameError(f"cannot open {what} {source}: {hint}.")
    return capture


@dataclass
class VideoResult:
    """What `run_video` wrote and how fast it went."""

    source: str
    frames: int
    seconds: float
    video: Path
    jsonl: Path
    lanes_per_frame: float

    @property
    def fps(self) -> float:
        return self.frames / self.seconds if self.seconds > 0 else 0.0


def frames_of(capture: Any, max_frames: int) -> Iterator[Any]:
    """Frames until the source ends or `max_frames` (0: no limit)."""
    count = 0
    while max_frames <= 0 or count < max_frames:
        ok, frame = capture.read()
        if not ok or frame is None:
            return
        count += 1
        yield frame


def run_video(
    detect: Callable[[Any], list[Any]], source: str, out: Path, *, model: str, max_frames: int = 0,
    progress: Callable[[int, float], None] | None = None, geometry: Any = None,
) -> VideoResult:
    """Detect lanes in every frame of `source`; write OUT/<stem>.lanes.mp4 and OUT/<stem>.lanes.jsonl. With
    `geometry` (a LaneGeometry) each line gains the markers and figures and the video the bird's-eye panel.

    Both are written under temporary names and renamed at the end, so an interrupted run
    (Ctrl-C) leaves the frames done so far under the final names and no half-named files.
    """
    import cv2

    from ..geometry.birdseye import annotated_frame

    capture = open_video(source)
    stem = "camera" if not Path(source).suffix or "!" in source else Path(source).stem
    out.mkdir(parents=True, exist_ok=True)
    video_path, jsonl_path = out / f"{stem}.lanes.mp4", out / f"{stem}.lanes.jsonl"
    tmp_video, tmp_jsonl = out / f".{video_path.name}.tmp.mp4", out / f".{jsonl_path.name}.tmp"
    fps_in = capture.get(cv2.CAP_PROP_FPS) or 0.0
    if geometry is not None and geometry.fps is None:
        geometry.fps = fps_in if 1 <= fps_in <= 240 else 30.0
    writer = None
    frames, lanes_total, started = 0, 0, time.monotonic()
    try:
        with open(tmp_jsonl, "w") as log:
            for frame in frames_of(capture, max_frames):
                lanes = detect(frame)
                found = geometry.frame_markers(lanes, frame) if geometry is not None else None
                caption = f"{model}: {len(lanes)} lane{'s' if len(lanes) != 1 else ''} (frame {frames})"
                picture = annotated_frame(frame, lanes, caption, found)
                if writer is None:
                    h, w = picture.shape[0] // 2 * 2, picture.shape[1] // 2 * 2  # MPEG-4 needs even sizes
                    writer = cv2.VideoWriter(str(tmp_video), cv2.VideoWriter_fourcc(*FOURCC),
                                             fps_in if 1 <= fps_in <= 240 else 30.0, (w, h))
                    if not writer.isOpened():
                        raise FrameError(f"cannot write {video_path}: OpenCV has no {FOURCC} encoder here.")
                writer.write(picture[:h, :w])
                line = {"frame": frames, "lanes": [lane.to_dict() for lane in lanes]}
                log.write(json.dumps({**line, **(found.to_dict() if found is not None else {})}) + "\n")
                frames += 1
                lanes_total += len(lanes)
                if progress is not None:
                    progress(frames, time.monotonic() - started)
    except KeyboardInterrupt:
        pass  # keep what was done
    finally:
        capture.release()
        if writer is not None:
            writer.release()
    seconds = time.monotonic() - started
    if frames == 0:
        tmp_video.unlink(missing_ok=True)
        tmp_jsonl.unlink(missing_ok=True)
        raise FrameError(f"{source} gave no frames; check that it is a video OpenCV can decode.")
    os.replace(tmp_video, video_path)
    os.replace(tmp_jsonl, jsonl_path)
    return VideoResult(source, frames, seconds, video_path, jsonl_path, lanes_total / frames)


def write_drive(path: Path, seed: int, n_frames: int, width: int, height: int, fps: float = 30.0) -> Path:
    """A synthetic drive (consecutive frames of one road, lanedet.synthetic.drive) as a video file."""
    import cv2

    from ..training.synthetic import drive

    if width % 2 or height % 2:
        raise FrameError(f"a video needs an even width and height (MPEG-4), got {width}x{height}; pass even sizes.")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.parent / f".{path.name}.tmp{path.suffix}"
    writer = cv2.VideoWriter(str(tmp), cv2.VideoWriter_fourcc(*FOURCC), fps, (width, height))
    if not writer.isOpened():
        raise FrameError(f"cannot write {path}: OpenCV has no {FOURCC} encoder here.")
    try:
        for scene in drive(seed, n_frames, width, height, fps=fps):
            writer.write(scene.frame)
    finally:
        writer.release()
    os.replace(tmp, path)
    return path
