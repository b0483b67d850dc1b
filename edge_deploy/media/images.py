"""Image files in and out: which files a list of paths names, reading one as a BGR frame (one-line errors)."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from ..core.bounded_read import read_regular
from ..errors import FrameError
from .image_header import image_size, sniff_format

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp")
# An encoded image file edge-deploy reads whole: a 64 Mpx PNG of noise is about 200 MB, a camera's JPEG a few MB.
MAX_IMAGE_FILE_BYTES = 256 << 20


def image_paths(paths: list[Path]) -> list[Path]:
    """The image files to run: each file as given, each directory as the images in it (sorted)."""
    out: list[Path] = []
    for path in paths:
        if not path.is_dir():
            out.append(path)
            continue
        found = sorted(p for p in path.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES and p.is_file())
        if not found:
            raise FrameError(f"{path} is a directory with no images in it ({' '.join(IMAGE_SUFFIXES)}); pass image "
                             "files, a directory holding some, or --synthetic N.")
        out += found
    return out


def read_image(path: Path) -> Any:
    """An image file as an HxWx3 uint8 BGR array, or a one-line FrameError: not a regular file (a FIFO, a device:
    never opened to block), over MAX_IMAGE_FILE_BYTES, a header declaring over image_header.MAX_IMAGE_PIXELS
    (checked before anything decodes), or not decodable."""
    import cv2
    import numpy as np

    data = read_regular(path, "image", FrameError, "pass image files (PNG, JPEG) or --synthetic N",
                        MAX_IMAGE_FILE_BYTES)
    if not data:
        raise FrameError(f"image {path} is empty (0 bytes); pass PNG or JPEG files.")
    if sniff_format(data) is None:
        raise FrameError(f"cannot decode {path} as an image (it is not a PNG, JPEG, BMP, WebP or TIFF file); pass PNG "
                         "or JPEG files.")
    image_size(data, f"image {path}")  # its header's width x height, before anything decodes
    try:
        frame = cv2.imdecode(np.frombuffer(data, dtype=np.uint8), cv2.IMREAD_COLOR)
    except cv2.error:
        frame = None
    if frame is None:
        raise FrameError(f"cannot decode {path} as an image; pass PNG or JPEG files.")
    return frame


def read_images(paths: list[Path]) -> list[tuple[str, Any]]:
    """(name, frame) for every image `paths` names (`image_paths`), all read before any is used."""
    return [(str(p), read_image(p)) for p in image_paths(paths)]
