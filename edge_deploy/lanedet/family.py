"""The lane-model family interface and its registry.

A family is one kind of lane detector (LaneATT, ...): what its model outputs mean
and how they become `Lane`s. Everything that turns model outputs into lanes asks
the family recorded for the model (the manifest's "family", config.pbtxt's
``edge_deploy.family``): LaneDetClient and AsyncLaneDetClient, the server-side
postprocess model, `infer`, `evaluate`, the FP16 and plan lane checks, and fused
preprocessing. docs/design.md, "Adding a lane-model family", walks through a new one.

A family provides:

- `preprocess`: its default preprocessing spec (input size, colour, scale, mean/std, crop);
- `decode_defaults` and `datasets`: the decode defaults, per data set where they differ;
- `decoder_module`: a self-contained module (numpy, the standard library and `lane.py` only,
  because install copies it beside Triton Python-backend models) whose
  ``decode_outputs(outputs, *, conf_threshold, nms_threshold, top_k, image_size, model_width)``
  turns one image's lane outputs into `Lane`s in frame pixels;
- `lane_outputs()`: which of a model's outputs the decoder reads (or why the model is not one of this
  family's), and `max_points`, the most points a lane has (server-side pipelines pad to it);
- `load()`: the model builder and official-checkpoint loader (torch), for `convert NAME`.

Light on purpose (numpy and the standard library): the client imports it.
"""
from __future__ import annotations

import importlib
import math
from abc import ABC, abstractmethod
from dataclasses import dataclass, replace
from importlib import resources
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, Mapping, Sequence

import numpy as np

from .lane import Lane

if TYPE_CHECKING:  # pragma: no cover
    from .preprocess import PreprocessSpec

__all__ = ["DatasetPreset", "DecodeDefaults", "DecodeDefaultsError", "LaneFamily", "LoadedModel", "SourceSpec",
           "TensorSpec", "family_for_outputs", "family_names", "get_family", "register_family"]


class DecodeDefaultsError(ValueError):
    """Decode settings that cannot be used (one-line message)."""


@dataclass(frozen=True)
class DecodeDefaults:
    """Score threshold, NMS threshold (pixels at the model's input width) and the most lanes to return.

    Built and checked once where they are given (convert's --conf/--nms/--top-k, a data set's preset, a
    client call), then carried as this object: manifest "decode" → config.pbtxt ``edge_deploy.decode`` →
    the client and the pipeline models.
    """

    conf_threshold: float
    nms_threshold: float
    top_k: int

    def __post_init__(self) -> None:
        try:
            conf, nms = float(self.conf_threshold), float(self.nms_threshold)
        except (TypeError, ValueError):
            raise DecodeDefaultsError(f"conf_threshold and nms_threshold must be numbers, got "
                                      f"{self.conf_threshold!r} and {self.nms_threshold!r}") from None
        if not math.isfinite(conf):
            raise DecodeDefaultsError(f"conf_threshold must be a finite number, got {self.conf_threshold!r}")
        if not (math.isfinite(nms) and nms >= 0):
            raise DecodeDefaultsError(f"nms_threshold must be a finite number >= 0, got {self.nms_threshold!r}")
        top_k = self.top_k
        if isinstance(top_k, bool) or not isinstance(top_k, (int, float, np.integer)) or int(top_k) != top_k \
                or top_k < 1:
            raise DecodeDefaultsError(f"top_k must be an integer >= 1, got {self.top_k!r}")
        object.__setattr__(self, "conf_threshold", conf)
        object.__setattr__(self, "nms_threshold", nms)
        object.__setattr__(self, "top_k", int(top_k))

    def overridden(self, conf_threshold: float | None = None, nms_threshold: float | None = None,
                   top_k: int | None = None) -> DecodeDefaults:
        """These defaults with the given values in their place."""
        given = {"conf_threshold": conf_threshold, "nms_threshold": nms_threshold, "top_k": top_k}
        return replace(self, **{key: value for key, value in given.items() if value is not None})

    def to_dict(self) -> dict[str, Any]:
        return {"conf_threshold": self.conf_threshold, "nms_threshold": self.nms_threshold, "top_k": self.top_k}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> DecodeDefaults:
        if not isinstance(data, Mapping):
            raise DecodeDefaultsError(f"decode defaults must be a mapping, got {type(data).__name__}")
        missing = {"conf_threshold", "nms_threshold", "top_k"} - set(data)
        if missing:
            raise DecodeDefaultsError(f"decode defaults lack {', '.join(sorted(missing))}")
        return cls(data["conf_threshold"], data["nms_threshold"], data["top_k"])


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
    """What a family's official checkpoints of one data set need beyond the model: its decode defaults."""

    name: str
    decode: DecodeDefaults


