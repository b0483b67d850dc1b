"""The lane-model family interface and its registry.

A family is one kind of lane detector (LaneATT, UFLDv2, ...): what its model outputs mean
and how they become `Lane`s. Everything that turns model outputs into lanes asks
the family recorded for the model (the manifest's "family", config.pbtxt's
``edge_deploy.family``): LaneDetClient and AsyncLaneDetClient, the server-side
postprocess model, `infer`, `evaluate`, the FP16 and plan lane checks, and fused
preprocessing. docs/design.md, "Adding a lane-model family", walks through a new one.

A family provides:

- `preprocess`: its default preprocessing spec (input size, colour, scale, mean/std, crop);
- `decode_defaults` (an instance of its own `DecodeParams` subclass) and `datasets`: the decode
  defaults (and preprocessing), per data set where they differ;
- `decoder_module`: a self-contained module (numpy, the standard library and `lane.py` only,
  because install copies it beside Triton Python-backend models) whose
  ``decode_outputs(outputs, *, image_size, model_width, **decode_params)`` turns one image's lane
  outputs into `Lane`s in frame pixels;
- `lane_outputs()`: which of a model's outputs the decoder reads (or why the model is not one of this
  family's), and `max_points()`, the most points a lane has (server-side pipelines pad to it);
- `load()`: the model builder and official-checkpoint loader (torch), for `convert NAME`.

Light on purpose (numpy and the standard library): the client imports it.
"""
from __future__ import annotations

import contextlib
import functools
import importlib
import importlib.util
import logging
import math
import sys
import typing
from abc import ABC, abstractmethod
from dataclasses import MISSING, dataclass, field, fields, replace
from importlib import resources
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, ClassVar, Mapping, Sequence, TypeVar

import numpy as np

from ..errors import ConvertError, EdgeDeployError, PluginError, one_line
from .lane import Lane
from ..fsutil import sha256_file
from .preprocess import PreprocessSpec

if TYPE_CHECKING:  # pragma: no cover
    from importlib.metadata import EntryPoint

    from .preprocess import PreprocessSpec

__all__ = ["DECODE_OPTIONS", "ENTRY_POINT_GROUP", "LEGACY_FAMILY", "BrokenFamilyError", "DatasetPreset", "DecodeDefaults",
           "DecodeDefaultsError", "DecodeParams", "FamilyOption", "LaneFamily", "LoadedModel", "SourceSpec",
           "TensorSpec", "family_for_outputs", "family_names", "get_family", "known_families", "register_family",
           "unregister_family"]


class DecodeDefaultsError(ValueError):
    """Decode settings that cannot be used (one-line message).

    For one refused value, `param` names the parameter and `problem` is the rest of the sentence
    ("conf_threshold" + "is a score threshold from 0 to 1 (got 7)"), so that a caller that took the value
    as a command-line option can name the option instead (`for_options`)."""

    def __init__(self, message: str, *, param: str | None = None, problem: str | None = None) -> None:
        super().__init__(message)
        self.param, self.problem = param, problem

    @classmethod
    def of(cls, param: str, problem: str) -> DecodeDefaultsError:
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
        raise DecodeDefaultsError.of(param, f"must be a number (got {value!r})")
    try:
        return float(value)
    except (TypeError, ValueError):
        raise DecodeDefaultsError.of(param, f"must be a number (got {value!r})") from None


def check_top_k(value: Any) -> int:
    """`value` as the most lanes to return (an integer >= 1), or DecodeDefaultsError: every family's rule."""
    number = None if isinstance(value, bool) else value
    if not isinstance(number, (int, float, np.integer, np.floating)) or not math.isfinite(number) \
            or int(number) != number:
        raise DecodeDefaultsError.of("top_k", f"must be a whole number of lanes, at least 1 (got {value!r})")
    if number < 1:
        raise DecodeDefaultsError.of("top_k", f"must be at least 1 lane (got {int(number)})")
    return int(number)


def check_conf_threshold(value: Any) -> float:
    """`value` as a score threshold (0 <= conf <= 1), or DecodeDefaultsError."""
    conf = _number("conf_threshold", value)
    if not 0.0 <= conf <= 1.0:
        raise DecodeDefaultsError.of("conf_threshold", f"is a score threshold from 0 to 1 (got {conf:g})")
    return conf


