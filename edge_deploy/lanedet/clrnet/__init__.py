"""The CLRNet family (Cross Layer Refinement Network, CVPR 2022): 192 line priors refined over three FPN levels,
one output `predictions` [B, 192, 78] per image (docs/design.md, "CLRNet").

presets.py holds the official data-set configurations; decode.py is the self-contained decoder; model.py (and
dla.py) need torch (imported by `load`); `FAMILY` is what the registry hands out.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar, Sequence

from ...core.json_record import read_ints, read_str
from ..model_source import ModelSource
from ..datasets import DatasetPreset
from ..decode_params import DecodeParams, DecodeParamsError, ScoreNmsDecodeParams
from ..lane import Lane
from ..lane_family import LaneFamily, LoadedModel
from ..preprocess import PreprocessSpec
from ..source import SourceSpec
from ..tensor_spec import FLOAT_DATATYPES, TensorSpec
from .decode import NUM_POINTS, NUM_PRIORS, OUTPUT_NAME, PREDICTION_SIZE
from .presets import BACKBONES, DEFAULT_BACKBONE, DEFAULT_DATASET, PRESETS, CLRNetPreset
from ...core.deps import require

# Seeded random weights (no checkpoint) give class logits that barely differ between priors and fall below every
# data set's threshold on road frames, and lengths of ~0 rows (no points): no lane to check, or near-ties that FP16
# rounding reorders. load() makes them checkable: the class branch's hidden layers get zero weights, so every prior
# has the same score, softmax of UNTRAINED_LOGITS (equal scores keep the prior order in the NMS, in FP32 and FP16
# alike), the length bias gets UNTRAINED_LENGTH (a fraction of the 71 strips), and the regression weights are scaled
# by UNTRAINED_REG_GAIN, so that FP16 rounding of the random offsets (~0.3 px, up to 2 px) does not flip NMS decisions
# between priors whose distance is near the threshold (the lanes still follow the frame, by tenths of a pixel).
UNTRAINED_LOGITS, UNTRAINED_LENGTH, UNTRAINED_REG_GAIN = (0.0, 0.5), 0.6, 0.05


@dataclass(frozen=True)
class CLRNetDecodeParams(ScoreNmsDecodeParams):
    """CLRNet's decode parameters: score threshold, NMS threshold (pixels at the 800-wide input), the most lanes
    (the NMS's top_k), and the fraction of the frame's height above the model's view (the cut, scaled to any
    frame: the preset's cut_height / the data set's frame height, as the preprocessing makes it)."""

    cut_fraction: float = 0.0
    title: ClassVar[str] = "CLRNet"

    def __post_init__(self) -> None:
        super().__post_init__()
        cut = self.cut_fraction
        if isinstance(cut, bool) or not isinstance(cut, (int, float)) or not (math.isfinite(cut) and 0 <= cut < 1):
            raise DecodeParamsError.of("cut_fraction", f"is the part of the frame above the model's view, from 0 "
                                                         f"to below 1 (got {cut!r})")
        object.__setattr__(self, "cut_fraction", float(cut))

    def narrows(self, server: DecodeParams) -> bool:
        return super().narrows(server) and getattr(server, "cut_fraction", None) == self.cut_fraction

    def narrow(self, lanes: list[Lane], server: DecodeParams) -> list[Lane]:
        # A score >= the threshold is kept (official get_lanes), and NMS in score order makes cutting the
        # server's lanes by a higher threshold the same as decoding with it.
        return [lane for lane in lanes if lane.score >= self.conf_threshold][: self.top_k]


@dataclass(frozen=True, eq=False)
class CLRNetSource(ModelSource):
    """The manifest's "source" of a CLRNet model: the common keys, the data set's frame size and, for seeded
    weights, what was done to them (`untrained`)."""

    image_size: tuple[int, ...] | None = None  # (H, W) of the data set's frames
    untrained: str | None = None

    _READERS = {**ModelSource._READERS, "image_size": read_ints, "untrained": read_str}
    LAYOUT = (*ModelSource.LAYOUT, "image_size", "untrained")
    NULLS = ModelSource.NULLS | {"image_size"}


def preset_preprocess(preset: CLRNetPreset) -> PreprocessSpec:
    """The official test pipeline: BGR, the rows from cut_height down resized to 800x320 (imgaug's Resize, cubic),
    /255, no mean/std. As a spec: the whole frame resized to resized_height rows, the bottom 320 kept, so that
    the cut scales with a frame of another height (docs/design.md, "CLRNet")."""
    return PreprocessSpec(height=preset.input_height, width=preset.input_width, color="bgr", scale=1.0 / 255.0,
                          interpolation="bicubic", resized_height=preset.resized_height)


def preset_decode_params(preset: CLRNetPreset, backbone: str = DEFAULT_BACKBONE) -> CLRNetDecodeParams:
    return CLRNetDecodeParams(preset.conf_threshold, preset.nms_for(backbone), preset.max_lanes,
                        cut_fraction=preset.cut_fraction)


class CLRNetFamily(LaneFamily[None]):  # no options of its own
    name = "clrnet"
    title = "CLRNet"
    backbones = BACKBONES
    default_backbone = DEFAULT_BACKBONE
    default_dataset = DEFAULT_DATASET
    source_type = CLRNetSource
    preprocess = preset_preprocess(PRESETS[DEFAULT_DATASET])
    decode_defaults = preset_decode_params(PRESETS[DEFAULT_DATASET])
    datasets = {name: DatasetPreset(name, preset_decode_params(p), preset_preprocess(p), p.image_size)
                for name, p in PRESETS.items()}
    decoder_module = "edge_deploy.lanedet.clrnet.decode"

    def lane_outputs(self, outputs: Sequence[TensorSpec], has_batch: bool) -> tuple[TensorSpec, ...]:
        by_name = {t.name: t for t in outputs}
        if OUTPUT_NAME not in by_name:
            shapes = ", ".join(f"{t.name} {list(t.shape)}" for t in outputs)
            raise ValueError(f"returns {shapes}; a CLRNet model returns {OUTPUT_NAME} [{NUM_PRIORS}, "
                             f"{PREDICTION_SIZE}] per image: check --model.")
        tensor = by_name[OUTPUT_NAME]
        shape = tensor.shape[1:] if has_batch else tensor.shape  # a fixed batch keeps its axis: [B, 192, 78]
        if tuple(shape[-2:]) != (NUM_PRIORS, PREDICTION_SIZE) or len(shape) > 3 or tensor.datatype not in FLOAT_DATATYPES:
            raise ValueError(f"has {tensor.name} {tensor.datatype} {list(tensor.shape)}; CLRNet decoding needs "
                             f"FP32/FP16 {OUTPUT_NAME} [{NUM_PRIORS}, {PREDICTION_SIZE}] per image: check the "
                             "exported model.")
        return (tensor,)

    def max_points(self, lane_outputs: Sequence[TensorSpec]) -> int:
        return NUM_POINTS

    def recognizes_checkpoint(self, keys: Sequence[str]) -> bool:
        return {"heads.priors", "heads.cls_layers.weight", "heads.reg_layers.weight"} <= set(keys)

    def build(self, spec: SourceSpec, *, backbone: str | None, dataset: str | None, options: None,
              shape: tuple[int, int, int]) -> LoadedModel:
        from .model import build_clrnet

        assert dataset is not None and backbone is not None  # default_dataset, default_backbone
        preset = PRESETS[dataset]
        module = build_clrnet(dataset, backbone, spec.checkpoint, spec.seed)
        trained = spec.checkpoint is not None
        if not trained:
            make_checkable(module)
        untrained = {} if trained else {"untrained": (
            f"class branch set to one score for every prior (logits {list(UNTRAINED_LOGITS)}), regression weights "
            f"x{UNTRAINED_REG_GAIN:g}, length bias +{UNTRAINED_LENGTH:g} strips: lanes to check instead of near-ties "
            "or none")}
        source = self.source_section(spec, module, backbone=backbone, dataset=dataset,
                                     dropped=_dropped(module.dropped_keys) if module.dropped_keys else None,
                                     image_size=tuple(preset.image_size), **untrained)
        return LoadedModel(module, shape, source, self, decode=preset_decode_params(preset, backbone),
                           preprocess=preset_preprocess(preset), output_names=(OUTPUT_NAME,))


def _dropped(keys: Sequence[str]) -> str:
    seg = sum(k.startswith("heads.seg_decoder.") for k in keys)
    other = [k for k in keys if not k.startswith("heads.seg_decoder.")]
    return f"{seg} heads.seg_decoder.* keys and {', '.join(other) or 'nothing else'} (training only)"


def make_checkable(module: Any) -> None:
    """Seeded random weights: one score for every prior and lanes with length (UNTRAINED_LOGITS' comment)."""
    import torch

    heads = module.heads
    with torch.no_grad():
        for layer in heads.cls_modules:
            if isinstance(layer, torch.nn.Linear):
                layer.weight.zero_()
                layer.bias.zero_()
        heads.cls_layers.bias.copy_(torch.tensor(UNTRAINED_LOGITS))
        heads.reg_layers.weight *= UNTRAINED_REG_GAIN
        heads.reg_layers.bias[3] += UNTRAINED_LENGTH


FAMILY = CLRNetFamily()
