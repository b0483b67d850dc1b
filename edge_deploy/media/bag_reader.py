"""Opening a ROS recording with `rosbags`, bounded, and as rosbag2 writes them (imported where a recording is read:
it imports rosbags).

Bounds (docs/failures.md, "Bounded reading"; docs/recordings.md): a recording is outside data, and its
compression lets a small file declare, or decompress to, any size. rosbags decompresses a chunk whole in memory
and a `compression_mode: file` bag whole into $TMPDIR, before any check. Here:

- every file is a regular file (`bounded_read`): a FIFO named as a recording is refused, never opened to block;
- an MCAP chunk (zstd, lz4) declares its decompressed size: over MAX_CHUNK_BYTES it is refused before anything
  decompresses, and it decompresses streaming to at most its declared size (rosbags' decompressor table is
  replaced by ours, which give the same bytes or refuse); the chunks the reader would hold at once (those whose
  times overlap) may declare MAX_HELD_BYTES together;
- a ROS 1 chunk (bz2, lz4) decompresses streaming to at most MAX_CHUNK_BYTES;
- a rosbag2 `compression_mode: message` message decompresses streaming to at most MAX_CHUNK_BYTES, and a
  `compression_mode: file` storage file decompresses streaming into a temporary directory, to at most
  `file_budget()`: MAX_FILE_BYTES, MAX_EXPANSION times its compressed size (EXPANSION_FLOOR at least), and the
  temporary file system's free space less TMP_RESERVE. Past a cap: one FrameError line naming it and what to do,
  and the temporary files are gone.

As rosbag2 writes them: the type definitions of only the topics read are parsed (Jazzy records service events
whose definitions are `SRV:` text, and a topic nobody reads must not refuse the recording), and an MCAP file whose
profile is empty (written by tools other than rosbag2) is read as ros2 when its channels are.
"""
from __future__ import annotations

import contextlib
import os
import shutil
import struct
import sys
import tempfile
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path, PurePath
from typing import TYPE_CHECKING, Any, BinaryIO

from rosbags.interfaces import Connection, MessageDefinitionFormat
from rosbags.rosbag1 import Reader as Reader1
from rosbags.rosbag1 import reader as rosbag1_reader
from rosbags.rosbag2 import Reader as Reader2
from rosbags.rosbag2 import storage_mcap
from rosbags.typesys import Stores, get_types_from_idl, get_types_from_msg, get_typestore

from ..core.bounded_read import read_regular, regular_file
from ..errors import FrameError

if TYPE_CHECKING:  # types only
    from rosbags.interfaces.typing import Typesdict
    from rosbags.typesys.store import Typestore

if sys.version_info >= (3, 14):  # pragma: no cover - as rosbags imports it
    from compression import zstd
else:
    from backports import zstd

MiB, GiB = 1 << 20, 1 << 30
# One chunk (MCAP, ROS 1) or one message-compressed message, decompressed. rosbag2 and the mcap writers close a
# chunk at 768 KiB to 4 MiB; a chunk is larger only when one message is, and the largest message edge-deploy reads
# is an 8192x8192 rgb8 Image (192 MiB, image_header.MAX_IMAGE_PIXELS). The reader holds a chunk twice (its bytes
# and its messages), so this bounds a chunk's cost at 512 MiB.
MAX_CHUNK_BYTES = 256 * MiB
# The chunks rosbags holds at once: it merges chunks in time order, so it holds every chunk whose time range
# overlaps another's. A recording's chunks follow one another in time; a hostile one makes them all overlap.
MAX_HELD_BYTES = 512 * MiB
# A `compression_mode: file` storage file, decompressed into $TMPDIR: rosbag2 splits a recording into files of
# --max-bag-size; an hour of raw 1080p at 30 frames/s is about 650 GB unsplit, but such a recording is split (and
# zstd gives it back at 2-10x), so 32 GiB a file admits what rosbag2 writes with a split size.
MAX_FILE_BYTES = 32 * GiB
# zstd gives camera and point-cloud data back at 2-10 times its compressed size, a recording of constant values at
# a few hundred times; a bomb at 30,000 times. A file may decompress to MAX_EXPANSION times its size, and to
# EXPANSION_FLOOR whatever its size.
MAX_EXPANSION = 1000
EXPANSION_FLOOR = 64 * MiB
TMP_RESERVE = 256 * MiB  # left free on the temporary file system: other programs use it too
MAX_METADATA_BYTES = 16 * MiB  # a rosbag2 metadata.yaml: a few KB, a few hundred KB with thousands of topics
_BLOCK = 1 * MiB

