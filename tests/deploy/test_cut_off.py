"""An install or rollback cut off between its config write and the server's load loses nothing (issue 44, item 1):
the next install spares what the server serves and what last served, rollback returns to a version that served, and
`models`, `health` and `status` name a config that selects another version than the one serving.

The cut-off is made with the real commands: install and rollback run while no server record can be found (another
state directory) write their files and configs only, which is the disk a SIGKILL after the config write leaves
(the write itself is atomic: docs/failures.md). One real explicit-mode tritonserver serves throughout.
"""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from cli_process import run_cli
from small_artifact import make_artifact

from edge_deploy.deploy.install import install
from edge_deploy.deploy.options import InstallOptions
from edge_deploy.deploy.rollback import rollback
from edge_deploy.serve import admin
from edge_deploy.serve import server_record as control
from edge_deploy.serve.server_record import process_start
from edge_deploy.core.triton_layout import policy_now, versions

KEY_NAME = "edge-deploy-key"


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "EDGE_DEPLOY_DEBUG"}
    return run_cli(args, env=env, timeout=120)


@pytest.fixture(scope="module")
def artifact(tmp_path_factory, laneatt_data) -> Path:
    return make_artifact(tmp_path_factory.mktemp("art") / "a", laneatt_data / "anchors_2784x77.npy", n=100, seed=1)


def test_after_rollback_to_without_a_server_install_keep_spares_the_pinned_version(tmp_path, artifact,
                                                                                    monkeypatch) -> None:
    # "Tests that notice": with no server, the config is the only witness of what a server would serve.
    monkeypatch.setenv("EDGE_DEPLOY_STATE_DIR", str(tmp_path / "state"))
    repo = tmp_path / "repo"
    for _ in range(3):
        install(InstallOptions(artifact, repo, "lane", runtime="python"))
    rollback(repo, "lane", to=1)
    result = install(InstallOptions(artifact, repo, "lane", runtime="python", keep=1))
    assert versions(repo, "lane") == [1, 4] and result.pruned == {"lane": [2, 3]}


@pytest.mark.triton
def test_a_cut_off_install_or_rollback_never_prunes_what_serves(tmp_path, artifact, start_triton, monkeypatch) -> None:
    state, elsewhere = tmp_path / "state", tmp_path / "no-server-here"
    monkeypatch.setenv("EDGE_DEPLOY_STATE_DIR", str(state))
    repo = tmp_path / "repo"
    install(InstallOptions(artifact, repo, "lane", runtime="python"))
    key_file = tmp_path / "key"
    key_file.write_text("k" * 32 + "\n")
    server = start_triton(repo, model_control="explicit", restricted_key=(KEY_NAME, "k" * 32))
    # the record a `serve --foreground` writes (this test process stands for that one, so `status` lists it)
    control.save_record(control.ServerRecord(url=server.url, repository=repo, key_header=KEY_NAME, key_file=key_file,
                                             scope="user", pid=os.getpid(), pid_start=process_start(os.getpid())))
    install(InstallOptions(artifact, repo, "lane", runtime="python"))
    assert admin.served_versions(server.url, "lane") == [2]

    # an install cut off after its config write: version 3 selected, never loaded; 2 still serves
    monkeypatch.setenv("EDGE_DEPLOY_STATE_DIR", str(elsewhere))
    install(InstallOptions(artifact, repo, "lane", runtime="python"))
    monkeypatch.setenv("EDGE_DEPLOY_STATE_DIR", str(state))
    assert policy_now(repo, "lane") == [3] and admin.served_versions(server.url, "lane") == [2]
    listed = _cli("models", "--repository", str(repo))
    assert listed.returncode == 0 and "config.pbtxt selects version 3 but the server serves 2" in listed.stdout, listed
    assert f"`edge-deploy rollback lane --to 2 --repository {repo}` pins what serves" in listed.stdout
    health = _cli("health", "--url", server.url, "--repository", str(repo))
    assert health.returncode == 0 and "lane: config.pbtxt selects version 3 but the server serves 2" in health.stdout
    status = _cli("status")
    assert "lane: config.pbtxt selects version 3 but the server serves 2" in status.stdout, status

    result = install(InstallOptions(artifact, repo, "lane", runtime="python", keep=1))
    assert result.served == {"lane": [4]} and 2 in versions(repo, "lane"), (result.pruned, versions(repo, "lane"))
    assert rollback(repo, "lane").version == 2  # the version that served, not 3 that no server loaded
    assert admin.served_versions(server.url, "lane") == [2]

    # a rollback cut off at its config write: pinned to 3 while 5 serves
    install(InstallOptions(artifact, repo, "lane", runtime="python"))
    assert admin.served_versions(server.url, "lane") == [5]
    monkeypatch.setenv("EDGE_DEPLOY_STATE_DIR", str(elsewhere))
    rollback(repo, "lane", to=3)
    monkeypatch.setenv("EDGE_DEPLOY_STATE_DIR", str(state))
    assert policy_now(repo, "lane") == [3] and admin.served_versions(server.url, "lane") == [5]
    result = install(InstallOptions(artifact, repo, "lane", runtime="python", keep=1))
    assert result.served == {"lane": [6]} and 5 in versions(repo, "lane"), (result.pruned, versions(repo, "lane"))
    assert "selects version" not in _cli("models", "--repository", str(repo)).stdout  # settled: they agree again
