"""What the lane clients send and receive, whatever the way they reach the server.

LaneDetClient and AsyncLaneDetClient both use these: the served model as the
client understands it (`describe_model`, from get_model_metadata and
get_model_config), frame checks, the buffers of one request (`Slot`, in shared
memory or not), a request built into them, the decode settings of a call, and
the server's answer turned into `Lane`s. Two kinds of model are accepted:

- a raw lane model (input [B,] 3 x H x W float, output [B,] N x 77): the client
  preprocesses the frame and decodes the raw output (`decode_lanes`);
- an ``NAME_pipeline`` ensemble (input a UINT8 H x W x 3 frame): the server
  preprocesses and decodes, the client only turns its padded lanes into `Lane`s;
- a fused lane model (`convert --fuse-preprocess`; input UINT8 [B,] H x W x 3 camera
  frames, output [B,] N x 77, config parameter ``edge_deploy.fused_preprocess``): the
  model preprocesses, the client copies frames into the request buffer and decodes.
  Frames of another size than the model's are resized here (or refused with strict).
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from ..errors import ClientError, FrameError, ModelChangedError, ModelMismatchError
from ..lanedet.contract import (
    LANEATT_DECODE,
    LANEATT_PREPROCESS,
    LANES,
    NUM_LANES,
    NUM_POINTS,
    PARAM_DECODE,
    PARAM_FUSED,
    PARAM_PREPROCESS,
    SCORES,
)
from ..lanedet.decode import ROW_WIDTH, DecodeError, Lane, decode_lanes
from .shm import ShmRegion

__all__ = ["LaneModel", "describe_model", "check_frame", "check_frames", "DecodeParams", "decode_params", "Slot",
           "Request", "build_request", "read_lanes"]

COLORS = ("bgr", "rgb")
# NAME_pipeline's outputs, as `edge-deploy install --pipeline` generates them (edge_deploy.repository.model_config).
PIPE_OUTPUTS = (LANES, SCORES, NUM_POINTS, NUM_LANES)
_NUMPY_DTYPES = {"FP32": np.float32, "FP16": np.float16}
# A pipeline's frame region is at least this big (a CULane frame), so a stream of
# slightly different frame sizes does not re-create it.
_MIN_FRAME_BYTES = 1640 * 590 * 3


# --- what the server serves ----------------------------------------------------------------


@dataclass(frozen=True)
class LaneModel:
    """A served lane model as the client understands it (from metadata + config)."""

    name: str
    kind: str  # "raw" (client-side pre/post) | "pipeline" (server-side pre/post) | "fused" (model-side pre)
    input_name: str
    input_datatype: str  # FP32 | FP16 | UINT8
    input_shape: tuple[int, ...]  # the request shape for one batch (raw: [B,]3,H,W; pipeline: -1,-1,3; fused: [B,]H,W,3)
    max_batch_size: int  # Triton's; 0 = no batch axis
    output_name: str = ""  # raw: the N x 77 tensor
    output_datatype: str = "FP32"
    num_rows: int = 0  # raw: N
    preprocess: dict[str, Any] = field(default_factory=dict)
    decode: dict[str, Any] = field(default_factory=dict)
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
            return int(self.preprocess["height"]), int(self.preprocess["width"])
        return int(self.input_shape[-2]), int(self.input_shape[-1])


def _config_json(config: Any, key: str) -> dict[str, Any] | None:
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


def describe_model(metadata: Any, config: Any) -> LaneModel:
    """Turn get_model_metadata / get_model_config answers (protobuf) into a LaneModel, or raise ModelMismatchError."""
    cfg = getattr(config, "config", config)
    name = metadata.name
    max_batch = int(cfg.max_batch_size)
    inputs = list(metadata.inputs)
    outputs = list(metadata.outputs)
    preprocess = {**LANEATT_PREPROCESS, **(_config_json(cfg, PARAM_PREPROCESS) or {})}
    decode = {**LANEATT_DECODE, **(_config_json(cfg, PARAM_DECODE) or {})}
    version = metadata.versions[-1] if len(metadata.versions) else ""

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
    frame_size = (int(fused["height"]), int(fused["width"])) if fused and "height" in fused else None
    if tin.datatype == "UINT8" and fused and not set(PIPE_OUTPUTS) <= {t.name for t in outputs}:
        frame = sample(in_shape)
        frame = frame[1:] if max_batch == 0 and len(frame) == 4 else frame
        if frame_size is None or tuple(frame) != (*frame_size, 3):
            raise ModelMismatchError(
                f"model {name!r} takes UINT8 {list(in_shape)} but its config says fused frames of "
                f"{fused.get('height')}x{fused.get('width')}; reinstall it with `edge-deploy install`."
            )
        tout, rows = _lane_output(name, outputs, sample)
        return LaneModel(name=name, kind="fused", input_name=tin.name, input_datatype="UINT8", input_shape=in_shape,
                         max_batch_size=max_batch, output_name=tout.name, output_datatype=tout.datatype,
                         num_rows=rows, preprocess=preprocess, decode=decode, version=version,
                         frame_size=frame_size)
    if tin.datatype == "UINT8":
        frame = sample(in_shape)
        if frame_size is not None and len(frame) == 4 and frame[0] == 1:  # the pipeline of a fused model
            frame = frame[1:]
        names = {t.name for t in outputs}
        if len(frame) != 3 or frame[2] != 3 or not set(PIPE_OUTPUTS) <= names:
            raise ModelMismatchError(
                f"model {name!r} takes UINT8 {list(in_shape)} and returns {sorted(names)}; a lane pipeline takes an "
                f"HxWx3 frame and returns {', '.join(PIPE_OUTPUTS)}: install it with `edge-deploy install --pipeline`."
            )
        return LaneModel(name=name, kind="pipeline", input_name=tin.name, input_datatype="UINT8",
                         input_shape=in_shape, max_batch_size=max_batch, preprocess=preprocess, decode=decode,
                         version=version, frame_size=frame_size)
    if tin.datatype not in _NUMPY_DTYPES:
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
    tout, rows = _lane_output(name, outputs, sample)
    h, w = chw[1], chw[2]
    if (int(preprocess.get("height", h)), int(preprocess.get("width", w))) != (h, w):
        raise ModelMismatchError(
            f"model {name!r} takes {h}x{w} images but its config says preprocess to "
            f"{preprocess.get('height')}x{preprocess.get('width')}; reinstall it with `edge-deploy install`."
        )
    preprocess["height"], preprocess["width"] = h, w
    return LaneModel(name=name, kind="raw", input_name=tin.name, input_datatype=tin.datatype,
                     input_shape=in_shape, max_batch_size=max_batch, output_name=tout.name,
                     output_datatype=tout.datatype, num_rows=rows, preprocess=preprocess, decode=decode,
                     version=version)


def _lane_output(name: str, outputs: list[Any], sample: Any) -> tuple[Any, int]:
    """The [B,] N x 77 output of a lane model and its N, or ModelMismatchError."""
    def shape_of(tensor: Any) -> tuple[int, ...]:
        return tuple(int(d) for d in tensor.shape)

    lane_outputs = [t for t in outputs if len(sample(shape_of(t))) in (2, 3) and shape_of(t)[-1] == ROW_WIDTH]
    if not lane_outputs:
        shapes = ", ".join(f"{t.name} {list(shape_of(t))}" for t in outputs)
        raise ModelMismatchError(
            f"model {name!r} returns {shapes}; a lane model returns [batch,] N x {ROW_WIDTH} "
            "(2 logits, start_y, start_x, length, 72 x offsets): check --model."
        )
    tout = next((t for t in lane_outputs if t.name == "predict_lanes"), lane_outputs[0])
    rows = shape_of(tout)[-2]
    if rows <= 0 or tout.datatype not in _NUMPY_DTYPES:
        raise ModelMismatchError(
            f"model {name!r} output {tout.name!r} is {tout.datatype} {list(shape_of(tout))}; the client needs a "
            f"fixed number of FP32/FP16 rows of {ROW_WIDTH}: check the exported model."
        )
    return tout, rows


# --- frames --------------------------------------------------------------------------------


def check_frame(frame: Any, index: int | None = None) -> np.ndarray:
    """`frame` as an HxWx3 uint8 image, or FrameError.

    uint8 frames pass through untouched; float frames (0..255, e.g. after OpenCV
    float maths) must be finite and are rounded and clipped to uint8.
    """
    where = "frame" if index is None else f"frame {index}"
    if not isinstance(frame, np.ndarray):
        raise FrameError(f"{where} is a {type(frame).__name__}, not a numpy array; pass an HxWx3 uint8 image (cv2.imread).")
    if frame.ndim != 3 or frame.shape[2] != 3:
        raise FrameError(
            f"{where} has shape {tuple(frame.shape)}; expected HxWx3 (a colour image: convert grey or BGRA "
            "images with cv2.cvtColor)."
        )
    if frame.size == 0:
        raise FrameError(f"{where} is empty (shape {tuple(frame.shape)}); check the camera or the file it came from.")
    if frame.dtype == np.uint8:
        return frame
    if frame.dtype.kind == "f":
        if not np.isfinite(frame).all():
            raise FrameError(f"{where} contains NaN or infinite values; pass a uint8 image or finite 0..255 floats.")
        return np.clip(np.rint(frame), 0, 255).astype(np.uint8)
    raise FrameError(f"{where} has dtype {frame.dtype}; expected uint8 (or float in 0..255).")


def check_frames(frames: Sequence[Any], color: str) -> list[np.ndarray]:
    """Every frame through `check_frame` (numbered when there are several), and the colour order checked."""
    checked = [check_frame(f, i if len(frames) > 1 else None) for i, f in enumerate(frames)]
    if color not in COLORS:
        raise FrameError(f"unknown color order {color!r}; use 'bgr' (OpenCV) or 'rgb'.")
    return checked


# --- decode settings -----------------------------------------------------------------------


@dataclass(frozen=True)
class DecodeParams:
    """The decode settings of one call."""

    conf_threshold: float
    nms_threshold: float
    top_k: int

    @classmethod
    def of(cls, model: LaneModel) -> "DecodeParams":
        """The defaults in the model's config."""
        d = model.decode
        return cls(float(d["conf_threshold"]), float(d["nms_threshold"]), int(d["top_k"]))


