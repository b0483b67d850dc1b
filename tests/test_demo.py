"""`bash scripts/demo.sh`, the README's first command, with the default family and every `FAMILY=...` the README
documents: convert, install with a pipeline, a real tritonserver, infer on a frame and a drive, evaluate, pictures.

Each run takes minutes (a whole convert and server start), so the default suite skips these and `.ci/run` runs
them on their own (EDGE_DEPLOY_DEMO_TESTS=1, after the suite): CI runs every documented demo, and the suite keeps
its time."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from needs import torch_or_skip

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")
FAMILIES = ["", *sorted(set(re.findall(r"FAMILY=(\w+)", README)))]

pytestmark = [
    pytest.mark.slow, pytest.mark.triton,
    pytest.mark.once(reason="minutes per family"),
]


def test_the_readme_documents_other_families_for_the_demo() -> None:
    assert len(FAMILIES) >= 3, FAMILIES  # the default (LaneATT) and at least ufldv2 and clrnet


@pytest.mark.parametrize("family", FAMILIES, ids=lambda f: f or "default")
def test_demo_runs_as_the_readme_shows(family: str, tmp_path: Path) -> None:
    torch_or_skip()
    from conftest import free_port

    env = {**os.environ, "OUT": str(tmp_path / "demo"), "PORT": str(free_port())}
    env.pop("FAMILY", None)
    if family:
        env["FAMILY"] = family
    done = subprocess.run(["bash", "scripts/demo.sh"], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=1200)
    assert done.returncode == 0, (done.stdout[-3000:], done.stderr[-3000:])
    out = tmp_path / "demo"
    assert (out / "lanes" / "road-000.lanes.png").stat().st_size > 10_000
    assert (out / "lanes" / "drive.lanes.mp4").stat().st_size > 10_000
    assert (out / "evaluate" / "worst_frames.png").is_file()
    lanes = (out / "lanes" / "road-000.lanes.json").read_text()
    assert '"lanes"' in lanes
    if not family:  # the README's figure comes from the demo's artifact: re-measured with its command (issue 45 #4)
        checked = subprocess.run([sys.executable, "scripts/docs_figures.py", str(out / "lanedet")], cwd=ROOT,
                                 capture_output=True, text=True, timeout=1200)
        assert checked.returncode == 0, checked.stdout + checked.stderr