HINT = "pass a rosbag2 directory, a .mcap file or a ROS 1 .bag"


class RecordingProblem(FrameError):
    """What is wrong with a recording, worded without its path (the reader that opened it adds the path)."""


class LimitError(RecordingProblem):
    """A recording declares, or decompresses to, more than a cap allows."""


# --- bounded decompression ---------------------------------------------------------------------------------


def inflate(make: Callable[[], Any], blocks: Iterable[bytes], limit: int, sink: Callable[[bytes], object]) -> \
        tuple[int, bool]:
    """Decompress the frames of `blocks` (one after another, as `zstd -d` does) with `make()`'s decompressors,
    handing at most `limit` + 1 bytes to `sink`, `_BLOCK` at a time: (bytes out, whether the input ended at the
    end of a frame). More than `limit` out: the caller refuses; nothing past limit + 1 is ever made."""
    source = iter(blocks)
    decompressor = make()
    total, data = 0, b""
    while True:
        if decompressor.eof:
            data = decompressor.unused_data or next((b for b in source if b), b"")
            if not data:
                return total, True
            decompressor = make()
        elif decompressor.needs_input:
            data = next((b for b in source if b), b"")
            if not data:
                return total, False  # the input ended inside a frame: truncated
        else:
            data = b""  # output held back by max_length: ask for it
        out = decompressor.decompress(data, max_length=min(_BLOCK, limit + 1 - total))
        total += len(out)
        if total > limit:
            return total, False
        if out:
            sink(out)


def _decompress(make: Callable[[], Any], data: bytes, limit: int) -> tuple[bytes, int]:
    """(the first `limit` bytes `data` decompresses to, how many it made: limit + 1 when it goes on)."""
    parts: list[bytes] = []
    total, _ = inflate(make, (data,), limit, parts.append)
    return b"".join(parts), total


def _size(n: int) -> str:
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift:
            return f"{n / (1 << shift):g} {unit}"
    return f"{n} bytes"


def check_chunk_size(size: int) -> None:
    """Refuse an MCAP chunk declaring more than MAX_CHUNK_BYTES decompressed, before anything decompresses."""
    if size > MAX_CHUNK_BYTES:
        raise LimitError(f"an MCAP chunk declares {_size(size)} decompressed, over the {_size(MAX_CHUNK_BYTES)} a "
                         "chunk may hold (MAX_CHUNK_BYTES); the recording is damaged or hostile, or one of its "
                         "messages is larger than any camera frame: check it with `mcap doctor`.")


def _mcap_chunk(make: Callable[[], Any]) -> Callable[[bytes, int], bytes]:
    def decompress(data: bytes, size: int) -> bytes:
        check_chunk_size(size)
        out, total = _decompress(make, data, size)
        if total > size:
            raise RecordingProblem(f"an MCAP chunk decompresses to more than the {size} bytes it declares; the "
                                   "recording is truncated, damaged or hostile: check it with `mcap doctor`.")
        return out  # rosbags refuses one shorter than it declares
    return decompress


def _ros1_chunk(make: Callable[[], Any]) -> Callable[[bytes], bytes]:
    def decompress(data: bytes) -> bytes:
        out, total = _decompress(make, data, MAX_CHUNK_BYTES)
        if total > MAX_CHUNK_BYTES:
            raise LimitError(f"a ROS 1 chunk decompresses past {_size(MAX_CHUNK_BYTES)} (MAX_CHUNK_BYTES); the "
                             "recording is damaged or hostile: check it with `rosbag check`, or re-record it.")
        return out
    return decompress


