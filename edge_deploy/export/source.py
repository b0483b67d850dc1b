"""Where the torch model comes from: a lane-model family (laneatt), a TorchScript file, or package.module:factory.

`load_source()` turns MODEL (plus the family's options) into an eval-mode
nn.Module, the per-sample input shape, and what the manifest's "source"
section says about it. A family name is built by that family's `load`
(edge_deploy.lanedet.family). torch is imported only when a model is loaded.
"""
from __future__ import annotations

import importlib
import math
import os
import sys
import warnings
from pathlib import Path
from typing import Any

from ..core.bounded_read import special_kind
from ..core.deps import require
from ..artifact.manifest import MANIFEST_NAME, ONNX_NAME, not_a_file
from ..errors import ConvertError, EdgeDeployError, brief, one_line
from ..lanedet.lane_family import LoadedModel, family_fault, family_names, get_family, is_plugin
from ..lanedet.source import SourceSpec
from ..core.numbers import whole
from ..lanedet.model_source import ExternalSource, SourceFile


INPUT_DIM = whole(1, 32768, noun="a whole number")  # a dimension of a model's input: 4x an 8K frame's width
MAX_INPUT_DIMS = 8
MAX_INPUT_ELEMENTS = 1 << 28  # 1 GiB of float32: four times a batch of 8 rgb 4K frames
MAX_SHAPE_TEXT = 80  # characters: 8 dimensions of 5 digits and their commas are 47


def parse_input_shape(text: str) -> tuple[int, ...]:
    """'1,3,360,640' (or '1x3x360x640') -> (1, 3, 360, 640): 2 to MAX_INPUT_DIMS dimensions, each in INPUT_DIM, at
    most MAX_INPUT_ELEMENTS together; a one-line ConvertError naming the bound for anything else."""
    parts = [part for part in str(text).replace("x", ",").split(",") if part.strip()] \
        if len(str(text)) <= MAX_SHAPE_TEXT else []
    try:
        dims = tuple(int(part) for part in parts)
    except ValueError:
        dims = ()
    if not 2 <= len(dims) <= MAX_INPUT_DIMS or not all(INPUT_DIM.contains(d) for d in dims):
        raise ConvertError(
            f"--input-shape {brief(text)} is not 2 to {MAX_INPUT_DIMS} comma-separated dimensions, each "
            f"{INPUT_DIM.describe()}; write it like 1,3,360,640."
        )
    if math.prod(dims) > MAX_INPUT_ELEMENTS:
        raise ConvertError(f"--input-shape {brief(text)} is {math.prod(dims)} elements, over the {MAX_INPUT_ELEMENTS} "
                           "(1 GiB of float32) a model input may have; pass the shape of one real input.")
    return dims


# --------------------------------------------------------------------------- loading


def classify_model(model: str) -> str:
    """'family' (a lane-model family's name), 'artifact' (an existing convert output), 'onnx' (a .onnx file: an
    exported model, e.g. an object detector), 'torchscript' (another file) or 'factory'."""
    if family_named(model) is not None:
        return "family"
    path = Path(model)
    if model.lower().endswith(".onnx") and not path.is_dir():
        return "onnx"  # read (and refused when it is no ONNX file, or missing) by export/onnx_import.py
    if path.is_dir():
        if (path / MANIFEST_NAME).is_file() and (path / ONNX_NAME).is_file():
            return "artifact"
        why = not_a_file(path / ONNX_NAME)
        if (path / MANIFEST_NAME).is_file() and why != "does not exist":
            raise ConvertError(f"{path / ONNX_NAME} {why}, but an artifact's {ONNX_NAME} is the ONNX model file; put "
                               "the file itself there, or re-run `edge-deploy convert` with --output to a new "
                               "directory.")
        raise ConvertError(
            f"{model} is a directory but not an edge-deploy artifact (no {MANIFEST_NAME} + {ONNX_NAME}); "
            f"pass {'|'.join(family_names())}, an ONNX or TorchScript file, package.module:factory, or a directory made by "
            "convert."
        )
    if path.is_file():
        return "torchscript"
    special = special_kind(path)
    if special is not None:  # a FIFO would block the read forever, a device never ends
        raise ConvertError(f"MODEL {model} is {special}, not a regular file; pass the TorchScript or ONNX file itself.")
    if ":" in model and os.sep not in model.split(":", 1)[0]:
        return "factory"
    raise ConvertError(
        f"MODEL {model!r} is not {' or '.join(family_names())}, an existing ONNX or TorchScript file, "
        "package.module:factory "
        "or an artifact directory; check the spelling or the path."
    )


