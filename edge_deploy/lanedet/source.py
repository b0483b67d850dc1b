"""The convert side of a family: what to convert (`SourceSpec`) and a family's own convert options (`FamilyOption`,
read from its options dataclass by `family_options`).

Only convert (export/, cli/convert.py, a family's `load`) uses these; the client never imports this module
(tests/test_architecture.py).
"""
from __future__ import annotations

import typing
from dataclasses import MISSING, dataclass, field, fields
from pathlib import Path
from typing import Any, Mapping, Sequence

from ..core.numbers import Range, whole

__all__ = ["CONVERT_OPTION_NAMES", "FamilyOption", "OptionValue", "SourceSpec", "family_options", "one_of",
           "option_flag"]

# The value of a family's own convert option: its options dataclass declares one of these types per field.
OptionValue = int | float | str | Path


@dataclass
class SourceSpec:
    """What to convert: MODEL plus the options that describe how to build or load it.

    `options` holds the family's own options that were given (name -> value, e.g. {"topk_anchors": 1000} for
    LaneATT's --topk-anchors); the family reads them into its typed options object (`LaneFamily.options_from`)."""

    model: str
    backbone: str | None = None  # family models only; None: the family's default
    checkpoint: Path | None = None
    dataset: str | None = None
    options: Mapping[str, OptionValue | None] = field(default_factory=dict)
    input_shape: tuple[int, ...] | None = None
    seed: int = 0

    @property
    def family_options_given(self) -> list[str]:
        """The flags given that only a lane-model family's builder reads (`convert NAME`)."""
        common = [flag for flag, value in (("--backbone", self.backbone), ("--checkpoint", self.checkpoint),
                                           ("--dataset", self.dataset)) if value is not None]
        return [*common, *(option_flag(name) for name, value in self.options.items() if value is not None)]

    @property
    def options_given(self) -> list[str]:
        """Every flag given that describes the torch model (an artifact MODEL refuses them)."""
        return [*self.family_options_given, *(["--input-shape"] if self.input_shape is not None else [])]


def one_of(names: Sequence[str]) -> str:
    """"a", "a or b", "a, b or c": the choices in a message."""
    names = list(names)
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} or {names[-1]}"


def option_flag(name: str) -> str:
    """The command-line flag of a family option: topk_anchors -> --topk-anchors."""
    return "--" + name.replace("_", "-")


@dataclass(frozen=True)
class FamilyOption:
    """One of a family's own convert options, read from its options dataclass (`LaneFamily.options_type`):
    the field's name, its value type (int, float, str or Path), the help text, choices and, for a number, its range
    (an edge_deploy.core.numbers.Range) from the field's metadata ({"help": ..., "choices": (...), "range": Range(...)}).
    A number without a range takes DEFAULT_RANGES' (finite, and a whole number for an int)."""

    name: str
    type: type
    help: str
    choices: tuple[str, ...] | None = None
    range: Range | None = None

    @property
    def flag(self) -> str:
        return option_flag(self.name)

    def value(self, given: object) -> OptionValue:
        """`given` as this option's type (a str for a Path option becomes a Path), or ValueError saying what the
        option takes."""
        kind = self.type
        if isinstance(given, bool) or not isinstance(given, _ACCEPTED[kind]):
            raise ValueError(f"{self.flag} takes {_WORDS[kind]}, not {type(given).__name__} {given!r:.40}")
        if kind is Path:
            return Path(given)  # type: ignore[arg-type] # a str or a Path: checked above
        if self.range is not None:  # a NumberError, which is a ValueError too
            given = self.range.check(self.flag, given)
        if kind is float:
            return float(given)  # type: ignore[arg-type] # an int or a float: checked above
        return given  # type: ignore[return-value] # an int or a str: checked above


