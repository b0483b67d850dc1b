"""An encoded image's format and size read from its header, before anything decodes it.

A PNG of 8 bytes per row of zeros compresses about a thousand times: a 40 KB file can declare 100,000 x 100,000
pixels, and OpenCV allocates the whole 30 GB frame before it finds out (or the process is killed). So every
encoded image edge-deploy decodes (image files given to `infer`, calibration images, a recording's
CompressedImage) is first read here: its format from its signature, its width and height from its header, refused
in one line when it declares more than MAX_IMAGE_PIXELS or when its header cannot be read. See docs/failures.md
("Bounded reading").
"""
from __future__ import annotations

import struct

from ..errors import FrameError

# 8192 x 8192 (64 Mpx; 192 MiB as a BGR frame): above every automotive camera (8 Mpx at most today) and the 4K and
# 6K frames a test rig records, far below what would exhaust a Jetson's memory (a frame is held several times:
# decoded, resized, in a request buffer).
MAX_IMAGE_PIXELS = 8192 * 8192
FORMATS = ("png", "jpeg", "bmp", "webp", "tiff")

# JPEG start-of-frame markers (baseline, progressive, lossless, arithmetic...): not C4 (DHT), C8 (JPG), CC (DAC)
_SOF = {0xC0, 0xC1, 0xC2, 0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCD, 0xCE, 0xCF}


def sniff_format(data: bytes) -> str | None:
    """The format an encoded image's bytes begin with (one of FORMATS), or None."""
    head = bytes(data[:12])
    if head.startswith(b"\x89PNG\r\n\x1a\n"):
        return "png"
    if head.startswith(b"\xff\xd8\xff"):
        return "jpeg"
    if head.startswith(b"BM"):
        return "bmp"
    if head.startswith(b"RIFF") and head[8:12] == b"WEBP":
        return "webp"
    if head[:4] in (b"II*\x00", b"MM\x00*"):
        return "tiff"
    return None


def image_size(data: bytes, where: str) -> tuple[str, int, int]:
    """(format, width, height) of an encoded image from its header, or a one-line FrameError: not an image format
    edge-deploy decodes, a header that does not say the size, or a size over MAX_IMAGE_PIXELS."""
    data = data if isinstance(data, bytes) else bytes(data)
    fmt = sniff_format(data)
    if fmt is None:
        raise FrameError(f"cannot decode {where}: it is not a PNG, JPEG, BMP, WebP or TIFF image (its first bytes "
                         "say none of them); pass PNG or JPEG images.")
    try:
        size = _SIZE_READERS[fmt](data)
    except (struct.error, IndexError, ValueError):
        size = None
    if size is None:
        raise FrameError(f"{where}: its {fmt.upper()} header is damaged or truncated (it does not say the image's "
                         "size); pass the image as the camera or exporter wrote it.")
    width, height = size
    if width < 1 or height < 1:
        raise FrameError(f"{where}: its {fmt.upper()} header says {width}x{height} pixels; an image has at least "
                         "one pixel: the file is damaged.")
    if width * height > MAX_IMAGE_PIXELS:
        raise FrameError(f"{where}: its {fmt.upper()} header says {width}x{height} pixels, over the "
                         f"{MAX_IMAGE_PIXELS // 1_000_000} Mpx edge-deploy decodes (8192x8192); a camera frame is "
                         "far smaller: resize the image, or check that it is not damaged or hostile (a "
                         "decompression bomb).")
    return fmt, width, height


def _png(data: bytes) -> tuple[int, int] | None:
    # signature, then the IHDR chunk first: length, "IHDR", width, height (big-endian)
    if len(data) < 24 or data[12:16] != b"IHDR":
        return None
    return struct.unpack(">II", data[16:24])


def _jpeg(data: bytes) -> tuple[int, int] | None:
    pos, end = 2, len(data)
    while pos + 4 <= end:
        if data[pos] != 0xFF:
            return None
        marker = data[pos + 1]
        if marker == 0xFF:  # fill byte
            pos += 1
            continue
        if marker in (0x01, *range(0xD0, 0xD8)):  # standalone markers: no length
            pos += 2
            continue
        if marker in (0xD9, 0xDA):  # end of image, start of scan: no frame header came first
            return None
        (length,) = struct.unpack(">H", data[pos + 2: pos + 4])
        if length < 2:
            return None
        if marker in _SOF:
            if pos + 9 > end:
                return None
            height, width = struct.unpack(">HH", data[pos + 5: pos + 9])
            return width, height
        pos += 2 + length
    return None


def _bmp(data: bytes) -> tuple[int, int] | None:
    (header,) = struct.unpack("<I", data[14:18])
    if header == 12:  # BITMAPCOREHEADER
        return struct.unpack("<HH", data[18:22])
    width, height = struct.unpack("<ii", data[18:26])
    return width, abs(height)  # a negative height: rows top-down


def _webp(data: bytes) -> tuple[int, int] | None:
    chunk = data[12:16]
    if chunk == b"VP8X":
        width = int.from_bytes(data[24:27], "little") + 1
        height = int.from_bytes(data[27:30], "little") + 1
        return width, height
    if chunk == b"VP8L":
        if data[20] != 0x2F:
            return None
        bits = int.from_bytes(data[21:25], "little")
        return (bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1
    if chunk == b"VP8 ":
        if data[23:26] != b"\x9d\x01\x2a":
            return None
        width, height = struct.unpack("<HH", data[26:30])
        return width & 0x3FFF, height & 0x3FFF
    return None


def _tiff(data: bytes) -> tuple[int, int] | None:
    order = "<" if data[:2] == b"II" else ">"
    (ifd,) = struct.unpack(order + "I", data[4:8])
    (count,) = struct.unpack(order + "H", data[ifd: ifd + 2])
    found: dict[int, int] = {}
    for i in range(count):
        entry = data[ifd + 2 + 12 * i: ifd + 14 + 12 * i]
        tag, kind = struct.unpack(order + "HH", entry[:4])
        if tag in (256, 257):
            found[tag] = struct.unpack(order + ("H" if kind == 3 else "I"), entry[8:10] if kind == 3 else entry[8:12])[0]
    return (found[256], found[257]) if len(found) == 2 else None


_SIZE_READERS = {"png": _png, "jpeg": _jpeg, "bmp": _bmp, "webp": _webp, "tiff": _tiff}
