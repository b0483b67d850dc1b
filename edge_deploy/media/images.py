"""Image files in and out: which files a list of paths names, reading one as a BGR frame (one-line errors)."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from ..errors import FrameError

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp")


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
    """An image file as an HxWx3 uint8 BGR array, or a one-line FrameError."""
    import cv2
    import numpy as np

    if not path.is_file():
        raise FrameError(f"image {path} does not exist; pass image files (PNG, JPEG) or --synthetic N.")
    data = np.fromfile(str(path), dtype=np.uint8)
    if data.size == 0:
        raise FrameError(f"image {path} is empty (0 bytes); pass PNG or JPEG files.")
    try:
        frame = cv2.imdecode(data, cv2.IMREAD_COLOR)
    except cv2.error:
        frame = None
    if frame is None:
        raise FrameError(f"cannot decode {path} as an image; pass PNG or JPEG files.")
    return frame


def read_images(paths: list[Path]) -> list[tuple[str, Any]]:
    """(name, frame) for every image `paths` names (`image_paths`), all read before any is used."""
    return [(str(p), read_image(p)) for p in image_paths(paths)]