def check_nms_threshold(value: Any) -> float:
    """`value` as an NMS threshold in pixels (finite, >= 0), or DecodeDefaultsError."""
    nms = _number("nms_threshold", value)
    if not (math.isfinite(nms) and nms >= 0):
        raise DecodeDefaultsError.of("nms_threshold", f"must be 0 or more pixels (got {nms:g})")
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

    def __post_init__(self) -> None:
        object.__setattr__(self, "top_k", check_top_k(self.top_k))

    @classmethod
    def names(cls) -> list[str]:
        return [f.name for f in fields(cls)]

    def overridden(self: _P, **values: Any) -> _P:
        """These parameters with the given (not None) values in their place; a name this family's
        decoding does not take is a DecodeDefaultsError naming the ones it does."""
        given = {key: value for key, value in values.items() if value is not None}
        unknown = sorted(set(given) - set(self.names()))
        if unknown:
            raise DecodeDefaultsError(f"{self.title} decoding has no {' or '.join(unknown)}; it takes "
                                      f"{', '.join(self.names())}")
        return replace(self, **given)

    def to_dict(self) -> dict[str, Any]:
        return {name: list(v) if isinstance(v, tuple) else v for name, v in
                ((name, getattr(self, name)) for name in self.names())}

    @classmethod
    def from_dict(cls: type[_P], data: Mapping[str, Any]) -> _P:
        if not isinstance(data, Mapping):
            raise DecodeDefaultsError(f"decode defaults must be a mapping, got {type(data).__name__}")
        required = {f.name for f in fields(cls) if f.default is MISSING and f.default_factory is MISSING}
        missing, unknown = required - set(data), set(data) - set(cls.names())
        if missing or unknown:
            raise DecodeDefaultsError(
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
class DecodeDefaults(DecodeParams):
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
        LaneDetClient(conf_threshold=...). DecodeDefaultsError for the first refused one (`for_options` names
        its option)."""
        for value, check in ((conf_threshold, check_conf_threshold), (nms_threshold, check_nms_threshold),
                             (top_k, check_top_k)):
            if value is not None:
                check(value)

    def narrows(self, server: DecodeParams) -> bool:
        """A higher score threshold and a smaller top_k can be applied to the server's lanes; NMS cannot."""
        if not isinstance(server, DecodeDefaults):
            return False
        return (self.conf_threshold >= server.conf_threshold and self.top_k <= server.top_k
                and math.isclose(self.nms_threshold, server.nms_threshold))

    def narrow(self, lanes: list[Lane], server: DecodeParams) -> list[Lane]:
        if self.conf_threshold > getattr(server, "conf_threshold", self.conf_threshold):
            lanes = [lane for lane in lanes if lane.score > self.conf_threshold]
        return lanes[: self.top_k]


@dataclass(frozen=True)
class TensorSpec:
    """One input or output of a model (Triton datatype; -1 = a dynamic dimension)."""

    name: str
    datatype: str
    shape: tuple[int, ...]

    @classmethod
    def from_dict(cls, entry: Mapping[str, Any]) -> TensorSpec:
        return cls(str(entry["name"]), str(entry["datatype"]), tuple(int(d) for d in entry["shape"]))

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "datatype": self.datatype, "shape": list(self.shape)}


@dataclass(frozen=True)
class DatasetPreset:
    """What a family's official checkpoints of one data set need beyond the model: decode defaults and,
    where it differs from the family's, preprocessing."""

    name: str
    decode: DecodeParams
    preprocess: PreprocessSpec | None = None
    image_size: tuple[int, int] | None = None  # (H, W) of the data set's frames; the lane checks decode at it


