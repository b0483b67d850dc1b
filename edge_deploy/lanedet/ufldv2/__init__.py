"""The UFLDv2 family (Ultra-Fast-Lane-Detection v2): row- and column-anchor classification, four outputs
per image (docs/design.md, "UFLDv2").

presets.py holds the official data-set configurations; decode.py is the self-contained decoder;
model.py needs torch (imported by `load`); `FAMILY` is what the registry hands out.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar, Sequence

from ..datasets import DatasetPreset
from ..decode_params import DecodeParams, DecodeParamsError
from ..lane_family import LaneFamily, LoadedModel
from ..preprocess import PreprocessSpec
from ..source import SourceSpec
from ..tensor_spec import FLOAT_DATATYPES, TensorSpec
from .decode import COL_ANCHOR, LOCAL_WIDTH, NUM_LANES, OUTPUT_NAMES, TOP_K
from .presets import PRESETS, UFLDv2Preset
from ...core.deps import require

DEFAULT_DATASET, DEFAULT_BACKBONE = "culane", "resnet18"
IMAGENET_MEAN, IMAGENET_STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


@dataclass(frozen=True)
class UFLDv2DecodeParams(DecodeParams):
    """UFLDv2's decode parameters: the anchors' (start, end) as fractions of the image height (rows) and
    width (columns), the local window around each argmax, and the most lanes to return."""

    row_anchor: tuple[float, float]
    col_anchor: tuple[float, float] = COL_ANCHOR
    local_width: int = LOCAL_WIDTH
    top_k: int = TOP_K
    title: ClassVar[str] = "UFLDv2"

    def __post_init__(self) -> None:
        super().__post_init__()
        for name in ("row_anchor", "col_anchor"):
            value = getattr(self, name)
            try:
                start, end = (float(v) for v in value)
            except (TypeError, ValueError):
                raise DecodeParamsError(f"{name} must be (start, end), two numbers, got {value!r}") from None
            if not (math.isfinite(start) and math.isfinite(end) and 0.0 <= start <= end <= 1.0):
                raise DecodeParamsError(f"{name} must be (start, end) with 0 <= start <= end <= 1, got {value!r}")
            object.__setattr__(self, name, (start, end))
        width = self.local_width
        if isinstance(width, bool) or not isinstance(width, int) or width < 0:
            raise DecodeParamsError(f"local_width must be an integer >= 0, got {width!r}")


def preset_preprocess(preset: UFLDv2Preset) -> PreprocessSpec:
    """The official test transform: RGB, resize to (input_height / crop_ratio, input_width), /255, ImageNet
    mean/std, the bottom input_height rows. The official resize is PIL's antialiased bilinear (torchvision
    Resize on a PIL image): "antialiased_bilinear" is that resize with Pillow's own weights (lanedet/preprocess.py,
    AntialiasedBilinear; BENCHMARKS.md, "UFLDv2 preprocessing"). Manifests written with "area" (OpenCV's area
    resize, the closest cv2.resize) are still served with it."""
    return PreprocessSpec(height=preset.input_height, width=preset.input_width, color="rgb", scale=1.0 / 255.0,
                          mean=IMAGENET_MEAN, std=IMAGENET_STD, interpolation="antialiased_bilinear",
                          resized_height=preset.resized_height)


def preset_decode_params(preset: UFLDv2Preset) -> UFLDv2DecodeParams:
    return UFLDv2DecodeParams(row_anchor=preset.row_anchor, col_anchor=preset.col_anchor)


class UFLDv2Family(LaneFamily[None]):  # no options of its own
    name = "ufldv2"
    title = "UFLDv2"
    preprocess = preset_preprocess(PRESETS[DEFAULT_DATASET])
    decode_defaults = preset_decode_params(PRESETS[DEFAULT_DATASET])
    datasets = {name: DatasetPreset(name, preset_decode_params(p), preset_preprocess(p), p.image_size)
                for name, p in PRESETS.items()}
    decoder_module = "edge_deploy.lanedet.ufldv2.decode"
    backbones = ("resnet18", "resnet34")  # the official checkpoints' backbones (model.BACKBONES)
    default_backbone = DEFAULT_BACKBONE
    default_dataset = DEFAULT_DATASET

    def lane_outputs(self, outputs: Sequence[TensorSpec], has_batch: bool) -> tuple[TensorSpec, ...]:
        by_name = {t.name: t for t in outputs}
        if not all(name in by_name for name in OUTPUT_NAMES):
            returned = ", ".join(f"{t.name} {list(t.shape)}" for t in outputs)
            raise ValueError(f"returns {returned}; a UFLDv2 model returns {', '.join(OUTPUT_NAMES)} (the official "
                             "output names): check --model.")
        chosen = tuple(by_name[name] for name in OUTPUT_NAMES)
        shapes = [t.shape[1:] if has_batch else t.shape for t in chosen]
        loc_row, loc_col, exist_row, exist_col = shapes
        fits = (all(len(s) == 3 and s[-1] == NUM_LANES and min(s) > 0 for s in shapes)
                and exist_row == (2, *loc_row[1:]) and exist_col == (2, *loc_col[1:]))
        if not fits or any(t.datatype not in FLOAT_DATATYPES for t in chosen):
            described = ", ".join(f"{t.name} {t.datatype} {list(t.shape)}" for t in chosen)
            raise ValueError(f"has {described}; UFLDv2 decoding needs FP32/FP16 loc_* [cells, anchors, {NUM_LANES}] "
                             f"and exist_* [2, anchors, {NUM_LANES}] per image: check the exported model.")
        return chosen

    def max_points(self, lane_outputs: Sequence[TensorSpec]) -> int:
        return max(t.shape[-2] for t in lane_outputs)  # a lane has at most one point per anchor

    def recognizes_checkpoint(self, keys: Sequence[str]) -> bool:
        return {"pool.weight", "cls.1.weight", "model.conv1.weight"} <= set(keys)

    def build(self, spec: SourceSpec, *, backbone: str | None, dataset: str | None, options: None,
              shape: tuple[int, int, int]) -> LoadedModel:
        from .model import build_ufldv2

        assert dataset is not None and backbone is not None  # default_dataset, default_backbone
        preset = PRESETS[dataset]
        module = build_ufldv2(dataset, backbone, spec.checkpoint, spec.seed)
        # the training-only auxiliary head (official use_aux=True) is not part of the exported model
        dropped = f"{len(module.dropped_keys)} seg_head.* keys (training-only auxiliary head)" \
            if module.dropped_keys else None
        source = self.source_section(spec, module, backbone=backbone, dataset=dataset, dropped=dropped)
        return LoadedModel(module, shape, source, self, decode=preset_decode_params(preset),
                           preprocess=preset_preprocess(preset), output_names=OUTPUT_NAMES)


FAMILY = UFLDv2Family()
