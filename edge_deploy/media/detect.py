"""The run loop of `edge-deploy infer`, for any detector (a LaneDetClient's `detect`, or a vehicle app's own):
lanes for each image written as a picture with the lanes drawn and/or JSON; lanes for each frame of a video
written as an annotated video and one JSON line per frame."""
from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ..errors import FrameError
from ..core.strict_json import dumps
from .lane_json import FrameLanes, ImageLanes
from .stamped import CameraSetup, FrameResult, Publish, StampedFrame
from .video import VideoWriter, frames_of, open_video, source_fps
from ..core.fsutil import AtomicOutput, write_json_atomic
from ..geometry.birdseye import annotated_frame
from ..lanedet.draw import save_png
from .bag import read_frames

Detect = Callable[[Any], list[Any]]  # an HxWx3 uint8 BGR frame -> its lanes (edge_deploy.lanedet.lane.Lane)
# an HxWx3 uint8 BGR frame -> an object detector's boxes beside the lanes (an edge_deploy.detect.Detections)
DetectObjects = Callable[[Any], Any]


def lanes_record(name: str, frame: Any, lanes: list[Any], model: str) -> ImageLanes:
    """The record written for one image (its `to_dict()` is the JSON)."""
    return ImageLanes.of(name, frame, lanes, model)


def unique_stems(names: list[str]) -> list[str]:
    """The file stems of `names`, a repeated one numbered (road, road-1, ...) so no output overwrites another."""
    seen: dict[str, int] = {}
    out = []
    for name in names:
        stem = Path(name).stem
        count = seen.get(stem, 0)
        seen[stem] = count + 1
        out.append(stem if count == 0 else f"{stem}-{count}")
    return out


def _caption(model: str, lanes: list[Any]) -> str:
    return f"{model}: {len(lanes)} lane{'s' if len(lanes) != 1 else ''}"


def detect_images(
    detect: Detect, frames: list[tuple[str, Any]], out: Path, *, model: str, write_png: bool = True,
    write_json: bool = False, geometry: Any = None, detect_objects: DetectObjects | None = None,
) -> list[ImageLanes]:
    """Detect lanes in each (name, frame) and write OUT/<stem>.lanes.png and/or OUT/<stem>.lanes.json; with
    `geometry` (a LaneGeometry) each record gains the markers and figures and the PNG the bird's-eye panel; with
    `detect_objects`, the detector's boxes (drawn, and in the JSON). Returns the records (with the paths written in
    `png` and `json`)."""
    out.mkdir(parents=True, exist_ok=True)
    records = []
    for (name, frame), stem in zip(frames, unique_stems([n for n, _ in frames])):
        lanes = detect(frame)
        found = geometry.frame_markers(lanes, frame) if geometry is not None else None
        objects = detect_objects(frame) if detect_objects is not None else None
        record = ImageLanes.of(name, frame, lanes, model, found, objects)
        if write_png:
            picture = _with_boxes(annotated_frame(frame, lanes, _caption(model, lanes), found), objects)
            record = replace(record, png=str(save_png(out / f"{stem}.lanes.png", picture)))
        if write_json:
            path = out / f"{stem}.lanes.json"
            write_json_atomic(path, record.to_dict(), 0o644, indent=1)
            record = replace(record, json=str(path))
        records.append(record)
    return records


@dataclass
class VideoResult:
    """What `detect_video` wrote and how fast it went."""

    source: str
    frames: int
    seconds: float
    video: Path
    jsonl: Path
    lanes_per_frame: float

    @property
    def fps(self) -> float:
        return self.frames / self.seconds if self.seconds > 0 else 0.0


def detect_video(
    detect: Detect, source: str, out: Path, *, model: str, max_frames: int = 0,
    progress: Callable[[int, float], None] | None = None, geometry: Any = None, publish: Publish | None = None,
    detect_objects: DetectObjects | None = None,
) -> VideoResult:
    """Detect lanes in every frame of `source` (a video file, a camera, a GStreamer pipeline: `open_video`); write
    OUT/<stem>.lanes.mp4 and OUT/<stem>.lanes.jsonl. With `geometry` (a LaneGeometry) each line gains the markers
    and figures and the video the bird's-eye panel. `progress(frames, seconds)` is called after each frame;
    `publish(FrameResult)` too (edge_deploy.ros.Publisher: an MCAP file, a Foxglove server), each frame stamped
    with the time it was read.

    Both are written under temporary names and renamed at the end, so an interrupted run
    (Ctrl-C) leaves the frames done so far under the final names and no half-named files.
    """
    capture = open_video(source)
    stem = "camera" if not Path(source).suffix or "!" in source else Path(source).stem
    try:
        frames = (StampedFrame.now(frame, i) for i, frame in enumerate(frames_of(capture, max_frames)))
        return detect_stream(detect, frames, source, stem, out, model=model, fps=source_fps(capture),
                             progress=progress, geometry=geometry, publish=publish, detect_objects=detect_objects)
    finally:
        capture.release()


