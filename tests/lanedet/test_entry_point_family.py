"""A lane-model family from another installed distribution: a real wheel (tests/data/lane_plugin, packed here),
installed by pip into a folder of its own, found through the `edge_deploy.families` entry point group. With that
folder on PYTHONPATH, `convert stripes`, `install` (raw and --pipeline bls), the real bundled tritonserver and
`infer` (LaneDetClient) work, and no edge-deploy file names the family; without it, `stripes` is unknown."""
from __future__ import annotations

import base64
import hashlib
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest
from needs import torch_or_skip

torch_or_skip()  # the plugin's model is a torch module
from triton_helpers import cli_env, serving  # noqa: E402

pytestmark = pytest.mark.triton
PLUGIN = Path(__file__).resolve().parents[1] / "data" / "lane_plugin"
DIST = "edge_deploy_stripes-1.0"


def build_wheel(out: Path) -> Path:
    """The plugin's sources as a py3-none-any wheel with its entry point (what a build backend writes)."""
    files = {f"edge_deploy_stripes/{p.name}": p.read_bytes() for p in sorted((PLUGIN / "edge_deploy_stripes").glob("*.py"))}
    info = f"{DIST}.dist-info"
    files[f"{info}/METADATA"] = b"Metadata-Version: 2.1\nName: edge-deploy-stripes\nVersion: 1.0\n"
    files[f"{info}/WHEEL"] = b"Wheel-Version: 1.0\nGenerator: edge-deploy tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    files[f"{info}/entry_points.txt"] = b"[edge_deploy.families]\nstripes = edge_deploy_stripes:FAMILY\n"
    record = [f"{name},sha256={base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b'=').decode()},"
              f"{len(data)}" for name, data in files.items()]
    files[f"{info}/RECORD"] = ("\n".join([*record, f"{info}/RECORD,,"]) + "\n").encode()
    wheel = out / f"{DIST}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for name, data in files.items():
            archive.writestr(name, data)
    return wheel


@pytest.fixture(scope="module")
def plugin(tmp_path_factory):
    work = tmp_path_factory.mktemp("plugin")
    site = work / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index", "--target", str(site),
                    str(build_wheel(work))], check=True, capture_output=True, text=True, timeout=120)
    env = cli_env(work)
    env["PYTHONPATH"] = os.pathsep.join([str(site), *filter(None, [env.get("PYTHONPATH")])])
    return work, env


def edge_deploy(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "edge_deploy", *args], env=env, capture_output=True, text=True,
                          timeout=300)


@pytest.fixture(scope="module")
def served(plugin):
    work, env = plugin
    done = edge_deploy(env, "convert", "stripes", "-o", str(work / "art"), "--target", "onnx")
    assert done.returncode == 0, done.stderr
    repo = work / "repo"
    done = edge_deploy(env, "install", str(work / "art"), "-r", str(repo), "--name", "stripes", "--pipeline", "bls")
    assert done.returncode == 0, done.stderr
    with serving(repo, work) as proc:
        yield work, env, proc


def test_the_installed_family_is_found_only_through_its_distribution(plugin, tmp_path) -> None:
    work, env = plugin
    listed = subprocess.run([sys.executable, "-c", "from edge_deploy.lanedet.family import family_names, get_family; "
                             "print(family_names()[-1], get_family('stripes').title)"],
                            env=env, capture_output=True, text=True, timeout=60)
    assert listed.stdout.split() == ["stripes", "Stripes"], listed.stderr
    helped = edge_deploy(env, "convert", "--help")
    assert "stripes" in helped.stdout
    without = edge_deploy(cli_env(tmp_path), "convert", "stripes", "-o", str(tmp_path / "art"), "--target", "onnx")
    assert without.returncode == 2 and "'stripes' is not" in without.stderr
    assert len(without.stderr.strip().splitlines()) == 1


def test_convert_install_serve_and_infer_a_family_from_another_package(served) -> None:
    work, env, proc = served
    # read as JSON: this process has no plugin, so Manifest.read would call the unknown family a damaged manifest
    assert json.loads((work / "art" / "manifest.json").read_text())["family"] == "stripes"
    frame = np.zeros((80, 128, 3), np.uint8)
    frame[..., 2] = 220  # BGR red: the first stripe scores high, the others not
    import cv2

    cv2.imwrite(str(work / "red.png"), frame)
    lanes = {}
    for model in ("stripes", "stripes_pipeline"):
        out = work / model
        done = edge_deploy(env, "infer", str(work / "red.png"), "--url", proc.url, "--model", model, "--json",
                           "--no-png", "-o", str(out), "--wait", "30")
        assert done.returncode == 0, done.stderr
        lanes[model] = json.loads((out / "red.lanes.json").read_text())["lanes"]
    assert len(lanes["stripes"]) == 1  # row 0 only: its x from 8 (top) to 16 (bottom) at 64 wide, 2x here
    np.testing.assert_allclose(lanes["stripes"][0]["points"], [[16.0, 0.0], [32.0, 80.0]], atol=0.05)
    assert len(lanes["stripes_pipeline"]) == 1  # the BLS pipeline ran the decoder install copied from the plugin
    np.testing.assert_allclose(lanes["stripes_pipeline"][0]["points"], lanes["stripes"][0]["points"], atol=1e-3)
    assert lanes["stripes_pipeline"][0]["score"] == pytest.approx(lanes["stripes"][0]["score"], abs=1e-3)
