"""A family's decode parameters: `DecodeParams` (the base of each family's frozen dataclass), LaneATT's score/NMS
parameters that CLRNet and others extend, the checks every family's parameters are made with, and their error.

Light (numpy and the standard library): the client imports it.
"""
from __future__ import annotations

import math
from dataclasses import MISSING, dataclass, fields, replace
from typing import TYPE_CHECKING, Any, ClassVar, Mapping, TypeVar

import numpy as np

from .lane import Lane

__all__ = ["DECODE_OPTIONS", "DecodeParams", "DecodeParamsError", "ScoreNmsDecodeParams", "check_conf_threshold",
           "check_nms_threshold", "check_top_k"]


class DecodeParamsError(ValueError):
    """Decode settings that cannot be used (one-line message).

    For one refused value, `param` names the parameter and `problem` is the rest of the sentence
    ("conf_threshold" + "is a score threshold from 0 to 1 (got 7)"), so that a caller that took the value
    as a command-line option can name the option instead (`for_options`)."""

    def __init__(self, message: str, *, param: str | None = None, problem: str | None = None) -> None:
        super().__init__(message)
        self.param, self.problem = param, problem

    @classmethod
    def of(cls, param: str, problem: str) -> DecodeParamsError:
        return cls(f"{param} {problem}", param=param, problem=problem)

    def for_options(self, options: Mapping[str, str] | None = None) -> str:
        """The message with the parameter named as the option that gave it ("--conf is a score threshold ...");
        `options`: parameter -> option (default `DECODE_OPTIONS`, convert's and infer's)."""
        option = (DECODE_OPTIONS if options is None else options).get(self.param or "")
        return f"{option} {self.problem}" if option and self.problem else str(self)


# The command-line options (convert, infer) that give the decode parameters, for messages.
DECODE_OPTIONS = {"conf_threshold": "--conf", "nms_threshold": "--nms", "top_k": "--top-k"}


def _number(param: str, value: Any) -> float:
    if isinstance(value, bool):
        raise DecodeParamsError.of(param, f"must be a number (got {value!r})")
    try:
        return float(value)
    except (TypeError, ValueError):
        raise DecodeParamsError.of(param, f"must be a number (got {value!r})") from None


def check_top_k(value: Any) -> int:
    """`value` as the most lanes to return (an integer >= 1), or DecodeParamsError: every family's rule."""
    number = None if isinstance(value, bool) else value
    if not isinstance(number, (int, float, np.integer, np.floating)) or not math.isfinite(number) \
            or int(number) != number:
        raise DecodeParamsError.of("top_k", f"must be a whole number of lanes, at least 1 (got {value!r})")
    if number < 1:
        raise DecodeParamsError.of("top_k", f"must be at least 1 lane (got {int(number)})")
    return int(number)


def check_conf_threshold(value: Any) -> float:
    """`value` as a score threshold (0 <= conf <= 1), or DecodeParamsError."""
    conf = _number("conf_threshold", value)
    if not 0.0 <= conf <= 1.0:
        raise DecodeParamsError.of("conf_threshold", f"is a score threshold from 0 to 1 (got {conf:g})")
    return conf


def check_nms_threshold(value: Any) -> float:
    """`value` as an NMS threshold in pixels (finite, >= 0), or DecodeParamsError."""
    nms = _number("nms_threshold", value)
    if not (math.isfinite(nms) and nms >= 0):
        raise DecodeParamsError.of("nms_threshold", f"must be 0 or more pixels (got {nms:g})")
    return nms


_P = TypeVar("_P", bound="DecodeParams")


