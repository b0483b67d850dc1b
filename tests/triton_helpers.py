"""Reading a real tritonserver's log in tests."""
from __future__ import annotations

from pathlib import Path

# Errors a GPU-less machine always logs (no CUDA driver): at startup, and when an ensemble loads.
CPU_ONLY_NOISE = ("CudaDriverHelper has not been initialized", "CUDA driver version is insufficient")


def failed_loads(log: Path) -> list[str]:
    """Failed loads and errors in a tritonserver log, minus the CUDA noise of this CPU machine."""
    lines = Path(log).read_text(errors="replace").splitlines()
    return [
        ln for ln in lines
        if "failed to load" in ln or (ln.startswith("E") and not any(noise in ln for noise in CPU_ONLY_NOISE))
    ]
