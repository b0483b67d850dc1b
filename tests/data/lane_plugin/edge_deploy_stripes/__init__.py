"""The `stripes` lane-model family: a model that returns K straight lanes as rows (score logit, x at the top,
x at the bottom) in model-input pixels. It exists to show a family living in its own distribution."""
from __future__ import annotations

from typing import Sequence

from edge_deploy.lanedet.family import DecodeDefaults, LaneFamily, LoadedModel, SourceSpec, TensorSpec
from edge_deploy.lanedet.preprocess import PreprocessSpec

ROWS = 4
INPUT = (3, 40, 64)  # C, H, W


class StripesFamily(LaneFamily):
    name = "stripes"
    title = "Stripes"
    preprocess = PreprocessSpec(height=INPUT[1], width=INPUT[2], color="rgb", scale=1 / 255,
                                interpolation="bilinear")
    decode_defaults = DecodeDefaults(0.5, 0.0, ROWS)
    decoder_module = "edge_deploy_stripes.decode"

    def max_points(self, lane_outputs: Sequence[TensorSpec]) -> int:
        return 2

    def lane_outputs(self, outputs: Sequence[TensorSpec], has_batch: bool) -> tuple[TensorSpec, ...]:
        for tensor in outputs:
            rows = tensor.shape[1:] if has_batch else tensor.shape
            if tensor.name == "stripes" and len(rows) == 2 and rows[-1] == 3:
                return (tensor,)
        raise ValueError("returns no stripes [K, 3] output: check --model.")

    def load(self, spec: SourceSpec) -> LoadedModel:
        from .model import StripesModel

        return LoadedModel(StripesModel(), INPUT, {"kind": "stripes", "spec": "stripes", "trained": True}, self,
                           output_names=("stripes",))


FAMILY = StripesFamily()
