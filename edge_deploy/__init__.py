"""edge-deploy: lane models (and the detectors beside them) from PyTorch or ONNX to TensorRT on Jetson Orin,
served by Triton.

`import edge_deploy` stays light: torch, onnx, tensorrt and pycuda are imported
only by the stage that needs them.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .errors import EdgeDeployError, LanesUnavailable, ModelUnavailable

from ._version import __version__

__all__ = ["EdgeDeployError", "LaneDetClient", "AsyncLaneDetClient", "LaneStream", "LaneResult", "LanesUnavailable",
           "ModelClient", "AsyncModelClient", "DetectorClient", "AsyncDetectorClient", "ModelUnavailable",
           "PerceptionStream", "PerceptionResult", "TLSConfig", "Lane", "decode_lanes", "__version__"]

# name -> the module that defines it, imported on first use
_LAZY = {
    "LaneDetClient": ".client.sync_client", "AsyncLaneDetClient": ".client.async_client",
    "ModelClient": ".client.model_client", "DetectorClient": ".client.detector_client",
    "AsyncModelClient": ".client.detector_client", "AsyncDetectorClient": ".client.detector_client",
    "TLSConfig": ".tls.config", "LaneStream": ".media.stream", "LaneResult": ".media.stream",
    "PerceptionStream": ".media.perception", "PerceptionResult": ".media.perception", "Lane": ".lanedet.lane",
    "decode_lanes": ".lanedet",
}

if TYPE_CHECKING:  # pragma: no cover
    from .client.async_client import AsyncLaneDetClient
    from .client.detector_client import AsyncDetectorClient, AsyncModelClient, DetectorClient
    from .client.model_client import ModelClient
    from .client.sync_client import LaneDetClient
    from .media.perception import PerceptionResult, PerceptionStream
    from .tls.config import TLSConfig
    from .lanedet.lane import Lane
    from .media.stream import LaneResult, LaneStream
    from .lanedet import decode_lanes


def __getattr__(name: str) -> Any:
    # Lazy so that `import edge_deploy` does not pay for grpc/tritonclient.
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name], __name__), name)
    raise AttributeError(f"module 'edge_deploy' has no attribute {name!r}")
