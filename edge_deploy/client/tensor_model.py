"""Any served model as `ModelClient` understands it (`TensorModel`, from get_model_metadata and get_model_config),
its request buffers (`TensorSlot`) and a camera frame made into its image input (`FrameInput`).

A model "declares image preprocessing" when it has one float input of [B,] 3 x H x W and install wrote its
`edge_deploy.preprocess` parameter: then `ModelClient.infer` also takes a frame. An object detector's
`edge_deploy.detection` parameter (the manifest's "detection") says how frames are fitted to it (letterbox or
stretch) and how its outputs are laid out.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np

from ..errors import FrameError, ModelMismatchError
from ..lanedet.contract import PARAM_DETECTION, PARAM_PREPROCESS
from ..lanedet.preprocess import PreprocessSpec, PreprocessSpecError
from ..lanedet.tensor_spec import TensorSpec
from ..detect.record import DetectionRecord
from ..core.json_record import RecordError
from .shm import ShmRegion

__all__ = ["FrameInput", "NUMPY_OF", "TensorModel", "TensorSlot", "describe_tensor_model"]

# Triton datatype -> numpy dtype, for the tensors a generic model takes and returns.
NUMPY_OF: Mapping[str, Any] = {
    "BOOL": np.bool_, "UINT8": np.uint8, "UINT16": np.uint16, "UINT32": np.uint32, "UINT64": np.uint64,
    "INT8": np.int8, "INT16": np.int16, "INT32": np.int32, "INT64": np.int64, "FP16": np.float16,
    "FP32": np.float32, "FP64": np.float64,
}


@dataclass(frozen=True)
class TensorModel:
    """A served model: its tensors (shapes without the batch axis when max_batch_size > 0) and, when it takes
    images, how a frame becomes its input."""

    name: str
    version: str
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    max_batch_size: int
    preprocess: PreprocessSpec | None = None  # set when the model declares image preprocessing
    detection: DetectionRecord | None = None

    @property
    def kind(self) -> str:
        return "detector" if self.detection is not None else "image" if self.preprocess is not None else "tensors"

    @property
    def input_size(self) -> tuple[int, int]:
        """(H, W) of an image model's input."""
        if self.preprocess is None:
            raise ModelMismatchError(f"model {self.name!r} declares no image preprocessing; pass its inputs as a "
                                     f"dict of arrays ({', '.join(t.name for t in self.inputs)}).")
        return self.preprocess.height, self.preprocess.width

    def sample_shape(self, tensor: TensorSpec) -> tuple[int, ...]:
        """One request's shape of `tensor` without the batch axis (a fixed-batch model's full shape)."""
        return tuple(tensor.shape)


def config_json(config: Any, key: str) -> Any:
    """A config parameter holding JSON (None when absent or empty); ModelMismatchError when unreadable."""
    if key not in config.parameters:
        return None
    text = config.parameters[key].string_value
    try:
        return json.loads(text) if text else None
    except ValueError:
        raise ModelMismatchError(f"model {config.name!r} has an unreadable {key} parameter ({text[:60]!r}); "
                                 "reinstall it with `edge-deploy install`.") from None


def describe_tensor_model(metadata: Any, config: Any) -> TensorModel:
    """get_model_metadata / get_model_config answers (protobuf) as a TensorModel, or ModelMismatchError."""
    cfg = getattr(config, "config", config)
    max_batch = int(cfg.max_batch_size)

    def specs(tensors: Any) -> tuple[TensorSpec, ...]:
        out = []
        for t in tensors:
            shape = tuple(int(d) for d in t.shape)
            out.append(TensorSpec(t.name, t.datatype, shape[1:] if max_batch > 0 else shape))
        return tuple(out)

    inputs, outputs = specs(metadata.inputs), specs(metadata.outputs)
    for tensor in (*inputs, *outputs):
        if tensor.datatype not in NUMPY_OF:
            raise ModelMismatchError(f"model {metadata.name!r} has the {tensor.datatype} tensor {tensor.name!r}, which "
                                     "ModelClient does not carry (numeric tensors only).")
    preprocess = detection = None
    image = len(inputs) == 1 and inputs[0].datatype in ("FP32", "FP16") and len(inputs[0].shape) == 3 \
        and inputs[0].shape[0] == 3 and min(inputs[0].shape[1:]) > 0
    spec = config_json(cfg, PARAM_PREPROCESS)
    if image and isinstance(spec, dict):
        try:
            preprocess = PreprocessSpec.from_dict({**spec, "height": inputs[0].shape[1], "width": inputs[0].shape[2]})
            found = config_json(cfg, PARAM_DETECTION)
            detection = DetectionRecord.from_dict(found, "detection") if isinstance(found, dict) else None
        except (PreprocessSpecError, RecordError) as exc:
            raise ModelMismatchError(f"model {metadata.name!r}'s preprocessing or detection settings are not usable: "
                                     f"{exc}; reinstall it with `edge-deploy install`.") from None
    version = metadata.versions[-1] if len(metadata.versions) else ""
    return TensorModel(metadata.name, version, inputs, outputs, max_batch, preprocess, detection)


