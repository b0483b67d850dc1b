"""The one number validator: every duration, rate, count, size and coordinate edge-deploy takes from a command line,
an environment variable or a library call is finite and inside a documented range, or refused in one line that names
the range ("--fps must be a number of frames/s in (0, 1000], not inf.").

A `Range` is the rule and its words: `check` a value given to a library (or an option, by the CLI's callback),
`parse` the text of an environment variable or a list option, `env` read an environment variable. Each refusal is a
`NumberError` (an EdgeDeployError: exit 2), or the caller's own class of the error family. Imports nothing of
edge_deploy but errors, so every floor may use it.
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Any, Union

from ..errors import EdgeDeployError, NumberError, brief

Number = Union[int, float]

__all__ = ["FPS", "MAX_AGE_S", "STREAM_FPS", "STREAM_SECONDS", "Number", "NumberError", "PORT", "Range", "SEED",
           "THREADS", "TIMEOUT_S", "WAIT_S", "finite_points", "whole"]


@dataclass(frozen=True)
class Range:
    """Numbers from `low` to `high` of `unit` (both bounds finite; each closed unless `low_open`/`high_open`);
    `whole`: integers only. `note` says what a special value means ("0: no limit")."""

    low: Number
    high: Number
    unit: str
    whole: bool = False
    low_open: bool = False
    high_open: bool = False
    note: str = ""
    noun: str = ""  # what one value is, where "a number of UNIT" does not read well: "a TCP port"

    def __post_init__(self) -> None:
        if not (math.isfinite(self.low) and math.isfinite(self.high) and self.low <= self.high):
            raise ValueError(f"a Range needs finite bounds low <= high (got {self.low!r}, {self.high!r})")

    def __str__(self) -> str:
        """The interval as written in messages and help: [1, 64], (0, 1000]."""
        return f"{'(' if self.low_open else '['}{_text(self.low)}, {_text(self.high)}{')' if self.high_open else ']'}"

    def describe(self) -> str:
        """What the range takes, in words: "a whole number of frames in [0, 100000] (0: no limit)"."""
        kind = self.noun or ("a whole number" if self.whole else "a number") + f" of {self.unit}"
        return f"{kind} in {self}" + (f" ({self.note})" if self.note else "")

    def contains(self, value: Any) -> bool:
        """Whether `value` (a real number, not a bool) is finite, inside, and whole when the range is."""
        number = _real(value)
        if number is None:
            return False
        if not isinstance(number, int):  # an int is finite and whole, however large (float() of it may overflow)
            if not math.isfinite(number) or (self.whole and not number.is_integer()):
                return False
        above = number > self.low if self.low_open else number >= self.low
        below = number < self.high if self.high_open else number <= self.high
        return above and below

    def check(self, name: str, value: Any, error: type[EdgeDeployError] = NumberError, advice: str = "") -> Any:
        """`value` (an int for a whole range, else a float) when this range takes it; else `error` in one line:
        "NAME must be a number of UNIT in [LOW, HIGH], not VALUE." (and `advice`, a sentence, after it)."""
        if not self.contains(value):
            raise error(f"{name} must be {self.describe()}, not {brief(value)}." + (f" {advice}" if advice else ""))
        number = _real(value)
        return int(number) if self.whole else float(number)  # type: ignore[arg-type] # contains() saw a number

    def parse(self, name: str, text: str, error: type[EdgeDeployError] = NumberError, advice: str = "") -> Any:
        """The number `text` writes ("4", " 2.5 ", "1e3"), checked; `error` in one line for text that is no number
        or one outside: "NAME='TEXT' is not a number of UNIT in [LOW, HIGH]"."""
        number = _parse(text)
        if number is None or not self.contains(number):
            raise error(f"{name}={brief(text)} is not {self.describe()}" + (f"; {advice}" if advice else "."))
        return int(number) if self.whole else float(number)

    def parse_list(self, name: str, text: str, error: type[EdgeDeployError] = NumberError) -> tuple[Any, ...]:
        """The comma-separated numbers `text` writes ("1,2,4"), each checked, repeats dropped; `error` in one line for
        an empty list or any part that is no number in the range."""
        parts = [part.strip() for part in str(text).split(",") if part.strip()]
        numbers = [_parse(part) for part in parts]
        bad = next((part for part, n in zip(parts, numbers) if n is None or not self.contains(n)), None)
        if not parts or bad is not None:
            which = f": {brief(bad)} is not" if len(parts) > 1 else ""
            raise error(f"{name} {brief(text)} is not a list of comma-separated values, each {self.describe()}"
                        f"{which}.")
        return tuple(dict.fromkeys(int(n) if self.whole else float(n) for n in numbers))  # type: ignore[arg-type]

    def env(self, name: str, default: Any = None, error: type[EdgeDeployError] = NumberError,
            advice: str = "") -> Any:
        """The environment variable `name` parsed and checked, or `default` when it is unset or blank."""
        text = os.environ.get(name, "").strip()
        return default if not text else self.parse(name, text, error, advice)


def whole(low: int, high: int, unit: str = "", note: str = "", noun: str = "") -> Range:
    """A range of whole numbers from `low` to `high` (both included)."""
    return Range(low, high, unit, whole=True, note=note, noun=noun)


# The ranges more than one command or library call takes (docs/failures.md, "Numbers").
DAY_S = 86400
TIMEOUT_S = Range(0, DAY_S, "seconds", low_open=True)  # a request's timeout, a time to measure for
WAIT_S = Range(0, DAY_S, "seconds", note="0: do not wait")  # waiting for a server or a model to be ready
MAX_AGE_S = Range(0, 60, "seconds", low_open=True)  # how long after capture lanes count as fresh; a call's deadline
FPS = Range(0, 1000, "frames/s", low_open=True)  # a camera's (or a drive's) frame rate
# A stream's (LaneStream, PerceptionStream) max_age and deadline, and fps: MAX_AGE_S and FPS, said as "a positive
# number" (the words apps match on).
STREAM_SECONDS = Range(MAX_AGE_S.low, MAX_AGE_S.high, "", low_open=True, noun="a positive number of seconds")
STREAM_FPS = Range(FPS.low, FPS.high, "", low_open=True, noun="a positive number of frames/s")
SPEED_MPS = Range(0, 100, "metres per second")  # a vehicle's speed (geometry.figures.MAX_SPEED_MPS)
PORT = whole(1, 65535, noun="a TCP port")
MAX_THREADS = 64  # ONNX Runtime's threads (install --threads, $EDGE_DEPLOY_ORT_THREADS): past this, more threads
THREADS = whole(1, MAX_THREADS, "threads")  # than any Orin has cores; 100000 made ONNX Runtime crash (SIGSEGV)
SEED = whole(0, 2**32 - 1, noun="a seed")


def finite_points(points: Any, name: str = "points", error: type[EdgeDeployError] = NumberError) -> Any:
    """`points` as a float64 array of (x, y) rows; `error` in one line when it holds NaN or an infinity, or is no
    array of pairs of numbers (numpy itself would fail later with a message about SVD or a matmul)."""
    import numpy as np

    try:
        array = np.asarray(points, dtype=np.float64).reshape(-1, 2)
    except (TypeError, ValueError, OverflowError):
        raise error(f"{name} must be (x, y) pairs of numbers, not {brief(points)}.") from None
    bad = ~np.isfinite(array).all(axis=1)
    if bad.any():
        row = int(np.argmax(bad))
        x, y = array[row]
        raise error(f"{name} must be finite (x, y) pairs, but point {row} is ({x:g}, {y:g}); drop it or pass "
                    "finite points.")
    return array


def _real(value: Any) -> float | int | None:
    """A real number from `value` (int, float, numpy scalar), or None (a bool, a string, anything else)."""
    if isinstance(value, bool) or isinstance(value, str):
        return None
    if isinstance(value, int):
        return value
    try:
        return float(value)
    except (TypeError, ValueError, OverflowError):
        return None


def _parse(text: str) -> float | int | None:
    text = text.strip()
    try:
        return int(text)
    except ValueError:
        pass
    try:
        return float(text)
    except ValueError:
        return None


def _text(bound: Number) -> str:
    """A bound as written: 1000 not 1000.0, 1e-06, 0.5; an int's every digit."""
    if isinstance(bound, int):
        return str(bound)
    if float(bound).is_integer() and abs(bound) < 1e15:
        return str(int(bound))
    return f"{bound:g}"
