"""The frames a bench sends: images of a directory, frames of a video, or the synthetic sample set."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from ..errors import BenchError
from ..media.images import IMAGE_SUFFIXES, read_image
from ..media.video import frames_of, open_video
from ..synthetic.roads import EVAL_SEED_BASE, scene

SAMPLE_FRAMES = 8  # the synthetic sample set: what `edge-deploy sample` writes, 1640x590


def load_frames(source: Path | None, limit: int) -> tuple[str, list[tuple[str, Any]]]:
    """(a description of the source, up to `limit` (name, HxWx3 uint8 BGR frame))."""
    if source is None:
        count = min(limit, SAMPLE_FRAMES)
        return (f"synthetic sample set ({count} frames, 1640x590)",
                [(f"road-{i:03d}", scene(EVAL_SEED_BASE + i, 1640, 590).frame) for i in range(count)])
    if source.is_dir():
        return _images(source, limit)
    text = str(source)
    if not source.exists() and "!" not in text and not text.isdigit():  # a GStreamer pipeline, a camera index
        raise BenchError(f"--frames {source} does not exist; pass a directory of images or a video file.")
    return _video(text, limit)


def _images(directory: Path, limit: int) -> tuple[str, list[tuple[str, Any]]]:
    paths = sorted(p for p in directory.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES and p.is_file())[:limit]
    if not paths:
        raise BenchError(f"--frames {directory} has no images ({' '.join(IMAGE_SUFFIXES)}); pass a directory of "
                         "images or a video file.")
    return f"{directory} ({len(paths)} images)", [(path.name, read_image(path)) for path in paths]


def _video(source: str, limit: int) -> tuple[str, list[tuple[str, Any]]]:
    """The first `limit` frames of a video file, a camera (/dev/video0, 0) or a GStreamer pipeline."""
    capture = open_video(source)
    name = Path(source).name if "!" not in source else "pipeline"
    try:
        frames = [(f"{name}#{i}", frame) for i, frame in enumerate(frames_of(capture, limit))]
    finally:
        capture.release()
    if not frames:
        raise BenchError(f"cannot read frames from {source}; --frames takes a directory of images or a video OpenCV "
                         "can open (.mp4, .avi, .mkv).")
    return f"{source} (first {len(frames)} frames)", frames