@dataclass
class SourceSpec:
    """What to convert: MODEL plus the options that describe how to build or load it."""

    model: str
    backbone: str | None = None  # family models only; None: the family's default
    checkpoint: Path | None = None
    anchors_freq: Path | None = None
    dataset: str | None = None
    topk_anchors: int | None = None
    anchor_order: str | None = None  # LaneATT only; None: torch16
    input_shape: tuple[int, ...] | None = None
    seed: int = 0

    @property
    def family_options_given(self) -> list[str]:
        """The flags given that only a lane-model family's builder reads (`convert NAME`)."""
        return [flag for flag, value in (
            ("--backbone", self.backbone), ("--checkpoint", self.checkpoint), ("--dataset", self.dataset),
            ("--anchors-freq", self.anchors_freq), ("--topk-anchors", self.topk_anchors),
            ("--anchor-order", self.anchor_order)) if value is not None]

    @property
    def options_given(self) -> list[str]:
        """Every flag given that describes the torch model (an artifact MODEL refuses them)."""
        return [*self.family_options_given, *(["--input-shape"] if self.input_shape is not None else [])]


@dataclass
class LoadedModel:
    """A torch module ready to export, with what the manifest says about where it came from."""

    module: Any  # torch.nn.Module
    sample_shape: tuple[int, ...]  # per-sample input shape (without batch)
    source: dict[str, Any]  # the manifest's "source" section; source["trained"] is False for seeded weights
    family: "LaneFamily | None" = None  # None: found from the exported outputs (edge_deploy.lanedet.family)
    decode: DecodeDefaults | None = None  # the decode defaults the model was trained for (None: the family's)




class LaneFamily(ABC):
    """One lane-detector family. Subclass it, set the class attributes, register an instance."""

    name: str  # as recorded in manifests and configs, and as `convert NAME`
    title: str  # for people: "LaneATT"
    preprocess: PreprocessSpec
    decode_defaults: DecodeDefaults
    datasets: Mapping[str, DatasetPreset] = {}
    decoder_module: str  # dotted name of the self-contained decoder module (see the module docstring)
    max_points: int  # points per lane at most

    @abstractmethod
    def lane_outputs(self, outputs: Sequence[TensorSpec], has_batch: bool) -> tuple[TensorSpec, ...]:
        """The outputs the decoder reads, in its order, or ValueError (why, in one line that continues
        "model NAME ...") when `outputs` are not this family's. `has_batch`: shapes lead with the batch axis."""

    def matches(self, outputs: Sequence[TensorSpec], has_batch: bool) -> bool:
        try:
            self.lane_outputs(outputs, has_batch)
        except ValueError:
            return False
        return True

    def decode_preset(self, dataset: str | None) -> DecodeDefaults:
        """The decode defaults of `dataset` (the family's own without one)."""
        return self.datasets[dataset].decode if dataset in self.datasets else self.decode_defaults

    def decoder(self) -> ModuleType:
        return importlib.import_module(self.decoder_module)

    def decode(self, outputs: Sequence[np.ndarray], params: DecodeDefaults, image_size: tuple[float, float],
               model_width: float) -> list[Lane]:
        """One image's lane outputs (in `lane_outputs` order) -> lanes in an image of `image_size` (H, W)."""
        return self.decoder().decode_outputs(
            outputs, conf_threshold=params.conf_threshold, nms_threshold=params.nms_threshold, top_k=params.top_k,
            image_size=image_size, model_width=model_width)

    def decoder_sources(self) -> dict[str, bytes]:
        """The files a server-side postprocess model imports: decode.py (this family's decoder) and lane.py."""
        module = self.decoder()
        with open(module.__file__, "rb") as fh:  # type: ignore[arg-type]
            decoder = fh.read()
        return {"decode.py": decoder, "lane.py": resources.files(__package__).joinpath("lane.py").read_bytes()}

    def load(self, spec: SourceSpec) -> LoadedModel:
        """Build the torch model `convert NAME` exports (weights from spec.checkpoint)."""
        from ..errors import ConvertError

        raise ConvertError(f"the {self.title} family has no model builder; convert a TorchScript file or "
                           "package.module:factory instead.")


# --------------------------------------------------------------------------- registry

# Built-in families, imported on first use: name -> module whose FAMILY attribute is the instance.
_BUILTIN = {"laneatt": "edge_deploy.lanedet.laneatt"}
_REGISTRY: dict[str, LaneFamily] = {}


def register_family(family: LaneFamily) -> LaneFamily:
    """Make `family` known by its name (a family of your own; the built-in ones register themselves)."""
    _REGISTRY[family.name] = family
    return family


def get_family(name: str) -> LaneFamily:
    """The family called `name`; KeyError (with the known names) when there is none."""
    if name not in _REGISTRY and name in _BUILTIN:
        register_family(importlib.import_module(_BUILTIN[name]).FAMILY)
    if name not in _REGISTRY:
        raise KeyError(f"no lane-model family {name!r} (known: {', '.join(family_names())})")
    return _REGISTRY[name]


def family_names() -> list[str]:
    return sorted({*_BUILTIN, *_REGISTRY})


def family_for_outputs(outputs: Sequence[TensorSpec], has_batch: bool) -> LaneFamily | None:
    """The first family (built-in ones first) whose outputs these are, or None."""
    for name in [*_BUILTIN, *sorted(set(_REGISTRY) - set(_BUILTIN))]:
        family = get_family(name)
        if family.matches(outputs, has_batch):
            return family
    return None