_OPTION_TYPES = {"int": int, "float": float, "str": str, "Path": Path}
# The range of a family's numeric option that gives none in its metadata.
DEFAULT_RANGES = {int: whole(-(2**31), 2**31 - 1, noun="a whole number"), float: Range(-1e9, 1e9, "", noun="a number")}
# option type -> the values it takes (a bool is neither an int nor a float here), and their name in a message
_ACCEPTED: dict[type, tuple[type, ...]] = {int: (int,), float: (int, float), str: (str,), Path: (str, Path)}
_WORDS = {int: "a whole number", float: "a number", str: "a string", Path: "a path"}


def _option_type(annotation: Any) -> type | None:
    """int, float, str or Path from a field's annotation, `| None` / Optional[...] allowed; a string (a module with
    `from __future__ import annotations`) or the type itself (a module without it); None for anything else."""
    if isinstance(annotation, str):
        name = annotation.strip()
        for wrapper in ("Optional[", "typing.Optional["):
            if name.startswith(wrapper) and name.endswith("]"):
                name = name[len(wrapper):-1]
        parts = [part.strip() for part in name.split("|") if part.strip() != "None"]
        name = parts[0] if len(parts) == 1 else ""
        return _OPTION_TYPES.get(name.rpartition(".")[2] if name.startswith(("pathlib.", "builtins.")) else name)
    if annotation in _OPTION_TYPES.values():
        return annotation
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    if len(args) == 1 and len(typing.get_args(annotation)) == 2:  # X | None, Optional[X]
        return _option_type(args[0])
    return None


def family_options(options_type: type | None) -> tuple[FamilyOption, ...]:
    """The options an options dataclass declares, in field order. Every field needs a default (an option not given
    takes it) and a type of int, float, str or Path (optionally `| None`)."""
    if options_type is None:
        return ()
    found = []
    for f in fields(options_type):
        kind = _option_type(f.type)
        if kind is None or (f.default is MISSING and f.default_factory is MISSING):
            raise TypeError(f"family option {options_type.__name__}.{f.name}: give it a default and a type of "
                            f"{', '.join(_OPTION_TYPES)} (got {getattr(f.type, '__name__', f.type)!r})")
        if f.name in CONVERT_OPTION_NAMES:
            raise TypeError(f"family option {options_type.__name__}.{f.name} is named like convert's own "
                            f"{option_flag(f.name)}; rename it")
        choices = f.metadata.get("choices")
        rng = f.metadata.get("range")
        if rng is not None and (not isinstance(rng, Range) or kind not in (int, float) or rng.whole != (kind is int)):
            raise TypeError(f"family option {options_type.__name__}.{f.name}: its metadata's range must be an "
                            "edge_deploy.core.numbers.Range of a number option (whole=True for an int)")
        if rng is None and kind in DEFAULT_RANGES and not choices:
            rng = DEFAULT_RANGES[kind]
        found.append(FamilyOption(f.name, kind, str(f.metadata.get("help", "")),
                                  tuple(choices) if choices else None, rng))
    return tuple(found)


# convert's own options (edge_deploy.cli.convert.ConvertOptions' fields, --no-* of its switches, --help): a family's
# option may not take one of these names (tests/cli/test_convert_options.py keeps the list whole).
CONVERT_OPTION_NAMES = frozenset({
    "model", "output", "o", "backbone", "checkpoint", "dataset", "input_shape", "opset", "batch", "min_batch",
    "opt_batch", "max_batch", "input_name", "output_name", "target", "force", "seed", "atol", "rtol", "simplify",
    "no_simplify", "builder", "precision", "workspace", "dla_core", "timing_cache", "calibration_images",
    "builder_optimization_level", "verify", "no_verify", "fp16_io", "no_fp16_io", "weak_typing", "no_weak_typing",
    "eval_data", "fuse_preprocess", "no_fuse_preprocess", "frame_size", "conf", "nms", "top_k", "install", "layout",
    "resize",
    "repository", "name", "family_options", "help", "version",
})

