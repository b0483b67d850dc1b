"""Every Bayer pattern a recording's Image may have demosaics with its own channel order (issue 55 item 9: only
bayer_rggb8 was tested; plant `"bayer_bggr8": (1, "COLOR_BayerBG2BGR")` in media/bag.py and this fails)."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from edge_deploy.media.bag import IMAGE, decode_image

BGR = (30, 120, 220)  # a colour whose three channels differ, so a swap shows


def mosaic(pattern: str, height: int = 8, width: int = 12) -> np.ndarray:
    """The raw sensor values of a uniform BGR frame under a 2x2 `pattern` ("rggb", "bggr", "gbrg", "grbg": the
    colours of the top-left 2x2 block, row by row)."""
    value = {"b": BGR[0], "g": BGR[1], "r": BGR[2]}
    out = np.zeros((height, width), np.uint8)
    for index, colour in enumerate(pattern):
        out[index // 2 :: 2, index % 2 :: 2] = value[colour]
    return out


@pytest.mark.parametrize("pattern", ["rggb", "bggr", "gbrg", "grbg"])
def test_each_bayer_pattern_demosaics_to_the_colour_it_recorded(pattern):
    raw = mosaic(pattern)
    msg = SimpleNamespace(data=raw.ravel(), encoding=f"bayer_{pattern}8", height=raw.shape[0], width=raw.shape[1],
                          step=raw.shape[1])
    frame = decode_image(msg, IMAGE, "test")
    inner = frame[2:-2, 2:-2].reshape(-1, 3)  # the border is interpolated from fewer neighbours
    assert np.abs(inner.astype(int) - np.array(BGR)).max() <= 1, (pattern, inner[0])
