"""Where the torch model comes from: built-in LaneATT, a TorchScript file, or package.module:factory.

`load_source()` turns MODEL (plus the LaneATT options) into an eval-mode
nn.Module, the per-sample input shape, and what the manifest's "source"
section says about it. torch is imported only when a model is loaded.
"""
from __future__ import annotations

import importlib
import os
import sys
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .._deps import require
from ..artifact import MANIFEST_NAME, ONNX_NAME, sha256_file
from ..errors import ConvertError, EdgeDeployError, one_line
from ..lanedet.anchors import N_ANCHORS
from ..lanedet.contract import DATASET_DECODE

LANEATT_INPUT_SHAPE = (1, 3, 360, 640)
ANCHOR_ORDER_RULES = {
    "torch16": "torch.argsort(freq, descending=True)[:k] as PyTorch 1.6 computes it on the CPU "
               "(TH quicksort: median of three, insertion pass over partitions <= 10; ties not in index order)",
    "stable": "descending frequency, ties by anchor index",
}


@dataclass
class SourceSpec:
    """What to convert: MODEL plus the options that describe how to build or load it."""

    model: str
    backbone: str | None = None  # LaneATT only; None: resnet34
    checkpoint: Path | None = None
    anchors_freq: Path | None = None
    dataset: str | None = None
    topk_anchors: int | None = None
    anchor_order: str | None = None  # LaneATT only; None: torch16
    input_shape: tuple[int, ...] | None = None
    seed: int = 0


@dataclass
class LoadedModel:
    """A torch module ready to export, with what the manifest says about where it came from."""

    module: Any  # torch.nn.Module
    sample_shape: tuple[int, ...]  # per-sample input shape (without batch)
    source: dict[str, Any]  # the manifest's "source" section; source["trained"] is False for seeded weights
    decode: dict[str, Any] | None = None  # decode defaults the model was trained for (None: CULane's)




def parse_input_shape(text: str) -> tuple[int, ...]:
    """'1,3,360,640' -> (1, 3, 360, 640), with a one-line error for anything else."""
    try:
        dims = tuple(int(part) for part in text.replace("x", ",").split(",") if part.strip())
    except ValueError:
        dims = ()
    if len(dims) < 2 or any(d < 1 for d in dims):
        raise ConvertError(
            f"--input-shape {text!r} is not a list of positive integers; write it like 1,3,360,640."
        )
    return dims


# --------------------------------------------------------------------------- loading


def classify_model(model: str) -> str:
    """'laneatt', 'artifact' (an existing convert output), 'torchscript' (a file) or 'factory'."""
    if model.lower() == "laneatt":
        return "laneatt"
    path = Path(model)
    if path.is_dir():
        if (path / MANIFEST_NAME).is_file() and (path / ONNX_NAME).is_file():
            return "artifact"
        raise ConvertError(
            f"{model} is a directory but not an edge-deploy artifact (no {MANIFEST_NAME} + {ONNX_NAME}); "
            "pass laneatt, a TorchScript file, package.module:factory, or a directory made by convert."
        )
    if path.is_file():
        return "torchscript"
    if ":" in model and os.sep not in model.split(":", 1)[0]:
        return "factory"
    raise ConvertError(
        f"MODEL {model!r} is not laneatt, an existing TorchScript file, package.module:factory "
        "or an artifact directory; check the spelling or the path."
    )


def load_source(spec: SourceSpec) -> LoadedModel:
    """Build or load the torch module MODEL names, in eval mode."""
    kind = classify_model(spec.model)
    if kind == "laneatt":
        return _load_laneatt(spec)
    if kind == "artifact":
        raise ConvertError(f"{spec.model} is already converted (an artifact directory), not a torch model.")
    laneatt_only = [flag for flag, value in (
        ("--backbone", spec.backbone), ("--checkpoint", spec.checkpoint), ("--dataset", spec.dataset),
        ("--anchors-freq", spec.anchors_freq), ("--topk-anchors", spec.topk_anchors),
        ("--anchor-order", spec.anchor_order)) if value is not None]
    if laneatt_only:
        raise ConvertError(
            f"{' and '.join(laneatt_only)} only appl{'ies' if len(laneatt_only) == 1 else 'y'} to the built-in "
            f"LaneATT (MODEL laneatt); a {kind} model is "
            "converted as it is: drop them, or build the model with those settings before saving it."
        )
    torch = require("torch", "converting a PyTorch model")
    if spec.input_shape is None:
        raise ConvertError(
            f"a {kind} model needs --input-shape (the input of one forward call, e.g. 1,3,360,640)."
        )
    if kind == "torchscript":
        module = _load_torchscript(torch, Path(spec.model))
        source = {"kind": "torchscript", "spec": spec.model, "file": {"path": str(Path(spec.model).resolve()),
                                                                        "sha256": sha256_file(Path(spec.model))}}
    else:
        module = _load_factory(torch, spec.model)
        source = {"kind": "factory", "spec": spec.model}
    module.eval()
    source.update({"backbone": None, "checkpoint": None, "num_anchors": None, "trained": True})
    return LoadedModel(module, tuple(spec.input_shape[1:]), source)


