"""Commands that talk to a server find it the way `status` does (issue 56, item 4).

Without --url, `health`, `infer` and `bench` dial the server the state directory's record names: that of
--repository, else of ./model_repository (serve's default), else the one `serve --foreground` running here; each
says which on one line of stderr. An explicit --url still wins (and no line is printed). `health --wait` says it is
waiting, every few seconds. One real tritonserver on a free port (never 8001), its record written as `serve
--foreground` writes it (this test process stands for that process, so the record counts as running).
"""
from __future__ import annotations

import os
from pathlib import Path

import pytest
from conftest import free_port
from small_artifact import make_artifact
from triton_helpers import cli_env, write_model

from cli_process import run_cli
from edge_deploy.deploy.install import install
from edge_deploy.deploy.options import InstallOptions
from edge_deploy.serve import server_record as control
from edge_deploy.serve.server_record import process_start
from edge_deploy.serve.status import WAIT_REPORT_EVERY_S

KEY_NAME = "edge-deploy-key"


@pytest.fixture(scope="module")
def served(tmp_path_factory, laneatt_data):
    """(work dir holding ./model_repository, state dir, server) with the server's record in the state dir."""
    from edge_deploy.serve.argv import ServerOptions
    from edge_deploy.serve.discovery import find_tritonserver
    from edge_deploy.serve.process import TritonProcess

    work = tmp_path_factory.mktemp("discovery")
    repo = work / "model_repository"
    write_model(repo, "add_one")
    art = make_artifact(work / "art", laneatt_data / "anchors_2784x77.npy", n=100, seed=1)
    install(InstallOptions(art, repo, "lanedet", runtime="python"))
    key = "k" * 32
    (work / "key").write_text(key + "\n")
    proc = TritonProcess(find_tritonserver(cache_dir=work / "cache"),
                         ServerOptions(model_repository=repo, grpc_port=free_port(), restricted_key=(KEY_NAME, key)),
                         work / "triton.log")
    proc.start()
    try:
        proc.wait_ready(120)
        state = work / "state"
        record = control.ServerRecord(url=proc.url, repository=repo.resolve(), key_header=KEY_NAME,
                                      key_file=work / "key", scope="user", pid=os.getpid(),
                                      pid_start=process_start(os.getpid()))
        old = os.environ.get("EDGE_DEPLOY_STATE_DIR")
        os.environ["EDGE_DEPLOY_STATE_DIR"] = str(state)
        try:
            control.save_record(record)
        finally:
            if old is None:
                os.environ.pop("EDGE_DEPLOY_STATE_DIR")
            else:
                os.environ["EDGE_DEPLOY_STATE_DIR"] = old
        yield work, state, proc
    finally:
        proc.stop(timeout=15)


def cli(work: Path, state: Path, *args: str, cwd: Path | None = None, timeout: float = 120):
    env = cli_env(work)
    env["EDGE_DEPLOY_STATE_DIR"] = str(state)
    return run_cli(args, env=env, cwd=cwd or work, timeout=timeout)


def test_health_finds_the_server_status_shows(served) -> None:
    work, state, proc = served
    status = cli(work, state, "status")
    assert f"server {proc.url}: ready" in status.stdout, (status.stdout, status.stderr)
    # from the directory holding the default repository: its server
    done = cli(work, state, "health")
    assert done.returncode == 0 and f"ready: {proc.url}" in done.stdout, (done.stdout, done.stderr)
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"server {proc.url}: `edge-deploy serve --foreground` (PID "), lines
    assert "the default repository" in lines[0] and "add_one" in done.stdout and "lanedet" in done.stdout
    # from anywhere else: the one foreground server running here
    elsewhere = work / "elsewhere"
    elsewhere.mkdir(exist_ok=True)
    done = cli(work, state, "health", cwd=elsewhere)
    assert done.returncode == 0 and f"ready: {proc.url}" in done.stdout, (done.stdout, done.stderr)
    assert "the one server running here" in done.stderr, done.stderr
    # --repository: that repository's server
    done = cli(work, state, "health", "--repository", str(work / "model_repository"), cwd=elsewhere)
    assert done.returncode == 0 and f"server {proc.url}: " in done.stderr, (done.stdout, done.stderr)


def test_an_explicit_url_wins_and_prints_no_line(served) -> None:
    work, state, proc = served
    nothing = f"127.0.0.1:{free_port()}"
    done = cli(work, state, "health", "--url", nothing)
    assert done.returncode == 3 and nothing in done.stderr and proc.url not in done.stderr, done.stderr
    assert not done.stderr.startswith("server "), done.stderr


def test_health_wait_says_it_is_waiting(served) -> None:
    work, state, _ = served
    nothing = f"127.0.0.1:{free_port()}"
    wait = WAIT_REPORT_EVERY_S + 3
    done = cli(work, state, "health", "--url", nothing, "--wait", f"{wait:g}", "--model", "add_one")
    assert done.returncode == 3, (done.stdout, done.stderr)
    waiting = [line for line in done.stderr.splitlines() if line.startswith(f"waiting for the server at {nothing}: ")]
    assert waiting and "not reachable" in waiting[0] and f"of {wait:g} s" in waiting[0], done.stderr


def test_infer_and_bench_find_the_server(served, tmp_path) -> None:
    work, state, proc = served
    done = cli(work, state, "infer", "--synthetic", "1", "--out", str(tmp_path / "lanes"), timeout=300)
    assert done.returncode == 0, (done.stdout, done.stderr)
    assert done.stderr.splitlines()[0].startswith(f"server {proc.url}: "), done.stderr
    assert (tmp_path / "lanes" / "road-000.lanes.png").is_file()
    done = cli(work, state, "bench", "--model", "lanedet", "--seconds", "0.5", "--warmup", "0", "--concurrency", "1",
               "--max-frames", "1", "--no-check", "--json", timeout=300)
    assert done.returncode == 0, (done.stdout, done.stderr)
    assert done.stderr.splitlines()[0].startswith(f"server {proc.url}: "), done.stderr
    assert proc.url in done.stdout
