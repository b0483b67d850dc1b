"""Lines that said something else than what was wrong (issue 54, class 8): a state directory below a file or a
symbolic-link loop (was read as empty), a model named `-rf` (installed, then not addressable), a `model.onnx` that
is a directory (was "Is a directory (3)" or "does not exist"), and doctor's trtexec (was "ready" for a trtexec that
never ran). Each is one line saying what is wrong with the path or name and what is expected.

TensorRT cannot exist here (no NVIDIA GPU; its libraries download from NVIDIA at install time), so the trtexec
doctor runs is a script of this test, a double at the process boundary: one that fails like /bin/false, one that
answers without trtexec's banner like /bin/true, one that never answers, and a working one (jetson_fixtures')."""
from __future__ import annotations


import os
import re
import stat
from pathlib import Path

import pytest
from cli_process import run_cli
from typer.testing import CliRunner

from edge_deploy.cli import app
from edge_deploy.engine import trtexec
from edge_deploy.errors import RepositoryError, ServerError
from edge_deploy.core.state import state_dir

pytest_plugins = ["jetson_fixtures"]  # board, no_tensorrt, fake_trtexec


def one_line(result, code: int = 2) -> str:
    assert result.returncode == code, result
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    return lines[0]


# --- the state directory ------------------------------------------------------------------------------------------


@pytest.fixture
def blocked(tmp_path):
    (tmp_path / "file").write_text("not a directory")
    (tmp_path / "loop").symlink_to("loop")
    return tmp_path


@pytest.mark.parametrize("where,says", [("file/state", "lies below {root}/file, which is a file"),
                                        ("loop", "is a symbolic-link loop"),
                                        ("loop/state", "is a symbolic-link loop"),
                                        ("file", "is not a directory")])
def test_a_state_dir_that_cannot_be_one_is_a_one_line_error_not_an_empty_one(blocked, monkeypatch, where, says):
    monkeypatch.setenv("EDGE_DEPLOY_STATE_DIR", str(blocked / where))
    with pytest.raises(ServerError) as error:
        state_dir("user")
    assert says.format(root=blocked) in str(error.value) and "EDGE_DEPLOY_STATE_DIR=" in str(error.value)


def test_an_xdg_config_home_below_a_file_is_named(blocked, monkeypatch):
    monkeypatch.delenv("EDGE_DEPLOY_STATE_DIR", raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(blocked / "file" / "config"))
    with pytest.raises(ServerError, match=r"XDG_CONFIG_HOME=.* lies below .*/file, which is a file"):
        state_dir("user")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(blocked / "fresh"))  # not there yet: nothing recorded, not an error
    assert state_dir("user") == blocked / "fresh" / "edge-deploy"


@pytest.mark.slow
def test_models_refuses_a_state_dir_below_a_file_in_one_line(blocked):
    env = {**os.environ, "EDGE_DEPLOY_STATE_DIR": str(blocked / "file" / "state")}
    (blocked / "repo").mkdir()
    line = one_line(run_cli(["models", "--repository", blocked / "repo"], env=env))
    assert "lies below" in line and "which is a file" in line


# --- model names ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["-rf", "-", "--help", "-lanedet"])
def test_a_model_name_a_command_line_takes_for_an_option_is_refused_at_install(tmp_path, name):
    from edge_deploy.deploy.options import InstallOptions

    with pytest.raises(RepositoryError, match=r"starts with '-'.*start it with a letter, digit or _"):
        InstallOptions(tmp_path / "artifact", tmp_path / "repo", name)
    assert not (tmp_path / "repo").exists()


@pytest.mark.parametrize("name", ["lanedet", "_private", "7seg", "lane-det_2"])
def test_names_commands_can_address_are_still_accepted(tmp_path, name):
    from edge_deploy.deploy.options import InstallOptions

    (tmp_path / "artifact").mkdir()
    assert InstallOptions(tmp_path / "artifact", tmp_path / "repo", name).name == name


@pytest.mark.slow
def test_install_name_dash_rf_is_one_line_and_writes_nothing(tmp_path):
    (tmp_path / "artifact").mkdir()
    line = one_line(run_cli(["install", tmp_path / "artifact", "--name=-rf", "--repository", tmp_path / "repo"]))
    assert "illegal model name '-rf'" in line and not (tmp_path / "repo").exists()


# --- model.onnx that is a directory ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def onnx_dir_artifact(tmp_path_factory, laneatt_data) -> Path:
    from small_artifact import make_artifact

    artifact = make_artifact(tmp_path_factory.mktemp("onnx_dir") / "artifact", laneatt_data / "anchors_2784x77.npy")
    (artifact / "model.onnx").unlink()
    (artifact / "model.onnx").mkdir()
    return artifact


@pytest.mark.slow
@pytest.mark.parametrize("command", ["install", "evaluate", "convert", "fleet reference"])
def test_a_model_onnx_that_is_a_directory_says_so(tmp_path, onnx_dir_artifact, command):
    args = {"install": ["install", onnx_dir_artifact, "--repository", tmp_path / "repo"],
            "evaluate": ["evaluate", onnx_dir_artifact, "--synthetic", "1"],
            "convert": ["convert", onnx_dir_artifact],
            "fleet reference": ["fleet", "reference", onnx_dir_artifact]}[command]
    line = one_line(run_cli(args))
    assert f"{onnx_dir_artifact}/model.onnx" in line and "is a directory" in line, line
    assert "Is a directory (" not in line and "does not exist" not in line
    assert "regular file" in line or "ONNX model file" in line  # what is expected there
    assert not (tmp_path / "repo").exists() and not (onnx_dir_artifact / "smoke").exists()


# --- doctor runs trtexec --------------------------------------------------------------------------------------------


def _script(path: Path, body: str) -> Path:
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


@pytest.mark.parametrize("body,says", [("exit 1", "--help` failed"),
                                       ("echo usage: something else; exit 0", "no TensorRT.trtexec banner")])
def test_doctor_reports_convert_not_ready_with_a_trtexec_that_does_not_work(tmp_path, monkeypatch, no_tensorrt,
                                                                            board, body, says):
    tool = _script(tmp_path / "trtexec", body)
    monkeypatch.setenv(trtexec.TRTEXEC_ENV, str(tool))
    monkeypatch.setenv("COLUMNS", "250")
    result = CliRunner().invoke(app, ["doctor", "--for", "convert", "--root", str(board("agx_orin_jp60"))])
    assert result.exit_code == 1, result.output
    # "(plan builder)", or "(plan builder, torch)" where torch is missing too (the Python 3.10 run)
    assert re.search(r"convert: not ready \(plan builder[,)]", result.output) and says in result.output


def test_a_trtexec_that_never_answers_is_reported_within_the_probe_timeout(tmp_path):
    tool = _script(tmp_path / "trtexec", "exec sleep 30")
    probe = trtexec.probe_trtexec(tool, timeout=0.5)
    assert probe.version is None and "did not answer within 0.5 s" in probe.problem


def test_a_working_trtexec_still_reports_its_version(fake_trtexec):
    probe = trtexec.probe_trtexec(trtexec.find_trtexec())
    assert probe == trtexec.TrtexecProbe("8.6.2", None)
