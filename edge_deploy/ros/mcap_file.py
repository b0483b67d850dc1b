"""The results as a rosbag2-compatible MCAP file (profile ros2, ros2msg schemas, cdr messages), written with the
`mcap` library under a temporary name beside it and renamed when finished: a reader never finds half a file under
the final name, and a run stopped with Ctrl-C still finishes (summary, footer) what it wrote."""
from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ..errors import ClientError
from ..core.fsutil import AtomicOutput, check_target
from .messages import TF_STATIC, Message
from .types import schema
from ..core.deps import require
from .._version import __version__

_INFINITE = {"sec": 2147483647, "nsec": 4294967295}  # rmw's infinite duration, as rosbag2 writes it


def offered_qos(latched: bool) -> str:
    """The channel's `offered_qos_profiles` (required by the MCAP ros2 profile), as rosbag2 records a publisher's:
    reliable, volatile, history and depth left to the player (rmw enum values: the form every rosbag2 reads).
    `latched`: transient_local, depth 1, as tf2's static broadcaster offers /tf_static, so `ros2 bag play`
    latches it too."""
    import yaml

    profile = {"history": 1 if latched else 3, "depth": 1 if latched else 0, "reliability": 1,
               "durability": 1 if latched else 2, "deadline": dict(_INFINITE), "lifespan": dict(_INFINITE),
               "liveliness": 1, "liveliness_lease_duration": dict(_INFINITE), "avoid_ros_namespace_conventions": False}
    return yaml.safe_dump([profile], sort_keys=False).strip()


def check_output(path: Path, inputs: Iterable[Path | str] = ()) -> Path:
    """`path` if an MCAP file can be written there, else a one-line ClientError (before anything is run): not a
    directory, a device node, a FIFO or a socket, not one of `inputs` (the recordings and videos read: the same
    file however reached), in a directory that exists and can be written."""
    path = Path(path)
    check_target(path, what="--mcap", inputs=_files_of(inputs), error=ClientError)
    if not path.parent.is_dir():
        raise ClientError(f"--mcap {path}: the directory {path.parent} does not exist; create it or pass a path in "
                          "an existing directory.")
    if not os.access(path.parent, os.W_OK):
        raise ClientError(f"--mcap {path}: cannot write in {path.parent} (permissions); pass another path.")
    return path


def _files_of(inputs: Iterable[Path | str]) -> list[Path]:
    """The inputs and, for a directory (a rosbag2 recording), the files directly in it."""
    files = []
    for source in inputs:
        path = Path(source)
        files.append(path)
        if path.is_dir():
            with contextlib.suppress(OSError):
                files.extend(p for p in path.iterdir())
    return files


class McapRecording:
    """Messages (`write`) into `path`: channels and schemas registered as their first message comes. The file is
    written under a temporary name beside `path` (fsutil.AtomicOutput) and renamed by `finish()`."""

    def __init__(self, path: Path, inputs: Iterable[Path | str] = ()) -> None:
        writer = require("mcap.writer", "writing an MCAP file (--mcap)")
        self.path = check_output(path, inputs)
        self._output = AtomicOutput(self.path, what="--mcap", inputs=_files_of(inputs), error=ClientError)
        self.tmp = self._output.tmp
        try:
            self._file = self._output.open("wb")
            # Chunks uncompressed: most of each is the frame's JPEG, which does not compress; zstd cost CPU per frame.
            self._writer = writer.Writer(self._file, compression=writer.CompressionType.NONE)
            self._writer.start(profile="ros2", library=f"edge-deploy {__version__}")
        except BaseException:
            self.discard()
            raise
        self._channels: dict[str, int] = {}
        self._schemas: dict[str, int] = {}
        self._sequence = 0
        self.messages = 0

    def write(self, message: Message) -> None:
        channel = self._channels.get(message.topic)
        if channel is None:
            schema_id = self._schemas.get(message.msgtype)
            if schema_id is None:
                schema_id = self._writer.register_schema(message.msgtype, "ros2msg", schema(message.msgtype))
                self._schemas[message.msgtype] = schema_id
            channel = self._writer.register_channel(
                message.topic, "cdr", schema_id, {"offered_qos_profiles": offered_qos(message.topic == TF_STATIC)})
            self._channels[message.topic] = channel
        self._writer.add_message(channel, log_time=message.log_time_ns, data=message.data,
                                 publish_time=message.log_time_ns, sequence=self._sequence)
        self._sequence += 1
        self.messages += 1

    def finish(self) -> Path:
        """Write the summary and footer and rename to `path`; returns it (on any failure the temporary file is
        removed and `path` is left as it was)."""
        try:
            self._writer.finish()
            self._file.close()
        except BaseException:
            self.discard()
            raise
        return self._output.commit()

    def discard(self) -> None:
        if getattr(self, "_file", None) is not None:
            with contextlib.suppress(OSError):
                self._file.close()
        self._output.discard()

    def close(self, keep: bool) -> Any:
        return self.finish() if keep else self.discard()
