"""What the user asks of the TensorRT build: the options object `convert` passes down.

Light on purpose (no TensorRT, no device reads): the CLI builds these on any machine.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..errors import EngineError
from ..artifact.precision import Precision

BUILDERS = ("auto", "python", "trtexec")


DLA_CORES = (0, 1)  # NVDLA engines of AGX Orin and Orin NX (Orin Nano has none)


@dataclass
class EngineOptions:
    """What the user asked of the TensorRT build (CLI options of `convert`)."""

    builder: str = "auto"  # auto | python | trtexec
    precision: Precision = Precision.FP16
    workspace: int | None = None  # bytes; None: derived from free memory
    dla_core: int | None = None
    timing_cache: Path | None = None
    calibration_images: Path | None = None
    optimization_level: int | None = None
    verify: bool = True
    force: bool = False
    weak_typing: bool = False  # TensorRT 10.x FP16: the builder-flag path on model.onnx instead of strong typing

    def __post_init__(self) -> None:
        try:
            self.precision = Precision(self.precision)
        except ValueError:
            raise EngineError(f"--precision must be one of "
                              f"{', '.join(p.value for p in Precision)} (got {self.precision!r}).") from None
        if self.dla_core is not None and (isinstance(self.dla_core, bool) or self.dla_core not in DLA_CORES):
            raise EngineError(f"--dla-core {self.dla_core!r}: a Jetson Orin has DLA cores "
                              f"{' and '.join(map(str, DLA_CORES))} (AGX Orin and Orin NX; Orin Nano has none); pass 0 "
                              "or 1, or leave it out to build for the GPU.")