@dataclass(frozen=True)
class DecodeParams:
    """A family's decode parameters: the base of each family's own frozen dataclass.

    Built and checked once where they are given (convert's options, a data set's preset, a client
    call), then carried as this object: manifest "decode" -> config.pbtxt ``edge_deploy.decode`` ->
    the client and the pipeline models, whose decoder module takes them as keyword arguments
    (``decode_outputs(outputs, image_size=..., model_width=..., **params.to_dict())``). Every
    family's parameters include `top_k`, the most lanes returned (server-side pipelines pad to it).
    """

    title: ClassVar[str] = "this family's"  # for messages: "UFLDv2 decoding has no ..."
    if TYPE_CHECKING:  # every subclass's own field (a field here would come first in their constructors)
        @property
        def top_k(self) -> int: ...

    def __post_init__(self) -> None:
        object.__setattr__(self, "top_k", check_top_k(self.top_k))

    @classmethod
    def names(cls) -> list[str]:
        return [f.name for f in fields(cls)]

    def overridden(self: _P, **values: Any) -> _P:
        """These parameters with the given (not None) values in their place; a name this family's
        decoding does not take is a DecodeParamsError naming the ones it does."""
        given = {key: value for key, value in values.items() if value is not None}
        unknown = sorted(set(given) - set(self.names()))
        if unknown:
            raise DecodeParamsError(f"{self.title} decoding has no {' or '.join(unknown)}; it takes "
                                      f"{', '.join(self.names())}")
        return replace(self, **given)

    def to_dict(self) -> dict[str, Any]:
        return {name: list(v) if isinstance(v, tuple) else v for name, v in
                ((name, getattr(self, name)) for name in self.names())}

    @classmethod
    def from_dict(cls: type[_P], data: Mapping[str, Any]) -> _P:
        if not isinstance(data, Mapping):
            raise DecodeParamsError(f"decode defaults must be a mapping, got {type(data).__name__}")
        required = {f.name for f in fields(cls) if f.default is MISSING and f.default_factory is MISSING}
        missing, unknown = required - set(data), set(data) - set(cls.names())
        if missing or unknown:
            raise DecodeParamsError(
                f"{cls.title} decode defaults " + "; ".join(
                    [*([f"lack {', '.join(sorted(missing))}"] if missing else []),
                     *([f"have unknown keys {', '.join(sorted(unknown))}"] if unknown else [])]))
        return cls(**dict(data))

    def narrows(self, server: DecodeParams) -> bool:
        """Whether lanes decoded on the server with `server` can be cut down to these parameters here
        (server-side pipelines): by default only a smaller top_k."""
        return all(getattr(self, n) == getattr(server, n) for n in self.names() if n != "top_k") \
            and self.top_k <= server.top_k

    def narrow(self, lanes: list[Lane], server: DecodeParams) -> list[Lane]:
        """`lanes` decoded with `server`, cut down to these parameters (see `narrows`)."""
        return lanes[: self.top_k]


@dataclass(frozen=True)
class ScoreNmsDecodeParams(DecodeParams):
    """Score threshold, NMS threshold (pixels at the model's input width) and the most lanes to return:
    the decode parameters of anchor-based families (LaneATT)."""

    conf_threshold: float
    nms_threshold: float
    top_k: int
    title: ClassVar[str] = "score/NMS"

    def __post_init__(self) -> None:
        super().__post_init__()
        object.__setattr__(self, "conf_threshold", check_conf_threshold(self.conf_threshold))
        object.__setattr__(self, "nms_threshold", check_nms_threshold(self.nms_threshold))

    @classmethod
    def check_given(cls, *, conf_threshold: Any = None, nms_threshold: Any = None, top_k: Any = None) -> None:
        """The values given (not None) checked by the rules these parameters are made with, before the defaults
        they go over are known: convert's and infer's --conf/--nms/--top-k (ExportSettings, the infer CLI) and
        LaneDetClient(conf_threshold=...). DecodeParamsError for the first refused one (`for_options` names
        its option)."""
        for value, check in ((conf_threshold, check_conf_threshold), (nms_threshold, check_nms_threshold),
                             (top_k, check_top_k)):
            if value is not None:
                check(value)

    def narrows(self, server: DecodeParams) -> bool:
        """A higher score threshold and a smaller top_k can be applied to the server's lanes; NMS cannot."""
        if not isinstance(server, ScoreNmsDecodeParams):
            return False
        return (self.conf_threshold >= server.conf_threshold and self.top_k <= server.top_k
                and math.isclose(self.nms_threshold, server.nms_threshold))

    def narrow(self, lanes: list[Lane], server: DecodeParams) -> list[Lane]:
        if self.conf_threshold > getattr(server, "conf_threshold", self.conf_threshold):
            lanes = [lane for lane in lanes if lane.score > self.conf_threshold]
        return lanes[: self.top_k]

