"""Output JSON is strict JSON (RFC 8259): what edge-deploy writes for machines (`--json`, lanes.json, the JSON lines
of a video, reports, state files) never holds NaN or Infinity, which strict parsers refuse. A number that is not
finite has no value to give, and is written as null."""
from __future__ import annotations

import json
import math
from typing import Any


def finite(data: Any) -> Any:
    """`data` with every float that is not finite (NaN, +-inf, numpy's too) replaced by None, through dicts, lists
    and tuples."""
    if isinstance(data, float) or (hasattr(data, "dtype") and getattr(data, "ndim", 1) == 0
                                   and getattr(data.dtype, "kind", "") == "f"):
        return float(data) if math.isfinite(float(data)) else None
    if isinstance(data, dict):
        return {key: finite(value) for key, value in data.items()}
    if isinstance(data, (list, tuple)):
        return [finite(value) for value in data]
    return data


def dumps(data: Any, **kwargs: Any) -> str:
    """json.dumps of `finite(data)`, refusing (ValueError) anything that would still not be strict JSON."""
    return json.dumps(finite(data), allow_nan=False, **kwargs)
