"""The README's shell sequences and the docs' Python snippets run as written (issue 34: "every command in README.md
and docs/ run as written"), so they cannot drift from the product again.

One test walks the README: install (twice, the second with `--pipeline bls`) -> `serve --foreground` -> stop (refused,
naming the foreground server) -> status, health -> sample -> infer (frames and the video) -> evaluate -> docs/bench.md's
and docs/geometry.md's command blocks -> rollback -> status, each command taken verbatim from the
README (optional `[...]` parts left out, comments dropped; fewer frames and shorter bench cells) and run by bash in a
fresh directory with `edge-deploy` on PATH, the real bundled tritonserver serving. While it serves, the Python snippets
of README.md and docs/client.md run through Sybil's Markdown parser and evaluator, with `frame` a sample frame.

The artifact `artifacts/lanedet` is made by tests/support/small_artifact.py, not by `convert` (minutes of export
that tests/export covers); docs/tls.md's snippet dials a vehicle's address and is marked `skip` there.
"""
from __future__ import annotations

import json
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


def doc_commands(page: str, starts: str = "edge-deploy ") -> list[str]:
    """The command lines of a docs/ page (indented or fenced) that begin with `starts`, comments dropped."""
    text = (REPO / "docs" / page).read_text()
    return [line.strip().split("  #", 1)[0].strip() for line in text.splitlines() if line.strip().startswith(starts)]


