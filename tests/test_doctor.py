"""`edge-deploy doctor` on fake Jetson roots (tests/data/jetson_root: real-looking /etc, /proc, /sys).

The Python packages, tritonserver (the nvidia-pytriton bundle) and systemd are
this machine's real ones. TensorRT cannot be installed here, so where a test
needs a plan builder it puts the stand-in `trtexec` script of tests/support/jetson_fixtures.py
on $TRTEXEC (doctor runs `trtexec --help` to learn the version from its banner).
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from cli_process import run_cli
from needs import torch_or_skip
from typer.testing import CliRunner

from edge_deploy.deploy import doctor
from edge_deploy.machine.facts import device_facts
from edge_deploy.cli import app

pytest_plugins = ["jetson_fixtures"]  # board, no_tensorrt, fake_trtexec (shared fixtures)
runner = CliRunner()


@pytest.fixture(autouse=True)
def isolated(tmp_path: Path, monkeypatch, no_tensorrt):
    """No real TensorRT/pycuda/trtexec (whatever this machine has); a private cache dir for tritonserver discovery."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("COLUMNS", "250")
    monkeypatch.delenv("TRITONSERVER", raising=False)


def invoke(*args: str):
    result = runner.invoke(app, ["doctor", *args])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result


def test_ready_jetson_with_trtexec(board, fake_trtexec) -> None:
    torch_or_skip()  # convert's readiness also needs torch, which doctor checks
    result = invoke("--for", "convert", "--root", str(board("agx_orin_jp60")))
    out = result.output
    assert result.exit_code == 0, out
    for text in ("NVIDIA Jetson AGX Orin Developer Kit", "R36.3.0 / JetPack 6.0", "12.2.140", "MAXN (mode 0)",
                 "TensorRT 8.6.2", "convert: ready"):
        assert text in out
    assert "pycuda" in out and "edge-deploy[jetson]" in out  # a warning, not a blocker


def test_not_ready_with_an_unsupported_tensorrt(board, fake_trtexec, monkeypatch) -> None:
    torch_or_skip()  # convert's readiness also needs torch, which doctor checks
    monkeypatch.setenv("FAKE_TRTEXEC_BANNER", "120000")  # a TensorRT line edge-deploy does not know
    result = invoke("--for", "convert", "--root", str(board("agx_orin_jp60")))
    assert result.exit_code == 1
    assert "convert: not ready (plan builder)" in result.output and "12.0.0 is not supported" in result.output


def test_not_ready_without_a_builder(board) -> None:
    torch_or_skip()  # convert's readiness also needs torch, which doctor checks
    result = invoke("--for", "convert", "--root", str(board("agx_orin_jp60")))
    assert result.exit_code == 1
    assert "convert: not ready (plan builder)" in result.output
    assert "python3-libnvinfer" in result.output


def test_serve_stage_needs_tritonserver(board, monkeypatch, tmp_path) -> None:
    root = str(board("orin_nano_jp62"))
    ok = invoke("--for", "serve", "--root", root)
    assert ok.exit_code == 0, ok.output
    assert "serve: ready" in ok.output and "convert" not in ok.output.split("serve: ready")[1]
    assert "15W (mode 0), not maximum performance" in ok.output and "sudo nvpmodel -m 2" in ok.output
    assert "tritonserver pid 4242 holds 1800 MiB" in ok.output
    monkeypatch.setenv("TRITONSERVER", str(tmp_path / "no-such-tritonserver"))
    bad = invoke("--for", "serve", "--root", root)
    assert bad.exit_code == 1 and "serve: not ready (tritonserver)" in bad.output


def _model(repository: Path, name: str, plan: dict | None, with_plan: bool = True) -> None:
    version = repository / name / "1"
    version.mkdir(parents=True)
    if with_plan:
        (version / "model.plan").write_bytes(b"engine")
        if plan is not None:
            (version / "manifest.json").write_text(json.dumps({"format": 1, "plan": plan}))
    else:
        (version / "model.onnx").write_bytes(b"onnx")