def decode_params(model: LaneModel, conf: float | None, nms: float | None, top_k: int | None,
                  defaults: DecodeParams) -> DecodeParams:
    """Per-call values over `defaults`, checked (and, for a pipeline, checked against the server's)."""
    try:
        params = DecodeParams(
            conf_threshold=float(defaults.conf_threshold if conf is None else conf),
            nms_threshold=float(defaults.nms_threshold if nms is None else nms),
            top_k=int(defaults.top_k if top_k is None else top_k),
        )
        integral = top_k is None or int(top_k) == top_k
    except (TypeError, ValueError):
        raise ClientError(
            f"conf_threshold, nms_threshold and top_k must be numbers, got {conf!r}, {nms!r} and {top_k!r}."
        ) from None
    if not math.isfinite(params.conf_threshold) or not (math.isfinite(params.nms_threshold) and params.nms_threshold >= 0):
        raise ClientError(
            f"conf_threshold must be finite and nms_threshold finite and >= 0, got {params.conf_threshold} and "
            f"{params.nms_threshold}."
        )
    if params.top_k < 1 or not integral:
        raise ClientError(f"top_k must be an integer >= 1, got {top_k!r}.")
    if model.kind == "pipeline":
        server = DecodeParams.of(model)
        # The ensemble decodes with its configured values; a stricter threshold or a smaller
        # top_k can still be applied to its lanes here, anything else cannot.
        if (params.conf_threshold < server.conf_threshold or params.top_k > server.top_k
                or not math.isclose(params.nms_threshold, server.nms_threshold)):
            raise ClientError(
                f"{model.name} decodes on the server with conf_threshold={server.conf_threshold}, "
                f"nms_threshold={server.nms_threshold}, top_k={server.top_k}; it can only be made stricter per call "
                "(higher conf_threshold, lower top_k): use the raw model for other values."
            )
    return params


