"""PerceptionStream: one camera, several served models (a lane model beside an object detector, ...), each with its
own deadline and state: LaneStream generalized to a stack.

A reader thread keeps only the newest frame (older ones not yet taken are dropped and counted). One worker thread
per model takes the newest frame as soon as its previous call returned and calls its client, bounded by the
stream's `deadline`, so a slow, unloaded or crashed model never holds the others back. Models whose clients make
the same input from a frame (same size, preprocessing, datatype and fitting: `FrameInput.key_of`) share it: the
frame is converted once per frame for all of them and, on shared memory, uploaded once (`ModelClient.share`): the
others send that region by name. `latest()` returns at once a `PerceptionResult`: per model its
newest result with its own seq, capture time, latency, age and state ("ok", "stale", "unavailable" as in
LaneStream: a model that fails, or has had no answer for longer than `max_age`, is "unavailable" on its own).

Any client works: one with `frame_input` and `shares_frame_input` (ModelClient, DetectorClient) gets the shared
input; one with `detect(frame, deadline=)` (LaneDetClient) gets the frame. So this module imports no client.
"""
from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Callable

from ..errors import ClientError, EdgeDeployError, one_line
from ..runtime import Threads, call_app
from .stream import STATES, STOP_MARGIN, _Frames, check_timing, default_deadline, freshness, why_unavailable

__all__ = ["ModelResult", "PerceptionResult", "PerceptionStream", "STATES"]


@dataclass(frozen=True)
class ModelResult:
    """One model's newest answer. seq and captured_at: of the frame it answered (0 before its first answer).
    result: what its client returned (lanes, `Detections`, a dict of arrays); None when unavailable. latency_s:
    capture -> answer. age_s: now - captured_at when handed out. state: "ok", "stale" or "unavailable". error: why it
    is unavailable, in one line."""

    seq: int
    captured_at: float
    result: Any = None
    latency_s: float | None = None
    age_s: float = 0.0
    state: str = "unavailable"
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.state == "ok"


@dataclass(frozen=True)
class PerceptionResult:
    """The stack's newest answers: `seq` and `captured_at` of the newest frame any model answered, and per model
    (by the name given to the stream) its own `ModelResult`."""

    seq: int
    captured_at: float
    models: Mapping[str, ModelResult] = field(default_factory=dict)

    def __getitem__(self, name: str) -> ModelResult:
        return self.models[name]

    @property
    def states(self) -> dict[str, str]:
        return {name: result.state for name, result in self.models.items()}


@dataclass(eq=False)
class _Entry:
    """One frame's input for one key: made once (`done` set when it is), taken by `users` calls not yet returned;
    `retired` once a newer frame came."""

    done: threading.Event = field(default_factory=threading.Event)
    value: Any = None
    failure: BaseException | None = None
    users: int = 0
    retired: bool = False


