"""The child side of `plugin_probe.py`: import each named plug-in family, check it and read everything `families` and
`convert` show of it (`describe()`), reporting each on the result fd as one JSON line. Runs only in that child.
"""
from __future__ import annotations

import json
import logging
import os
import sys

from ..errors import one_line
from .lane_family import BrokenFamilyError, get_family, isolate_plugins_here


def main(names: list[str], out: int) -> None:
    """Probe `names`, then end the process with os._exit: a non-daemon thread a plug-in started would otherwise keep
    it alive after its last result (and the parent waiting for its end)."""
    # The parent says each warning once, through its own logging; here they would be said twice.
    quiet = logging.getLogger("edge_deploy.families")
    quiet.addHandler(logging.NullHandler())
    quiet.propagate = False
    isolate_plugins_here()
    try:
        for name in names:
            _send(out, {"start": name})
            _send(out, _probe(name))
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:  # noqa: BLE001, S110 - a plug-in may have closed or replaced them
                pass
        os._exit(0)


def _probe(name: str) -> dict[str, object]:
    try:
        family = get_family(name)  # imported and checked (every property it must have read once)
        description = family.describe().to_dict()
        json.dumps(description, allow_nan=False)
    except BrokenFamilyError as exc:
        return {"name": name, "broken": exc.what}
    except BaseException as exc:  # noqa: BLE001 - describe() reads the plug-in's properties again; any may raise
        return {"name": name, "broken": f"describing it raised {type(exc).__name__}: {one_line(exc, 160)}"}
    return {"name": name, "description": description}


def _send(out: int, event: dict[str, object]) -> None:
    data = (json.dumps(event) + "\n").encode()
    while data:
        data = data[os.write(out, data):]
