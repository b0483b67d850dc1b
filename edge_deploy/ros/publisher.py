"""Each frame's results to every sink asked for (an MCAP file, a Foxglove server): `Publisher` is the `publish`
callback of the run loop (edge_deploy.media.detect)."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from ..media.stamped import FrameResult
from .messages import frame_messages


class Publisher:
    """Serializes a frame's messages once and hands them to each sink (`write(Message)`, `close(keep)`)."""

    def __init__(self, sinks: list[Any]) -> None:
        self.sinks = sinks
        self.frames = 0

    @classmethod
    def open(cls, mcap: Path | None = None, foxglove: Any = None) -> "Publisher":
        """The sinks for --mcap PATH and --foxglove ADDRESS (a ListenAddress); either may be None."""
        sinks: list[Any] = []
        try:
            if mcap is not None:
                from .mcap_file import McapRecording

                sinks.append(McapRecording(mcap))
            if foxglove is not None:
                from .live import FoxgloveLive

                sinks.append(FoxgloveLive(foxglove))
        except BaseException:
            for sink in sinks:
                sink.close(keep=False)
            raise
        return cls(sinks)

    def __call__(self, result: FrameResult) -> None:
        messages = frame_messages(result)
        for sink in self.sinks:
            for message in messages:
                sink.write(message)
        self.frames += 1

    def close(self, keep: bool = True) -> None:
        """Finish every sink (keep=False: an MCAP file is removed, as when nothing was published)."""
        for sink in self.sinks:
            sink.close(keep=keep and self.frames > 0)

    def __bool__(self) -> bool:
        return bool(self.sinks)
