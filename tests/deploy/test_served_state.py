"""What serves is never changed or lost by a mistaken command (issue 34, items 1-6): a pipeline's name is not free
for a lane model, a rollback that fails half-way puts back what served, a state file of a newer format or with
wrong types, and a state directory that is a file.

Real files and the real bundled tritonserver throughout; one explicit-mode server serves the module's served cases.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from cli_process import run_cli
from small_artifact import make_artifact

from edge_deploy.errors import RepositoryError
from edge_deploy.deploy.install import install
from edge_deploy.deploy.options import InstallOptions


ANCHORS = "anchors_2784x77.npy"  # in laneatt_data: LaneATT's anchor table (small_artifact's rows)


@pytest.fixture(autouse=True)
def _state_dir(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("EDGE_DEPLOY_STATE_DIR", str(tmp_path / "state"))


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory, laneatt_data) -> tuple[Path, Path]:
    """Two small artifacts whose lanes differ."""
    work = tmp_path_factory.mktemp("artifacts")
    anchors = laneatt_data / ANCHORS
    return make_artifact(work / "a", anchors, n=100, seed=1), make_artifact(work / "b", anchors, n=100, seed=2)


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in (env or os.environ).items() if k != "EDGE_DEPLOY_DEBUG"}
    return run_cli(args, env=env, timeout=120)


def snapshot(repo: Path) -> dict[str, bytes]:
    """Every file of a repository, by path (what a refused command must leave as it was)."""
    return {str(p.relative_to(repo)): p.read_bytes() for p in sorted(repo.rglob("*")) if p.is_file()}


def one_line_refusal(proc: subprocess.CompletedProcess[str], needle: str) -> None:
    """Exit 2 and one error line holding `needle` (after any notes, such as which tritonserver `serve` found)."""
    assert proc.returncode == 2, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert errors == proc.stderr.splitlines()[-1:] and needle in errors[0], proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr


# ------------------------------------------------------------------ 1. a pipeline's name is not free for the taking


@pytest.mark.parametrize("kind, taken, role", [
    ("bls", "lane_pipeline", "pipeline"),
    ("ensemble", "lane_pipeline", "pipeline"),
    ("ensemble", "lane_preprocess", "preprocess"),
    ("ensemble", "lane_postprocess", "postprocess"),
])
def test_a_pipeline_name_is_refused_to_a_lane_model(tmp_path, artifacts, kind, taken, role) -> None:
    first, other = artifacts
    repo = tmp_path / "repo"
    install(InstallOptions(first, repo, "lane", runtime="python", pipeline=kind))
    before = snapshot(repo)
    with pytest.raises(RepositoryError, match=f"{taken} is lane's {role} in"):
        install(InstallOptions(other, repo, taken, runtime="python", pipeline=False))
    for pipeline in ("--no-pipeline", "--pipeline=bls"):
        proc = cli("install", str(other), "--repository", str(repo), "--name", taken, "--runtime", "python", pipeline)
        one_line_refusal(proc, f"{taken} is lane's {role} in")
    assert snapshot(repo) == before


def test_a_lane_model_name_is_refused_to_a_pipeline(tmp_path, artifacts) -> None:
    first, other = artifacts
    repo = tmp_path / "repo"
    install(InstallOptions(first, repo, "lane_pipeline", runtime="python", pipeline=False))
    before = snapshot(repo)
    with pytest.raises(RepositoryError, match="lane_pipeline is a model of its own in"):
        install(InstallOptions(other, repo, "lane", runtime="python", pipeline="bls"))
    assert snapshot(repo) == before


# ------------------------------------------------------------------ one explicit-mode server for the served cases

KEY_NAME = "edge-deploy-key"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """The real bundled tritonserver, explicit model control with a key, serving an (at first empty) repository,
    and the state directory holding the record install and rollback find it by."""
    from conftest import free_port

    from edge_deploy.serve import server_record as control
    from edge_deploy.serve.argv import ServerOptions
    from edge_deploy.serve.discovery import find_tritonserver
    from edge_deploy.serve.process import TritonProcess

    work = tmp_path_factory.mktemp("served")
    repo, state = work / "repo", work / "state"
    repo.mkdir()
    key = "s" * 32
    (work / "key").write_text(key + "\n")
    options = ServerOptions(model_repository=repo, grpc_port=free_port(), restricted_key=(KEY_NAME, key))
    proc = TritonProcess(find_tritonserver(cache_dir=work / "cache"), options, work / "triton.log").start()
    try:
        proc.wait_ready(90)
        with pytest.MonkeyPatch.context() as env:
            env.setenv("EDGE_DEPLOY_STATE_DIR", str(state))
            control.save_record(control.ServerRecord(url=proc.url, repository=repo, key_header=KEY_NAME,
                                                     key_file=work / "key", scope="user"))
        yield proc, repo, state
    finally:
        proc.stop(timeout=15)


@pytest.fixture
def served(server, monkeypatch):
    """(server, repository) with this test's state directory the server's."""
    proc, repo, state = server
    monkeypatch.setenv("EDGE_DEPLOY_STATE_DIR", str(state))
    return proc, repo


def served_now(url: str, *models: str) -> dict[str, list[int]]:
    from edge_deploy.serve import admin

    return {m: admin.served_versions(url, m) for m in models}


# ------------------------------------------------------------------ 2. a rollback is done whole or not at all


@pytest.fixture(scope="module")
def two_kinds(tmp_path_factory, laneatt_data) -> tuple[Path, Path]:
    """Two artifacts whose BLS pipelines differ (other anchor counts), so a rollback loads the pipeline too."""
    work = tmp_path_factory.mktemp("two_kinds")
    anchors = laneatt_data / ANCHORS
    return make_artifact(work / "a", anchors, n=100, seed=1), make_artifact(work / "b", anchors, n=80, seed=2)


@pytest.mark.triton
@pytest.mark.parametrize("damage, needle", [
    (lambda spec: spec.unlink(), "has no pipeline.json, so version 1 of {m}_pipeline cannot load"),
    (lambda spec: spec.write_text("{ not json"), "did not load {m}_pipeline"),
], ids=["missing", "unloadable"])
def test_a_rollback_that_cannot_finish_leaves_what_served(served, two_kinds, damage, needle) -> None:
    proc, repo = served
    model = f"roll_{len(list(repo.iterdir()))}"
    for artifact in two_kinds:
        install(InstallOptions(artifact, repo, model, runtime="python", pipeline="bls"))
    models = (model, f"{model}_pipeline")
    assert served_now(proc.url, *models) == {model: [2], f"{model}_pipeline": [2]}
    damage(repo / f"{model}_pipeline" / "1" / "pipeline.json")
    configs = {m: (repo / m / "config.pbtxt").read_bytes() for m in models}
    rolled = cli("rollback", model, "--repository", str(repo), "--to", "1")
    one_line_refusal(rolled, needle.format(m=model))
    assert served_now(proc.url, *models) == {model: [2], f"{model}_pipeline": [2]}, "half rolled back"
    assert {m: (repo / m / "config.pbtxt").read_bytes() for m in models} == configs


# ------------------------------------------------------------------ 3. one server per repository, whatever the state dir


@pytest.mark.triton
def test_a_second_foreground_server_is_refused_whatever_its_state_directory(tmp_path, monkeypatch) -> None:
    from triton_helpers import write_model

    from edge_deploy.serve.server_record import foreground_claim

    repo = tmp_path / "repo"
    write_model(repo, "add_one")
    monkeypatch.setenv("EDGE_DEPLOY_STATE_DIR", str(tmp_path / "root-state"))
    # The first server's claim, held as `serve --foreground` holds it (its tritonserver adds nothing to the claim).
    with foreground_claim("user", repo, "127.0.0.1:8123"):
        env = {**os.environ, "EDGE_DEPLOY_STATE_DIR": str(tmp_path / "user-state"), "HOME": str(tmp_path)}
        second = cli("serve", "--foreground", "--repository", str(repo), "--grpc-port", "8124", env=env)
        # The unit is refused too (before it would need root and systemd), whatever the state directory.
        unit = cli("serve", "--repository", str(repo), env=env)
    one_line_refusal(second, f"(PID {os.getpid()} at 127.0.0.1:8123) already serves {repo.resolve()}")
    one_line_refusal(unit, f"{repo.resolve()} is already served by `edge-deploy serve --foreground` (PID {os.getpid()}")


# ------------------------------------------------------------------ 4. and 6. the state file: newer, or damaged


def test_a_state_file_of_a_newer_format_is_never_rewritten(tmp_path, artifacts) -> None:
    from edge_deploy.repository.history import STATE_NAME

    repo = tmp_path / "repo"
    install(InstallOptions(artifacts[0], repo, "lane", runtime="python"))
    newer = json.dumps({"format": 99, "tool": {"name": "edge-deploy", "version": "9.1"}, "models": {"x": "y"}})
    (repo / STATE_NAME).write_text(newer)
    before = snapshot(repo)
    needle = "is format 99, written by edge-deploy 9.1; this edge-deploy"
    with pytest.raises(RepositoryError, match=needle):
        install(InstallOptions(artifacts[1], repo, "lane", runtime="python", keep=1))
    one_line_refusal(cli("rollback", "lane", "--repository", str(repo), "--to", "1"), needle)
    assert snapshot(repo) == before


@pytest.mark.parametrize("entry", [{"served": "abc", "failed": [1, 2]}, {"served": 3, "failed": "x"}, ["lane"]])
def test_a_state_file_with_wrong_types_reads_as_damaged(tmp_path, artifacts, entry) -> None:
    from edge_deploy.repository.history import STATE_NAME

    repo = tmp_path / "repo"
    for artifact in artifacts:
        install(InstallOptions(artifact, repo, "lane", runtime="python"))
    (repo / STATE_NAME).write_text(json.dumps({"format": 1, "models": {"lane": entry}}))
    rolled = cli("rollback", "lane", "--repository", str(repo))
    assert rolled.returncode == 0 and "pinned to version 1" in rolled.stdout, rolled.stderr
    installed = cli("install", str(artifacts[0]), "--repository", str(repo), "--name", "lane", "--runtime", "python",
                    "--keep", "1")
    assert installed.returncode == 0 and "version 3" in installed.stdout, installed.stderr


# ------------------------------------------------------------------ 5. a state directory that is a file


def test_a_state_directory_that_is_a_file_is_refused_first(tmp_path, artifacts) -> None:
    repo = tmp_path / "repo"
    install(InstallOptions(artifacts[0], repo, "lane", runtime="python"))
    before = snapshot(repo)
    (tmp_path / "state-file").write_text("not a directory\n")
    env = {**os.environ, "EDGE_DEPLOY_STATE_DIR": str(tmp_path / "state-file")}
    needle = f"EDGE_DEPLOY_STATE_DIR={tmp_path / 'state-file'} is not a directory"
    for args in (("install", str(artifacts[1]), "--repository", str(repo), "--name", "lane", "--runtime", "python"),
                 ("rollback", "lane", "--repository", str(repo), "--to", "1"),
                 ("status",), ("health", "--repository", str(repo))):
        one_line_refusal(cli(*args, env=env), needle)
    assert snapshot(repo) == before


# ------------------------------------------------------------------ 11. one damaged pipeline keeps no other model down


@pytest.mark.triton
def test_serve_serves_the_models_that_load_and_names_the_damaged_pipeline(tmp_path, artifacts) -> None:
    import signal

    from conftest import free_port

    from edge_deploy.serve import admin

    repo = tmp_path / "repo"
    install(InstallOptions(artifacts[0], repo, "lane", runtime="python", pipeline="bls"))
    (repo / "lane_pipeline" / "1" / "pipeline.json").write_text("{ damaged")
    port = free_port()
    env = {**os.environ, "EDGE_DEPLOY_STATE_DIR": str(tmp_path / "state"), "HOME": str(tmp_path)}
    env.pop("EDGE_DEPLOY_DEBUG", None)
    proc = subprocess.Popen([sys.executable, "-m", "edge_deploy", "serve", "--foreground", "--repository", str(repo),
                             "--grpc-port", str(port)], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                            env=env)
    try:
        lines = []
        for line in proc.stdout:  # the lines `serve` prints once the server serves (or nothing: it exited)
            lines.append(line.rstrip())
            if len(lines) == 3:
                break
        assert lines[:1] == [f"tritonserver serving {repo} at 127.0.0.1:{port} (Ctrl-C to stop)"], lines
        assert "  lane: ready, versions served: 1" in lines
        damaged = [line for line in lines if line.startswith("  lane_pipeline: NOT ready (version 1 failed to load: ")]
        assert damaged and "pipeline.json of lane_pipeline version 1 is damaged (JSONDecodeError" in damaged[0], lines
        assert "`edge-deploy rollback lane`" in damaged[0] or "--pipeline bls" in damaged[0], lines
        assert admin.served_versions(f"127.0.0.1:{port}", "lane") == [1]
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(60)
    # Item 20: the claim is the repository's lock; the state directory keeps no lock per repository ever served.
    assert list((tmp_path / "state").rglob("*.lock")) == [] and (repo / ".edge-deploy-server.lock").is_file()


# ------------------------------------------------------------------ 12. and 16. health and status say what is so


def refused(proc: subprocess.CompletedProcess[str], code: int, needle: str) -> None:
    assert proc.returncode == code and proc.stderr.count("\n") == 1 and needle in proc.stderr, (proc.returncode,
                                                                                                proc.stderr)


@pytest.mark.triton
def test_health_after_a_failed_load_and_for_names_it_does_not_know(served, tmp_path, laneatt_data) -> None:
    from small_artifact import make_unloadable

    from edge_deploy.serve import admin

    proc, repo = served
    anchors = laneatt_data / ANCHORS
    good = make_artifact(tmp_path / "good", anchors, n=100, seed=3)
    install(InstallOptions(good, repo, "healthy", runtime="python"))
    with pytest.raises(RepositoryError):
        install(InstallOptions(make_unloadable(tmp_path / "broken", anchors), repo, "never_loads", runtime="python"))
    assert admin.served_versions(proc.url, "healthy") == [1]
    refused(cli("health", "--url", proc.url), 3, f"the server at {proc.url} answers but is not ready: a model is "
            "still loading or failed to load; pass --repository DIR or --model M to see which.")
    assert cli("health", "--url", proc.url, "--model", "healthy").returncode == 0
    refused(cli("health", "--url", proc.url, "--model", "nosuch"), 3,
            "model nosuch (the server does not know this model) at")
    refused(cli("health", "--url", proc.url, "--model", "nosuch"), 3, "check the name (`edge-deploy models")
    refused(cli("health", "--url", proc.url, "--model", ""), 2, "--model '' names no model")
    refused(cli("health", "--repository", str(tmp_path / "missing")), 2,
            f"model repository {tmp_path / 'missing'} does not exist; pass the --repository the server serves.")


def test_status_and_health_exit_3_when_nothing_serves_as_the_docs_say(tmp_path, default_port_alone) -> None:
    """README.md, docs/serving.md, docs/failures.md: "`status` and `health` exit 3 when not serving"."""
    from edge_deploy.serve.checks import port_in_use

    env = {**os.environ, "EDGE_DEPLOY_STATE_DIR": str(tmp_path / "state"), "HOME": str(tmp_path)}
    assert cli("status", env=env).returncode == 3
    if port_in_use("127.0.0.1", 8001):  # another server on this machine: ask a port where nothing listens
        from conftest import free_port

        assert cli("health", "--url", f"127.0.0.1:{free_port()}", env=env).returncode == 3
    else:
        assert cli("health", env=env).returncode == 3
