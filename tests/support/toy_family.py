"""A toy third lane-model family, registered from the tests only: it proves the family interface.

The model sees a frame and returns K straight lanes as rows (score logit, x at the top, x at the bottom)
in model-input pixels; the decoder (`toy_lane_decoder.py`, self-contained like every family decoder)
keeps the rows whose score passes the threshold and draws each as a two-point lane. Nothing in the
product knows this family: `convert toy`, `install` (with and without `--pipeline`) and LaneDetClient
reach it through `edge_deploy.lanedet.family.register_family`.
"""
from __future__ import annotations

from typing import Any, Sequence

from edge_deploy.lanedet.family import (
    DecodeDefaults,
    LaneFamily,
    LoadedModel,
    SourceSpec,
    TensorSpec,
    get_family,
    register_family,
    unregister_family,
)
from edge_deploy.lanedet.preprocess import PreprocessSpec

K = 5  # rows per image
INPUT = (3, 48, 80)  # C, H, W


class ToyFamily(LaneFamily):
    name = "toy"
    title = "Toy"
    preprocess = PreprocessSpec(height=INPUT[1], width=INPUT[2], color="rgb", scale=1 / 255, interpolation="bilinear")
    decode_defaults = DecodeDefaults(0.5, 0.0, 3)
    decoder_module = "toy_lane_decoder"

    def max_points(self, lane_outputs: Sequence[TensorSpec]) -> int:
        return 2

    def lane_outputs(self, outputs: Sequence[TensorSpec], has_batch: bool) -> tuple[TensorSpec, ...]:
        for tensor in outputs:
            rows = tensor.shape[1:] if has_batch else tensor.shape
            if tensor.name == "toy_lanes" and len(rows) == 2 and rows[-1] == 3:
                return (tensor,)
        raise ValueError("returns no toy_lanes [K, 3] output (score logit, x top, x bottom): check --model.")

    def load(self, spec: SourceSpec) -> LoadedModel:
        import torch

        torch.manual_seed(spec.seed)
        return LoadedModel(ToyModel(), INPUT, {"kind": "toy", "spec": "toy", "trained": True}, self)


def _module() -> Any:
    import torch

    class ToyModel(torch.nn.Module):
        """Scores follow the frame's mean colour per channel; x positions are fixed fractions of the width."""

        def __init__(self) -> None:
            super().__init__()
            self.score = torch.nn.Linear(3, K)
            with torch.no_grad():
                self.score.weight.copy_(torch.tensor([[8.0, 0, 0], [0, 8.0, 0], [0, 0, 8.0], [4, 4, 0], [-8, -8, -8]]))
                self.score.bias.fill_(-2.0)
            self.register_buffer("xs", torch.tensor([[10.0, 20.0], [30.0, 25.0], [50.0, 60.0], [70.0, 40.0],
                                                     [5.0, 5.0]]))

        def forward(self, x):
            logits = self.score(x.mean(dim=(2, 3)))
            xs = self.xs.expand(x.shape[0], K, 2)
            return torch.cat([logits.unsqueeze(-1), xs], dim=-1)

    return ToyModel


def ToyModel() -> Any:  # noqa: N802 - built lazily so that importing this module does not import torch
    return _module()()


def register() -> LaneFamily:
    """The toy family, registered once per process (`unregister` takes it out again)."""
    try:
        return get_family("toy")
    except KeyError:
        return register_family(ToyFamily())


def unregister() -> None:
    """Take the toy family out of this process's registry: no test after one that used it may see it (the CLI's
    flags and reference, `families`, the lists of known families)."""
    unregister_family("toy")
