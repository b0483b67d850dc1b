"""LaneStream: the loop a vehicle app runs. The newest frame only, lanes with their age and a state, never a call
that waits on a server restart.

A reader thread takes frames from the source and keeps only the newest (an older one not yet detected is dropped
and counted, as ROS 2's KEEP_LAST depth 1); a worker thread detects on it as soon as the previous request
returned, each call bounded by a deadline (`LaneDetClient.detect(frame, deadline=)`), and publishes a `LaneResult`
stamped with the frame's capture time. `latest()` hands out the newest result at once, its age and state
computed at that moment:

- "ok": lanes of a frame at most `max_age` old;
- "stale": older than `max_age`, but the server answers (the source has stopped delivering frames, or the
  model is slower than `max_age`);
- "unavailable": the last call failed (server unreachable or restarting, model not ready, too slow for the
  deadline), or the call in flight has had no answer for longer than `max_age`. Lanes are empty; with
  track=True the markers coast (each `missed` > 0) until the tracker drops them.

Frames, cameras and pipelines come from `edge_deploy.media` (numpy and OpenCV only); the detector is any object
with `detect(frame, *, deadline=)` (a `LaneDetClient`), so this module imports no client.
"""
from __future__ import annotations

import collections
import threading
import time
import warnings
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import ClientError, EdgeDeployError, one_line
from ..geometry.frame_markers import LaneGeometry
from ..runtime import Threads, call_app
from ..numbers import STREAM_FPS, STREAM_SECONDS
from .video import frames_of, is_live_source, open_video, source_fps


__all__ = ["STATES", "LaneResult", "LaneStream", "StreamStats"]

STATES = ("ok", "stale", "unavailable")
UNREAD_KEPT = 256  # results kept for a consumer that iterates the stream (about 8 s at 30 frames/s)
LATENCIES_KEPT = 100_000  # capture -> lanes latencies kept for StreamStats (about an hour at 30 frames/s)
STOP_MARGIN = 0.05  # stop() returns within max_age + this
LATE_WARNING = 3  # answers in a row later than max_age before the stream says the model is slower than max_age


def check_timing(max_age: float, deadline: float | None, fps: float | None) -> None:
    """A stream's (LaneStream's, PerceptionStream's) max_age, deadline and fps, each in its range
    (numbers.STREAM_SECONDS, STREAM_FPS; None: not given), else one line of ClientError naming it and the range."""
    for name, value, rng in (("max_age", max_age, STREAM_SECONDS), ("fps", fps, STREAM_FPS),
                             ("deadline", deadline, STREAM_SECONDS)):
        if value is not None:
            rng.check(name, value, ClientError)


def default_deadline(max_age: float) -> float:
    """A call's deadline when the app gives none: long enough that a model slower than `max_age` still gives its
    lanes ("stale") rather than nothing, short enough that a call hung on a server gives up and the next frame
    is tried (`latest()` says "unavailable" once nothing answered within max_age, whatever the deadline)."""
    return max(2.0, 10 * max_age)


