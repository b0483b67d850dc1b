"""The live run loop of `edge-deploy infer`: a camera, a GStreamer pipeline, or a video file read at its own rate
(`--realtime`), through a `LaneStream`, so frames the model cannot keep up with are dropped instead of queued.
Writes the frames that were detected as an annotated video and one JSON line each (with the frame's number,
state, capture -> lanes latency and the frames dropped before it)."""
from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..core.strict_json import dumps
from .detect import VideoResult, _caption, finish_video, video_outputs
from .lane_json import LiveFrameLanes
from .stamped import CameraSetup, FrameResult, Publish, StampedFrame
from .stream import LaneResult, LaneStream, StreamStats
from .video import frames_of, is_live_source, open_video, source_fps
from ..geometry.birdseye import annotated_frame


@dataclass(frozen=True)
class LiveResult:
    """What `detect_live` wrote (the video of the detected frames and their JSON lines) and what the stream did."""

    video: VideoResult
    stats: StreamStats


@dataclass(frozen=True)
class DecodeOverrides:
    """The decode parameters a run asks of every call, under the keywords `LaneDetClient.detect` takes (and
    infer's --conf, --nms, --top-k give); None: the served model's own."""

    conf_threshold: float | None = None
    nms_threshold: float | None = None
    top_k: int | None = None


class _Detector:
    """A client's detect with this run's decode parameters (what LaneStream calls), and its release."""

    def __init__(self, client: Any, decode: DecodeOverrides) -> None:
        self.client, self.decode = client, decode

    def detect(self, frame: Any, *, deadline: float | None = None) -> list[Any]:
        return self.client.detect(frame, deadline=deadline, conf_threshold=self.decode.conf_threshold,
                                  nms_threshold=self.decode.nms_threshold, top_k=self.decode.top_k)

    def release(self) -> None:
        self.client.release()


def detect_live(
    client: Any, source: str, out: Path, *, model: str, max_frames: int = 0, max_age: float = 0.1,
    camera: Any = None, track: bool = False, speed_mps: float | None = None,
    detect_options: DecodeOverrides | None = None, progress: Callable[[int, float], None] | None = None,
    publish: Publish | None = None,
) -> LiveResult:
    """Lanes of the newest frame of `source` (a camera, a pipeline, or a video file played at its frame rate), as a
    vehicle app gets them; writes OUT/<stem>.lanes.mp4 and OUT/<stem>.lanes.jsonl (under temporary names, renamed
    at the end: Ctrl-C keeps what was written). `progress(frames detected, seconds)` after each; `publish` (an MCAP
    file, a Foxglove server: edge_deploy.ros) gets each detected frame stamped with its capture time; `detect_options`:
    the decode parameters of every call (None: the served model's)."""
    capture = open_video(source)
    live = is_live_source(source)
    fps_in = source_fps(capture)
    stem = "camera" if live else Path(source).stem
    out.mkdir(parents=True, exist_ok=True)
    writer, jsonl = video_outputs(out, stem, fps_in)
    try:
        stream = LaneStream(_Detector(client, detect_options or DecodeOverrides()), frames_of(capture, max_frames),
                            max_age=max_age, fps=None if live else fps_in, camera=camera, track=track,
                            speed_mps=speed_mps)
    except BaseException:
        writer.discard()
        jsonl.discard()
        capture.release()
        raise
    lanes_total, last_seq, started = 0, 0, time.monotonic()
    try:
        with jsonl.open("w") as log, stream:
            for result in stream:
                if result.frame is None or result.seq <= last_seq:
                    continue  # nothing new within max_age: the loop goes on
                last_seq = result.seq
                found = result.markers
                writer.write(annotated_frame(result.frame, list(result.lanes),
                                             f"{_caption(model, list(result.lanes))} (frame {result.seq}, "
                                             f"{result.state})", found))
                line = LiveFrameLanes.live(result.seq, result.state, result.latency_s, result.dropped, result.error,
                                           result.lanes, found)
                log.write(dumps(line.to_dict()) + "\n")
                lanes_total += len(result.lanes)
                if publish is not None:
                    publish(_frame_result(result, camera))
                if progress is not None:
                    progress(writer.frames, time.monotonic() - started)
    except KeyboardInterrupt:
        pass  # keep what was done
    except BaseException:
        writer.discard()  # an error, SIGTERM: no temporary file left, an earlier output left as it was
        jsonl.discard()
        raise
    finally:
        stream.stop()
        capture.release()
        writer.close()
    video = finish_video(source, writer, jsonl, time.monotonic() - started, lanes_total)
    return LiveResult(video, stream.stats())


def _frame_result(result: LaneResult, camera: Any) -> FrameResult:
    """A stream's result as the publishers take it: the frame stamped with its capture time (wall clock, ns)."""
    captured_ns = time.time_ns() - int((time.monotonic() - result.captured_at) * 1e9)
    return FrameResult(StampedFrame(result.frame, captured_ns, "camera", result.seq - 1), list(result.lanes),
                       result.markers, CameraSetup(camera) if camera is not None else None)