@dataclass
class SourceSpec:
    """What to convert: MODEL plus the options that describe how to build or load it.

    `options` holds the family's own options that were given (name -> value, e.g. {"topk_anchors": 1000} for
    LaneATT's --topk-anchors); the family reads them into its typed options object (`LaneFamily.options_from`)."""

    model: str
    backbone: str | None = None  # family models only; None: the family's default
    checkpoint: Path | None = None
    dataset: str | None = None
    options: Mapping[str, Any] = field(default_factory=dict)
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
    the field's name, its value type (int, float, str or Path), the help text and choices from the field's
    metadata ({"help": ..., "choices": (...)})."""

    name: str
    type: type
    help: str
    choices: tuple[str, ...] | None = None

    @property
    def flag(self) -> str:
        return option_flag(self.name)


_OPTION_TYPES = {"int": int, "float": float, "str": str, "Path": Path}


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
        found.append(FamilyOption(f.name, kind, str(f.metadata.get("help", "")),
                                  tuple(choices) if choices else None))
    return tuple(found)


# convert's own options (edge_deploy.cli.convert.ConvertOptions' fields, --no-* of its switches, --help): a family's
# option may not take one of these names (tests/cli/test_convert_options.py keeps the list whole).
CONVERT_OPTION_NAMES = frozenset({
    "model", "output", "o", "backbone", "checkpoint", "dataset", "input_shape", "opset", "batch", "min_batch",
    "opt_batch", "max_batch", "input_name", "output_name", "target", "force", "seed", "atol", "rtol", "simplify",
    "no_simplify", "builder", "precision", "workspace", "dla_core", "timing_cache", "calibration_images",
    "builder_optimization_level", "verify", "no_verify", "fp16_io", "no_fp16_io", "weak_typing", "no_weak_typing",
    "eval_data", "fuse_preprocess", "no_fuse_preprocess", "frame_size", "conf", "nms", "top_k", "install",
    "repository", "name", "family_options", "help", "version",
})


@dataclass
class LoadedModel:
    """A torch module ready to export, with what the manifest says about where it came from."""

    module: Any  # torch.nn.Module
    sample_shape: tuple[int, ...]  # per-sample input shape (without batch)
    # the manifest's "source" section, free-form: each family's loader writes its own keys (source_section);
    # source["trained"] is False for seeded weights
    source: dict[str, Any]
    family: "LaneFamily | None" = None  # None: found from the exported outputs (edge_deploy.lanedet.family)
    decode: DecodeParams | None = None  # the decode defaults the model was trained for (None: the family's)
    preprocess: PreprocessSpec | None = None  # its preprocessing (None: the family's, at the model's input size)
    output_names: tuple[str, ...] | None = None  # the names its outputs are exported under (None: --output-name)


class LaneFamily(ABC):
    """One lane-detector family. Subclass it, set the class attributes, register an instance."""

    name: str  # as recorded in manifests and configs, and as `convert NAME`
    title: str  # for people: "LaneATT"
    preprocess: PreprocessSpec
    decode_defaults: DecodeParams
    datasets: Mapping[str, DatasetPreset] = {}
    decoder_module: str  # dotted name of the self-contained decoder module (see the module docstring)
    backbones: tuple[str, ...] = ()  # what `convert NAME --backbone` takes (empty: the family has no choice)
    default_backbone: str | None = None
    options_type: type | None = None  # a dataclass of the family's own convert options (`family_options`)

    @abstractmethod
    def lane_outputs(self, outputs: Sequence[TensorSpec], has_batch: bool) -> tuple[TensorSpec, ...]:
        """The outputs the decoder reads, in its order, or ValueError (why, in one line that continues
        "model NAME ...") when `outputs` are not this family's. `has_batch`: shapes lead with the batch axis."""

    @abstractmethod
    def max_points(self, lane_outputs: Sequence[TensorSpec]) -> int:
        """The most points a lane decoded from these outputs (`lane_outputs`' result) has."""

    def matches(self, outputs: Sequence[TensorSpec], has_batch: bool) -> bool:
        try:
            self.lane_outputs(outputs, has_batch)
        except ValueError:
            return False
        return True

    def options(self) -> tuple[FamilyOption, ...]:
        """This family's own convert options (the CLI makes a flag of each)."""
        return family_options(self.options_type)

    def options_from(self, spec: SourceSpec) -> Any:
        """spec.options as this family's typed options object (None without `options_type`), or ConvertError
        naming the options that belong to other families and the ones this family takes."""
        given = {name: value for name, value in spec.options.items() if value is not None}
        known = {option.name for option in self.options()}
        foreign = [option_flag(name) for name in given if name not in known]
        if foreign:
            takes = ", ".join(["--dataset", "--backbone", "--checkpoint", *(o.flag for o in self.options())])
            owners = sorted({other.title for other in known_families() if other.name != self.name
                             and any(option_flag(o.name) in foreign for o in other.options())})
            whose = f"only appl{'ies' if len(foreign) == 1 else 'y'} to {' and '.join(owners)}" if owners else \
                "is not an option of any lane family"
            raise ConvertError(f"{' and '.join(foreign)} {whose}; {self.title} takes {takes}.")
        if self.options_type is None:
            return None
        for option in self.options():
            value = given.get(option.name)
            if option.choices and value is not None and value not in option.choices:
                raise ConvertError(f"{self.title} has no {option.flag} {value}; use {one_of(option.choices)}.")
        return self.options_type(**given)

    def backbone_from(self, spec: SourceSpec) -> str | None:
        """spec.backbone (the family's default when not given), or ConvertError naming the backbones it has."""
        if spec.backbone is None:
            return self.default_backbone
        if spec.backbone not in self.backbones:
            choices = one_of(self.backbones) if self.backbones else "no choice of backbone (drop --backbone)"
            raise ConvertError(f"{self.title} has no --backbone {spec.backbone}; use {choices}.")
        return spec.backbone

    def dataset_from(self, spec: SourceSpec, default: str | None = None) -> str | None:
        """spec.dataset (`default` when not given), or ConvertError naming the data sets this family has presets
        for."""
        dataset = spec.dataset or default
        if dataset is not None and dataset not in self.datasets:
            choices = one_of(list(self.datasets)) if self.datasets else "none (drop --dataset)"
            raise ConvertError(f"{self.title} has no --dataset {dataset} preset; use {choices}.")
        return dataset

    def check_input_shape(self, spec: SourceSpec, shape: Sequence[int], preset: str | None = None) -> None:
        """ConvertError when --input-shape was given and is not the model's (C, H, W) `shape` (of `preset`)."""
        if spec.input_shape is not None and tuple(spec.input_shape[1:]) != tuple(shape):
            where = f"{self.title} for {preset}" if preset else self.title
            raise ConvertError(f"{where} takes {shape[1]}x{shape[2]} input, not --input-shape "
                               f"{','.join(map(str, spec.input_shape))}; drop --input-shape.")

    def source_section(self, spec: SourceSpec, module: Any, *, backbone: str | None, dataset: str | None,
                       dropped: str | None = None, **extra: Any) -> dict[str, Any]:
        """The manifest's "source" section for a model `load` built: what it is, the checkpoint it came from (path,
        sha256 and what of it was `dropped`), its parameter count, whether it is trained (else its seed), then
        `extra` (free-form: the family's own keys)."""
        trained = spec.checkpoint is not None
        checkpoint = None if not trained else {
            "path": str(Path(spec.checkpoint).resolve()), "sha256": sha256_file(Path(spec.checkpoint)),
            **({"dropped": dropped} if dropped else {})}
        return {"kind": self.name, "spec": self.name, "backbone": backbone, "dataset": dataset, "checkpoint": checkpoint,
                "parameters": sum(p.numel() for p in module.parameters()), "trained": trained,
                "seed": None if trained else spec.seed, **extra}

    def check_image_size(self, dataset: str | None, decode: DecodeParams) -> tuple[int, int] | None:
        """(H, W) at which convert's FP16, fused and plan lane checks decode this family's lanes and hold their
        limits (pixels at this width): the frames of `dataset` (or of the preset whose decode parameters these
        are), when its preset gives their size; None: the model's input size, limits at 640 wide."""
        preset = self.datasets.get(dataset or "") or next(
            (p for p in self.datasets.values() if p.decode == decode), None)
        return preset.image_size if preset is not None else None

    def recognizes_checkpoint(self, keys: Sequence[str]) -> bool:
        """Whether a state dict with these keys is one of this family's checkpoints (for the message that names
        the right family when another family's checkpoint is given): False unless the family says."""
        return False

    def describe(self) -> dict[str, Any]:
        """What `edge-deploy families` shows of this family (JSON-ready)."""
        return {
            "name": self.name, "title": self.title, "origin": family_origin(self.name),
            "backbones": list(self.backbones), "default_backbone": self.default_backbone,
            "datasets": {name: {"image_size": list(p.image_size) if p.image_size else None}
                         for name, p in self.datasets.items()},
            "options": [{"flag": o.flag, "type": o.type.__name__, "choices": list(o.choices) if o.choices else None,
                         "help": o.help} for o in self.options()],
            "input": [self.preprocess.height, self.preprocess.width],
            "decode": self.decode_defaults.to_dict(),
        }

    def decode_preset(self, dataset: str | None) -> DecodeParams:
        """The decode defaults of `dataset` (the family's own without one)."""
        return self.datasets[dataset].decode if dataset in self.datasets else self.decode_defaults

    def decoder(self) -> ModuleType:
        return importlib.import_module(self.decoder_module)

    def decode_type(self) -> type[DecodeParams]:
        """The class of this family's decode parameters (a manifest's "decode" is read with it)."""
        return type(self.decode_defaults)

    def decode(self, outputs: Sequence[np.ndarray], params: DecodeParams, image_size: tuple[float, float],
               model_width: float) -> list[Lane]:
        """One image's lane outputs (in `lane_outputs` order) -> lanes in an image of `image_size` (H, W)."""
        return self.decoder().decode_outputs(outputs, image_size=image_size, model_width=model_width,
                                             **params.to_dict())

    def decoder_sources(self) -> dict[str, bytes]:
        """The files a server-side postprocess model imports: decode.py (this family's decoder) and lane.py."""
        module = self.decoder()
        with open(module.__file__, "rb") as fh:  # type: ignore[arg-type]
            decoder = fh.read()
        return {"decode.py": decoder, "lane.py": resources.files(__package__).joinpath("lane.py").read_bytes()}

    def load(self, spec: SourceSpec) -> LoadedModel:
        """Build the torch model `convert NAME` exports (weights from spec.checkpoint)."""
        raise ConvertError(f"the {self.title} family has no model builder; convert a TorchScript file or "
                           "package.module:factory instead.")