def bound_rosbags() -> None:
    """Replace rosbags' whole-buffer decompressors (MCAP chunks: zstd, lz4; ROS 1 chunks: bz2, lz4) with bounded
    ones: the same bytes for every chunk within the caps, a LimitError past them. Idempotent; rosbags keeps these
    tables at module level, so every reader in the process is bounded."""
    import bz2

    import lz4.frame

    storage_mcap.DECOMPRESSORS.update({"zstd": _mcap_chunk(zstd.ZstdDecompressor),
                                       "lz4": _mcap_chunk(lz4.frame.LZ4FrameDecompressor)})
    rosbag1_reader.decompressors.update({"bz2": _ros1_chunk(bz2.BZ2Decompressor),
                                         "lz4": _ros1_chunk(lz4.frame.LZ4FrameDecompressor)})


def decompress_message(data: bytes) -> bytes:
    """A rosbag2 `compression_mode: message` message, decompressed (at most MAX_CHUNK_BYTES)."""
    parts: list[bytes] = []
    total, complete = inflate(zstd.ZstdDecompressor, (bytes(data),), MAX_CHUNK_BYTES, parts.append)
    if total > MAX_CHUNK_BYTES:
        raise LimitError(f"a zstd-compressed message decompresses past {_size(MAX_CHUNK_BYTES)} (MAX_CHUNK_BYTES); "
                         "the recording is damaged or hostile: check it with `ros2 bag info`.")
    if not complete:
        raise RecordingProblem("a zstd-compressed message is truncated")
    return b"".join(parts)


def file_budget(compressed_bytes: int, tmp: Path) -> tuple[int, str]:
    """How many bytes one `compression_mode: file` storage file may decompress to, and which cap that is."""
    free = shutil.disk_usage(tmp).free - TMP_RESERVE
    caps = [(MAX_FILE_BYTES, f"{_size(MAX_FILE_BYTES)} a file (MAX_FILE_BYTES)"),
            (max(EXPANSION_FLOOR, MAX_EXPANSION * compressed_bytes),
             f"{MAX_EXPANSION} times its compressed size (MAX_EXPANSION)"),
            (max(free, 0), f"the free space of the temporary directory {tmp} less {_size(TMP_RESERVE)}")]
    return min(caps)


def _decompress_file(source: Path, target: Path, tmp: Path) -> None:
    limit, cap = file_budget(source.stat().st_size, tmp)
    with open_recording_file(source) as fin, open(target, "wb") as fout:
        total, complete = inflate(zstd.ZstdDecompressor, iter(lambda: fin.read(_BLOCK), b""), limit, fout.write)
    if total > limit:
        raise LimitError(f"{source.name} (compression_mode: file) decompresses past {_size(limit)}, {cap}; the "
                         "recording is damaged or hostile, or larger than this machine can unpack: decompress it "
                         "where there is room (`ros2 bag decompress`), or set TMPDIR to a larger file system.")
    if not complete:
        raise RecordingProblem(f"{source.name} (compression_mode: file) is a truncated zstd file")


def open_recording_file(path: Path) -> BinaryIO:
    from ..core.bounded_read import open_regular

    return open_regular(path, "recording file", FrameError, HINT)


# --- MCAP: bounded opening, empty profiles -----------------------------------------------------------------


class _Ros2Header:
    """An MCAP file whose Header record says profile "ros2" where it says "" (same length: the 8 bytes of an empty
    profile and the library's length become a 4-byte "ros2"; rosbags reads no further into the header)."""

    def __init__(self, fh: BinaryIO, patch_at: int) -> None:
        self.fh, self.patch = fh, (patch_at, struct.pack("<I", 4) + b"ros2")

    def read(self, size: int = -1) -> bytes:
        start = self.fh.tell()
        data = self.fh.read(size)
        at, patch = self.patch
        lo, hi = max(start, at), min(start + len(data), at + len(patch))
        if lo < hi:
            data = data[: lo - start] + patch[lo - at: hi - at] + data[hi - start:]
        return data

    def seek(self, offset: int, whence: int = 0) -> int:
        return self.fh.seek(offset, whence)

    def tell(self) -> int:
        return self.fh.tell()

    def close(self) -> None:
        self.fh.close()


