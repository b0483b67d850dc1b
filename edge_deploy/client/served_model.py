"""The served model as the client understands it: `describe_model` (from get_model_metadata and
get_model_config) and the decode settings of a call.

Three kinds of model are accepted, each of a lane-model family (config parameter
``edge_deploy.family``; configs written before families are LaneATT):

- a raw lane model (input [B,] 3 x H x W float, the family's lane outputs): the client
  preprocesses the frame and decodes the outputs with the family's decoder;
- an ``NAME_pipeline`` ensemble (input a UINT8 H x W x 3 frame): the server
  preprocesses and decodes, the client only turns its padded lanes into `Lane`s;
- a fused lane model (`convert --fuse-preprocess`; input UINT8 [B,] H x W x 3 camera
  frames, config parameter ``edge_deploy.fused_preprocess``): the model preprocesses,
  the client copies frames into the request buffer and decodes.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, replace
from typing import Any

from ..errors import ClientError, ModelMismatchError, PluginError
from ..lanedet.contract import (
    LANES,
    NUM_LANES,
    NUM_POINTS,
    PARAM_DECODE,
    PARAM_FAMILY,
    PARAM_FAMILY_PACKAGE,
    PARAM_FUSED,
    PARAM_PREPROCESS,
    SCORES,
)
from ..lanedet.decode_params import DecodeParams, DecodeParamsError
from ..lanedet.entry_points import LEGACY_FAMILY
from ..lanedet.lane_family import LaneFamily, get_family
from ..lanedet.preprocess import PreprocessSpec, PreprocessSpecError
from ..lanedet.tensor_spec import FLOAT_DATATYPES, TensorSpec

__all__ = ["LaneModel", "describe_model", "decode_params", "PIPE_OUTPUTS"]

# NAME_pipeline's outputs, as `edge-deploy install --pipeline` generates them (edge_deploy.repository.model_config).
PIPE_OUTPUTS = (LANES, SCORES, NUM_POINTS, NUM_LANES)


@dataclass(frozen=True)
class LaneModel:
    """A served lane model as the client understands it (from metadata + config)."""

    name: str
    kind: str  # "raw" (client-side pre/post) | "pipeline" (server-side pre/post) | "fused" (model-side pre)
    family: LaneFamily
    input_name: str
    input_datatype: str  # FP32 | FP16 | UINT8
    input_shape: tuple[int, ...]  # the request shape for one batch (raw: [B,]3,H,W; pipeline: -1,-1,3; fused: [B,]H,W,3)
    max_batch_size: int  # Triton's; 0 = no batch axis
    preprocess: PreprocessSpec
    decode: DecodeParams
    outputs: tuple[TensorSpec, ...] = ()  # raw and fused: the lane outputs, in the family decoder's order
    version: str = ""
    frame_size: tuple[int, int] | None = None  # fused model or pipeline: the (H, W) of the frames it takes

    @property
    def batch_capacity(self) -> int:
        """How many frames one request carries at most."""
        if self.kind == "pipeline":
            return 1
        if self.max_batch_size > 0:
            return self.max_batch_size
        return self.input_shape[0] if len(self.input_shape) == 4 else 1

    @property
    def input_size(self) -> tuple[int, int]:
        """(H, W) of the model input (raw and fused models)."""
        if self.kind == "fused":
            return self.preprocess.height, self.preprocess.width
        return int(self.input_shape[-2]), int(self.input_shape[-1])

    # The first lane output (LaneATT's N x 77 rows): what the messages about a changed version name.
    @property
    def output_name(self) -> str:
        return self.outputs[0].name if self.outputs else ""

    @property
    def output_datatype(self) -> str:
        return self.outputs[0].datatype if self.outputs else "FP32"

    @property
    def num_rows(self) -> int:
        return int(self.outputs[0].shape[-2]) if self.outputs else 0


def _config_json(config: Any, key: str) -> dict[str, object] | None:
    """A config parameter holding a JSON object, read here into the types below (None: no such parameter, or not
    an object); its values are checked where they are used."""
    if key not in config.parameters:
        return None
    text = config.parameters[key].string_value
    try:
        value = json.loads(text) if text else {}
    except ValueError:
        raise ModelMismatchError(
            f"model {config.name!r} has an unreadable {key} parameter ({text[:60]!r}); reinstall it with `edge-deploy install`."
        ) from None
    return value if isinstance(value, dict) else None


def _family(config: Any, server_decodes: bool) -> LaneFamily:
    """The config's family. One this client does not have (a plug-in's package not installed here) is no obstacle to
    a pipeline, whose lanes the server decodes (`ServerDecodedFamily`); for a model the client decodes, the error
    names the package to install."""
    name = config.parameters[PARAM_FAMILY].string_value if PARAM_FAMILY in config.parameters else LEGACY_FAMILY
    try:
        return get_family(name, probe=False)  # no probe child in a vehicle app (lane_family.get_family)
    except KeyError as exc:
        if server_decodes:
            return _server_decoded(name, config)
        package = config.parameters[PARAM_FAMILY_PACKAGE].string_value \
            if PARAM_FAMILY_PACKAGE in config.parameters else ""
        provider = package or "the package that provides it (the one `edge-deploy convert` had)"
        why = f" ({exc})" if isinstance(exc, PluginError) else ""
        raise ModelMismatchError(
            f"model {config.name!r} is of the lane-model family {name!r}, which this client does not have{why}: "
            f"install {provider} where the client runs, or ask for {config.name}_pipeline (`install --pipeline`), "
            "whose lanes the server decodes."
        ) from None


class ServerDecodedFamily(LaneFamily):
    """A family this client does not have, of a pipeline: the server decodes, so the client needs only what the config
    says (its preprocessing and decode parameters, read as they are). It decodes nothing itself."""

    decoder_module = ""

    def __init__(self, name: str, preprocess: PreprocessSpec, decode: DecodeParams) -> None:
        self.name = self.title = name
        self.preprocess = preprocess
        self.decode_defaults = decode

    def lane_outputs(self, outputs: Any, has_batch: bool) -> tuple[TensorSpec, ...]:
        raise ValueError(f"is of the lane-model family {self.name!r}, which this client does not have: only its "
                         "pipeline, whose lanes the server decodes, can be used here")

    def max_points(self, lane_outputs: Any) -> int:
        return 0


def _server_decoded(name: str, config: Any) -> ServerDecodedFamily:
    """The pipeline's family from its config alone: its preprocessing, and its decode parameters as a DecodeParams
    of their own keys (whatever they are: the family's code is not here)."""
    from dataclasses import make_dataclass

    try:
        preprocess = PreprocessSpec.from_dict(_config_json(config, PARAM_PREPROCESS) or {})
        params = _config_json(config, PARAM_DECODE) or {}
        kind = make_dataclass(f"{name}DecodeParams", [(key, Any) for key in params if key != "top_k"] +
                              [("top_k", int)], bases=(DecodeParams,), frozen=True)
        decode = kind(**params)
    except (PreprocessSpecError, DecodeParamsError, TypeError, ValueError) as exc:
        raise ModelMismatchError(f"the pipeline's preprocessing or decode settings are not usable: {exc}; "
                                 "reinstall it with `edge-deploy install --pipeline`.") from None
    return ServerDecodedFamily(name, preprocess, decode)


def _frame_size(fused: dict[str, object] | None) -> tuple[int, int] | None:
    """The (H, W) of the frames a fused model (or its pipeline) takes, from its edge_deploy.fused_preprocess
    parameter; None when it names none."""
    if not fused or "height" not in fused:
        return None
    height, width = fused["height"], fused.get("width")
    if not isinstance(height, (int, float, str)) or not isinstance(width, (int, float, str)):
        raise ModelMismatchError(f"the fused preprocessing parameter {PARAM_FUSED} gives no frame size "
                                 f"(height {height!r}, width {width!r}); reinstall the model with `edge-deploy install`.")
    return int(height), int(width)


def _settings(config: Any, family: LaneFamily) -> tuple[PreprocessSpec, DecodeParams]:
    """The config's preprocessing spec and decode defaults (the family's where a config written before
    families left them out)."""
    try:
        preprocess = PreprocessSpec.from_dict({**family.preprocess.to_dict(), **(_config_json(config, PARAM_PREPROCESS) or {})})
        decode = family.decode_params_type().from_dict({**family.decode_defaults.to_dict(),
                                                 **(_config_json(config, PARAM_DECODE) or {})})
    except (PreprocessSpecError, DecodeParamsError) as exc:
        raise ModelMismatchError(
            f"the served model's preprocessing or decode settings are not usable: {exc}; reinstall it with "
            "`edge-deploy install`."
        ) from None
    return preprocess, decode


def describe_model(metadata: Any, config: Any) -> LaneModel:
    """Turn get_model_metadata / get_model_config answers (protobuf) into a LaneModel, or raise ModelMismatchError."""
    cfg = getattr(config, "config", config)
    name = metadata.name
    max_batch = int(cfg.max_batch_size)
    inputs = list(metadata.inputs)
    outputs = [TensorSpec(t.name, t.datatype, tuple(int(d) for d in t.shape)) for t in metadata.outputs]
    output_names = {t.name for t in outputs}
    server_decodes = len(inputs) == 1 and inputs[0].datatype == "UINT8" and set(PIPE_OUTPUTS) <= output_names
    family = _family(cfg, server_decodes)
    preprocess, decode = _settings(cfg, family)
    version = metadata.versions[-1] if len(metadata.versions) else ""
    common = {"name": name, "family": family, "max_batch_size": max_batch, "preprocess": preprocess,
              "decode": decode, "version": version}

    def shape_of(tensor: Any) -> tuple[int, ...]:
        return tuple(int(d) for d in tensor.shape)

    def sample(shape: tuple[int, ...]) -> tuple[int, ...]:
        return shape[1:] if max_batch > 0 else shape

    if len(inputs) != 1:
        raise ModelMismatchError(
            f"model {name!r} has {len(inputs)} inputs ({', '.join(t.name for t in inputs)}); a lane model has one "
            "(a 3xHxW float image, or a UINT8 HxWx3 frame for NAME_pipeline): check --model."
        )
    tin = inputs[0]
    in_shape = shape_of(tin)
    fused = _config_json(cfg, PARAM_FUSED)
    frame_size = _frame_size(fused)
    if tin.datatype == "UINT8" and fused and not set(PIPE_OUTPUTS) <= output_names:
        frame = sample(in_shape)
        frame = frame[1:] if max_batch == 0 and len(frame) == 4 else frame
        if frame_size is None or tuple(frame) != (*frame_size, 3):
            raise ModelMismatchError(
                f"model {name!r} takes UINT8 {list(in_shape)} but its config says fused frames of "
                f"{fused.get('height')}x{fused.get('width')}; reinstall it with `edge-deploy install`."
            )
        return LaneModel(kind="fused", input_name=tin.name, input_datatype="UINT8", input_shape=in_shape,
                         outputs=_lane_outputs(name, family, outputs, max_batch), frame_size=frame_size, **common)
    if tin.datatype == "UINT8":
        frame = sample(in_shape)
        if frame_size is not None and len(frame) == 4 and frame[0] == 1:  # the pipeline of a fused model
            frame = frame[1:]
        if len(frame) != 3 or frame[2] != 3 or not set(PIPE_OUTPUTS) <= output_names:
            raise ModelMismatchError(
                f"model {name!r} takes UINT8 {list(in_shape)} and returns {sorted(output_names)}; a lane pipeline takes "
                f"an HxWx3 frame and returns {', '.join(PIPE_OUTPUTS)}: install it with `edge-deploy install --pipeline`."
            )
        return LaneModel(kind="pipeline", input_name=tin.name, input_datatype="UINT8", input_shape=in_shape,
                         frame_size=frame_size, **common)
    if tin.datatype not in FLOAT_DATATYPES:
        raise ModelMismatchError(
            f"model {name!r} input {tin.name!r} is {tin.datatype}; a lane model takes an FP32 or FP16 image "
            "(or UINT8 frames for NAME_pipeline): check --model."
        )
    image = sample(in_shape)
    batched_fixed = max_batch == 0 and len(image) == 4 and image[0] >= 1
    chw = image[1:] if batched_fixed else image
    if len(chw) != 3 or chw[0] != 3 or chw[1] <= 0 or chw[2] <= 0:
        raise ModelMismatchError(
            f"model {name!r} input {tin.name!r} has shape {list(in_shape)}; a lane model takes [batch,] 3 x H x W "
            "with fixed H and W: check --model."
        )
    lane_outputs = _lane_outputs(name, family, outputs, max_batch)
    h, w = chw[1], chw[2]
    if (preprocess.height, preprocess.width) != (h, w):
        raise ModelMismatchError(
            f"model {name!r} takes {h}x{w} images but its config says preprocess to "
            f"{preprocess.height}x{preprocess.width}; reinstall it with `edge-deploy install`."
        )
    return LaneModel(kind="raw", input_name=tin.name, input_datatype=tin.datatype, input_shape=in_shape,
                     outputs=lane_outputs, **{**common, "preprocess": replace(preprocess, height=h, width=w)})


def _lane_outputs(name: str, family: LaneFamily, outputs: list[TensorSpec], max_batch: int) -> tuple[TensorSpec, ...]:
    """The outputs the family decodes, or ModelMismatchError with the family's reason."""
    try:
        return family.lane_outputs(outputs, max_batch > 0)
    except ValueError as exc:
        raise ModelMismatchError(f"model {name!r} {exc}") from None


def decode_params(model: LaneModel, conf: float | None, nms: float | None, top_k: int | None,
                  defaults: DecodeParams) -> DecodeParams:
    """Per-call values over `defaults`, checked (and, for a pipeline, checked against the server's)."""
    try:
        params = defaults.overridden(conf_threshold=conf, nms_threshold=nms, top_k=top_k)
    except (DecodeParamsError, TypeError, ValueError) as exc:
        raise ClientError(f"{model.name}: {exc}.") from None
    if model.kind == "pipeline" and not params.narrows(model.decode):
        # The pipeline decodes with its configured values; only what can be applied to its lanes here
        # (a stricter threshold, a smaller top_k) can change per call.
        server = ", ".join(f"{k}={v}" for k, v in model.decode.to_dict().items())
        raise ClientError(
            f"{model.name} decodes on the server with {server}; it can only be made stricter per call "
            "(higher conf_threshold, lower top_k): use the raw model for other values."
        )
    return params


