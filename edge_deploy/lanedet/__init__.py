"""LaneATT itself: the model (torch, imported lazily), anchors, preprocessing, decoding, drawing, synthetic scenes,
and the install<->client contract. The gRPC client lives in `edge_deploy.client`.

Only light modules are imported here; `edge_deploy.lanedet.model` needs torch.
"""
from __future__ import annotations

from typing import Any

__all__ = ["Lane", "decode_lanes"]


def __getattr__(name: str) -> Any:
    if name in ("Lane", "decode_lanes"):
        from . import decode

        return getattr(decode, name)
    raise AttributeError(f"module 'edge_deploy.lanedet' has no attribute {name!r}")