def _mcap_profile(fh: BinaryIO) -> tuple[str | None, int]:
    """The profile an MCAP file's Header record names (None when it has none to read) and where its length is."""
    head = fh.read(8 + 1 + 8 + 4)
    fh.seek(0)
    if len(head) < 21 or head[:8] != b"\x89MCAP0\r\n" or head[8] != 0x01:
        return None, 0
    (length,) = struct.unpack_from("<I", head, 17)
    if length > 4096:
        return None, 0
    fh.seek(21)
    name = fh.read(length)
    fh.seek(0)
    try:
        return name.decode(), 17
    except UnicodeDecodeError:
        return None, 0


class BoundedMcapReader(storage_mcap.McapReader):
    """rosbags' MCAP storage, opened as a regular file without blocking, its chunks' declared sizes checked before
    any decompresses, an empty profile read as ros2."""

    def open(self) -> None:
        fh = open_recording_file(Path(str(self.path)))
        try:
            profile, at = _mcap_profile(fh)
            if profile not in (None, "", "ros2"):
                raise RecordingProblem(f"its MCAP profile is {profile[:40]!r}, not ros2: it is not a ROS 2 recording; "
                                 "edge-deploy reads ROS 2 and ROS 1 recordings")
            self.bio = _Ros2Header(fh, at) if profile == "" else fh  # type: ignore[assignment]
            self._open()
            self.bio = fh
            check_held(self.chunks)
        except BaseException:
            self.bio = None
            fh.close()
            raise


def check_held(chunks: Iterable[Any]) -> None:
    """Refuse a chunk index whose chunks declare more than MAX_CHUNK_BYTES each, or more than MAX_HELD_BYTES among
    those that overlap in time (what rosbags' time-ordered merge holds at once), before any decompresses."""
    events: list[tuple[int, int, int]] = []
    for chunk in chunks:
        size = int(chunk.uncompressed_size)
        check_chunk_size(size)
        events += [(int(chunk.message_start_time), 0, size), (int(chunk.message_end_time), 1, -size)]
    held = 0
    for _, _, change in sorted(events):
        held += change
        if held > MAX_HELD_BYTES:
            raise LimitError(f"its MCAP chunks that overlap in time declare {_size(held)} decompressed together, "
                             f"over the {_size(MAX_HELD_BYTES)} a reader holds at once (MAX_HELD_BYTES); the "
                             "recording is damaged or hostile: check it with `mcap doctor`, or rewrite it in time "
                             "order (`mcap recover`).")


# --- the reader --------------------------------------------------------------------------------------------