def family_named(model: str) -> str | None:
    """The family MODEL names: its name as given, else the one name equal to it but for case (`convert LaneATT`,
    and a family registered as `MyLane`); None when none is."""
    names = family_names()
    if model in names:
        return model
    same = [name for name in names if name.lower() == model.lower()]
    return same[0] if len(same) == 1 else None


def _load_family(spec: SourceSpec) -> LoadedModel:
    """The model a family builds; a plug-in family whose load() fails other than with a one-line error of its own, or
    returns something else than a LoadedModel, is that family's bug (BrokenFamilyError names its package)."""
    family = get_family(family_named(spec.model) or spec.model)
    # What every family takes, checked here whatever its load() checks: --backbone, --dataset and the families' own
    # options that it has (a family without backbones never silently takes --backbone).
    family.backbone_from(spec)
    family.dataset_from(spec)
    family.options_from(spec)
    if not is_plugin(family):
        return family.load(spec)
    try:
        loaded = family.load(spec)
    except (EdgeDeployError, KeyboardInterrupt, MemoryError):
        raise
    except Exception as exc:  # noqa: BLE001 - a third-party family can fail in any way
        raise family_fault(family, f"its load() raised {type(exc).__name__}: {one_line(exc, 160)}") from None
    if not isinstance(loaded, LoadedModel):
        raise family_fault(family, f"its load() returned {type(loaded).__name__}, not a LoadedModel")
    return loaded


def load_source(spec: SourceSpec) -> LoadedModel:
    """Build or load the torch module MODEL names, in eval mode."""
    kind = classify_model(spec.model)
    if kind == "family":
        return _load_family(spec)
    if kind in ("artifact", "onnx"):
        raise ConvertError(f"{spec.model} is already {'converted (an artifact directory)' if kind == 'artifact' else 'ONNX'}"
                           ", not a torch model.")
    family_only = spec.family_options_given
    if family_only:
        raise ConvertError(
            f"{' and '.join(family_only)} only appl{'ies' if len(family_only) == 1 else 'y'} to the built-in "
            f"lane families (MODEL {' or '.join(family_names())}); a {kind} model is "
            "converted as it is: drop them, or build the model with those settings before saving it."
        )
    torch = require("torch", "converting a PyTorch model")
    if spec.input_shape is None:
        raise ConvertError(
            f"a {kind} model needs --input-shape (the input of one forward call, e.g. 1,3,360,640)."
        )
    if kind == "torchscript":
        module = _load_torchscript(torch, Path(spec.model))
        file: SourceFile | None = SourceFile.of(spec.model)
    else:
        module = _load_factory(torch, spec.model)
        file = None
    module.eval()
    return LoadedModel(module, tuple(spec.input_shape[1:]),
                       ExternalSource(kind=kind, spec=spec.model, file=file, trained=True))


def _load_torchscript(torch: Any, path: Path) -> Any:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # torch >= 2.9 marks TorchScript deprecated
            return torch.jit.load(str(path), map_location="cpu")
    except Exception as exc:  # torch raises RuntimeError/ValueError with long C++ messages
        raise ConvertError(
            f"{path} is not a loadable TorchScript file ({one_line(exc, 160, first_line=True)}); save it with torch.jit.save, "
            "or for an official checkpoint of a lane family use `convert FAMILY --checkpoint FILE`."
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
    factory: Any = module
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
