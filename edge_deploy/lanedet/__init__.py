"""LaneATT: the model (torch, imported lazily), anchors, pre/post-processing and the client.

Only light modules are imported here; `edge_deploy.lanedet.model` needs torch.
"""
from __future__ import annotations

from typing import Any

__all__ = ["Lane", "decode_lanes", "LaneDetClient", "AsyncLaneDetClient"]


def __getattr__(name: str) -> Any:
    if name in ("Lane", "decode_lanes"):
        from . import decode

        return getattr(decode, name)
    if name == "LaneDetClient":
        from .client import LaneDetClient

        return LaneDetClient
    if name == "AsyncLaneDetClient":
        from .async_client import AsyncLaneDetClient

        return AsyncLaneDetClient
    raise AttributeError(f"module 'edge_deploy.lanedet' has no attribute {name!r}")
