"""Package-level promises: a light `import edge_deploy` and a working console script."""
from __future__ import annotations

import subprocess
import sys


def test_import_does_not_pull_heavy_packages() -> None:
    code = (
        "import sys, edge_deploy, edge_deploy.cli, edge_deploy.lanedet, edge_deploy.media, edge_deploy.ros;"
        "heavy = [m for m in ('torch', 'onnx', 'tensorrt', 'pycuda', 'onnxruntime', 'rosbags', 'mcap', 'websockets')"
        " if m in sys.modules];"
        "print(','.join(heavy))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "", f"import edge_deploy imported: {out.stdout.strip()}"


def test_cli_help_lists_commands() -> None:
    out = subprocess.run([sys.executable, "-m", "edge_deploy", "--help"], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "convert" in out.stdout
