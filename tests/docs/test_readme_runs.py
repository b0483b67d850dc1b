"""The README's shell sequences and the docs' Python snippets run as written (issue 34: "every command in README.md
and docs/ run as written"), so they cannot drift from the product again.

One test walks the README: install (twice, the second with `--pipeline bls`) -> `serve --foreground` -> status,
health -> sample -> infer (frames and the video) -> evaluate -> rollback, each command taken verbatim from the
README (optional `[...]` parts left out, comments dropped) and run by bash in a fresh directory with `edge-deploy`
on PATH, the real bundled tritonserver serving. While it serves, the Python snippets of README.md and
docs/client.md run through Sybil's Markdown parser and evaluator, with `frame` a sample frame.

The artifact `artifacts/lanedet` is made by tests/support/small_artifact.py, not by `convert` (minutes of export
that tests/export covers); docs/tls.md's snippet dials a vehicle's address and is marked `skip` there.
"""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import unittest
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
README = (REPO / "README.md").read_text()


def readme_command(starts: str) -> str:
    """The README's indented command line beginning with `starts`, without its comment and optional [..] parts."""
    found = [line.strip() for line in README.splitlines() if line.startswith("    " + starts)]
    assert len(found) == 1, f"README.md has {len(found)} lines starting {starts!r}: the test walks them as written"
    command = found[0].split("  #", 1)[0].strip()
    return re.sub(r"\s*\[[^\]]*\]", "", command)


def bash(command: str, cwd: Path, env: dict[str, str], timeout: float = 300) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(["bash", "-c", command], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"{command}: exit {done.returncode}\n{done.stdout[-1500:]}\n{done.stderr[-1500:]}"
    return done


@pytest.mark.slow
@pytest.mark.triton
def test_the_readme_sequences_run_as_written(tmp_path, laneatt_data) -> None:
    from small_artifact import make_artifact
    from triton_helpers import stop_process_group

    from edge_deploy.serve.checks import port_in_use

    if port_in_use("127.0.0.1", 8001):
        pytest.skip("127.0.0.1:8001, where the README's server listens, is in use on this machine")
    work = tmp_path / "work"
    (work / "bin").mkdir(parents=True)
    shim = work / "bin" / "edge-deploy"  # the console script of this checkout
    shim.write_text(f"#!/bin/sh\nexec {sys.executable} -m edge_deploy \"$@\"\n")
    shim.chmod(0o755)
    env = {**os.environ, "PATH": f"{work / 'bin'}:{os.environ['PATH']}", "PYTHONPATH": str(REPO),
           "EDGE_DEPLOY_STATE_DIR": str(work / "state"), "HOME": str(work)}
    for name in ("EDGE_DEPLOY_DEBUG", "TRITONSERVER", "XDG_CONFIG_HOME"):
        env.pop(name, None)
    make_artifact(work / "artifacts" / "lanedet", laneatt_data / "anchors_2784x77.npy", n=1000, seed=3)

    bash(readme_command("edge-deploy install artifacts/lanedet --repository"), work, env)
    bash(readme_command("edge-deploy install artifacts/lanedet --name lanedet --pipeline bls"), work, env)
    serve = readme_command("edge-deploy serve --foreground")
    server = subprocess.Popen(["bash", "-c", f"exec {serve}"], cwd=work, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL, text=True, start_new_session=True)
    try:
        ready = server.stdout.readline()
        assert ready.startswith(f"tritonserver serving {work / 'model_repository'} at 127.0.0.1:8001"), ready
        bash(readme_command("edge-deploy health --wait 300 --model lanedet"), work, env)
        synopsis = readme_command("edge-deploy status | stop")
        assert synopsis.startswith("edge-deploy status |")
        status = bash("edge-deploy status", work, env)
        assert "serve --foreground" in status.stdout and "lanedet: ready" in status.stdout, status.stdout
        bash(readme_command("edge-deploy sample -o samples && edge-deploy infer samples/*.png"), work, env)
        assert list((work / "lanes").glob("*.png"))
        bash(readme_command("edge-deploy sample -o samples --video"), work, env)
        assert (work / "lanes" / "drive.lanes.mp4").is_file() and (work / "lanes" / "drive.lanes.jsonl").is_file()
        bash(readme_command("edge-deploy evaluate --url 127.0.0.1:8001"), work, env)
        assert (work / "report.json").is_file()
        run_python_snippets(work)
        rolled = bash(readme_command("edge-deploy rollback lanedet"), work, env)
        assert "lanedet pinned to version 1 (was [2])" in rolled.stdout, rolled.stdout
    finally:
        stop_process_group(server, signal.SIGINT)  # Ctrl-C, as the README says


def run_python_snippets(work: Path) -> None:
    """Every ```python block of README.md and docs/client.md (Sybil), `frame` a sample frame, the server serving."""
    import cv2
    from sybil import Sybil
    from sybil.parsers.markdown import PythonCodeBlockParser, SkipParser

    frame = cv2.imread(str(next((work / "samples").glob("*.png"))))
    sybil = Sybil(parsers=[PythonCodeBlockParser(), SkipParser()])
    ran, skipped = 0, 0
    for page in (REPO / "README.md", REPO / "docs" / "client.md", REPO / "docs" / "tls.md"):
        document = sybil.parse(page)
        document.namespace["frame"] = frame
        for example in document:
            try:
                example.evaluate()
            except unittest.SkipTest:  # a `<!-- skip: next "why" -->` in the page says why
                skipped += 1
            else:
                ran += 1
    assert ran >= 2 and skipped == 1, (ran, skipped)
