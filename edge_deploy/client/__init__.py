"""The gRPC client vehicle apps import: LaneDetClient, AsyncLaneDetClient, and what they share: the served model
(`served_model`), frames (`frames`), request buffers (`buffers`, `shm`), requests and answers (`request`), TLS.

Imports only `edge_deploy.lanedet` (the family interface, preprocessing, the install<->client contract) and
`edge_deploy.errors`.
"""
from __future__ import annotations

from typing import Any

__all__ = ["LaneDetClient", "AsyncLaneDetClient", "ModelClient", "DetectorClient", "AsyncModelClient",
           "AsyncDetectorClient", "TLSConfig"]


def __getattr__(name: str) -> Any:
    # Lazy so that importing the package does not pay for grpc/tritonclient.
    if name == "LaneDetClient":
        from .sync_client import LaneDetClient

        return LaneDetClient
    if name == "AsyncLaneDetClient":
        from .async_client import AsyncLaneDetClient

        return AsyncLaneDetClient
    if name == "ModelClient":
        from .model_client import ModelClient

        return ModelClient
    if name in ("DetectorClient", "AsyncModelClient", "AsyncDetectorClient"):
        from . import detector_client

        return getattr(detector_client, name)
    if name == "TLSConfig":
        from ..tls.config import TLSConfig

        return TLSConfig
    raise AttributeError(f"module 'edge_deploy.client' has no attribute {name!r}")
