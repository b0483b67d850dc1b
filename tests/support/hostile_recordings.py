"""Hostile and unusual inputs built byte by byte for the bounded-reading tests (never by the code under test): an
unindexed MCAP file of hand-written records, zstd bombs made streaming (the test never holds what they expand
to), PNG files that declare more pixels than they hold or hold a decompression bomb."""
from __future__ import annotations

import struct
import sys
import zlib
from pathlib import Path

if sys.version_info >= (3, 14):
    from compression import zstd
else:
    from backports import zstd

MAGIC = b"\x89MCAP0\r\n"


def _string(text: str | bytes) -> bytes:
    data = text.encode() if isinstance(text, str) else text
    return struct.pack("<I", len(data)) + data


def _record(op: int, content: bytes) -> bytes:
    return bytes([op]) + struct.pack("<Q", len(content)) + content


def message_record(channel: int, log_time: int, payload: bytes) -> bytes:
    return _record(0x05, struct.pack("<HIQQ", channel, 0, log_time, log_time) + payload)


def unindexed_mcap(chunk_data: bytes, uncompressed_size: int, compression: str = "zstd", *,
                   profile: str = "ros2", topic: str = "/cam/image_raw",
                   schema: str = "sensor_msgs/msg/Image", schema_text: str = "") -> bytes:
    """An MCAP file without a summary (so a reader scans it): header, a schema, a channel, one chunk of
    `chunk_data` that declares `uncompressed_size`, DataEnd, a footer."""
    header = _record(0x01, _string(profile) + _string("hostile_recordings"))
    schema_rec = _record(0x03, struct.pack("<H", 1) + _string(schema) + _string("ros2msg") + _string(schema_text))
    channel = _record(0x04, struct.pack("<HH", 1, 1) + _string(topic) + _string("cdr") + struct.pack("<I", 0))
    chunk = _record(0x06, struct.pack("<QQQI", 0, 1, uncompressed_size, 0) + _string(compression)
                    + struct.pack("<Q", len(chunk_data)) + chunk_data)
    data_end = _record(0x0F, struct.pack("<I", 0))
    footer = _record(0x02, struct.pack("<QQI", 0, 0, 0))
    return MAGIC + header + schema_rec + channel + chunk + data_end + footer + MAGIC


def zstd_zeros(size: int, prefix: bytes = b"") -> bytes:
    """A zstd frame of `prefix` and then zeros up to `size` bytes, compressed block by block."""
    compressor = zstd.ZstdCompressor()
    parts = [compressor.compress(prefix)]
    block = bytes(1 << 20)
    left = size - len(prefix)
    while left > 0:
        parts.append(compressor.compress(block[: min(left, len(block))]))
        left -= len(block)
    parts.append(compressor.flush())
    return b"".join(parts)


def _png_chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)


def png(width: int, height: int, *, rows: int | None = None) -> bytes:
    """A grey 8-bit PNG declaring width x height, its IDAT holding `rows` rows of zeros (all: a decompression
    bomb of width x height bytes in a few hundred KB; fewer: a header that declares more than the file holds)."""
    compressor = zlib.compressobj(1)  # fast; a bomb of 256 MB is still about 1 MB
    row = bytes(width + 1)  # filter byte 0, then zeros
    idat = b"".join(compressor.compress(row) for _ in range(height if rows is None else rows)) + compressor.flush()
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + _png_chunk(b"IHDR", ihdr) + _png_chunk(b"IDAT", idat) + _png_chunk(b"IEND", b"")


def write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path