# --- buffers -------------------------------------------------------------------------------


class Slot:
    """The buffers of one request in flight, in shared memory regions when `use_shm`.

    Raw model: `input` (capacity x 3 x H x W, written by `pre`) and `output`
    (capacity x N x 77); with shared memory they are views of `regions` [in, out].
    Pipeline: only a uint8 frame region, made and grown by `frame_view`.
    """

    def __init__(self, model: LaneModel, use_shm: bool) -> None:
        self.model = model
        self.use_shm = use_shm
        self.regions: list[ShmRegion] = []
        self.input: np.ndarray | None = None
        self.output: np.ndarray | None = None
        self.pre: Any = None
        if model.kind == "fused":  # uint8 frames in, rows out: no preprocessing buffers at all
            cap = model.batch_capacity
            in_shape, out_shape = (cap, *model.frame_size, 3), (cap, model.num_rows, ROW_WIDTH)
            out_dtype = np.dtype(_NUMPY_DTYPES[model.output_datatype])
            if use_shm:
                self.regions = [ShmRegion(int(np.prod(in_shape)), "in"),
                                ShmRegion(int(np.prod(out_shape)) * out_dtype.itemsize, "out")]
                self.input = self.regions[0].array(np.uint8, in_shape)
                self.output = self.regions[1].array(out_dtype, out_shape)
            else:
                self.input = np.empty(in_shape, np.uint8)
            return
        if model.kind != "raw":
            return
        cap = model.batch_capacity
        dtype = np.dtype(_NUMPY_DTYPES[model.input_datatype])
        out_dtype = np.dtype(_NUMPY_DTYPES[model.output_datatype])
        in_shape, out_shape = (cap, 3, *model.input_size), (cap, model.num_rows, ROW_WIDTH)
        if use_shm:
            self.regions = [ShmRegion(int(np.prod(in_shape)) * dtype.itemsize, "in"),
                            ShmRegion(int(np.prod(out_shape)) * out_dtype.itemsize, "out")]
            self.input = self.regions[0].array(dtype, in_shape)
            self.output = self.regions[1].array(out_dtype, out_shape)
        self.pre = _make_preprocessor(model.preprocess, dtype.type, cap, self.input)
        self.input = self.pre.output

    def frame_view(self, shape: tuple[int, ...]) -> tuple[np.ndarray, ShmRegion | None]:
        """Pipeline: a uint8 view of `shape` in the frame region, and the region it replaced if it had to grow."""
        nbytes = int(np.prod(shape))
        old = self.regions.pop() if self.regions and self.regions[0].byte_size < nbytes else None
        if not self.regions:
            self.regions.append(ShmRegion(max(nbytes, _MIN_FRAME_BYTES), "frame"))
        return self.regions[0].array(np.uint8, shape), old

    def drop_views(self) -> None:
        """Forget every numpy view of the regions (they must go before a region closes)."""
        self.input = self.output = self.pre = None


