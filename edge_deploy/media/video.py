"""Video files, cameras and GStreamer pipelines in (as OpenCV opens them), MPEG-4 video files out."""
from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from ..errors import FrameError
from ..core.fsutil import AtomicOutput

VIDEO_SUFFIXES = (".mp4", ".avi", ".mkv", ".mov", ".webm", ".m4v")
FOURCC = "mp4v"  # MPEG-4 part 2: written by every OpenCV build with FFmpeg, read by common players


def is_video_source(text: str) -> bool:
    """Whether an `infer` argument names a video: a video file, a camera device, or a GStreamer pipeline."""
    return (text.lower().endswith(VIDEO_SUFFIXES) or text.startswith("/dev/video") or text.isdigit()
            or "!" in text)


def is_live_source(text: str) -> bool:
    """Whether a video source is live (a camera or a GStreamer pipeline: it delivers frames at its own rate and
    drops what nobody reads) rather than a file (which can be read as fast as it decodes)."""
    return text.startswith("/dev/video") or text.isdigit() or "!" in text


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
        from ..core.bounded_read import regular_file

        regular_file(source, "video", FrameError, "pass a video file, a camera (/dev/video0) or a GStreamer "
                     "pipeline ending in appsink")  # a FIFO would block FFmpeg's open
        capture, what = cv2.VideoCapture(source), "video"
    if not capture.isOpened():
        raise FrameError(f"cannot open {what} {source}: {_open_hint(what, source, cv2)}.")
    return capture


def _open_hint(what: str, source: str, cv2: Any) -> str:
    """What to check when OpenCV cannot open a source of this kind."""
    if what == "GStreamer pipeline" and "GStreamer:                   YES" not in cv2.getBuildInformation():
        return ("this OpenCV build has no GStreamer (cv2.getBuildInformation()); on a Jetson use the system "
                "python3-opencv")
    if what == "video":  # a file: neither device permissions nor a camera are the matter
        size = Path(source).stat().st_size
        return (f"the file ({size} bytes) is empty, damaged or not a video this OpenCV build decodes; check it "
                f"with `ffprobe {source}`, or make a sample video with `edge-deploy sample --video`")
    return "check the device permissions (group video), that the camera is connected, and the pipeline"


def frames_of(capture: Any, max_frames: int = 0) -> Iterator[Any]:
    """Frames until the source ends or `max_frames` (0: no limit)."""
    count = 0
    while max_frames <= 0 or count < max_frames:
        ok, frame = capture.read()
        if not ok or frame is None:
            return
        count += 1
        yield frame


def source_fps(capture: Any, default: float = 30.0) -> float:
    """The frame rate a capture reports, or `default` where it reports none believable (a camera, a pipeline)."""
    import cv2

    fps = capture.get(cv2.CAP_PROP_FPS) or 0.0
    return fps if 1 <= fps <= 240 else default


class VideoWriter:
    """An MPEG-4 video file written under a temporary name in its folder (`fsutil.AtomicOutput`): `finish()` renames
    it to `path`, `discard()` removes it, so a reader never finds half a video under the final name. A `path` that
    exists and is not a regular file, or is one of `inputs`, is refused (OutputError) when the writer is made.

    The first frame sets the size; an odd width or height is cropped by one pixel (MPEG-4 needs even sizes).
    """

    def __init__(self, path: Path, fps: float, *, inputs: Iterable[Path | str] = ()) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._output = AtomicOutput(self.path, suffix=self.path.suffix, inputs=inputs)
        self.tmp = self._output.tmp
        self.fps = fps
        self.frames = 0
        self._writer: Any = None
        self._size = (0, 0)

    def write(self, frame: Any) -> None:
        import cv2

        if self._writer is None:
            h, w = frame.shape[0] // 2 * 2, frame.shape[1] // 2 * 2
            self._writer = cv2.VideoWriter(str(self.tmp), cv2.VideoWriter.fourcc(*FOURCC), self.fps, (w, h))
            if not self._writer.isOpened():
                raise FrameError(f"cannot write {self.path}: OpenCV has no {FOURCC} encoder here.")
            self._size = (w, h)
        w, h = self._size
        self._writer.write(frame[:h, :w])
        self.frames += 1

    def close(self) -> None:
        """Flush and close the file (still under its temporary name); idempotent."""
        if self._writer is not None:
            self._writer.release()
            self._writer = None

    def finish(self) -> Path:
        """Close and rename to `path`; returns it."""
        self.close()
        return self._output.commit()

    def discard(self) -> None:
        self.close()
        self._output.discard()


def write_video(path: Path, frames: Iterable[Any], width: int, height: int, fps: float = 30.0) -> Path:
    """`frames` (each HEIGHTxWIDTHx3 uint8 BGR) as an MPEG-4 video file, written atomically; returns the path."""
    if width % 2 or height % 2:
        raise FrameError(f"a video needs an even width and height (MPEG-4), got {width}x{height}; pass even sizes.")
    writer = VideoWriter(path, fps)
    try:
        for frame in frames:
            writer.write(frame)
    except BaseException:
        writer.discard()
        raise
    if writer.frames == 0:
        writer.discard()
        raise FrameError(f"no frames to write to {path}.")
    return writer.finish()
