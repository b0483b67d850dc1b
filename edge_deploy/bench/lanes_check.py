"""Before timing: every pipeline of one lane model gives the same lanes on the same frames (they must: the
same preprocessing and decoder run on the client or in the server)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np

from ..errors import BenchError
from .targets import BenchTarget

SCORE_TOLERANCE = 1e-3


@dataclass(frozen=True)
class LanesCheck:
    """What the check found: the models compared per lane model and how many lanes agreed."""

    groups: dict[str, list[str]]
    frames: int
    lanes: int

    def describe(self) -> str:
        compared = {m: names for m, names in self.groups.items() if len(names) > 1}
        if not compared:
            return "lanes-equal check: one pipeline per model, nothing to compare"
        if self.lanes == 0:
            return (f"lanes-equal check not verified: no pipeline found a lane on the {self.frames} frames "
                    f"({'; '.join(' = '.join(n) for n in compared.values())})")
        return (f"lanes-equal check passed: {'; '.join(' = '.join(n) for n in compared.values())} give the same "
                f"{self.lanes} lanes on {self.frames} frames")


def lanes_differ(a: Sequence[Any], b: Sequence[Any], tolerance_px: float) -> str | None:
    """Why two lane lists differ ("2 lanes against 3", "lane 1 moved 4.2 px"), or None when they are the same."""
    if len(a) != len(b):
        return f"{len(a)} lanes against {len(b)}"
    for i, (x, y) in enumerate(zip(a, b)):
        if abs(x.score - y.score) > SCORE_TOLERANCE:
            return f"lane {i} scores {x.score:.4f} against {y.score:.4f}"
        if len(x.points) != len(y.points):
            return f"lane {i} has {len(x.points)} points against {len(y.points)}"
        moved = float(np.max(np.abs(np.asarray(x.points) - np.asarray(y.points)))) if len(x.points) else 0.0
        if moved > tolerance_px:
            return f"lane {i} is {moved:.1f} px away"
    return None


def check_lanes_equal(targets: list[BenchTarget], frames: list[tuple[str, Any]],
                      detect: Callable[[BenchTarget, Any], list[Any]], tolerance_px: float) -> LanesCheck:
    """Detect on every frame with every target; BenchError (one line) at the first pipeline that differs from
    its lane model's first target."""
    groups: dict[str, list[BenchTarget]] = {}
    for target in targets:
        groups.setdefault(target.model, []).append(target)
    lanes = 0
    for members in groups.values():
        if len(members) < 2:
            continue
        reference = members[0]
        for name, frame in frames:
            expected = detect(reference, frame)
            lanes += len(expected)
            for other in members[1:]:
                why = lanes_differ(detect(other, frame), expected, tolerance_px)
                if why is not None:
                    raise BenchError(
                        f"{other.name} and {reference.name} give different lanes on frame {name} ({other.name}: "
                        f"{why}); the pipelines of one model must agree: reinstall {reference.model} with "
                        "`edge-deploy install`, or bench them one at a time with --model (or --no-check).")
    return LanesCheck({m: [t.name for t in ts] for m, ts in groups.items()}, len(frames), lanes)
