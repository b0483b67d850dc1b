"""Where lane-model families come from: the built-in ones (imported by name on first use) and other installed
distributions' entry points in the group `edge_deploy.families`; which distribution provides a family, for messages.
"""
from __future__ import annotations

import functools
import logging
from typing import TYPE_CHECKING

from ..errors import one_line

if TYPE_CHECKING:  # pragma: no cover
    from importlib.metadata import EntryPoint

__all__ = ["BUILTIN", "ENTRY_POINT_GROUP", "LEGACY_FAMILY", "family_entry_points", "family_origin", "family_package",
           "provider", "warn_once"]

# Built-in families, imported on first use: name -> module whose FAMILY attribute is the instance.
BUILTIN = {"laneatt": "edge_deploy.lanedet.laneatt", "ufldv2": "edge_deploy.lanedet.ufldv2",
            "clrnet": "edge_deploy.lanedet.clrnet"}
# The family of models installed before configs and manifests recorded one (format 1: LaneATT only).
LEGACY_FAMILY = "laneatt"
# Families from other installed distributions: an entry point NAME = "package.module:OBJECT" in this group, OBJECT
# a LaneFamily instance (or class) whose name is NAME. Loaded on first use, like the built-in ones.
ENTRY_POINT_GROUP = "edge_deploy.families"
_log = logging.getLogger("edge_deploy.families")


def warn_once(key: str, line: str) -> None:
    """One warning line per process (stderr through `logging`: an application's own logging config applies)."""
    if key not in _warned:
        _warned.add(key)
        _log.warning("warning: %s", line)


_warned: set[str] = set()


@functools.lru_cache(maxsize=1)
def family_entry_points() -> dict[str, EntryPoint]:
    """The group's entry points by name, read once per process (reading every distribution's metadata costs
    milliseconds, and the registry is asked on every convert, install and client start). A distribution whose
    entry_points.txt cannot be read is left out with a warning naming it; the others still count."""
    from importlib.metadata import distributions

    found: dict[str, EntryPoint] = {}
    seen: set[str] = set()
    for dist in distributions():
        try:
            dist_name = str(dist.metadata["Name"] or "")
        except Exception:  # noqa: BLE001 - unreadable METADATA: not ours to judge, and not a family
            continue
        if dist_name in seen:
            continue  # the first distribution on the path wins, as for imports
        seen.add(dist_name)
        try:
            points = list(dist.entry_points.select(group=ENTRY_POINT_GROUP))
        except Exception as exc:  # noqa: BLE001 - a malformed entry_points.txt (a line without '=')
            warn_once(f"dist:{dist_name}", f"package {dist_name} is left out: its entry_points.txt cannot be read "
                       f"({type(exc).__name__}: {one_line(exc, 120)}); this is a bug of {dist_name}, not of "
                       f"edge-deploy: reinstall or fix {dist_name}, or uninstall it.")
            continue
        for point in points:
            found.setdefault(point.name, point)
    return found


def provider(name: str) -> str:
    """Who provides a family, for messages: its distribution, its entry point, or the code that registered it."""
    point = family_entry_points().get(name)
    if point is None:
        return f"the code that registered family {name!r}"
    dist = getattr(point, "dist", None)
    return dist.name if dist is not None else f"the package of entry point {point.value}"


def family_package(name: str) -> str | None:
    """The distribution that provides family NAME through its entry point (recorded by convert, so that where the
    family is missing the package to install can be named); None for a built-in or registered family."""
    point = family_entry_points().get(name) if name not in BUILTIN else None
    dist = getattr(point, "dist", None)
    return dist.name if dist is not None else None


def family_origin(name: str) -> str:
    """Where a family comes from: "built-in", the distribution whose entry point provides it, or "registered" (by
    `register_family` in this process)."""
    if name in BUILTIN:
        return "built-in"
    point = family_entry_points().get(name)
    dist = getattr(point, "dist", None)
    if point is not None:
        return f"package {dist.name}" if dist is not None else f"entry point {point.value}"
    return "registered"

