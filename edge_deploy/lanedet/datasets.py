"""`DatasetPreset`: what a family's official checkpoints of one data set need (decode defaults, preprocessing, the
size of the data set's frames)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from .decode_params import DecodeParams

if TYPE_CHECKING:  # pragma: no cover
    from .preprocess import PreprocessSpec

__all__ = ["DatasetPreset"]


@dataclass(frozen=True)
class DatasetPreset:
    """What a family's official checkpoints of one data set need beyond the model: decode defaults and,
    where it differs from the family's, preprocessing."""

    name: str
    decode: DecodeParams
    preprocess: PreprocessSpec | None = None
    image_size: tuple[int, int] | None = None  # (H, W) of the data set's frames; the lane checks decode at it
