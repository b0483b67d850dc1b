"""What LaneStream and PerceptionStream share: the source read on a thread that keeps only the newest frame, and one
worker thread per client that calls it on the newest frame it has not taken yet, as soon as its previous call
returned; the threads stopped together (runtime.Threads). The streams add what a call is and what they hand out.
"""
from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, TypeVar

from ..errors import ClientError, EdgeDeployError, one_line
from ..core.numbers import STREAM_FPS, STREAM_SECONDS
from ..runtime import Threads, call_app
from .video import frames_of, is_live_source, open_video, source_fps

__all__ = ["Frames", "NewestFrameLoop", "StreamWorker", "check_timing", "failure_text"]

S = TypeVar("S", bound="NewestFrameLoop")

def check_timing(max_age: Any, fps: Any, deadline: Any) -> None:
    """A stream's max_age, fps and deadline (None: the default), each refused in one line outside its range."""
    for name, value, rng in (("max_age", max_age, STREAM_SECONDS), ("fps", fps, STREAM_FPS),
                             ("deadline", deadline, STREAM_SECONDS)):
        if value is not None:
            rng.check(name, value, ClientError)


def failure_text(exc: BaseException) -> str:
    """A failed call (or child) in one line: an EdgeDeployError's own words, else its type too."""
    return one_line(exc) if isinstance(exc, EdgeDeployError) else f"{type(exc).__name__}: {one_line(exc)}"


class Frames:
    """The source as an iterator of frames, paced to `fps` where it is a file or an iterable (a camera paces
    itself); `close()` releases what it opened."""

    def __init__(self, source: Any, fps: float | None, stop: threading.Event, owner: str = "LaneStream") -> None:
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
            raise ClientError(f"{owner} source must be a video file, camera or GStreamer pipeline, an iterable of "
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


class StreamWorker:
    """One client's thread: the call in flight and what it did."""

    def __init__(self, name: str, client: Any) -> None:
        self.name = name
        self.client = client
        self.call_started: float | None = None  # monotonic start of the call in flight, None when idle
        self.taken = 0  # the seq of the last frame this worker took
        self.answered = self.failed = 0


class NewestFrameLoop:
    """The reader and the workers of a stream (module docstring). A subclass sets `workers` and gives `_answer` (one
    call on a frame, its result published) and `_source_failed` (the source raised)."""

    workers: list[StreamWorker]

    def __init__(self, source: Any, fps: float | None) -> None:
        self._cond = threading.Condition()
        self._threads = Threads(wake=self._wake)
        self._stop = self._threads.stopping
        self._frames = Frames(source, fps, self._stop, type(self).__name__)  # opens a file or camera now: its error comes here
        self._newest: tuple[int, float, Any] | None = None  # (seq, captured_at, frame): the newest frame read
        self._source_done = False
        self._read = self._dropped = 0
        self._on_call: Callable[[float | None], Any] | None = None  # told each call's start, and None at its end

    def _check_startable(self) -> None:
        """A stream starts once: not again, nor after stop()."""
        if self._threads.started or self._threads.stopping.is_set():
            raise ClientError(f"this {type(self).__name__} was started already; make a new one to start again.")

    def _start_threads(self, prefix: str) -> None:
        self._threads.start(self._read_frames, f"{prefix}-reader")
        for worker in self.workers:
            self._threads.start(self._serve, f"{prefix}-{worker.name}", worker)

    def _wake(self) -> None:
        with self._cond:
            self._cond.notify_all()

    def __enter__(self: S) -> S:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self: S) -> S:
        raise NotImplementedError

    def stop(self) -> Any:
        raise NotImplementedError

    def _answer(self, worker: StreamWorker, seq: int, captured: float, frame: Any) -> None:
        raise NotImplementedError

    def _source_failed(self, seq: int, error: str) -> None:
        raise NotImplementedError

    def _new_for(self, worker: StreamWorker) -> bool:
        """(under the lock) Whether a frame `worker` has not taken is waiting."""
        return self._newest is not None and self._newest[0] > worker.taken

    def _read_frames(self) -> None:
        try:
            for frame in self._frames:
                captured = time.monotonic()
                with self._cond:
                    self._read += 1
                    if self._newest is not None and not any(w.taken >= self._newest[0] for w in self.workers):
                        self._dropped += 1  # never taken: a newer frame replaces it
                    self._newest = (self._read, captured, frame)
                    self._cond.notify_all()
                if self._stop.is_set():
                    break
        except EdgeDeployError as exc:
            self._source_failed(self._read, one_line(exc))
        finally:
            self._frames.close()
            with self._cond:
                self._source_done = True
                self._cond.notify_all()

    def _serve(self, worker: StreamWorker) -> None:
        """`worker`'s thread; as it ends on stop(), it releases its client's shared memory (the client stays
        usable), on its own time, never the caller's."""
        try:
            while True:
                with self._cond:
                    self._cond.wait_for(lambda: self._stop.is_set() or self._source_done or self._new_for(worker))
                    if self._stop.is_set() or not self._new_for(worker):
                        return
                    assert self._newest is not None
                    seq, captured, frame = self._newest
                    worker.taken = seq
                    worker.call_started = time.monotonic()
                self._tell_call(worker.call_started)
                try:
                    self._answer(worker, seq, captured, frame)
                finally:
                    with self._cond:
                        worker.call_started = None
                        self._cond.notify_all()
                    self._tell_call(None)
        finally:
            release = getattr(worker.client, "release", None)
            if release is not None and self._stop.is_set():
                call_app(release, what=f"{type(self).__name__} releasing {worker.name!r}'s shared memory")

    def _tell_call(self, started: float | None) -> None:
        if self._on_call is not None:
            call_app(self._on_call, started, what=f"{type(self).__name__} on_call")