def _make_preprocessor(spec: dict[str, Any], dtype: Any, batch: int, out: np.ndarray | None) -> Any:
    """A Preprocessor writing into `out` (e.g. the shared memory view) or its own buffer."""
    from ..lanedet.preprocess import Preprocessor, PreprocessSpec, PreprocessSpecError

    try:
        return Preprocessor(PreprocessSpec.from_dict(spec), dtype=dtype, batch=batch, out=out)
    except PreprocessSpecError as exc:
        raise ModelMismatchError(
            f"the served model's preprocessing spec is not usable: {exc}; reinstall it with `edge-deploy install`."
        ) from None


# --- requests and answers ------------------------------------------------------------------


@dataclass
class Request:
    """One inference request, ready to send (tritonclient InferInput / InferRequestedOutput)."""

    inputs: list[Any]
    outputs: list[Any]
    boxes: list[tuple[int, int, int, int]]  # (top, left, H, W) of the part of each frame the model sees
    # Fused models and their pipelines: (x, y) factors from the frames sent back to the caller's frames,
    # which differ when a frame of another size was resized here; and how many were.
    scales: list[tuple[float, float]] = field(default_factory=list)
    resized: int = 0


def fit_frame(frame: np.ndarray, size: tuple[int, int], interpolation: str, strict: bool) -> np.ndarray:
    """`frame` at `size` (H, W): itself when it has that size, else resized here (FrameError with `strict`)."""
    if frame.shape[:2] == tuple(size):
        return frame
    if strict:
        raise FrameError(
            f"frame is {frame.shape[1]}x{frame.shape[0]} but the model takes {size[1]}x{size[0]} camera frames "
            "(preprocessing fused in); send frames of that size, or pass strict=False to resize them here."
        )
    import cv2

    from ..lanedet.preprocess import INTERPOLATIONS

    return cv2.resize(frame, (size[1], size[0]), interpolation=INTERPOLATIONS.get(interpolation, cv2.INTER_CUBIC))


