"""edge_deploy.media stays light: a vehicle app (or the client) can use it without the server side or torch."""
from __future__ import annotations

import subprocess
import sys


def test_media_and_its_run_loop_pull_no_heavy_or_server_package(tmp_path) -> None:
    code = (
        "import sys, numpy as np, edge_deploy.media as m\n"
        "from edge_deploy.lanedet.lane import Lane\n"
        "lane = Lane(np.array([[10, 50], [20, 10]], np.float32), 0.9)\n"
        f"m.detect_images(lambda f: [lane], [('a.png', np.zeros((60, 80, 3), np.uint8))], __import__('pathlib').Path({str(tmp_path)!r}), model='x', write_json=True)\n"
        "heavy = ('torch', 'onnx', 'onnxruntime', 'tensorrt', 'tritonclient', 'typer', 'edge_deploy.repository', "
        "'edge_deploy.serve', 'edge_deploy.client', 'edge_deploy.training')\n"
        "print(','.join(h for h in heavy if h in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "", f"edge_deploy.media imported: {out.stdout.strip()}"
    assert (tmp_path / "a.lanes.png").is_file() and (tmp_path / "a.lanes.json").is_file()