class _SharedInputs:
    """Each frame's inputs by `FrameInput` key, made (converted, and uploaded once where the client shares) by the
    first worker that needs it, and handed to every other worker of that key. An upload's region is given back to
    its pool only when its frame was replaced by a newer one and every call that took it has returned, so no region
    is written while a request may read it. A worker still on an older frame than the newest makes its own input,
    not shared."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._seq = 0
        self._entries: dict[tuple[int, Any], _Entry] = {}
        self.made = 0  # shared inputs made (one per frame and key, however many models take it)
        self.private = 0  # inputs made for one worker on an older frame

    def take(self, seq: int, key: Any, make: Callable[[], Any], own: Callable[[], Any],
             timeout: float) -> tuple[_Entry | None, Any]:
        """(the entry to `give_back` after the call, or None for an input of the caller's own; the input)."""
        with self._lock:
            if seq > self._seq:
                self._seq = seq
                for (old, _), older in list(self._entries.items()):
                    if old < seq:
                        older.retired = True
                        self._free_if_unused(older)
            if seq < self._seq:
                self.private += 1
                found: _Entry | None = None
            else:
                found = self._entries.get((seq, key))
                first = found is None
                if found is None:
                    found = self._entries[(seq, key)] = _Entry()
                found.users += 1
        if found is None:
            return None, own()
        entry = found
        if first:
            try:
                entry.value = make()
                with self._lock:
                    self.made += 1
            except BaseException as exc:  # noqa: BLE001 - handed to every taker, then raised here too
                entry.failure = exc
            finally:
                entry.done.set()
        elif not entry.done.wait(timeout):
            self.give_back(entry)
            raise ClientError("the frame's shared input was not made within the deadline")
        if entry.failure is not None:
            self.give_back(entry)
            raise entry.failure
        return entry, entry.value

    def give_back(self, entry: _Entry | None) -> None:
        """A call that took `entry` returned."""
        if entry is None:
            return
        with self._lock:
            entry.users -= 1
            self._free_if_unused(entry)

    def _free_if_unused(self, entry: _Entry) -> None:
        """(under the lock) Forget a retired entry nobody uses, and give its upload's region back."""
        if entry.retired and entry.users <= 0:
            for k, found in list(self._entries.items()):
                if found is entry:
                    del self._entries[k]
            upload = getattr(entry.value, "upload", None)
            if upload is not None:
                upload.give_back()


class _Worker:
    """One model's thread: its newest result and the call in flight."""

    def __init__(self, name: str, client: Any) -> None:
        self.name = name
        self.client = client
        self.result = ModelResult(seq=0, captured_at=time.monotonic(), error="no frame answered yet")
        self.call_started: float | None = None
        self.taken = 0  # the seq of the last frame this worker took
        self.answered = self.failed = 0


class PerceptionStream:
    """The newest frame of `source` to every model of `models` (name -> client), each model's newest answer with its
    age and state (module docstring).

    source: as for LaneStream (a video file, camera or pipeline, an iterable of frames, or a callable returning the
    newest frame). max_age: seconds after capture that an answer counts as "ok". deadline: how long a call may take
    before it is given up (default: `default_deadline(max_age)`, at least 2 s: an answer later than max_age is still
    handed out, "stale"; the state is "unavailable" once a call has had no answer for max_age). fps: the rate a file or iterable is read at (a callable: polled at 30/s). on_result: called with each
    model's new result as (name, ModelResult), in that model's worker thread.

        with PerceptionStream(camera, {"lanes": lane_client, "objects": detector_client}) as stream:
            while driving:
                now = stream.latest()              # at once, never waits for a server
                if now["lanes"].ok: steer(now["lanes"].result)
    """

    def __init__(self, source: Any, models: Mapping[str, Any], *, max_age: float = 0.1, deadline: float | None = None,
                 fps: float | None = None,
                 on_result: Callable[[str, ModelResult], Any] | None = None) -> None:
        if not isinstance(models, Mapping) or not models:
            raise ClientError("models must be a dict of name -> client (e.g. {'lanes': LaneDetClient(...), "
                              "'objects': DetectorClient(...)}), with at least one.")
        for name, client in models.items():
            if not callable(getattr(client, "detect", None)) and not callable(getattr(client, "infer", None)):
                raise ClientError(f"model {name!r}: {type(client).__name__} has neither detect(frame, deadline=) nor "
                                  "infer(inputs, deadline=); pass a LaneDetClient, DetectorClient or ModelClient.")
        check_timing(max_age, deadline, fps)
        self.max_age = float(max_age)
        self.deadline = float(deadline) if deadline is not None else default_deadline(self.max_age)
        self.on_result = on_result
        self._cond = threading.Condition()
        self._threads = Threads(wake=self._wake)
        self._stop = self._threads.stopping
        self._frames = _Frames(source, fps, self._stop)
        self._newest: tuple[int, float, Any] | None = None
        self._source_done = False
        self._read = self._dropped = 0
        self._workers = {str(name): _Worker(str(name), client) for name, client in models.items()}
        self._shared = _SharedInputs()

    # -- lifecycle

    def start(self) -> "PerceptionStream":
        if self._threads.started:
            raise ClientError("this PerceptionStream was started already; make a new one to start again.")
        self._threads.start(self._read_frames, "perception-reader")
        for worker in self._workers.values():
            self._threads.start(self._serve, f"perception-{worker.name}", worker)
        return self

    def stop(self) -> None:
        """Stop reading and calling, within max_age + 50 ms whatever the servers do: a call still hung on a server is
        abandoned. Each worker releases its client's shared memory registrations as it ends, on its own thread,
        never on the caller's time (a hung server would hold that call too)."""
        self._threads.stop(within=self.max_age + STOP_MARGIN)

    def _wake(self) -> None:
        with self._cond:
            self._cond.notify_all()

    def __enter__(self) -> "PerceptionStream":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- what the app reads

    def latest(self) -> PerceptionResult:
        """Every model's newest answer, its age and state as of now; returns at once."""
        now = time.monotonic()
        models = {}
        for name, worker in self._workers.items():
            result, started = worker.result, worker.call_started
            state = freshness(result.seq, result.error, result.captured_at, started, self.max_age, now)
            models[name] = replace(result, age_s=now - result.captured_at, state=state,
                                   error=why_unavailable(state, result.error, started, self.max_age, now))
        newest = max(models.values(), key=lambda r: r.seq)
        return PerceptionResult(newest.seq, newest.captured_at, models)

    @property
    def inputs_made(self) -> int:
        """Frame inputs converted (and, on shared memory, uploaded) for every model of their key: one per frame and
        key, however many models take it."""
        return self._shared.made

    @property
    def private_inputs(self) -> int:
        """Frame inputs made for one model alone: a worker still on a frame older than the newest another took."""
        return self._shared.private

    @property
    def frames_dropped(self) -> int:
        return self._dropped

    # -- threads

    def _read_frames(self) -> None:
        try:
            for frame in self._frames:
                with self._cond:
                    self._read += 1
                    if self._newest is not None and all(w.taken < self._newest[0] for w in self._workers.values()):
                        self._dropped += 1  # no model took it
                    self._newest = (self._read, time.monotonic(), frame)
                    self._cond.notify_all()
                if self._stop.is_set():
                    break
        except EdgeDeployError as exc:
            for worker in self._workers.values():
                self._publish(worker, ModelResult(seq=self._read, captured_at=time.monotonic(), error=one_line(exc)))
        finally:
            self._frames.close()
            with self._cond:
                self._source_done = True
                self._cond.notify_all()

    def _serve(self, worker: _Worker) -> None:
        try:
            while True:
                with self._cond:
                    self._cond.wait_for(lambda: self._stop.is_set() or self._source_done or (
                        self._newest is not None and self._newest[0] > worker.taken))
                    if self._stop.is_set() or self._newest is None or self._newest[0] <= worker.taken:
                        return
                    seq, captured, frame = self._newest
                    worker.taken = seq
                    worker.call_started = time.monotonic()
                try:
                    self._publish(worker, self._call(worker, seq, captured, frame))
                finally:
                    worker.call_started = None
        finally:
            release = getattr(worker.client, "release", None)
            if release is not None and self._stop.is_set():
                call_app(release, what=f"PerceptionStream releasing {worker.name!r}'s shared memory")

    def _call(self, worker: _Worker, seq: int, captured: float, frame: Any) -> ModelResult:
        client, deadline = worker.client, self.deadline
        try:
            if getattr(client, "shares_frame_input", False):
                started = time.monotonic()
                key = client.frame_input_key(deadline=deadline)  # connects first when needed
                share = getattr(client, "share", lambda prepared: prepared)
                entry, prepared = self._shared.take(seq, key, lambda: share(client.frame_input(frame)),
                                                    lambda: client.frame_input(frame), deadline)
                try:
                    left = max(0.001, deadline - (time.monotonic() - started))
                    call = client.detect if callable(getattr(client, "detect", None)) else client.infer
                    answer = call(prepared, deadline=left)
                finally:
                    self._shared.give_back(entry)
            elif callable(getattr(client, "detect", None)):
                answer = client.detect(frame, deadline=deadline)
            else:
                answer = client.infer(frame, deadline=deadline)
        except Exception as exc:  # noqa: BLE001 - a model's failure is its own, never the stream's end
            worker.failed += 1
            error = one_line(exc) if isinstance(exc, EdgeDeployError) else f"{type(exc).__name__}: {one_line(exc)}"
            return ModelResult(seq=seq, captured_at=captured, error=error)
        worker.answered += 1
        latency = time.monotonic() - captured
        return ModelResult(seq=seq, captured_at=captured, result=answer, latency_s=latency, age_s=latency,
                           state="ok" if latency <= self.max_age else "stale")

    def _publish(self, worker: _Worker, result: ModelResult) -> None:
        worker.result = result
        if self.on_result is not None:
            call_app(self.on_result, worker.name, result, what="PerceptionStream on_result")
