"""Each frame's results to every sink asked for (an MCAP file, a Foxglove server): `Publisher` is the `publish`
callback of the run loop (edge_deploy.media.detect).

The messages are made and written on a worker thread, so the JPEG encoding and serialization overlap the next
frame's request instead of adding to it; a short queue keeps the worker close behind (the run waits when it is
full: no frame is dropped). `close` waits for every frame handed over, then finishes the sinks.
"""
from __future__ import annotations

import queue
import threading
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from ..media.stamped import FrameResult
from .messages import CHANNELS, frame_messages

QUEUE_FRAMES = 4
_STOP = object()


class Publisher:
    """Serializes a frame's messages once and hands them to each sink (`write(Message)`, `close(keep)`)."""

    def __init__(self, sinks: list[Any]) -> None:
        self.sinks = sinks
        self.frames = 0
        self._queue: queue.Queue[Any] = queue.Queue(maxsize=QUEUE_FRAMES)
        self._failure: BaseException | None = None
        self._worker = threading.Thread(target=self._work, name="edge-deploy-publish", daemon=True)
        self._worker.start()

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
        self._queue.put(result)

    def _work(self) -> None:
        while True:
            result = self._queue.get()
            if result is _STOP:
                return
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

    def close(self, keep: bool = True) -> None:
        """Publish every frame handed over, then finish every sink (an MCAP file is removed when no frame was
        published, or keep=False)."""
        if self._worker.is_alive():
            self._queue.put(_STOP)
            self._worker.join()
        for sink in self.sinks:
            sink.close(keep=keep and self.frames > 0)
        self._raise_failure()

    def __bool__(self) -> bool:
        return bool(self.sinks)
