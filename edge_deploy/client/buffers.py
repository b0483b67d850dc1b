"""The buffers of one request in flight (`Slot`), in POSIX shared memory regions or in process memory."""
from __future__ import annotations

from typing import Any, cast

import numpy as np

from ..errors import ModelMismatchError
from ..lanedet.tensor_spec import TensorSpec
from ..lanedet.preprocess import Preprocessor, PreprocessSpec, PreprocessSpecError
from .served_model import LaneModel
from .shm import ShmRegion

NUMPY_DTYPES = {"FP32": np.float32, "FP16": np.float16}
# A pipeline's frame region is at least this big (a CULane frame), so a stream of
# slightly different frame sizes does not re-create it.
_MIN_FRAME_BYTES = 1640 * 590 * 3


def frame_shape(model: LaneModel, tensor: TensorSpec) -> tuple[int, ...]:
    """One frame's part of a raw or fused model's tensor shape (its shape without the batch axis)."""
    batched = model.max_batch_size > 0 or len(model.input_shape) == 4
    return tuple(tensor.shape[1:] if batched else tensor.shape)


class Slot:
    """The buffers of one request in flight, in shared memory regions when `use_shm`.

    Raw model: `input` (capacity x 3 x H x W, written by `pre`) and `outputs`, one
    capacity x ... array per lane output of the family; with shared memory they are
    views of `regions` [in, out...]. Fused model: `input` holds the uint8 frames as
    they are. Pipeline: only a uint8 frame region, made and grown by `frame_view`.
    """

    def __init__(self, model: LaneModel, use_shm: bool) -> None:
        self.model = model
        self.use_shm = use_shm
        self.regions: list[ShmRegion] = []
        self.input: np.ndarray | None = None
        self.outputs: list[np.ndarray] = []
        self.pre: Any = None
        if model.kind == "pipeline":
            return
        cap = model.batch_capacity
        fused = model.kind == "fused"  # uint8 frames in: no preprocessing buffers at all
        dtype = np.dtype(np.uint8 if fused else NUMPY_DTYPES[model.input_datatype])
        in_shape = (cap, *cast("tuple[int, int]", model.frame_size), 3) if fused else (cap, 3, *model.input_size)
        out_specs = [(np.dtype(NUMPY_DTYPES[t.datatype]), (cap, *frame_shape(model, t))) for t in model.outputs]
        if use_shm:
            self.regions = [ShmRegion(int(np.prod(in_shape)) * dtype.itemsize, "in")]
            self.regions += [ShmRegion(int(np.prod(shape)) * out_dtype.itemsize, "out" if k == 0 else f"out{k}")
                             for k, (out_dtype, shape) in enumerate(out_specs)]
            self.input = self.regions[0].array(dtype, in_shape)
            self.outputs = [region.array(out_dtype, shape)
                            for region, (out_dtype, shape) in zip(self.regions[1:], out_specs)]
        if fused:
            if self.input is None:
                self.input = np.empty(in_shape, np.uint8)
            return
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
        self.input = self.pre = None
        self.outputs = []


def _make_preprocessor(spec: PreprocessSpec, dtype: Any, batch: int, out: np.ndarray | None) -> Any:
    """A Preprocessor writing into `out` (e.g. the shared memory view) or its own buffer."""
    try:
        return Preprocessor(spec, dtype=dtype, batch=batch, out=out)
    except PreprocessSpecError as exc:
        raise ModelMismatchError(
            f"the served model's preprocessing spec is not usable: {exc}; reinstall it with `edge-deploy install`."
        ) from None
