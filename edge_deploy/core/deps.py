"""Import optional heavy packages where they are used, with a helpful error."""
from __future__ import annotations

import importlib
from types import ModuleType

from ..errors import MissingDependencyError

_HINTS = {
    "torch": "install it with `pip install 'edge-deploy[torch]'` (on Jetson: NVIDIA's torch wheel for your JetPack)",
    "onnx": "install it with `pip install onnx`",
    "onnxruntime": "install it with `pip install onnxruntime`",
    "onnxslim": "install it with `pip install onnxslim`",
    "tensorrt": (
        "TensorRT comes with JetPack (apt install python3-libnvinfer); in a venv create it with "
        "`python3 -m venv --system-site-packages` so the system TensorRT is visible"
    ),
    "pycuda": "install it with `pip install 'edge-deploy[jetson]'` (builds against the CUDA toolkit from JetPack)",
    "matplotlib": "install it with `pip install matplotlib`",
    "cryptography": "install it with `pip install 'edge-deploy[tls]'`",
    "rosbags": "install it with `pip install 'edge-deploy[ros]'`",
    "mcap": "install it with `pip install 'edge-deploy[ros]'`",
    "websockets": "install it with `pip install 'edge-deploy[ros]'`",
}


def require(module: str, purpose: str) -> ModuleType:
    """Import `module` or raise MissingDependencyError saying why it is needed and how to get it."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        top = module.split(".")[0]
        hint = _HINTS.get(top, f"install it with `pip install {top}`")
        raise MissingDependencyError(f"{purpose} needs the Python package '{top}' ({exc}); {hint}.") from exc