def detect_recording(
    detect: Detect, recording: Any, out: Path, *, model: str, max_frames: int = 0,
    progress: Callable[[int, float], None] | None = None, geometry: Any = None, publish: Publish | None = None,
    setup: CameraSetup | None = None, detect_objects: DetectObjects | None = None,
) -> VideoResult:
    """`detect_video` for a recording (a checked edge_deploy.media.bag.Recording): its frames with their header
    stamps; each JSON line gains "stamp_ns". `setup`: its camera (media.bag_camera.recording_camera), published
    with each frame."""
    return detect_stream(detect, read_frames(recording, max_frames), str(recording.path), recording.name, out,
                         model=model, fps=recording.fps, progress=progress, geometry=geometry, publish=publish, setup=setup,
                         stamps=True, detect_objects=detect_objects)


def detect_stream(
    detect: Detect, frames: Iterable[StampedFrame], source: str, stem: str, out: Path, *, model: str, fps: float,
    progress: Callable[[int, float], None] | None = None, geometry: Any = None, publish: Publish | None = None,
    setup: CameraSetup | None = None, stamps: bool = False, detect_objects: DetectObjects | None = None,
) -> VideoResult:
    """The loop of `detect_video` and `detect_recording` over any StampedFrames: OUT/<stem>.lanes.mp4 and .jsonl
    (with `detect_objects`, each frame's boxes drawn and in its line, and published)."""
    out.mkdir(parents=True, exist_ok=True)
    if geometry is not None:
        geometry.reset()  # each video is its own drive: no tracks, no earlier frame to judge a jump from
        if geometry.fps is None:
            geometry.fps = fps
    if setup is None and geometry is not None:
        setup = CameraSetup(geometry.camera)
    writer, jsonl = video_outputs(out, stem, fps)
    lanes_total, started = 0, time.monotonic()
    try:
        with jsonl.open("w") as log:
            for frame in frames:
                result = _video_frame(detect, frame, writer, log, model, geometry, setup, stamps, detect_objects)
                lanes_total += len(result.lanes)
                if publish is not None:
                    publish(result)
                if progress is not None:
                    progress(writer.frames, time.monotonic() - started)
    except KeyboardInterrupt:
        pass  # keep what was done
    except BaseException:
        writer.discard()  # an error, SIGTERM: no temporary file left, an earlier output left as it was
        jsonl.discard()
        raise
    finally:
        writer.close()
    return finish_video(source, writer, jsonl, time.monotonic() - started, lanes_total)


def video_outputs(out: Path, stem: str, fps: float) -> tuple[VideoWriter, AtomicOutput]:
    """OUT/<stem>.lanes.mp4 and OUT/<stem>.lanes.jsonl, each under a temporary name until `finish_video` (a target
    that is not a regular file is refused: OutputError)."""
    writer = VideoWriter(out / f"{stem}.lanes.mp4", fps)
    try:
        return writer, AtomicOutput(out / f"{stem}.lanes.jsonl")
    except BaseException:
        writer.discard()
        raise


def finish_video(source: str, writer: VideoWriter, jsonl: AtomicOutput, seconds: float,
                 lanes_total: int) -> VideoResult:
    """The annotated video and its JSON lines renamed to their final names (both discarded, with a one-line
    FrameError, when no frame was written; neither left under a temporary name whatever fails)."""
    if writer.frames == 0:
        writer.discard()
        jsonl.discard()
        raise FrameError(f"{source} gave no frames; check that it is a video OpenCV can decode.")
    try:
        video = writer.finish()
    except BaseException:
        jsonl.discard()
        raise
    return VideoResult(source, writer.frames, seconds, video, jsonl.commit(), lanes_total / writer.frames)


def _video_frame(detect: Detect, stamped: StampedFrame, writer: VideoWriter, log: Any, model: str, geometry: Any,
                 setup: CameraSetup | None, stamps: bool, detect_objects: DetectObjects | None = None) -> FrameResult:
    """One frame of `detect_stream`: its lanes (and boxes) drawn into the video and written as a JSON line."""
    index, frame = writer.frames, stamped.image
    lanes = detect(frame)
    found = geometry.frame_markers(lanes, frame) if geometry is not None else None
    objects = detect_objects(frame) if detect_objects is not None else None
    writer.write(_with_boxes(annotated_frame(frame, lanes, f"{_caption(model, lanes)} (frame {index})", found),
                             objects))
    line = FrameLanes.of(index, lanes, found, stamp_ns=stamped.stamp_ns if stamps else None, detections=objects)
    log.write(dumps(line.to_dict()) + "\n")
    return FrameResult(stamped, lanes, found, setup, objects)


def _with_boxes(picture: Any, detections: Any) -> Any:
    """`picture` (the annotated frame: the frame's pixels at its top left) with the detector's boxes drawn."""
    if detections is None:
        return picture
    from ..detect.draw import draw_detections

    return draw_detections(picture, detections)
