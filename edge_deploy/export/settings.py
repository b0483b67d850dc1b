"""What `convert` exports: the batch range and the export/parity settings, checked once when they are made."""
from __future__ import annotations

from dataclasses import dataclass, field

from ..artifact.manifest import BatchRange
from ..errors import ConvertError
from ..lanedet.decode_params import DecodeParamsError, ScoreNmsDecodeParams
from ..artifact.precision import Precision
from .onnx_target import DEFAULT_OPSET, opset_problem
from .fused_preprocess import DEFAULT_FRAME_SIZE, parse_frame_size

DEFAULT_ATOL = 1e-3
DEFAULT_RTOL = 1e-3

__all__ = ["BatchRange", "ExportSettings", "batch_range", "DEFAULT_OPSET"]


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
    """How to export and verify (convert's export options), checked when made."""

    opset: int = DEFAULT_OPSET
    batch: BatchRange = field(default_factory=batch_range)
    input_name: str = "input"
    output_names: tuple[str, ...] = ("predict_lanes",)
    atol: float = DEFAULT_ATOL
    rtol: float = DEFAULT_RTOL
    simplify: bool = True
    seed: int = 0
    precision: Precision = Precision.FP16  # FP16 also writes model_fp16.onnx
    fp16_io: bool = False  # model_fp16.onnx with FP16 graph inputs/outputs (--fp16-io)
    fuse_frame: tuple[int, int] | None = None  # (height, width): fuse the preprocessing (--fuse-preprocess)
    # Decode defaults recorded for clients over the family's / data set's (--conf, --nms, --top-k); None: theirs.
    conf_threshold: float | None = None
    nms_threshold: float | None = None
    top_k: int | None = None

    def __post_init__(self) -> None:
        self.precision = Precision(self.precision)
        if self.opset != DEFAULT_OPSET:
            check_opset(self.opset)
        for flag, value in (("--atol", self.atol), ("--rtol", self.rtol)):
            if not value >= 0:
                raise ConvertError(f"{flag} is a parity tolerance and must be 0 or more (got {value:g}); "
                                   "the default is 1e-3.")
        try:  # the rules ScoreNmsDecodeParams is made with (lanedet/decode_params.py), named as convert's options
            ScoreNmsDecodeParams.check_given(conf_threshold=self.conf_threshold, nms_threshold=self.nms_threshold,
                                       top_k=self.top_k)
        except DecodeParamsError as exc:
            raise ConvertError(f"{exc.for_options()}.") from None
        if self.fuse_frame is not None and self.precision is Precision.INT8:
            # INT8 calibration feeds preprocessed images (engine/calibration.py), not camera frames.
            raise ConvertError("--fuse-preprocess does not support --precision int8 yet; use fp16 or fp32.")

    @property
    def fp16_onnx(self) -> bool:
        """Whether convert writes model_fp16.onnx."""
        return self.precision is Precision.FP16

    @property
    def export_options_given(self) -> list[str]:
        """The flags of these settings that differ from the defaults (an artifact MODEL refuses them)."""
        defaults = ExportSettings()
        given = {
            "--opset": self.opset != defaults.opset, "--batch": not self.batch.dynamic,
            "--min-batch": self.batch.dynamic and self.batch.min != defaults.batch.min,
            "--opt-batch": self.batch.dynamic and self.batch.opt != self.batch.min,
            "--max-batch": self.batch.dynamic and self.batch.max != defaults.batch.max,
            "--input-name": self.input_name != defaults.input_name,
            "--output-name": self.output_names != defaults.output_names, "--no-simplify": not self.simplify,
            "--fuse-preprocess": self.fuse_frame is not None, "--conf": self.conf_threshold is not None,
            "--nms": self.nms_threshold is not None, "--top-k": self.top_k is not None,
        }
        return [flag for flag, differs in given.items() if differs]


def fuse_frame(fuse: bool, frame_size: str | None) -> tuple[int, int] | None:
    """(height, width) for --fuse-preprocess [--frame-size WxH], or None."""
    if not fuse:
        if frame_size is not None:
            raise ConvertError("--frame-size is the camera frame size of --fuse-preprocess: add --fuse-preprocess, "
                               "or drop --frame-size.")
        return None
    return parse_frame_size(frame_size) if frame_size else DEFAULT_FRAME_SIZE


def check_opset(opset: int) -> None:
    """ConvertError unless the device's consumers parse `opset` (export/onnx_target.py) and torch's
    TorchScript-based exporter writes it (it would warn or fail mid-way)."""
    why = opset_problem(opset)
    if why is not None:
        raise ConvertError(f"--opset {opset}: {why}; keep the default {DEFAULT_OPSET}.")
    low, high = 7, 17  # torch 2.1 (the oldest JetPack wheel) exports opsets 7 to 17
    try:
        from torch.onnx import _constants

        low = _constants.ONNX_MIN_OPSET
        high = getattr(_constants, "ONNX_TORCHSCRIPT_EXPORTER_MAX_OPSET", _constants.ONNX_MAX_OPSET)
    except (ImportError, AttributeError):
        pass
    if not low <= opset <= high:
        raise ConvertError(
            f"--opset {opset} is not one this torch exports (opsets {low} to {high}); keep the default 17, "
            "which TensorRT on JetPack 5 and 6 parses."
        )