@dataclass(frozen=True)
class LaneResult:
    """The lanes of one frame, with when it was taken and how much to trust them.

    seq: the frame's number from the source (1, 2, ...; 0 before the first result). captured_at: time.monotonic()
    when the frame was read. lanes: its lanes (empty when unavailable). markers: a `FrameMarkers` with camera=
    (coasting markers have `missed` > 0), else None. latency_s: capture -> lanes (None when no lanes came). age_s:
    now - captured_at when this result was handed out. state: "ok", "stale" or "unavailable" (module docstring).
    dropped: frames skipped since the previous result. error: why it is unavailable, in one line (else None).
    """

    seq: int
    captured_at: float
    lanes: tuple[Any, ...] = ()
    markers: Any = None
    latency_s: float | None = None
    age_s: float = 0.0
    state: str = "unavailable"
    dropped: int = 0
    error: str | None = None
    frame: Any = field(default=None, repr=False, compare=False)  # the frame itself (HxWx3 BGR), e.g. to draw on

    @property
    def ok(self) -> bool:
        return self.state == "ok"

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: lanes as their records, markers as theirs."""
        return {"seq": self.seq, "captured_at": self.captured_at, "state": self.state, "age_s": self.age_s,
                "latency_s": self.latency_s, "dropped": self.dropped, "error": self.error,
                "lanes": [{"score": float(lane.score), "points": np.asarray(lane.points).tolist()}
                          for lane in self.lanes],
                "markers": self.markers.to_dict() if self.markers is not None else None}


@dataclass(frozen=True)
class StreamStats:
    """What a stream did: frames read, detected, dropped unseen, failed; capture -> lanes latency percentiles
    (seconds, over the detected frames); how many results were published in each state."""

    frames_read: int
    frames_processed: int
    frames_dropped: int
    frames_failed: int
    latency_p50_s: float | None
    latency_p99_s: float | None
    states: dict[str, int] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"frames_read": self.frames_read, "frames_processed": self.frames_processed,
                "frames_dropped": self.frames_dropped, "frames_failed": self.frames_failed,
                "latency_p50_s": self.latency_p50_s, "latency_p99_s": self.latency_p99_s, "states": dict(self.states)}

    def line(self) -> str:
        """One line for a terminal."""
        def ms(value: float | None) -> str:
            return "-" if value is None else f"{value * 1000:.1f} ms"

        return (f"frames read {self.frames_read}, processed {self.frames_processed}, dropped {self.frames_dropped}, "
                f"failed {self.frames_failed}; capture -> lanes p50 {ms(self.latency_p50_s)}, "
                f"p99 {ms(self.latency_p99_s)}")


def freshness(seq: int, error: str | None, captured_at: float, call_started: float | None, max_age: float,
              now: float) -> str:
    """The state of a result at `now` (module docstring): "unavailable" before the first answer, after a failed call,
    or while the call in flight (`call_started`) has had no answer for longer than max_age; "ok" within max_age of
    capture; "stale" after."""
    if seq == 0 or error is not None:
        return "unavailable"
    if now - captured_at <= max_age:
        return "ok"
    if call_started is not None and now - call_started > max_age:
        return "unavailable"  # nothing has answered within max_age
    return "stale"


def why_unavailable(state: str, error: str | None, call_started: float | None, max_age: float,
                    now: float) -> str | None:
    """A result's `error` as handed out: its own, or, when it is unavailable because the call in flight has had no
    answer for longer than max_age, that."""
    if state != "unavailable" or error is not None or call_started is None:
        return error
    return (f"no answer for {(now - call_started) * 1000:.0f} ms, more than max_age={max_age:g} s (the server is "
            "slow, hung or restarting)")


class _Frames:
    """The source as an iterator of frames, paced to `fps` where it is a file or an iterable (a camera paces
    itself); `close()` releases what it opened."""

    def __init__(self, source: Any, fps: float | None, stop: threading.Event) -> None:
        self._stop = stop
        self._capture = None
        self.period = 0.0
        if isinstance(source, (str, Path)):
            text = str(source)
            self._capture = open_video(text)
            if not is_live_source(text):  # a file plays at its own rate (or fps=), like a camera would deliver it
                self.period = 1.0 / (fps or source_fps(self._capture))
            self._iterator: Iterator[Any] = frames_of(self._capture)
        elif callable(source):
            self.period = 1.0 / (fps or 30.0)
            self._iterator = self._poll(source)
        elif isinstance(source, Iterable):
            self.period = 1.0 / fps if fps else 0.0
            self._iterator = iter(source)
        else:
            raise ClientError(f"LaneStream source must be a video file, camera or GStreamer pipeline, an iterable of "
                              f"frames or a callable returning the newest frame, not {type(source).__name__}.")

    def _poll(self, newest: Callable[[], Any]) -> Iterator[Any]:
        while not self._stop.is_set():
            frame = newest()
            if frame is not None:
                yield frame
            elif self._stop.wait(self.period):  # nothing new yet: ask again next period
                return

    def __iter__(self) -> Iterator[Any]:
        due = time.monotonic()
        for frame in self._iterator:
            if self.period:
                if self._stop.wait(max(0.0, due - time.monotonic())):
                    return
                due = max(due, time.monotonic() - self.period) + self.period  # a late source does not burst
            yield frame
            if self._stop.is_set():
                return

    def close(self) -> None:
        close = getattr(self._iterator, "close", None)
        if close is not None:
            close()
        if self._capture is not None:
            self._capture.release()


class LaneStream:
    """Lanes of the newest frame of `source`, for a control loop (module docstring).

    client: a LaneDetClient (or anything with `detect(frame, *, deadline=)`). source: a video file, a camera
    (/dev/video0, 0) or a GStreamer pipeline (as `edge_deploy.media.open_video` opens them), an iterable of frames,
    or a callable returning the newest frame (None: none yet; it is asked once per frame period, 1/fps, 30/s by
    default, and `captured_at` is when it returned the frame). max_age: seconds after capture that lanes count as
    "ok"; later lanes are "stale", and a call with no answer for longer than max_age makes the state "unavailable".
    deadline: how long one call may take before it is given up and the newest frame is tried (default
    `default_deadline(max_age)`: at least 2 s, so a model slower than max_age still gives its lanes, "stale";
    the stream warns once when three answers in a row come later than max_age). process: run the reader and the
    worker in a child process (stream_process.py) so that decoding never holds this interpreter; `latest()` and
    `stop()` as ever, no iteration or on_result; the source by name (a camera, pipeline or file). on_call: called
    with the start time of each call and None when it ends (in the worker thread). camera: an `edge_deploy.geometry.Camera` for markers;
    track=True follows them (a dropped frame advances the tracker without a miss, a failed frame counts a miss:
    markers coast for up to the tracker's `max_missed` frames, flagged `missed`, then drop). fps: the rate a file
    or iterable is read at (a file: its own rate by default; an iterable: as fast as it yields; a callable: polled
    at 30/s); also the tracker's frame interval. on_result: called with each new result, in the worker thread.
    speed_mps: the vehicle's speed for the tracker's motion and the time to line crossing.

        with LaneDetClient(url, model, connect=False) as client, LaneStream(client, "/dev/video0") as stream:
            while driving:
                result = stream.latest()          # at once, never waits for the server
                if result.state == "ok": steer(result.markers)
    """

    def __init__(self, client: Any, source: Any, *, max_age: float = 0.1, camera: Any = None, track: bool = False,
                 fps: float | None = None, on_result: Callable[[LaneResult], Any] | None = None,
                 deadline: float | None = None, speed_mps: float | None = None, process: bool = False,
                 on_call: Callable[[float | None], Any] | None = None) -> None:
        if not callable(getattr(client, "detect", None)):
            raise ClientError(f"LaneStream needs a client with detect(frame, deadline=) (a LaneDetClient), not "
                              f"{type(client).__name__}.")
        check_timing(max_age, deadline, fps)
        if track and camera is None:
            raise ClientError("track=True follows lane markers, which need camera=Camera.from_yaml(path).")
        self.client = client
        self.max_age = float(max_age)
        self.deadline = float(deadline) if deadline is not None else default_deadline(self.max_age)
        self.on_result = on_result
        self._on_call = on_call
        self._child: Any = None  # a ProcessStream with process=True
        if process:
            if on_result is not None:
                raise ClientError("process=True runs the stream in a child process, where on_result= cannot run; "
                                  "read latest() instead, or pass process=False.")
            from .stream_process import ProcessStream

            self._child = ProcessStream(type(self), client, source, {"max_age": self.max_age, "deadline": self.deadline,
                                                         "camera": camera, "track": track, "fps": fps,
                                                         "speed_mps": speed_mps})
            source, camera = (), None  # read, detected and followed in the child
        self._cond = threading.Condition()
        self._threads = Threads(wake=self._wake)
        self._stop = self._threads.stopping
        self._frames = _Frames(source, fps, self._stop)  # opens a file or camera now: its error comes here
        self.geometry = None
        if camera is not None:
            self.geometry = LaneGeometry(camera, track=track, speed_mps=speed_mps,
                                         fps=fps or (1.0 / self._frames.period if self._frames.period else None))
        self._newest: tuple[int, float, Any] | None = None  # (seq, captured_at, frame) not yet taken by the worker
        self._source_done = False
        self._result = LaneResult(seq=0, captured_at=time.monotonic(), error="no frame detected yet")
        self._unread: collections.deque[LaneResult] = collections.deque(maxlen=UNREAD_KEPT)  # for iteration
        self._call_started: float | None = None  # monotonic start of the call in flight, None when idle
        self._last_seq = 0
        self._late = 0  # answers in a row later than max_age
        self._warned_late = False
        self._read = self._processed = self._dropped = self._failed = 0
        self._latencies: collections.deque[tuple[float, float]] = collections.deque(maxlen=LATENCIES_KEPT)
        self._states: collections.Counter[str] = collections.Counter()

    # -- lifecycle

    def start(self) -> "LaneStream":
        if self._threads.started or self._threads.stopping.is_set():
            raise ClientError("this LaneStream was started already; make a new one to start again.")
        if self._child is not None:
            self._threads.stopping.set()  # no thread here: the child reads and detects
            self._child.start()
            return self
        self._threads.start(self._read_frames, "lanestream-reader")
        self._threads.start(self._detect_frames, "lanestream-worker")
        return self

    def stop(self) -> StreamStats:
        """Stop reading and detecting and return what the stream did, within max_age + 50 ms whatever the server
        or the source does. The worker releases the client's shared memory and server registrations as it ends
        (the client stays usable): at once when it is idle; a call still in flight (a hung server) is abandoned and
        releases when its deadline ends it, and regions the server did not drop are dropped at the client's next
        call or close()."""
        if self._child is not None:
            self._child.stop(within=self.max_age + STOP_MARGIN)
        else:
            self._threads.stop(within=self.max_age + STOP_MARGIN)
        return self.stats()

    def _wake(self) -> None:
        with self._cond:
            self._cond.notify_all()

    def __enter__(self) -> "LaneStream":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def running(self) -> bool:
        return self._child.running if self._child is not None else self._threads.running

    # -- what the app reads

    def latest(self) -> LaneResult:
        """The newest result, its age and state as of now; returns at once (it never waits for the server)."""
        if self._child is not None:
            result, started = self._child.newest() or self._result, self._child.call_started()
        else:
            result, started = self._result, self._call_started
        now = time.monotonic()
        state = freshness(result.seq, result.error, result.captured_at, started, self.max_age, now)
        return replace(result, age_s=now - result.captured_at, state=state,
                       error=why_unavailable(state, result.error, started, self.max_age, now))

    def __iter__(self) -> Iterator[LaneResult]:
        return self

    def __next__(self) -> LaneResult:
        """The next new result, each once and in order, as it was when its lanes came (a consumer more than
        UNREAD_KEPT results behind loses the oldest); when none comes within max_age, `latest()` (its state says
        why). Ends when the stream stopped or its source ended and every result was handed out."""
        if self._child is not None:
            raise ClientError("a stream with process=True hands out latest() only; iterate one with process=False.")
        with self._cond:
            self._cond.wait_for(lambda: self._unread or self._finished(), timeout=self.max_age)
            if self._unread:
                return self._unread.popleft()
            if self._finished():
                raise StopIteration
        return self.latest()

    def stats(self, since: float | None = None) -> StreamStats:
        """What the stream did so far; the latency percentiles over frames captured at or after `since`
        (time.monotonic(); None: all). With process=True: the child's, as of stop() (zeros before)."""
        if self._child is not None:
            return self._child.stats_at_stop or StreamStats(0, 0, 0, 0, None, None, {})
        latencies = np.asarray([latency for captured, latency in list(self._latencies)
                                if since is None or captured >= since], dtype=np.float64)
        p50, p99 = (float(np.percentile(latencies, q)) for q in (50, 99)) if latencies.size else (None, None)
        return StreamStats(self._read, self._processed, self._dropped, self._failed, p50, p99, dict(self._states))

    # -- the two threads

    def _finished(self) -> bool:
        return self._stop.is_set() or (self._source_done and self._newest is None and self._call_started is None)

    def _read_frames(self) -> None:
        try:
            for frame in self._frames:
                captured = time.monotonic()
                with self._cond:
                    self._read += 1
                    if self._newest is not None:
                        self._dropped += 1  # never detected: a newer frame replaces it
                    self._newest = (self._read, captured, frame)
                    self._cond.notify_all()
                if self._stop.is_set():
                    break
        except EdgeDeployError as exc:
            self._publish(LaneResult(seq=self._read, captured_at=time.monotonic(), error=one_line(exc)))
        finally:
            self._frames.close()
            with self._cond:
                self._source_done = True
                self._cond.notify_all()

    def _detect_frames(self) -> None:
        try:
            while True:
                with self._cond:
                    self._cond.wait_for(lambda: self._newest is not None or self._source_done or self._stop.is_set())
                    if self._stop.is_set() or self._newest is None:
                        return
                    seq, captured, frame = self._newest
                    self._newest = None
                    self._call_started = time.monotonic()
                if self._on_call is not None:
                    call_app(self._on_call, self._call_started, what="LaneStream on_call")
                try:
                    self._publish(self._detect(seq, captured, frame))
                finally:
                    with self._cond:
                        self._call_started = None
                        self._cond.notify_all()
                    if self._on_call is not None:
                        call_app(self._on_call, None, what="LaneStream on_call")
        finally:
            release = getattr(self.client, "release", None)
            if release is not None and self._stop.is_set():
                call_app(release, what="LaneStream releasing the client's shared memory")

    def _detect(self, seq: int, captured: float, frame: Any) -> LaneResult:
        dropped, self._last_seq = seq - self._last_seq - 1, seq
        if self.geometry is not None:
            for _ in range(dropped):
                self.geometry.skipped_frame()
        try:
            lanes = self.client.detect(frame, deadline=self.deadline)
            answered = time.monotonic()
            markers = self.geometry.frame_markers(lanes, frame) if self.geometry is not None else None
        except Exception as exc:  # noqa: BLE001 - any failure is this frame's, never the end of the stream
            self._failed += 1
            markers = self.geometry.missed_frame() if self.geometry is not None else None
            error = one_line(exc) if isinstance(exc, EdgeDeployError) else f"{type(exc).__name__}: {one_line(exc)}"
            return LaneResult(seq=seq, captured_at=captured, markers=markers, dropped=dropped, error=error,
                              frame=frame)
        self._processed += 1
        latency = answered - captured
        self._latencies.append((captured, latency))
        state = "ok" if latency <= self.max_age else "stale"
        self._late = self._late + 1 if state == "stale" else 0
        if self._late == LATE_WARNING and not self._warned_late:
            self._warned_late = True
            warnings.warn(f"LaneStream: the last {LATE_WARNING} frames' lanes came {latency * 1000:.0f} ms after "
                          f"capture, later than max_age={self.max_age:g} s, so they are 'stale', never 'ok': the "
                          "model (or the machine) is slower than max_age; pass a max_age above its latency "
                          "(`edge-deploy bench` measures it)", RuntimeWarning, stacklevel=2)
        return LaneResult(seq=seq, captured_at=captured, lanes=tuple(lanes), markers=markers, latency_s=latency,
                          age_s=time.monotonic() - captured, state=state, dropped=dropped, frame=frame)

    def _publish(self, result: LaneResult) -> None:
        with self._cond:
            self._result = result
            self._unread.append(result)
            self._states[result.state] += 1
            self._cond.notify_all()
        if self.on_result is not None:
            call_app(self.on_result, result, what="LaneStream on_result")