# --------------------------------------------------------------------------- registry

# Built-in families, imported on first use: name -> module whose FAMILY attribute is the instance.
_BUILTIN = {"laneatt": "edge_deploy.lanedet.laneatt", "ufldv2": "edge_deploy.lanedet.ufldv2",
            "clrnet": "edge_deploy.lanedet.clrnet"}
# The family of models installed before configs and manifests recorded one (format 1: LaneATT only).
LEGACY_FAMILY = "laneatt"
# Families from other installed distributions: an entry point NAME = "package.module:OBJECT" in this group, OBJECT
# a LaneFamily instance (or class) whose name is NAME. Loaded on first use, like the built-in ones.
ENTRY_POINT_GROUP = "edge_deploy.families"
_REGISTRY: dict[str, LaneFamily] = {}
_log = logging.getLogger("edge_deploy.families")


class FamilyError(KeyError):
    """No lane-model family of that name (a KeyError, as it always was); str() is the message, not its repr."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class BrokenFamilyError(PluginError, FamilyError):
    """A family from another package (or registered by other code) that failed: at import, its checks, or a call
    edge-deploy made of it. Its package's bug, said in one line (exit 2), never edge-deploy's; `package` names it."""

    def __init__(self, message: str, *, family: str, package: str) -> None:
        super().__init__(message)
        self.family, self.package = family, package


# Plug-ins that failed (name -> why), left out of every list; asked for by name, the error says why again.
_BROKEN: dict[str, BrokenFamilyError] = {}


def register_family(family: LaneFamily) -> LaneFamily:
    """Make `family` known by its name (a family of your own; the built-in ones register themselves)."""
    _REGISTRY[family.name] = family
    _BROKEN.pop(family.name, None)
    return family


def unregister_family(name: str) -> None:
    """Forget a family `register_family` made known (an application's own, or a test's); built-in and entry-point
    families come back when next asked for."""
    _REGISTRY.pop(name, None)
    _BROKEN.pop(name, None)


def _warn_once(key: str, line: str) -> None:
    """One warning line per process (stderr through `logging`: an application's own logging config applies)."""
    if key not in _warned:
        _warned.add(key)
        _log.warning("warning: %s", line)


_warned: set[str] = set()


@functools.lru_cache(maxsize=1)
def _entry_points() -> dict[str, EntryPoint]:
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
            _warn_once(f"dist:{dist_name}", f"package {dist_name} is left out: its entry_points.txt cannot be read "
                       f"({type(exc).__name__}: {one_line(exc, 120)}); this is a bug of {dist_name}, not of "
                       f"edge-deploy: reinstall or fix {dist_name}, or uninstall it.")
            continue
        for point in points:
            found.setdefault(point.name, point)
    return found


def _package(name: str) -> str:
    """Who provides a family, for messages: its distribution, its entry point, or the code that registered it."""
    point = _entry_points().get(name)
    if point is None:
        return f"the code that registered family {name!r}"
    dist = getattr(point, "dist", None)
    return dist.name if dist is not None else f"the package of entry point {point.value}"


def family_package(name: str) -> str | None:
    """The distribution that provides family NAME through its entry point (recorded by convert, so that where the
    family is missing the package to install can be named); None for a built-in or registered family."""
    point = _entry_points().get(name) if name not in _BUILTIN else None
    dist = getattr(point, "dist", None)
    return dist.name if dist is not None else None


def is_plugin(family: LaneFamily | str) -> bool:
    """Whether a family is not one of edge-deploy's own (its failures are its package's, not edge-deploy's)."""
    return (family if isinstance(family, str) else family.name) not in _BUILTIN


def family_fault(family: LaneFamily | str, what: str) -> BrokenFamilyError:
    """The error for a plug-in family that failed (`what`: "its load() raised ValueError: ..."): one line saying whose
    bug it is. The family is left out of this process's lists from now on, with one warning line."""
    name = family if isinstance(family, str) else family.name
    package = _package(name)
    if package.startswith("the code"):
        fix = "fix that code"
    else:
        fix = f"update or reinstall {package}, or uninstall it"
    error = BrokenFamilyError(f"lane-model family {name!r} of {package} is broken: {what}; this is a bug of "
                              f"{package}, not of edge-deploy or of your input: {fix}.", family=name, package=package)
    _BROKEN.setdefault(name, error)
    _REGISTRY.pop(name, None)
    _warn_once(name, f"lane-model family {name!r} of {package} is left out: {what}.")
    return error


def family_problem(family: Any, name: str) -> str | None:
    """Why `family` cannot serve as the family NAME (one phrase), or None: checked once, when a plug-in is loaded, so
    that nothing edge-deploy asks of it later fails on a wrong type."""
    if not isinstance(family, LaneFamily):
        return f"it is {type(family).__name__}, not a LaneFamily"
    checks: list[tuple[bool, str]] = [
        (isinstance(family.name, str) and family.name == name, f"its name is {family.name!r}, not the entry point's "
                                                               f"{name!r}"),
        (isinstance(getattr(family, "title", None), str) and bool(family.title), "its title is not a non-empty string"),
        (isinstance(getattr(family, "preprocess", None), PreprocessSpec), "its preprocess is not a PreprocessSpec"),
        (isinstance(getattr(family, "decode_defaults", None), DecodeParams),
         "its decode_defaults is not a DecodeParams"),
        (isinstance(family.datasets, Mapping) and all(isinstance(k, str) and isinstance(v, DatasetPreset)
                                                      for k, v in family.datasets.items()),
         "its datasets is not a mapping of names to DatasetPreset"),
        (isinstance(family.backbones, (tuple, list)) and all(isinstance(b, str) for b in family.backbones),
         f"its backbones are not names ({family.backbones!r:.60})"),
        (family.default_backbone is None or family.default_backbone in family.backbones,
         f"its default_backbone {family.default_backbone!r:.40} is not one of its backbones"),
        (isinstance(getattr(family, "decoder_module", None), str), "its decoder_module is not a module name"),
    ]
    for ok, problem in checks:
        if not ok:
            return problem
    try:
        found = importlib.util.find_spec(family.decoder_module) is not None
    except Exception:  # noqa: BLE001 - its parent package fails to import, or the name is malformed
        found = False
    if not found:
        return f"its decoder_module {family.decoder_module!r} cannot be found (install copies it beside the server's " \
               "pipeline models)"
    try:
        family.options()
    except Exception as exc:  # noqa: BLE001 - a wrong option type, a name convert has
        return f"{type(exc).__name__}: {one_line(exc, 200)}"
    return None


def _load_entry_point(name: str, point: Any) -> LaneFamily:
    """The plug-in family NAME, imported and checked; BrokenFamilyError (whose bug, in one line) when it fails in any
    way. What it prints on import goes to stderr (never into a command's output), and a sys.exit() there is its
    failure, not the command's exit."""
    try:
        with contextlib.redirect_stdout(sys.stderr):
            loaded = point.load()
            family = loaded() if isinstance(loaded, type) and issubclass(loaded, LaneFamily) else loaded
    except KeyboardInterrupt:
        raise
    except SystemExit as exc:
        raise family_fault(name, f"importing {point.value} called sys.exit({exc.code!r})") from None
    except BaseException as exc:  # noqa: BLE001 - a third-party package can fail in any way on import
        raise family_fault(name, f"importing {point.value} failed ({type(exc).__name__}: {one_line(exc, 160)})") \
            from None
    problem = family_problem(family, name)
    if problem:
        raise family_fault(name, f"{point.value}: {problem}")
    return family


def get_family(name: str) -> LaneFamily:
    """The family called `name`: registered, built in, or from an installed package's entry point; KeyError (with
    the known names) when there is none, BrokenFamilyError (a KeyError and an EdgeDeployError, naming the package and
    why) when its package is broken."""
    if name in _BROKEN:
        raise _BROKEN[name]
    if name not in _REGISTRY:
        if name in _BUILTIN:
            register_family(importlib.import_module(_BUILTIN[name]).FAMILY)
        elif name in (points := _entry_points()):
            register_family(_load_entry_point(name, points[name]))
    if name not in _REGISTRY:
        raise FamilyError(f"no lane-model family {name!r} (known: {', '.join(family_names())}; a family of another "
                          "package needs that package installed)")
    return _REGISTRY[name]


def family_origin(name: str) -> str:
    """Where a family comes from: "built-in", the distribution whose entry point provides it, or "registered" (by
    `register_family` in this process)."""
    if name in _BUILTIN:
        return "built-in"
    point = _entry_points().get(name)
    dist = getattr(point, "dist", None)
    if point is not None:
        return f"package {dist.name}" if dist is not None else f"entry point {point.value}"
    return "registered"


def family_names() -> list[str]:
    """Every family's name: the built-in ones first, in their order, then the others sorted (broken ones too: asked
    for by name, they say why they are left out)."""
    return [*_BUILTIN, *sorted({*_REGISTRY, *_entry_points(), *_BROKEN} - set(_BUILTIN))]


def known_families() -> list[LaneFamily]:
    """Every family that loads (`family_names` order); one whose package is broken is left out here, with one warning
    line naming the package and why, and named by the error when it is asked for by name."""
    found = []
    for name in family_names():
        try:
            found.append(get_family(name))
        except BrokenFamilyError:
            continue
    return found


def asking_families(question: str, ask: Any, *, skip: str | None = None) -> list[LaneFamily]:
    """The families (`known_families` order, but `skip`) for which `ask(family)` is true. A plug-in whose answer raises
    is that plug-in's failure: it is left out (one warning line), never the caller's (a user's conversion of another
    family). `question` names the call for the warning ("recognizes_checkpoint()")."""
    out = []
    for family in known_families():
        if family.name == skip:
            continue
        try:
            answer = ask(family)
        except EdgeDeployError:
            raise
        except Exception as exc:  # noqa: BLE001 - a plug-in can fail in any way
            if not is_plugin(family):
                raise
            family_fault(family, f"its {question} raised {type(exc).__name__}: {one_line(exc, 120)}")
            continue
        if answer:
            out.append(family)
    return out


def family_for_outputs(outputs: Sequence[TensorSpec], has_batch: bool) -> LaneFamily | None:
    """The first family (built-in ones first) whose outputs these are, or None."""
    found = asking_families("matches()", lambda family: family.matches(outputs, has_batch))
    return found[0] if found else None
