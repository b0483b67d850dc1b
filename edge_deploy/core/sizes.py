"""Sizes as people write them ('4G', '512M', '1.5GiB', bytes): convert's --workspace and serve's --log-max-size.

Each is bounded: the text (at most MAX_SIZE_TEXT characters) and the size (at most MAX_SIZE unless the option says
less), so no text costs more than its length to read and none becomes a size no board has."""
from __future__ import annotations

import re

from ..errors import EdgeDeployError, EngineError, brief

KiB = 1 << 10
MiB = 1 << 20
GiB = 1 << 30
TiB = 1 << 40
MAX_SIZE = TiB  # more memory than any board has (a Jetson AGX Orin: 64 GiB), more log than any disk there takes
MAX_SIZE_TEXT = 32  # characters: "1.5GiB" is 6
MIN_WORKSPACE = 64 * MiB  # below this TensorRT finds no tactic for LaneATT's larger layers

_SIZE = re.compile(r"\s*([0-9]+(?:\.[0-9]*)?|\.[0-9]+)\s*([KMGT]?)(i?B)?\s*", re.IGNORECASE)
_FACTOR = {"": 1, "K": KiB, "M": MiB, "G": GiB, "T": TiB}


def size_words(n: int) -> str:
    """A number of bytes as written in messages: "64 KiB", "1 TiB", "1.5 GiB", "100 bytes"."""
    for unit, size in (("TiB", TiB), ("GiB", GiB), ("MiB", MiB), ("KiB", KiB)):
        if n >= size:
            return f"{n / size:g} {unit}"
    return f"{n} bytes"


def parse_size(text: str, option: str = "the size", *, low: int = 0, high: int = MAX_SIZE,
               error: type[EdgeDeployError] = EngineError) -> int:
    """'4G', '512M', '1.5GiB', '65536' (bytes) -> bytes, from `low` to `high`; anything else (text that is no size,
    longer than MAX_SIZE_TEXT, a size outside) is one line of `error` naming `option`, the range and how to write
    one."""
    text = str(text)
    match = _SIZE.fullmatch(text) if len(text) <= MAX_SIZE_TEXT else None
    size = int(float(match.group(1)) * _FACTOR[match.group(2).upper()]) if match else None
    if size is None or not low <= size <= high:
        raise error(f"{option} {brief(text)} is not a size from {size_words(low)} to {size_words(high)}; write it "
                    "like 2G, 512M or a number of bytes.")
    return size
