"""Each frame's results to every sink asked for (an MCAP file, a Foxglove server): `Publisher` is the `publish`
callback of the run loop (edge_deploy.media.detect).

The messages are made and written on a worker thread, so the JPEG encoding and serialization overlap the next
frame's request instead of adding to it; a short queue keeps the worker close behind (the run waits when it is
full: no frame is dropped). `close` waits for every frame handed over, then finishes the sinks.

Neither wait is unbounded: a worker that has not taken the next frame, or finished those handed over, within
STUCK_AFTER seconds is stuck (a sink that blocks), and the run is told so in one line; the worker is a daemon,
abandoned, and the MCAP file is not kept (what the stuck worker wrote cannot be trusted to be whole).
"""
from __future__ import annotations

import queue
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from ..errors import EdgeDeployError
from ..media.stamped import FrameResult
from ..runtime import Threads
from .messages import CHANNELS, frame_messages

QUEUE_FRAMES = 4
# Seconds the worker may take to take one more frame, or to publish the (at most QUEUE_FRAMES + 1) frames handed over
# at close: each takes milliseconds (a JPEG encoding, a few writes), so past this the worker is stuck, not slow.
STUCK_AFTER = 5.0
_STOP = object()


class Publisher:
    """Serializes a frame's messages once and hands them to each sink (`write(Message)`, `close(keep)`)."""

    def __init__(self, sinks: list[Any]) -> None:
        self.sinks = sinks
        self.frames = 0
        self._queue: queue.Queue[Any] = queue.Queue(maxsize=QUEUE_FRAMES)
        self._failure: BaseException | None = None
        self._threads = Threads(wake=self._wake)
        self._threads.start(self._work, "edge-deploy-publish")

    @classmethod
    def open(cls, mcap: Path | None = None, foxglove: Any = None, inputs: Iterable[Path | str] = (), *,
             channels: Mapping[str, str] | None = None, insecure: bool = False) -> "Publisher":
        """The sinks for --mcap PATH and --foxglove ADDRESS (a ListenAddress); either may be None. `inputs`: the
        files the run reads, which --mcap must not be. `channels`: those the run publishes (topic -> type;
        messages.run_channels), advertised to Foxglove clients before the first frame (None: every one of
        CHANNELS); `insecure`: --foxglove-insecure (an address beyond loopback)."""
        sinks: list[Any] = []
        try:
            if mcap is not None:
                from .mcap_file import McapRecording

                sinks.append(McapRecording(mcap, inputs))
            if foxglove is not None:
                from .live import FoxgloveLive

                sinks.append(FoxgloveLive(foxglove, CHANNELS if channels is None else channels, insecure=insecure))
        except BaseException:
            for sink in sinks:
                sink.close(keep=False)
            raise
        return cls(sinks)

    def wait_for_subscriber(self, timeout: float, clients: int = 1) -> bool:
        """Whether `clients` clients of the live sink (Foxglove) subscribed within `timeout` seconds; True
        without one."""
        live = [sink for sink in self.sinks if hasattr(sink, "wait_for_subscriber")]
        return all(sink.wait_for_subscriber(timeout, clients) for sink in live)

    def __call__(self, result: FrameResult) -> None:
        self._raise_failure()
        try:
            self._queue.put(result, timeout=STUCK_AFTER)
        except queue.Full:
            raise self._stuck("took no frame") from None

    def _wake(self) -> None:
        """Wake a worker waiting for a frame (when the queue is full, it is busy and sees `stopping` next)."""
        try:
            self._queue.put_nowait(_STOP)
        except queue.Full:
            pass

    def _work(self) -> None:
        stopping = self._threads.stopping
        while not (stopping.is_set() and self._queue.empty()):  # every frame handed over, then stop
            result = self._queue.get()
            if result is _STOP:
                continue
            if self._failure is not None:
                continue  # drain: the run is told at its next frame
            try:
                messages = frame_messages(result)
                for sink in self.sinks:
                    for message in messages:
                        sink.write(message)
                self.frames += 1
            except BaseException as exc:  # noqa: BLE001 - handed to the run's thread
                self._failure = exc

    def _raise_failure(self) -> None:
        if self._failure is not None:
            raise self._failure

    def _stuck(self, what: str) -> EdgeDeployError:
        failure = EdgeDeployError(
            f"publishing to {', '.join(type(sink).__name__ for sink in self.sinks)} {what} within {STUCK_AFTER:g} s: "
            "a sink is stuck (a hung disk or network file system?); the frames not yet published are dropped and an "
            "MCAP file is not kept. Check where the output goes, then run again.")
        self._failure = self._failure or failure  # the worker drains what is left instead of publishing it
        return failure

    def close(self, keep: bool = True) -> None:
        """Publish every frame handed over, then finish every sink (an MCAP file is removed when no frame was
        published, or keep=False); the wait for the frames is at most STUCK_AFTER seconds (then a one-line error,
        and nothing kept)."""
        stuck = bool(self._threads.stop(within=STUCK_AFTER))
        if stuck:
            self._stuck("did not finish the frames handed over")
        for sink in self.sinks:
            sink.close(keep=keep and not stuck and self.frames > 0)
        self._raise_failure()

    def __bool__(self) -> bool:
        return bool(self.sinks)
