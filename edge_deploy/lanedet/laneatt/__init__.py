"""The LaneATT family: ResNet + anchor attention, N x 77 rows per image (docs/design.md, sections 4 and 5).

model.py / resnet.py / anchors.py / anchor_order.py need torch (imported by `load`);
decode.py is the self-contained decoder; `FAMILY` is what the registry hands out.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional, Sequence

from ...core.json_record import Record, read_int, read_record, read_str
from ..model_source import ModelSource, SourceFile
from ...core.numbers import whole
from ..datasets import DatasetPreset
from ..decode_params import ScoreNmsDecodeParams
from ..lane_family import LaneFamily, LoadedModel
from ..preprocess import PreprocessSpec
from ..source import SourceSpec
from ..tensor_spec import FLOAT_DATATYPES, TensorSpec
from .decode import CONF_THRESHOLD, N_OFFSETS, NMS_THRESHOLD, ROW_WIDTH, TOP_K
from ...core.deps import require
from ...core.fsutil import sha256_file

ANCHOR_ORDER_RULES = {
    "torch16": "torch.argsort(freq, descending=True)[:k] as PyTorch 1.6 computes it on the CPU "
               "(TH quicksort: median of three, insertion pass over partitions <= 10; ties not in index order)",
    "stable": "descending frequency, ties by anchor index",
}


@dataclass(frozen=True)
class LaneATTOptions:
    """LaneATT's own convert options (each field is a `convert` flag: --anchors-freq, --topk-anchors,
    --anchor-order)."""

    anchors_freq: Optional[Path] = field(default=None, metadata={"help": (
        "Your own anchor-frequency file (a torch 1-D tensor, for custom training) for --topk-anchors. A wrong file "
        "cannot be detected from shapes: the model converts and finds poor lanes.")})
    topk_anchors: Optional[int] = field(default=None, metadata={"range": whole(1, 100000, "anchors"), "help": (
        "Keep the top-k most frequent anchors (default 1000 with --dataset).")})
    anchor_order: str = field(default="torch16", metadata={"choices": tuple(ANCHOR_ORDER_RULES), "help": (
        "How tied frequencies are ordered: torch16 (the default) = PyTorch 1.6's argsort, what every official "
        "checkpoint was trained with; stable = ties by anchor index, only for checkpoints trained with that rule.")})


@dataclass(frozen=True, eq=False)
class AnchorOrder(Record):
    """The rule tied anchor frequencies were ordered by (--anchor-order), and what it is."""

    rule: str | None = None
    description: str | None = None

    _SECTION = "source.anchor_order"
    _READERS = {"rule": read_str, "description": read_str}


@dataclass(frozen=True, eq=False)
class LaneATTSource(ModelSource):
    """The manifest's "source" of a LaneATT model: the common keys and LaneATT's anchors."""

    anchors_freq: SourceFile | None = None  # --anchors-freq: the anchor-frequency file
    topk_anchors: int | None = None  # the anchors kept (None: all of them)
    anchor_order: AnchorOrder | None = None  # how ties were ordered when anchors were dropped
    num_anchors: int | None = None
    untrained_lanes: str | None = None  # what was done to seeded weights so that they decode to lanes

    _READERS = {**ModelSource._READERS, "anchors_freq": read_record(SourceFile), "topk_anchors": read_int,
                "anchor_order": read_record(AnchorOrder), "num_anchors": read_int, "untrained_lanes": read_str}
    LAYOUT = ("kind", "spec", "backbone", "checkpoint", "anchors_freq", "dataset", "topk_anchors", "anchor_order",
              "num_anchors", "trained", "seed", "untrained_lanes")
    NULLS = frozenset(LAYOUT) - {"untrained_lanes"}


class LaneATTFamily(LaneFamily[LaneATTOptions]):
    name = "laneatt"
    title = "LaneATT"
    # Input [B, 3, 360, 640], BGR as OpenCV reads it, value/255, bicubic resize, no crop.
    preprocess = PreprocessSpec(height=360, width=640, color="bgr", scale=1.0 / 255.0, interpolation="bicubic")
    decode_defaults = ScoreNmsDecodeParams(CONF_THRESHOLD, NMS_THRESHOLD, TOP_K)  # CULane's official test values
    # The official test parameters per data set (LaneATT's cfgs/*.yml), recorded when convert is given --dataset.
    datasets = {
        "culane": DatasetPreset("culane", decode_defaults),
        "tusimple": DatasetPreset("tusimple", ScoreNmsDecodeParams(0.2, 45.0, 5)),
        "llamas": DatasetPreset("llamas", decode_defaults),
    }
    decoder_module = "edge_deploy.lanedet.laneatt.decode"
    backbones = ("resnet18", "resnet34")
    default_backbone = "resnet34"
    options_type = LaneATTOptions
    source_type = LaneATTSource

    def max_points(self, lane_outputs: Sequence[TensorSpec]) -> int:
        return N_OFFSETS

    def lane_outputs(self, outputs: Sequence[TensorSpec], has_batch: bool) -> tuple[TensorSpec, ...]:
        def sample(shape: tuple[int, ...]) -> tuple[int, ...]:
            return shape[1:] if has_batch else shape

        rows = [t for t in outputs if len(sample(t.shape)) in (2, 3) and t.shape[-1] == ROW_WIDTH]
        if not rows:
            shapes = ", ".join(f"{t.name} {list(t.shape)}" for t in outputs)
            raise ValueError(f"returns {shapes}; a lane model returns [batch,] N x {ROW_WIDTH} "
                             "(2 logits, start_y, start_x, length, 72 x offsets): check --model.")
        chosen = next((t for t in rows if t.name == "predict_lanes"), rows[0])
        if chosen.shape[-2] <= 0 or chosen.datatype not in FLOAT_DATATYPES:
            raise ValueError(f"output {chosen.name!r} is {chosen.datatype} {list(chosen.shape)}; the client needs a "
                             f"fixed number of FP32/FP16 rows of {ROW_WIDTH}: check the exported model.")
        return (chosen,)

    def recognizes_checkpoint(self, keys: Sequence[str]) -> bool:
        return {"attention_layer.weight", "cls_layer.weight", "reg_layer.weight"} <= set(keys)

    def build(self, spec: SourceSpec, *, backbone: str | None, dataset: str | None, options: LaneATTOptions | None,
              shape: tuple[int, int, int]) -> LoadedModel:
        from .anchors import N_ANCHORS
        from .model import UNTRAINED_LANES, build_laneatt, give_untrained_lanes

        assert backbone is not None  # LaneATT has a default backbone
        assert options is not None  # and options_type: options_from makes one
        anchor_order = options.anchor_order
        module = build_laneatt(backbone, checkpoint=spec.checkpoint, anchors_freq=options.anchors_freq,
                               dataset=dataset, topk_anchors=options.topk_anchors, anchor_order=anchor_order,
                               seed=spec.seed)
        trained = spec.checkpoint is not None
        if not trained:
            give_untrained_lanes(module)
        dropped = module.num_anchors != N_ANCHORS
        source = LaneATTSource(
            kind=self.name, spec=self.name, backbone=backbone,
            checkpoint=None if spec.checkpoint is None else SourceFile.of(spec.checkpoint),
            anchors_freq=None if options.anchors_freq is None else SourceFile.of(options.anchors_freq),
            dataset=dataset, topk_anchors=module.num_anchors if dropped else None,
            anchor_order=AnchorOrder(anchor_order, ANCHOR_ORDER_RULES[anchor_order]) if dropped else None,
            num_anchors=module.num_anchors, trained=trained, seed=None if trained else spec.seed,
            untrained_lanes=None if trained else UNTRAINED_LANES)
        return LoadedModel(module, shape, source, self, self.decode_params_for(dataset))


FAMILY = LaneATTFamily()
