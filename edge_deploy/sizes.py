"""Sizes as people write them ('4G', '512M', '1.5GiB', bytes): convert's --workspace and serve's --log-max-size."""
from __future__ import annotations

import re

from .errors import EngineError

MiB = 1 << 20
GiB = 1 << 30


def parse_size(text: str) -> int:
    """'4G', '512M', '1.5GiB', '65536' (bytes) -> bytes; one-line EngineError when unreadable."""
    match = re.fullmatch(r"\s*([\d.]+)\s*([KMGT]?)(i?B)?\s*", str(text), re.IGNORECASE)
    if not match:
        raise EngineError(f"cannot read the size {text!r}; write it like 2G, 512M or a number of bytes.")
    value = float(match.group(1))
    factor = {"": 1, "K": 1 << 10, "M": MiB, "G": GiB, "T": 1 << 40}[match.group(2).upper()]
    return int(value * factor)
