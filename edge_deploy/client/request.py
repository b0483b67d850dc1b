"""One request: the frames written into a slot's buffers as Triton tensors, and the answer turned into `Lane`s."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from ..errors import ClientError, FrameError, ModelChangedError
from ..lanedet.contract import LANES, NUM_LANES, NUM_POINTS, SCORES
from ..lanedet.decode_params import DecodeParams
from ..lanedet.lane import Lane
from .buffers import Slot, frame_shape
from .frames import fit_frame
from .served_model import PIPE_OUTPUTS, LaneModel
from .shm import ShmRegion
from ..lanedet.preprocess import InvalidFrameError

__all__ = ["Request", "build_request", "read_lanes"]


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
            fitted = fit_frame(frame, model.frame_size, model.preprocess.interpolation, strict)
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
        return Request([inp], outputs, [(0, 0, frame.shape[0], frame.shape[1])], scales, resized), old


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
    outs = [grpcclient.InferRequestedOutput(t.name) for t in model.outputs]
    if slot.use_shm:
        inp.set_shared_memory(slot.regions[0].name, slot.input[0].nbytes * sent)
        for out, region, array in zip(outs, slot.regions[1:], slot.outputs):
            out.set_shared_memory(region.name, array[0].nbytes * sent)
    else:
        inp.set_data_from_numpy(slot.input[:sent].reshape(shape))
    return [inp], outs


def _fused_request(slot: Slot, frames: Sequence[np.ndarray], color: str, strict: bool) -> Request:
    """Fused model: the frames copied as they are into the input buffer (the model does the rest)."""
    model = slot.model
    size = model.frame_size
    assert size is not None and slot.input is not None
    scales, resized = [], 0
    for i, frame in enumerate(frames):
        scales.append(_frame_scale(frame, size))
        fitted = fit_frame(frame, size, model.preprocess.interpolation, strict)
        resized += fitted is not frame
        np.copyto(slot.input[i], fitted if color == "bgr" else fitted[:, :, ::-1])

    spec = model.preprocess
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
    _check_outputs(model, result)
    if slot.use_shm:
        arrays = slot.outputs
    else:
        arrays = [result.as_numpy(t.name).reshape(-1, *frame_shape(model, t)) for t in model.outputs]
    out = []
    for i, (top, left, box_h, box_w) in enumerate(request.boxes):
        # With a crop the model saw only that box of the frame: decode in it, then shift (as NAME_postprocess does).
        try:
            # x is in model-input pixels: the served model's width, not always 640.
            lanes = model.family.decode([array[i] for array in arrays], params, (box_h, box_w), model.input_size[1])
        except ValueError as exc:  # the family decoder's DecodeError
            raise ClientError(f"cannot decode the output of {model.name}: {exc}") from None
        if top or left:
            lanes = [Lane(lane.points + np.array([left, top], dtype=np.float32), lane.score) for lane in lanes]
        out.append(_scaled(lanes, request.scales[i]) if request.scales else lanes)
    return out


def _scaled(lanes: list[Lane], scale: tuple[float, float]) -> list[Lane]:
    """Lanes in the frame sent, mapped to the caller's frame (resized here when its size differed)."""
    if scale == (1.0, 1.0):
        return lanes
    return [Lane(lane.points * np.array(scale, dtype=np.float32), lane.score) for lane in lanes]


def _check_outputs(model: LaneModel, result: Any) -> None:
    """The answer has the shapes and datatypes the client was set up for, else the server loaded another version.

    Without this check a version with fewer rows would be decoded from a buffer laid
    out for more (stale rows included), and one with more rows cut to the old size.
    """
    for tensor in model.outputs:
        out = result.get_output(tensor.name)
        want = list(frame_shape(model, tensor))
        shape = [int(d) for d in out.shape] if out is not None else []
        if out is None or shape[len(shape) - len(want):] != want or out.datatype != tensor.datatype:
            got = f"{out.datatype} {shape}" if out is not None else f"no {tensor.name!r}"
            raise ModelChangedError(
                f"model {model.name!r} answered with {got}, not the {tensor.datatype} {want} {tensor.name!r} it had "
                "when the client read it: the server loaded another version; the next call re-reads the model."
            )


def _pipeline_lanes(model: LaneModel, result: Any, params: DecodeParams) -> list[Lane]:
    """Lanes from NAME_pipeline's padded outputs, with a stricter per-call threshold / top_k applied."""
    lanes_out = result.as_numpy(LANES)
    points = lanes_out.reshape(-1, lanes_out.shape[-2], 2)
    scores = result.as_numpy(SCORES).reshape(-1)
    counts = result.as_numpy(NUM_POINTS).reshape(-1)
    n = min(int(result.as_numpy(NUM_LANES).reshape(-1)[0]), len(scores))
    lanes = [Lane(points[i, : int(counts[i])], float(scores[i])) for i in range(n)]
    return params.narrow(lanes, model.decode)