@dataclass(frozen=True)
class FrameInput:
    """A camera frame made into an image model's input tensor, once: what every model of a `PerceptionStream` with
    the same input size, preprocessing and datatype shares. `letterbox`: how the frame was fitted (boxes are mapped
    back through it). `upload`: the tensor in a shared-memory region (`ModelClient.share`), which every client of
    that server sends by name instead of copying it."""

    key: tuple[Any, ...]
    tensor: np.ndarray  # [1, 3, H, W] in the model's input datatype
    letterbox: Any  # an edge_deploy.detect.Letterbox
    upload: Any = None  # a shared_input.SharedUpload

    @staticmethod
    def key_of(model: TensorModel) -> tuple[Any, ...]:
        """What two models must have in common to share a frame's input tensor."""
        assert model.preprocess is not None
        detection = model.detection
        return (model.preprocess, model.inputs[0].datatype, detection.resize if detection else "stretch",
                detection.pad_value if detection else None)

    @classmethod
    def of(cls, frame: np.ndarray, model: TensorModel, color: str = "bgr") -> FrameInput:
        """The frame (HxWx3 uint8, BGR unless color="rgb") fitted, colour-ordered, scaled and laid out NCHW."""
        import cv2

        from ..detect.letterbox import Letterbox
        from .frames import check_frame

        spec = model.preprocess
        if spec is None:
            raise FrameError(f"model {model.name!r} declares no image preprocessing: pass its inputs as a dict of "
                             "arrays.")
        frame = check_frame(frame)
        detection = model.detection
        mode = detection.resize if detection is not None and detection.resize else "stretch"
        fit = Letterbox.of(frame.shape[:2], (spec.height, spec.width), mode)
        fitted: np.ndarray
        if mode == "letterbox":
            fitted = fit.apply(frame, detection.pad_value if detection and detection.pad_value is not None else 114)
        else:
            fitted = cv2.resize(frame, (spec.width, spec.height), interpolation=cv2.INTER_LINEAR)
        if color != spec.color:
            fitted = fitted[:, :, ::-1]
        scaled = (fitted.astype(np.float32) * np.float32(spec.scale) - np.asarray(spec.mean, np.float32)) \
            / np.asarray(spec.std, np.float32)
        tensor = np.ascontiguousarray(scaled.transpose(2, 0, 1)[None], dtype=NUMPY_OF[model.inputs[0].datatype])
        return cls(cls.key_of(model), tensor, fit)


class TensorSlot:
    """The buffers of one request of a generic model: with shared memory, one region per input (grown when a
    request needs more) and one per output of fixed shape, sized for the model's batch capacity."""

    def __init__(self, model: TensorModel, use_shm: bool) -> None:
        self.model = model
        self.use_shm = use_shm
        self.inputs: dict[str, ShmRegion] = {}
        self.outputs: dict[str, ShmRegion] = {}
        if not use_shm:
            return
        capacity = max(1, model.max_batch_size)
        for tensor in model.outputs:
            shape = model.sample_shape(tensor)
            if all(d > 0 for d in shape):
                nbytes = capacity * int(np.prod(shape)) * np.dtype(NUMPY_OF[tensor.datatype]).itemsize
                self.outputs[tensor.name] = ShmRegion(max(nbytes, 1), f"out_{len(self.outputs)}")

    @property
    def regions(self) -> list[ShmRegion]:
        return [*self.inputs.values(), *self.outputs.values()]

    def input_region(self, name: str, nbytes: int) -> tuple[ShmRegion, ShmRegion | None]:
        """The region of input `name`, at least `nbytes`; and the region it replaced (to unregister), if any."""
        old = self.inputs.get(name)
        if old is not None and old.byte_size >= nbytes:
            return old, None
        region = ShmRegion(max(nbytes, 1), f"in_{len(self.inputs)}")
        self.inputs[name] = region
        return region, old

    def drop_views(self) -> None:
        """Views are made per request and copied out: nothing to drop."""
