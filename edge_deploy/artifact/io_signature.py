"""The I/O signature of a model file: its input and output tensors and the batch range it serves.

The manifest's "io" section (and fp16.onnx.io, model_fp16.onnx's); `edge_deploy.artifact.manifest` re-exports both types.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from ..lanedet.tensor_spec import TensorSpec


@dataclass(frozen=True)
class BatchRange:
    """The batch sizes the model must serve; `dynamic=False` means a fixed batch dimension."""

    min: int
    opt: int
    max: int
    dynamic: bool

    def ends(self) -> list[int]:
        """Batch sizes parity is checked at: both ends of the range."""
        return sorted({self.min, self.max})

    def to_dict(self) -> dict[str, Any]:
        return {"min": self.min, "opt": self.opt, "max": self.max, "dynamic": self.dynamic}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> BatchRange:
        dynamic = bool(data.get("dynamic", True))
        high = int(data.get("max", 1))
        return cls(int(data.get("min", 1)), int(data.get("opt", data.get("min", 1))), high, dynamic)


@dataclass(frozen=True)
class IOSignature:
    """Inputs, outputs and batch range of a model file."""

    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    batch: BatchRange

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> IOSignature:
        return cls(tuple(TensorSpec.from_dict(t) for t in data.get("inputs") or ()),
                   tuple(TensorSpec.from_dict(t) for t in data.get("outputs") or ()),
                   BatchRange.from_dict(data.get("batch") or {}))

    def to_dict(self) -> dict[str, Any]:
        return {"inputs": [t.to_dict() for t in self.inputs], "outputs": [t.to_dict() for t in self.outputs],
                "batch": self.batch.to_dict()}

    def output(self, name: str) -> TensorSpec:
        return next(t for t in self.outputs if t.name == name)
