"""A second `install --pipeline bls` of NAME, served, is no cut-off install (issue 56, item 1).

The BLS pipeline calls whichever NAME the server serves, so a new version of NAME that the same pipeline can serve
leaves the pipeline serving at its old version while its config selects the new one (docs/pipelines.md,
"Versions"). `models`, `status` and `health --repository` must not call that "cut off"; a cut-off install, and a
pipeline version that would do otherwise, still are. One real explicit-mode tritonserver (Python backend).
"""
from __future__ import annotations

import os
from pathlib import Path

import pytest
from small_artifact import make_artifact
from triton_helpers import run_cli

from edge_deploy.deploy.install import install
from edge_deploy.deploy.options import InstallOptions
from edge_deploy.deploy.rollback import rollback
from edge_deploy.serve import admin
from edge_deploy.serve import server_record as control
from edge_deploy.serve.server_record import process_start

KEY_NAME = "edge-deploy-key"
CUT_OFF = "config.pbtxt selects version"


@pytest.mark.triton
def test_a_second_bls_install_is_not_reported_as_cut_off(tmp_path, laneatt_data, start_triton, monkeypatch) -> None:
    anchors = laneatt_data / "anchors_2784x77.npy"
    first, second = (make_artifact(tmp_path / f"a{s}", anchors, n=100, seed=s) for s in (1, 2))
    state = tmp_path / "state"  # the state directory run_cli's commands use too
    monkeypatch.setenv("EDGE_DEPLOY_STATE_DIR", str(state))
    repo = tmp_path / "repo"
    install(InstallOptions(first, repo, "lanedet", runtime="python", pipeline="bls"))
    key = "k" * 32
    (tmp_path / "key").write_text(key + "\n")
    server = start_triton(repo, model_control="explicit", restricted_key=(KEY_NAME, key))
    # the record a `serve --foreground` writes (this test process stands for that one, so `status` lists it)
    control.save_record(control.ServerRecord(url=server.url, repository=repo, key_header=KEY_NAME,
                                             key_file=tmp_path / "key", scope="user", pid=os.getpid(),
                                             pid_start=process_start(os.getpid())))

    def warnings() -> dict[str, str]:
        shown = {
            "models": run_cli(tmp_path, "models", "--repository", str(repo)),
            "status": run_cli(tmp_path, "status"),
            "health": run_cli(tmp_path, "health", "--url", server.url, "--repository", str(repo)),
        }
        for command, done in shown.items():
            assert "lanedet_pipeline" in done.stdout, (command, done.stdout, done.stderr)
        return {command: "\n".join(line for line in done.stdout.splitlines() if CUT_OFF in line)
                for command, done in shown.items()}

    result = install(InstallOptions(second, repo, "lanedet", runtime="python", pipeline="bls"))
    assert result.served == {"lanedet": [2], "lanedet_pipeline": [1]}  # the pipeline keeps serving, as documented
    assert warnings() == {"models": "", "status": "", "health": ""}

    # The rollback that leaves the pipeline serving (its version 1 does what the served 1 does) says nothing either.
    assert rollback(repo, "lanedet", to=1).served == {"lanedet": [1], "lanedet_pipeline": [1]}
    install(InstallOptions(second, repo, "lanedet", runtime="python", pipeline="bls"))  # version 3
    assert admin.served_versions(server.url, "lanedet_pipeline") == [1]
    assert warnings() == {"models": "", "status": "", "health": ""}

    # A cut-off install is still reported: NAME selects 4 but serves 3 (its pipeline 4 would do what 1 does).
    monkeypatch.setenv("EDGE_DEPLOY_STATE_DIR", str(tmp_path / "no-server-here"))
    install(InstallOptions(second, repo, "lanedet", runtime="python", pipeline="bls"))
    # ...and so is a pipeline version that would not do what the served one does (other dims: 1000 anchors).
    other = make_artifact(tmp_path / "a3", anchors, n=1000, seed=3)
    install(InstallOptions(other, repo, "lanedet", runtime="python", pipeline="bls"))  # version 5, cut off
    monkeypatch.setenv("EDGE_DEPLOY_STATE_DIR", str(state))
    for command, lines in warnings().items():
        assert "lanedet: config.pbtxt selects version 5 but the server serves 3" in lines, (command, lines)
        assert "lanedet_pipeline: config.pbtxt selects version 5 but the server serves 1" in lines, (command, lines)
