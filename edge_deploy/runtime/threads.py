"""The threads edge-deploy starts (stream readers and workers, publishers, server-side cleanup) and how they stop.

Every one is a daemon, so none keeps a process alive; `Threads.stop(within)` returns within its bound whatever the
threads are blocked on (a hung server, a camera that stopped delivering): a thread still blocked then is abandoned
and ends when its blocking call does (each such call has a deadline of its own). The app's callbacks run through
`call_app`, which reports whatever they raise, SystemExit and KeyboardInterrupt included, instead of letting it end
the thread that called them (a worker that died that way would leave its stream hanging).
"""
from __future__ import annotations

import threading
import time
import warnings
from collections.abc import Callable
from typing import Any

from ..errors import one_line

__all__ = ["Threads", "call_app", "in_background"]


class Threads:
    """The threads of one object, started as daemons and stopped together under one deadline.

    `stopping` is set by `stop`; each thread's loop checks it (or waits on it). `wake` is called right after it is
    set, to wake threads that wait on something else (a Condition's notify_all)."""

    def __init__(self, wake: Callable[[], None] | None = None) -> None:
        self.stopping = threading.Event()
        self._wake = wake
        self._threads: list[threading.Thread] = []

    def start(self, target: Callable[..., Any], name: str, *args: Any) -> threading.Thread:
        thread = threading.Thread(target=target, args=args, name=name, daemon=True)
        self._threads.append(thread)
        thread.start()
        return thread

    @property
    def started(self) -> bool:
        return bool(self._threads)

    @property
    def running(self) -> bool:
        return any(thread.is_alive() for thread in self._threads)

    def stop(self, within: float) -> list[str]:
        """Tell every thread to stop and wait for them, `within` seconds in all; the names of those still running
        (abandoned: they end when what blocks them does)."""
        self.stopping.set()
        if self._wake is not None:
            self._wake()
        end = time.monotonic() + max(0.0, within)
        for thread in self._threads:
            if thread is not threading.current_thread():
                thread.join(timeout=max(0.0, end - time.monotonic()))
        return [thread.name for thread in self._threads if thread.is_alive()]


def in_background(work: Callable[[], Any], name: str) -> threading.Thread:
    """Run `work` on a daemon thread of its own (cleanup that must never run on the caller's time); what it raises
    is reported as a RuntimeWarning."""
    thread = threading.Thread(target=call_app, args=(work,), kwargs={"what": name}, name=name, daemon=True)
    thread.start()
    return thread


def call_app(callback: Callable[..., Any], *args: Any, what: str) -> bool:
    """Call `callback(*args)`; whatever it raises (SystemExit and KeyboardInterrupt too) becomes a RuntimeWarning
    naming `what`, never the end of the calling thread. Whether it returned normally."""
    try:
        callback(*args)
    except BaseException as exc:  # noqa: BLE001 - contained: the thread that calls an app's code must go on
        warnings.warn(f"{what} raised {type(exc).__name__}: {one_line(exc) or 'no message'}", RuntimeWarning,
                      stacklevel=2)
        return False
    return True