def _frame_scale(frame: np.ndarray, size: tuple[int, int]) -> tuple[float, float]:
    return frame.shape[1] / size[1], frame.shape[0] / size[0]


def build_request(slot: Slot, frames: Sequence[np.ndarray], color: str, *,
                  strict: bool = False) -> tuple[Request, ShmRegion | None]:
    """The request for checked `frames` (at most the model's batch capacity), its tensors written into `slot`.

    Also returns the region the slot replaced by a bigger one (pipeline), for the
    caller to unregister and close. strict: refuse (FrameError) frames of another size
    than a fused model's, instead of resizing them.
    """
    import tritonclient.grpc as grpcclient  # its InferInput/InferRequestedOutput serve the aio client too

    model = slot.model
    if model.kind == "fused":
        return _fused_request(slot, frames, color, strict), None
    if model.kind == "pipeline":
        frame = frames[0] if color == "bgr" else frames[0][:, :, ::-1]
        scales, resized = [], 0
        if model.frame_size is not None:  # a fused model's pipeline takes one frame size
            scales = [_frame_scale(frame, model.frame_size)]
            fitted = fit_frame(frame, model.frame_size, str(model.preprocess.get("interpolation")), strict)
            resized, frame = int(fitted is not frame), fitted
        shape = list(frame.shape) if model.max_batch_size == 0 and len(model.input_shape) == 3 else [1, *frame.shape]
        inp = grpcclient.InferInput(model.input_name, shape, "UINT8")
        old = None
        if slot.use_shm:
            view, old = slot.frame_view(frame.shape)
            np.copyto(view, frame)
            inp.set_shared_memory(slot.regions[0].name, view.nbytes)
        else:
            inp.set_data_from_numpy(np.ascontiguousarray(frame).reshape(shape))
        outputs = [grpcclient.InferRequestedOutput(name) for name in PIPE_OUTPUTS]
        return Request([inp], outputs, [(0, 0, *frame.shape[:2])], scales, resized), old

    from ..lanedet.preprocess import InvalidFrameError

    for i, frame in enumerate(frames):
        try:
            slot.pre(frame, index=i, color=color)
        except InvalidFrameError as exc:
            raise FrameError(f"frame {i}: {exc}.") from None
    boxes = [slot.pre.spec.crop_box(*frame.shape[:2]) for frame in frames]
    return Request(*_model_tensors(slot, len(frames), model.input_datatype), boxes), None


def _model_tensors(slot: Slot, count: int, datatype: str) -> tuple[list[Any], list[Any]]:
    """The model's input (`count` frames already in slot.input) and output, in shared memory or inline."""
    import tritonclient.grpc as grpcclient

    model = slot.model
    assert slot.input is not None
    fixed = model.max_batch_size == 0
    shape = list(model.input_shape) if fixed else [count, *model.input_shape[1:]]
    # A fixed-batch model always gets its whole batch.
    sent = model.batch_capacity if fixed and len(model.input_shape) == 4 else count
    inp = grpcclient.InferInput(model.input_name, shape, datatype)
    out = grpcclient.InferRequestedOutput(model.output_name)
    if slot.use_shm:
        inp.set_shared_memory(slot.regions[0].name, slot.input[0].nbytes * sent)
        out.set_shared_memory(slot.regions[1].name, slot.output[0].nbytes * sent)
    else:
        inp.set_data_from_numpy(slot.input[:sent].reshape(shape))
    return [inp], [out]