def bash(command: str, cwd: Path, env: dict[str, str], timeout: float = 300) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(["bash", "-c", command], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"{command}: exit {done.returncode}\n{done.stdout[-1500:]}\n{done.stderr[-1500:]}"
    return done


@pytest.mark.slow
@pytest.mark.triton
def test_the_readme_sequences_run_as_written(tmp_path, laneatt_data, default_port_alone) -> None:
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
    serve_err = work / "serve.stderr"
    with serve_err.open("w") as err:
        server = subprocess.Popen(["bash", "-c", f"exec {serve}"], cwd=work, env=env, stdout=subprocess.PIPE,
                                  stderr=err, text=True, start_new_session=True)
    try:
        ready = server.stdout.readline()
        assert ready.startswith(f"tritonserver serving {work / 'model_repository'} at 127.0.0.1:8001"), ready
        said_server_log(serve_err.read_text())
        stopped = subprocess.run(["edge-deploy", "stop"], cwd=work, env=env, capture_output=True, text=True)
        assert stopped.returncode != 0 and stopped.stderr.count("\n") == 1, stopped.stderr  # issue 45 #7
        assert f"`edge-deploy serve --foreground` (PID {server.pid}) serving {work / 'model_repository'}" \
               f" at 127.0.0.1:8001: stop it with Ctrl-C in its terminal or `kill -INT {server.pid}`" in stopped.stderr
        assert "run the server without it" not in stopped.stderr, stopped.stderr
        bash(readme_command("edge-deploy health --wait 300 --model lanedet"), work, env)
        synopsis = readme_command("edge-deploy status | stop")
        assert synopsis.startswith("edge-deploy status |")
        status = bash("edge-deploy status", work, env)
        assert "serve --foreground" in status.stdout and "lanedet: ready" in status.stdout, status.stdout
        bash(readme_command("edge-deploy sample -o samples && edge-deploy infer samples/*.png"), work, env)
        assert list((work / "lanes").glob("*.png"))
        video = readme_command("edge-deploy sample -o samples --video")
        assert " -n 60 " in video, video  # as written, with 6 frames instead of 60 (the bench page reads 4 of them)
        bash(video.replace(" -n 60 ", " -n 6 "), work, env)
        assert (work / "lanes" / "drive.lanes.mp4").is_file() and (work / "lanes" / "drive.lanes.jsonl").is_file()
        scored = readme_command("edge-deploy evaluate --url 127.0.0.1:8001")
        assert "--synthetic 200" in scored, scored  # as written, scoring 8 synthetic frames instead of 200
        bash(scored.replace("--synthetic 200", "--synthetic 8"), work, env)
        assert (work / "report.json").is_file()
        run_python_snippets(work)
        run_bench_page(work, env)
        run_geometry_page(work, env)
        rolled = bash(readme_command("edge-deploy rollback lanedet"), work, env)
        assert "lanedet pinned to version 1 (was [2])" in rolled.stdout, rolled.stdout
        after = bash("edge-deploy status", work, env).stdout  # issue 45 #2: version 2 was unloaded, not failed
        # right after the rollback version 2 may still be "unloading" (said so): never "failed to load"
        assert re.search(r"lanedet: ready, versions served: 1( \(|\n)", after) and "failed to load" not in after, after
    finally:
        stop_process_group(server, signal.SIGINT)  # Ctrl-C, as the README says


def said_server_log(stderr: str) -> None:
    """serve --foreground says where tritonserver's log is and keeps it there, not on the console (issue 45 #8)."""
    log = Path(re.search(r"tritonserver's log: (\S+)", stderr).group(1))
    assert not re.search(r"^[IWE]\d{4} ", stderr, re.M), stderr  # none of tritonserver's own (glog) lines
    assert re.search(r"^I\d{4} .*Started GRPCInferenceService", log.read_text(), re.M), log
    assert log.name.endswith(".foreground.log") and log.parent.name == "servers", log


FAST = "--seconds 0.2 --warmup 0.05"  # a bench cell's time: the commands run as written, only shorter


def run_bench_page(work: Path, env: dict[str, str]) -> None:
    """docs/bench.md's examples against the README's `serve --foreground` server (its key found by bench, issue 45
    #1), each cell shortened; the vehicle-7 line needs a vehicle over mutual TLS and is left out."""
    lines = [line for line in doc_commands("bench.md") if "vehicle-7" not in line]
    assert len(lines) == 5, lines
    by_repository, by_url, frames, realtime, realtime_json = lines
    narrow = bash(by_repository.replace("edge-deploy bench", f"edge-deploy bench {FAST} --concurrency 1"), work,
                  {**env, "COLUMNS": "80"}).stdout
    assert "lanedet (client-side), concurrency 1: " in narrow and "lanedet_pipeline (bls), concurrency 1: " in narrow
    assert max(map(len, narrow.splitlines())) <= 80 and "…" not in narrow, narrow  # issue 45 #6
    assert "--seconds 10" in by_url
    table = bash(by_url.replace("--seconds 10", FAST), work, {**env, "COLUMNS": "200"}).stdout
    assert table.count("│ lanedet_pipeline │ bls ") == 3 and "…" not in table, table  # concurrency 1, 2 and 4
    assert " -n 60 " in frames, frames  # a 6-frame video instead of 60 (bench reads 4 of them)
    bash(frames.replace(" -n 60 ", " -n 6 ").replace("edge-deploy bench", f"edge-deploy bench {FAST} --concurrency 1 "
                                                     "--max-frames 4"), work, env)
    report = json.loads((work / "bench.json").read_text())
    assert report["frames"].startswith("samples/drive.mp4") and {c["model"] for c in report["cells"]} == {
        "lanedet", "lanedet_pipeline"}, report["frames"]
    assert (work / "bench.png").read_bytes()[:4] == b"\x89PNG"
    # issue 42: the realtime lines, each stream timed 0.5 s (and 1 or 2 cameras, not 4)
    assert "--seconds 10" in realtime and "--cameras 1,2,4" in realtime
    streams = bash(realtime.replace("--seconds 10", "--seconds 0.5 --warmup 0.2").replace("1,2,4", "1,2"), work,
                   {**env, "COLUMNS": "80"}).stdout
    assert "realtime" in streams and "2/2" in streams and max(map(len, streams.splitlines())) <= 80, streams
    bash(realtime_json.replace("edge-deploy bench", "edge-deploy bench --seconds 0.5 --warmup 0.2"), work, env)
    live = json.loads((work / "realtime.json").read_text())
    assert live["mode"] == "realtime" and [c["model"] for c in live["cells"]] == ["lanedet"]


def run_geometry_page(work: Path, env: dict[str, str]) -> None:
    """docs/geometry.md's command block, with fewer frames (-n 90 -> 6, --synthetic 200 -> 5)."""
    lines = doc_commands("geometry.md")
    assert len(lines) == 4, lines
    for line in lines:
        bash(line.replace("-n 90", "-n 6").replace("--synthetic 200", "--synthetic 5"), work, env)
    frame = json.loads((work / "lanes" / "road-000.lanes.json").read_text())
    assert "markers" in frame and "figures" in frame, sorted(frame)
    drive = (work / "lanes" / "drive.lanes.jsonl").read_text().splitlines()
    assert len(drive) == 6 and all("markers" in json.loads(line) for line in drive)


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