def _load_laneatt(spec: SourceSpec) -> LoadedModel:
    require("torch", "converting LaneATT from PyTorch")
    if spec.input_shape is not None and tuple(spec.input_shape[1:]) != LANEATT_INPUT_SHAPE[1:]:
        raise ConvertError(
            f"LaneATT takes 3x360x640 input, not --input-shape {','.join(map(str, spec.input_shape))}; "
            "drop --input-shape."
        )
    from ..lanedet.model import build_laneatt

    backbone, anchor_order = spec.backbone or "resnet34", spec.anchor_order or "torch16"
    module = build_laneatt(
        backbone,
        checkpoint=spec.checkpoint,
        anchors_freq=spec.anchors_freq,
        dataset=spec.dataset,
        topk_anchors=spec.topk_anchors,
        anchor_order=anchor_order,
        seed=spec.seed,
    )
    module.eval()
    trained = spec.checkpoint is not None
    source: dict[str, Any] = {
        "kind": "laneatt",
        "spec": "laneatt",
        "backbone": backbone,
        "checkpoint": None if spec.checkpoint is None else {
            "path": str(Path(spec.checkpoint).resolve()), "sha256": sha256_file(Path(spec.checkpoint))},
        "anchors_freq": None if spec.anchors_freq is None else {
            "path": str(Path(spec.anchors_freq).resolve()), "sha256": sha256_file(Path(spec.anchors_freq))},
        "dataset": spec.dataset,
        "topk_anchors": module.num_anchors if module.num_anchors != N_ANCHORS else None,
        "anchor_order": None if module.num_anchors == N_ANCHORS else {
            "rule": anchor_order,
            "description": ANCHOR_ORDER_RULES[anchor_order],
        },
        "num_anchors": module.num_anchors,
        "trained": trained,
        "seed": None if trained else spec.seed,
    }
    decode = DATASET_DECODE.get(spec.dataset) if spec.dataset else None
    return LoadedModel(module, LANEATT_INPUT_SHAPE[1:], source, decode)


def _load_torchscript(torch: Any, path: Path) -> Any:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # torch >= 2.9 marks TorchScript deprecated
            return torch.jit.load(str(path), map_location="cpu")
    except Exception as exc:  # torch raises RuntimeError/ValueError with long C++ messages
        raise ConvertError(
            f"{path} is not a loadable TorchScript file ({one_line(exc, 160, first_line=True)}); save it with torch.jit.save, "
            "or for a LaneATT checkpoint use `convert laneatt --checkpoint FILE`."
        ) from exc


def _load_factory(torch: Any, spec: str) -> Any:
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise ConvertError(f"factory {spec!r} must look like package.module:function.")
    # Console scripts do not put the working directory on sys.path; `python -m` does.
    added = os.getcwd() not in sys.path
    if added:
        sys.path.insert(0, os.getcwd())
    try:
        try:
            module = importlib.import_module(module_name)
        except Exception as exc:
            raise ConvertError(
                f"cannot import {module_name!r} for factory {spec!r} ({type(exc).__name__}: {one_line(exc)}); "
                "run from the directory that holds it or install the package."
            ) from exc
    finally:
        if added:
            sys.path.remove(os.getcwd())
    factory = module
    for part in attr.split("."):
        factory = getattr(factory, part, None)
        if factory is None:
            raise ConvertError(f"{module_name!r} has no attribute {attr!r}; check the factory name in {spec!r}.")
    if not callable(factory):
        raise ConvertError(f"{spec} is not callable; point it at a function or class that returns an nn.Module.")
    try:
        built = factory()
    except EdgeDeployError:
        raise
    except Exception as exc:
        raise ConvertError(f"factory {spec} raised {type(exc).__name__}: {one_line(exc)}; fix the factory.") from exc
    if not isinstance(built, torch.nn.Module):
        raise ConvertError(
            f"factory {spec} returned {type(built).__name__}, not a torch.nn.Module; return the model itself."
        )
    return built