def _fused_request(slot: Slot, frames: Sequence[np.ndarray], color: str, strict: bool) -> Request:
    """Fused model: the frames copied as they are into the input buffer (the model does the rest)."""
    model = slot.model
    size = model.frame_size
    assert size is not None and slot.input is not None
    scales, resized = [], 0
    for i, frame in enumerate(frames):
        scales.append(_frame_scale(frame, size))
        fitted = fit_frame(frame, size, str(model.preprocess.get("interpolation")), strict)
        resized += fitted is not frame
        np.copyto(slot.input[i], fitted if color == "bgr" else fitted[:, :, ::-1])
    from ..lanedet.preprocess import InvalidFrameError, PreprocessSpec

    spec = PreprocessSpec.from_dict(model.preprocess)
    try:
        boxes = [spec.crop_box(*size) for _ in frames]
    except InvalidFrameError as exc:
        raise FrameError(f"{exc}.") from None
    return Request(*_model_tensors(slot, len(frames), "UINT8"), boxes, scales, resized)


def read_lanes(slot: Slot, request: Request, result: Any, params: DecodeParams) -> list[list[Lane]]:
    """The lanes of each frame of `request` from the server's answer (`result`: a tritonclient InferResult)."""
    model = slot.model
    if model.kind == "pipeline":
        lanes = _pipeline_lanes(model, result, params)
        return [_scaled(lanes, request.scales[0]) if request.scales else lanes]
    _check_output(model, result)
    if slot.use_shm:
        raw = slot.output
    else:
        raw = result.as_numpy(model.output_name).reshape(-1, model.num_rows, ROW_WIDTH)
    out = []
    for i, (top, left, box_h, box_w) in enumerate(request.boxes):
        # With a crop the model saw only that box of the frame: decode in it, then shift (as NAME_postprocess does).
        try:
            # x offsets are in model-input pixels: divide by the served model's width, not always 640.
            lanes = decode_lanes(raw[i], conf_threshold=params.conf_threshold, nms_threshold=params.nms_threshold,
                                 top_k=params.top_k, image_size=(box_h, box_w), model_width=model.input_size[1])
        except DecodeError as exc:
            raise ClientError(f"cannot decode the output of {model.name}: {exc}") from None
        if top or left:
            lanes = [Lane(lane.points + np.float32([left, top]), lane.score) for lane in lanes]
        out.append(_scaled(lanes, request.scales[i]) if request.scales else lanes)
    return out


def _scaled(lanes: list[Lane], scale: tuple[float, float]) -> list[Lane]:
    """Lanes in the frame sent, mapped to the caller's frame (resized here when its size differed)."""
    if scale == (1.0, 1.0):
        return lanes
    return [Lane(lane.points * np.float32(scale), lane.score) for lane in lanes]


def _check_output(model: LaneModel, result: Any) -> None:
    """The answer has the rows and datatype the client was set up for, else the server loaded another version.

    Without this check a version with fewer rows would be decoded from a buffer laid
    out for more (stale rows included), and one with more rows cut to the old count.
    """
    out = result.get_output(model.output_name)
    shape = [int(d) for d in out.shape] if out is not None else []
    if shape[-2:] != [model.num_rows, ROW_WIDTH] or out.datatype != model.output_datatype:
        got = f"{out.datatype} {shape}" if out is not None else f"no {model.output_name!r}"
        raise ModelChangedError(
            f"model {model.name!r} answered with {got}, not the {model.output_datatype} [{model.num_rows}, {ROW_WIDTH}] "
            "rows it had when the client read it: the server loaded another version; the next call re-reads the model."
        )


def _pipeline_lanes(model: LaneModel, result: Any, params: DecodeParams) -> list[Lane]:
    """Lanes from NAME_pipeline's padded outputs, with a stricter per-call threshold / top_k applied."""
    lanes_out = result.as_numpy(LANES)
    points = lanes_out.reshape(-1, lanes_out.shape[-2], 2)
    scores = result.as_numpy(SCORES).reshape(-1)
    counts = result.as_numpy(NUM_POINTS).reshape(-1)
    n = min(int(result.as_numpy(NUM_LANES).reshape(-1)[0]), len(scores))
    lanes = [Lane(points[i, : int(counts[i])], float(scores[i])) for i in range(n)]
    if params.conf_threshold > float(model.decode["conf_threshold"]):
        lanes = [lane for lane in lanes if lane.score > params.conf_threshold]
    return lanes[: params.top_k]
