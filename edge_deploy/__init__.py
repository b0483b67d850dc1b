"""edge-deploy: LaneATT from PyTorch to TensorRT on Jetson Orin, served by Triton.

`import edge_deploy` stays light: torch, onnx, tensorrt and pycuda are imported
only by the stage that needs them.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .errors import EdgeDeployError, LanesUnavailable

from ._version import __version__

__all__ = ["EdgeDeployError", "LaneDetClient", "AsyncLaneDetClient", "LaneStream", "LaneResult", "LanesUnavailable",
           "TLSConfig", "Lane", "decode_lanes", "__version__"]

if TYPE_CHECKING:  # pragma: no cover
    from .client.async_client import AsyncLaneDetClient
    from .client.sync_client import LaneDetClient
    from .tls import TLSConfig
    from .lanedet.lane import Lane
    from .media.stream import LaneResult, LaneStream
    from .lanedet import decode_lanes


def __getattr__(name: str) -> Any:
    # Lazy so that `import edge_deploy` does not pay for grpc/tritonclient.
    if name == "LaneDetClient":
        from .client.sync_client import LaneDetClient

        return LaneDetClient
    if name == "AsyncLaneDetClient":
        from .client.async_client import AsyncLaneDetClient

        return AsyncLaneDetClient
    if name == "TLSConfig":
        from .tls import TLSConfig

        return TLSConfig
    if name in ("LaneStream", "LaneResult"):
        from .media import stream

        return getattr(stream, name)
    if name == "Lane":
        from .lanedet.lane import Lane

        return Lane
    if name == "decode_lanes":
        from .lanedet import decode_lanes

        return decode_lanes
    raise AttributeError(f"module 'edge_deploy' has no attribute {name!r}")