class RecordingReader:
    """One recording opened for reading: `connections`, `messages(connections)` (raw CDR / ROS 1 bytes, in time
    order), `deserialize(raw, msgtype)`. Use as a context manager; every failure is an exception the caller words
    (FrameError, LimitError, or rosbags' own)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.ros1 = path.suffix.lower() == ".bag"
        self._stack = contextlib.ExitStack()
        self._message_mode = False
        self._stores: dict[str, Typestore] = {}
        self.reader: Any = None

    def __enter__(self) -> "RecordingReader":
        bound_rosbags()
        try:
            self.reader = self._open()
        except BaseException:
            self._stack.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self._stack.close()

    def _open(self) -> Any:
        reader: Any  # rosbags' ROS 1 or rosbag2 Reader, its storage replaced below
        if self.ros1:
            regular_file(self.path, "recording", FrameError, HINT)
            reader = Reader1(self.path)
        elif self.path.is_dir():
            reader = self._open_directory()
        else:
            reader = Reader2(self.path)
            reader.storage = BoundedMcapReader(self.path) if self.path.suffix.lower() == ".mcap" else reader.storage
            regular_file(self.path, "recording", FrameError, HINT)
        reader.open()
        self._stack.callback(reader.close)
        if self._message_mode:  # decompressed here (decompress_message), bounded, not by rosbags
            reader.storage.metadata = reader.storage.metadata._replace(compression_mode=None)
        return reader

    def _open_directory(self) -> Any:
        import yaml

        text = read_regular(self.path / "metadata.yaml", "rosbag2 metadata", FrameError, HINT, MAX_METADATA_BYTES)
        try:
            metadata = yaml.safe_load(text)
            info = metadata["rosbag2_bagfile_information"]
            files = [PurePath(str(name)).name for name in info["relative_file_paths"]]
            mode = str(info.get("compression_mode") or "").lower()
        except (yaml.YAMLError, KeyError, TypeError, AttributeError) as exc:
            raise RecordingProblem(f"its metadata.yaml is not rosbag2's ({type(exc).__name__})") from None
        for name in files:
            regular_file(self.path / name, "recording file", FrameError, HINT)
        directory = self.path
        if mode == "file":
            directory = self._decompressed(info, files)
        self._message_mode = mode == "message"
        reader: Any = Reader2(directory)
        reader.storage.STORAGE_PLUGINS = {**reader.storage.STORAGE_PLUGINS, "mcap": BoundedMcapReader}
        return reader

    def _decompressed(self, info: dict[str, object], files: list[str]) -> Path:
        """A `compression_mode: file` bag's files decompressed (bounded) into a temporary directory, with a
        metadata.yaml that says they are not compressed."""
        import yaml

        tmp = Path(self._stack.enter_context(tempfile.TemporaryDirectory(prefix="edge-deploy-bag-")))
        names = []
        for name in files:
            target = tmp / PurePath(name).stem  # x.mcap.zstd -> x.mcap, as rosbag2 names them
            _decompress_file(self.path / name, target, tmp)
            names.append(target.name)
        info = {**info, "relative_file_paths": names, "compression_mode": "", "compression_format": ""}
        (tmp / "metadata.yaml").write_text(yaml.safe_dump({"rosbag2_bagfile_information": info}))
        return tmp

    @property
    def connections(self) -> list[Connection]:
        return list(self.reader.connections)

    def messages(self, connections: list[Connection]) -> Iterator[tuple[Connection, int, bytes]]:
        if not connections:  # rosbags reads every topic for none
            return
        for connection, timestamp, raw in self.reader.messages(connections=connections):
            yield connection, timestamp, decompress_message(raw) if self._message_mode else raw

    def deserialize(self, raw: bytes, connection: Connection) -> Any:
        store = self._store(connection)
        if self.ros1:
            return store.deserialize_ros1(raw, connection.msgtype)
        return store.deserialize_cdr(raw, connection.msgtype)

    def _store(self, connection: Connection) -> Typestore:
        """The typestore of one message type: from the recording's own definition of it (the first connection of
        the type that has one), else the default store (ROS 2 Humble, ROS 1 Noetic). Only the types read are
        parsed: a topic nobody reads (a Jazzy service event's `SRV:` definition) never refuses the recording."""
        msgtype = connection.msgtype
        if msgtype in self._stores:
            return self._stores[msgtype]
        defined = next((c for c in self.reader.connections if c.msgtype == msgtype
                        and c.msgdef.format != MessageDefinitionFormat.NONE), None)
        if defined is None:
            store = get_typestore(Stores.ROS1_NOETIC if self.ros1 else Stores.ROS2_HUMBLE)
            if msgtype not in store.fielddefs:
                raise RecordingProblem(f"its topic {connection.topic} has no definition of {msgtype}, and "
                                 "edge-deploy knows none")
        else:
            store = get_typestore(Stores.EMPTY)
            if defined.msgdef.format == MessageDefinitionFormat.MSG:
                store.register(get_types_from_msg(defined.msgdef.data, msgtype))
            else:
                separator = "=" * 80 + "\n"
                types: Typesdict = {}
                if defined.msgdef.data.startswith(f"{separator}IDL: "):
                    for part in defined.msgdef.data.split(separator)[1:]:
                        types.update(get_types_from_idl(part.split("\n", 1)[1]))
                else:
                    types.update(get_types_from_idl(defined.msgdef.data))
                store.register(types)
            if defined.digest:
                have = store.hash_rihs01(msgtype) if not self.ros1 else store.generate_msgdef(msgtype)[1]
                if have != defined.digest:
                    raise RecordingProblem(f"its definition of {msgtype} does not match its hash ({have} != "
                                     f"{defined.digest})")
        self._stores[msgtype] = store
        return store


__all__ = ["EXPANSION_FLOOR", "MAX_CHUNK_BYTES", "MAX_EXPANSION", "MAX_FILE_BYTES", "MAX_HELD_BYTES",
           "LimitError", "RecordingProblem", "RecordingReader", "TMP_RESERVE", "bound_rosbags", "check_chunk_size", "check_held",
           "decompress_message", "file_budget", "inflate"]
