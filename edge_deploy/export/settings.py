"""What `convert` exports: the batch range and the export/parity settings."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..errors import ConvertError

DEFAULT_ATOL = 1e-3


DEFAULT_RTOL = 1e-3


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

    def as_manifest(self) -> dict[str, Any]:
        return {"min": self.min, "opt": self.opt, "max": self.max, "dynamic": self.dynamic}


def batch_range(
    batch: int | None = None,
    min_batch: int | None = None,
    opt_batch: int | None = None,
    max_batch: int | None = None,
) -> BatchRange:
    """Resolve --batch / --min-batch / --opt-batch / --max-batch (default: dynamic 1..4, opt 1)."""
    if batch is not None:
        if any(v is not None for v in (min_batch, opt_batch, max_batch)):
            raise ConvertError(
                "--batch fixes the batch size and cannot be combined with --min-batch/--opt-batch/--max-batch; "
                "use one or the other."
            )
        if batch < 1:
            raise ConvertError(f"--batch must be at least 1 (got {batch}).")
        return BatchRange(batch, batch, batch, dynamic=False)
    lo = 1 if min_batch is None else min_batch
    hi = max(4, lo) if max_batch is None else max_batch
    opt = lo if opt_batch is None else opt_batch
    if lo < 1 or not lo <= opt <= hi:
        raise ConvertError(
            f"the batch range needs 1 <= min <= opt <= max (got min {lo}, opt {opt}, max {hi}); "
            "fix --min-batch/--opt-batch/--max-batch."
        )
    return BatchRange(lo, opt, hi, dynamic=True)


@dataclass
class ExportSettings:
    """How to export and verify."""

    opset: int = 17
    batch: BatchRange = field(default_factory=batch_range)
    input_name: str = "input"
    output_names: tuple[str, ...] = ("predict_lanes",)
    atol: float = DEFAULT_ATOL
    rtol: float = DEFAULT_RTOL
    simplify: bool = True
    seed: int = 0
    fp16_onnx: bool = True  # also write model_fp16.onnx (convert --precision fp16, the default)
    fp16_io: bool = False  # model_fp16.onnx with FP16 graph inputs/outputs (--fp16-io)
    fuse_frame: tuple[int, int] | None = None  # (height, width): fuse the preprocessing (--fuse-preprocess)
    # decode defaults recorded for clients, over the data set's (--conf, --nms, --top-k): conf_threshold, ...
    decode: dict[str, Any] = field(default_factory=dict)