def test_repository_plans_are_checked_against_this_machine(board, tmp_path) -> None:
    repository = tmp_path / "repo"
    built_here = {"tensorrt": "8.6.2", "cuda": "12.2.140", "gpu": "Orin", "compute_capability": "8.7",
                  "l4t": "36.3.0", "precision": "fp16"}
    _model(repository, "lanes_ok", built_here)
    _model(repository, "lanes_old", dict(built_here, tensorrt="8.5.2", l4t="35.4.1"))
    _model(repository, "lanes_bare", None)
    _model(repository, "lanes_damaged", dict(built_here, compute_capability=[8, 7]))
    _model(repository, "lanes_onnx", None, with_plan=False)
    facts = device_facts(board("agx_orin_jp60"))
    checks = {c.name: c for c in doctor.repository_checks(repository, facts)}
    assert checks["model lanes_ok/1"].status == "ok"
    old = checks["model lanes_old/1"]
    assert old.status == "fail" and "TensorRT: 8.5.2 -> 8.6.2" in old.detail and "L4T release" in old.detail
    assert checks["model lanes_bare/1"].status == "warn"
    assert "without manifest.json" in checks["model lanes_bare/1"].detail
    damaged = checks["model lanes_damaged/1"]  # a manifest that is there but unreadable is named as such
    assert damaged.status == "warn" and "plan.compute_capability" in damaged.detail, damaged.detail
    assert checks["model lanes_onnx/1"].status == "info"

    result = invoke("--for", "serve", "--repository", str(repository), "--root", str(board("agx_orin_jp60")))
    assert result.exit_code == 1 and "model lanes_old/1" in result.output.split("serve: not ready")[1]


def test_a_crashing_check_is_reported_not_raised(board, monkeypatch) -> None:
    def broken() -> list:
        raise RuntimeError("simulated\nmulti-line failure")

    monkeypatch.setattr(doctor, "_python_checks", broken)
    checks = doctor.run_checks(root=board("x86_desktop"))
    failed = [c for c in checks if c.name == "Python packages"]
    assert failed and failed[0].status == "fail" and "simulated multi-line failure" in failed[0].detail
    assert not doctor.ready(checks, ("convert",))
    assert doctor.ready(checks, ("serve",))


def test_cli_subprocess_never_shows_a_traceback(board, tmp_path) -> None:
    env = dict(os.environ, XDG_CACHE_HOME=str(tmp_path / "cache"), TRITONSERVER=str(tmp_path / "missing"),
               COLUMNS="250", PATH="/usr/bin:/bin")
    env.pop("TRTEXEC", None)
    done = run_cli(["doctor", "--root", str(board("x86_desktop")), "--repository", str(tmp_path / "no-repo")],
                   env=env, timeout=120)
    assert done.returncode == 1
    assert "Traceback" not in done.stdout + done.stderr
    assert "not a Jetson" in done.stdout and "is not a directory" in done.stdout
    bad = run_cli(["doctor", "--for", "everything"], env=env, timeout=120)
    assert bad.returncode == 2 and "Traceback" not in bad.stderr


def test_stage_choice() -> None:
    assert doctor.stages_for("all") == ("convert", "serve")
    assert doctor.stages_for("serve") == ("serve",)
    with pytest.raises(Exception, match="--for must be"):
        doctor.stages_for("deploy")


def test_the_json_report_keeps_its_keys_for_the_fleet_role(board) -> None:
    """`doctor --json` is read by the fleet's Ansible role: its keys, their order and its nulls are a contract."""
    checks = [doctor.Check("plan builder", "fail", "no TensorRT", ("convert",)), doctor.Check("disk", "ok", "plenty"),
              doctor.Check("tritonserver", "fail", "missing", ("serve", "convert"))]
    data = doctor.report(checks, ("convert", "serve"), board("orin_nano_jp62")).to_dict()
    assert list(data) == ["ready", "stages", "fingerprint", "plan_builder", "checks"]
    assert data["ready"] is False and data["plan_builder"] is None
    assert data["stages"] == {"convert": {"ready": False, "blockers": ["plan builder", "tritonserver"]},
                              "serve": {"ready": False, "blockers": ["tritonserver"]}}
    assert list(data["fingerprint"]) == ["tensorrt", "cuda", "gpu", "compute_capability", "l4t", "jetpack"]
    assert data["fingerprint"]["jetpack"] == "6.2"
    assert data["checks"][2] == {"name": "tritonserver", "status": "fail", "detail": "missing",
                                 "needed_for": ["serve", "convert"]}
    built = doctor.report([doctor.Check("plan builder", "ok", "trtexec", ("convert",))], ("convert",))
    assert built.to_dict()["plan_builder"] == "trtexec" and built.ready

    result = invoke("--for", "serve", "--json", "--root", str(board("orin_nano_jp62")))
    printed = json.loads(result.output)
    assert list(printed) == list(data) and result.exit_code == (0 if printed["ready"] else 1)
