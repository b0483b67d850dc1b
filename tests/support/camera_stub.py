"""A camera stand-in for LaneStream tests: a thread pushes frames at a fixed rate (what a V4L2 camera does), and
iterating yields them as they come. A double for the camera only (none exists here): the server, client and stream
under test are real."""
from __future__ import annotations

import queue
import threading
import time

from edge_deploy.synthetic.roads import road_scene

SIZE = (590, 1640)
FPS = 30.0


class Camera:
    """A camera stand-in: a thread pushes a frame every 1/fps s (up to `count`); iterating yields them as they come
    and ends after the last (or when `close()` is called)."""

    def __init__(self, fps: float = FPS, count: int = 10_000) -> None:
        self.frames = [road_scene(SIZE[1], SIZE[0], seed=s)[0] for s in (50, 51, 52)]
        self._queue: queue.Queue = queue.Queue()
        self._stop = threading.Event()
        self.pushed = 0
        self._thread = threading.Thread(target=self._run, args=(fps, count), daemon=True)

    def _run(self, fps: float, count: int) -> None:
        due = time.monotonic()
        while self.pushed < count and not self._stop.is_set():
            self._queue.put(self.frames[self.pushed % 3])
            self.pushed += 1
            due += 1.0 / fps
            self._stop.wait(max(0.0, due - time.monotonic()))
        self._queue.put(None)

    def __iter__(self):
        self._thread.start()
        while (frame := self._queue.get()) is not None:
            yield frame

    def close(self) -> None:
        self._stop.set()
