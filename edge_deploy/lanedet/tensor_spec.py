"""`TensorSpec`: one input or output of a model, as a family reads a model's outputs and the client sizes its buffers;
`FLOAT_DATATYPES`, the float datatypes they may have."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

__all__ = ["FLOAT_DATATYPES", "TensorSpec"]

# The Triton datatypes of a model's float inputs and outputs (what a family's decoder and the client read).
FLOAT_DATATYPES = ("FP32", "FP16")


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
