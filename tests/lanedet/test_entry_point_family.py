"""A lane-model family from another installed distribution: the complete minimal plug-in of docs/families.md, copied
out of the page, `pip install`ed (its pyproject.toml, a real build) into a folder of its own and found through the
`edge_deploy.families` entry point group. With that folder on PYTHONPATH, `convert mylane`, `install` (raw and
--pipeline bls), the real bundled tritonserver and `infer` (LaneDetClient) work, and no edge-deploy file names the
family; without it, `mylane` is unknown, its pipeline still serves decoded lanes, and the raw model names the package
to install (issue 45 item 10)."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from needs import torch_or_skip

torch_or_skip()  # the plugin's model is a torch module
from triton_helpers import cli_env, serving  # noqa: E402

pytestmark = pytest.mark.triton
DOC = Path(__file__).resolve().parents[2] / "docs" / "families.md"
FAMILY, PACKAGE = "mylane", "mylane-edge"


def doc_project(out: Path) -> Path:
    """The plug-in's files as docs/families.md gives them: every fenced block whose first line is `# PATH`."""
    blocks = re.findall(r"```(?:python|toml)\n# (\S+)\n(.*?)```", DOC.read_text(), flags=re.S)
    assert {path for path, _ in blocks} == {"pyproject.toml", "mylane_edge/__init__.py", "mylane_edge/family.py",
                                            "mylane_edge/decode.py"}, [path for path, _ in blocks]
    for path, text in blocks:
        (out / path).parent.mkdir(parents=True, exist_ok=True)
        (out / path).write_text(text)
    return out


@pytest.fixture(scope="module")
def plugin(tmp_path_factory):
    work = tmp_path_factory.mktemp("plugin")
    site = work / "site"
    project = doc_project(work / "project")
    # what `pip install .` does in the package's directory (no network here: the build backend is the one installed)
    done = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index",
                           "--no-build-isolation", "--target", str(site), str(project)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    env = cli_env(work)
    env["PYTHONPATH"] = os.pathsep.join([str(site), *filter(None, [env.get("PYTHONPATH")])])
    return work, env


def edge_deploy(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "edge_deploy", *args], env=env, capture_output=True, text=True,
                          timeout=300)


@pytest.fixture(scope="module")
def served(plugin):
    work, env = plugin
    done = edge_deploy(env, "convert", FAMILY, "-o", str(work / "art"), "--target", "onnx")
    assert done.returncode == 0, done.stderr
    repo = work / "repo"
    done = edge_deploy(env, "install", str(work / "art"), "-r", str(repo), "--name", FAMILY, "--pipeline", "bls")
    assert done.returncode == 0, done.stderr
    with serving(repo, work) as proc:
        yield work, env, proc


def test_the_installed_family_is_found_only_through_its_distribution(plugin, tmp_path) -> None:
    work, env = plugin
    listed = edge_deploy(env, "families", "--json")
    row = next(row for row in json.loads(listed.stdout) if row["name"] == FAMILY)
    assert (row["title"], row["origin"]) == ("MyLane", f"package {PACKAGE}") and listed.stderr == "", listed.stderr
    helped = edge_deploy(env, "convert", "--help")
    assert FAMILY in helped.stdout
    without = edge_deploy(cli_env(tmp_path), "convert", FAMILY, "-o", str(tmp_path / "art"), "--target", "onnx")
    assert without.returncode == 2 and f"'{FAMILY}' is not" in without.stderr
    assert len(without.stderr.strip().splitlines()) == 1


def _infer(env: dict[str, str], frame: Path, out: Path, url: str, model: str) -> list[dict] | str:
    """The lanes `infer --json` wrote for `frame`, or its stderr when it failed."""
    done = edge_deploy(env, "infer", str(frame), "--url", url, "--model", model, "--json", "--no-png", "-o", str(out),
                       "--wait", "30")
    if done.returncode != 0:
        return f"exit {done.returncode}: {done.stderr}"
    return json.loads((out / f"{frame.stem}.lanes.json").read_text())["lanes"]


def test_convert_install_serve_and_infer_a_family_from_another_package(served, tmp_path) -> None:
    work, env, proc = served
    # read as JSON: this process has no plugin (Manifest.read would say which package to install)
    recorded = json.loads((work / "art" / "manifest.json").read_text())
    assert recorded["family"] == FAMILY and recorded["source"]["family_package"] == PACKAGE
    frame = np.zeros((80, 128, 3), np.uint8)
    frame[..., 2] = 220  # BGR red: the first lane scores high, the others not
    import cv2

    cv2.imwrite(str(work / "red.png"), frame)
    raw = _infer(env, work / "red.png", tmp_path / "raw", proc.url, FAMILY)
    piped = _infer(env, work / "red.png", tmp_path / "piped", proc.url, f"{FAMILY}_pipeline")
    assert not isinstance(raw, str) and not isinstance(piped, str), (raw, piped)
    assert len(raw) == 1  # row 0 only: its x from 8 (top) to 16 (bottom) at 64 wide, 2x here
    np.testing.assert_allclose(raw[0]["points"], [[16.0, 0.0], [32.0, 80.0]], atol=0.05)
    assert len(piped) == 1  # the BLS pipeline ran the decoder install copied from the plugin
    np.testing.assert_allclose(piped[0]["points"], raw[0]["points"], atol=1e-3)
    assert piped[0]["score"] == pytest.approx(raw[0]["score"], abs=1e-3)

    # a client without the plug-in: the pipeline's lanes are decoded on the server, so it serves them; the raw model
    # needs the family's decoder here, and the line names the package that has it
    bare = cli_env(tmp_path)
    thin = _infer(bare, work / "red.png", tmp_path / "thin", proc.url, f"{FAMILY}_pipeline")
    assert not isinstance(thin, str), thin
    assert len(thin) == 1 and np.allclose(thin[0]["points"], piped[0]["points"], atol=1e-3)
    refused = _infer(bare, work / "red.png", tmp_path / "refused", proc.url, FAMILY)
    assert isinstance(refused, str) and refused.startswith("exit 2:"), refused
    # the error is one line, after the one progress line of --wait
    lines = refused.split(": ", 1)[1].strip().splitlines()
    assert len(lines) == 2 and lines[0].startswith("waiting up to 30 s for") and lines[1].startswith("error: "), lines
    assert f"install {PACKAGE} where the client runs, or ask for {FAMILY}_pipeline" in refused
    assert "upgrade edge-deploy" not in refused
