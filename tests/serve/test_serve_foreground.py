"""`edge-deploy serve --foreground` (a real tritonserver, no systemd) and `serve`'s answers to bad input.

CLI runs are subprocesses (`python3 -m edge_deploy ...`) with HOME and the state
dir in tmp_path, so nothing lands in the real home or /etc. Conditions that depend on
the machine (tests run as root, with or without systemd as init) come from seams, with
the CLI run in-process: "not root" (`effective_uid`), "no systemd" (`SYSTEMD_RUN_DIR`
pointed at a missing directory) and "systemd, no unit installed" (it and the unit
directories pointed at tmp_path).
"""
from __future__ import annotations

import json
import queue
import signal
import socket
import subprocess
import sys
import threading

import numpy as np
import pytest
from conftest import free_port
from triton_helpers import ADD_TWO, BROKEN, cli_env, run_cli, write_model

from edge_deploy.serve import admin
from edge_deploy.serve import server_record as control
from edge_deploy.serve import systemd as su
from edge_deploy.serve.checks import port_in_use

EXIT_TIMEOUT = 5


def assert_one_line_error(result: subprocess.CompletedProcess[str], *needles: str) -> str:
    """edge-deploy's own message is the last line of stderr (--foreground echoes the server's log above it)."""
    assert result.returncode != 0, result.stdout
    lines = result.stderr.rstrip("\n").splitlines()
    assert lines and lines[-1].startswith("error: "), result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    for needle in needles:
        assert needle in lines[-1], lines[-1]
    return lines[-1]


@pytest.mark.triton
def test_foreground_serves_and_stops_cleanly_on_sigterm(tmp_path, monkeypatch, capsys) -> None:
    import tritonclient.grpc as grpcclient

    write_model(tmp_path / "repo", "add_one")
    unit_key = tmp_path / "state" / "model-repository.key"  # an installed unit's key: not the foreground's
    unit_key.parent.mkdir(parents=True)
    unit_key.write_text("the-unit-key\n")
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "edge_deploy", "serve", "--foreground", "--user", "--repository", str(tmp_path / "repo"),
         "--grpc-port", str(port), "--exit-timeout", str(EXIT_TIMEOUT), "--wait", "60"],
        env=cli_env(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )
    out = LineReader(proc.stdout)
    try:
        first = out.next(90)
        assert f"serving {tmp_path / 'repo'} at 127.0.0.1:{port}" in first
        assert "add_one: ready, versions served: 1" in out.next(10)
        client = grpcclient.InferenceServerClient(f"127.0.0.1:{port}")
        inp = grpcclient.InferInput("X", [4], "FP32")
        inp.set_data_from_numpy(np.arange(4, dtype=np.float32))
        np.testing.assert_array_equal(client.infer("add_one", [inp]).as_numpy("Y"), np.arange(1, 5, dtype=np.float32))
        client.close()
        records = list((tmp_path / "state" / "servers").glob("*.json"))
        assert len(records) == 1  # `install` can find this server and hot-load versions
        record = control.ServerRecord.from_dict(json.loads(records[0].read_text()))
        assert record.key_file != unit_key and record.key_file.stat().st_mode & 0o077 == 0
        # `status` reports this server whether or not systemd runs (issue 26: without it, it exited 2 saying so)
        served = f"`edge-deploy serve --foreground` (PID {proc.pid}): server 127.0.0.1:{port}: ready"
        for args in (["status", "--user"], ["status"]):
            shown = run_cli(tmp_path, *args)  # this machine's own systemd, whichever it is
            assert shown.returncode == 0 and served in shown.stdout, shown.stdout + shown.stderr
        for systemd in (False, True):
            for args in (["status", "--user"], ["status"]):
                code, said = status_in_process(tmp_path, monkeypatch, capsys, args, systemd=systemd)
                assert code == 0, (systemd, args, said)
                assert served in said and "add_one: ready, versions served: 1" in said, said
                scope = "user" if "--user" in args else "system"
                why = f"not installed ({scope})" if systemd else "systemd is not running"
                assert f"edge-deploy-triton.service: {why}" in said, said
        # the recorded key unlocks the model-repository protocol: a load brings in a new version
        write_model(tmp_path / "repo", "add_one", code=ADD_TWO, versions=(2,))
        assert admin.served_versions(record.url, "add_one") == [1]
        admin.load_models(record, ["add_one"])
        assert admin.served_versions(record.url, "add_one") == [2]
        client = grpcclient.InferenceServerClient(f"127.0.0.1:{port}")
        np.testing.assert_array_equal(client.infer("add_one", [inp]).as_numpy("Y"), np.arange(2, 6, dtype=np.float32))
        client.close()
        assert unit_key.read_text() == "the-unit-key\n"
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=EXIT_TIMEOUT + 10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert code == 0
    assert "tritonserver stopped" in out.rest()
    assert not port_in_use("127.0.0.1", port)
    assert not list((tmp_path / "state" / "servers").glob("*.json"))
    assert not record.key_file.exists()
    assert unit_key.read_text() == "the-unit-key\n"


def status_in_process(tmp_path, monkeypatch, capsys, args: list[str], *,  # noqa: ANN001
                      systemd: bool) -> tuple[int, str]:
    """`edge-deploy status` in-process in cli_env(tmp_path), with systemd absent (the `SYSTEMD_RUN_DIR` seam at a
    missing directory) or present with no unit installed (the seam at an existing directory, a `systemctl` on
    PATH, a user manager's socket, empty unit directories): (exit code, stdout + stderr)."""
    with monkeypatch.context() as patch:
        for name, value in cli_env(tmp_path).items():
            patch.setenv(name, value)
        for name in ("XDG_CONFIG_HOME", "EDGE_DEPLOY_DEBUG", "XDG_RUNTIME_DIR"):
            patch.delenv(name, raising=False)
        fake = tmp_path / "fake-systemd"
        patch.setattr(su, "SYSTEMD_RUN_DIR", fake / ("run" if systemd else "missing"))
        patch.setattr(su, "SYSTEM_UNIT_DIR", fake / "system-units")  # empty: no unit installed
        if systemd:
            (fake / "run").mkdir(parents=True, exist_ok=True)
            (fake / "runtime" / "systemd" / "private").mkdir(parents=True, exist_ok=True)
            (fake / "bin").mkdir(exist_ok=True)
            systemctl = fake / "bin" / "systemctl"  # found, never needed: with no unit, status asks it nothing
            systemctl.write_text("#!/bin/sh\necho \"systemctl $*: not expected\" >&2\nexit 1\n")
            systemctl.chmod(0o755)
            patch.setenv("PATH", f"{fake / 'bin'}:{cli_env(tmp_path)['PATH']}")
            patch.setenv("XDG_RUNTIME_DIR", str(fake / "runtime"))
        capsys.readouterr()
        code = run_in_process_code(*args)
        said = capsys.readouterr()
    return code, said.out + said.err


def run_in_process_code(*args: str) -> int:
    """`edge-deploy ARGS` in this process; its exit code."""
    from edge_deploy.cli import main

    old = sys.argv
    sys.argv = ["edge-deploy", *args]
    try:
        with pytest.raises(SystemExit) as exit_info:
            main()
    finally:
        sys.argv = old
    return exit_info.value.code


class LineReader:
    """Lines of a pipe, read by a thread so waiting for one can time out."""

    def __init__(self, stream) -> None:  # noqa: ANN001 - text pipe
        self.lines: queue.Queue[str] = queue.Queue()
        self.thread = threading.Thread(target=self._pump, args=(stream,), daemon=True)
        self.thread.start()

    def _pump(self, stream) -> None:  # noqa: ANN001
        for line in stream:
            self.lines.put(line)

    def next(self, seconds: float) -> str:
        try:
            return self.lines.get(timeout=seconds)
        except queue.Empty:
            raise AssertionError(f"no output within {seconds} s") from None

    def rest(self) -> str:
        self.thread.join(timeout=5)
        return "".join(self.lines.queue)


@pytest.mark.triton
def test_foreground_model_that_fails_to_load_shows_the_reason(tmp_path) -> None:
    write_model(tmp_path / "repo", "broken", code=BROKEN)
    result = run_cli(tmp_path, "serve", "--foreground", "--user", "--repository", str(tmp_path / "repo"),
                     "--grpc-port", str(free_port()), "--wait", "60")
    assert_one_line_error(result, "weights file is corrupt")


@pytest.mark.triton
def test_verbose_follows_the_server_log_that_otherwise_stays_in_its_file(tmp_path) -> None:
    """serve --foreground prints what edge-deploy knows; tritonserver's own lines go to the server's log file, and to
    the console too with --verbose (issue 45 #8). Without --verbose: the README walk (tests/docs/test_readme_runs)."""
    write_model(tmp_path / "repo", "add_one")
    err_path = tmp_path / "serve.stderr"
    with err_path.open("w") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "edge_deploy", "serve", "--foreground", "--user", "--verbose", "--repository",
             str(tmp_path / "repo"), "--grpc-port", str(free_port()), "--exit-timeout", str(EXIT_TIMEOUT)],
            env=cli_env(tmp_path), stdout=subprocess.PIPE, stderr=err, text=True)
    try:
        assert "serving" in LineReader(proc.stdout).next(90)
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=EXIT_TIMEOUT + 10) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    said = err_path.read_text()
    logs = list((tmp_path / "state" / "servers").glob("*.foreground.log"))
    assert len(logs) == 1 and "Started GRPCInferenceService" in logs[0].read_text()
    assert "Started GRPCInferenceService" in said and "tritonserver's log:" not in said, said


def test_missing_repository(tmp_path) -> None:
    result = run_cli(tmp_path, "serve", "--foreground", "--user", "--repository", str(tmp_path / "nope"))
    assert_one_line_error(result, "does not exist")


def test_empty_repository(tmp_path) -> None:
    (tmp_path / "repo").mkdir()
    result = run_cli(tmp_path, "serve", "--foreground", "--user", "--repository", str(tmp_path / "repo"))
    assert_one_line_error(result, "has no models")


def test_port_already_in_use_starts_nothing(tmp_path) -> None:
    write_model(tmp_path / "repo", "add_one")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        result = run_cli(tmp_path, "serve", "--foreground", "--user", "--repository", str(tmp_path / "repo"),
                         "--grpc-port", str(port))
    assert_one_line_error(result, f"127.0.0.1:{port} is already in use")
    assert not list((tmp_path / "state").rglob("*.log"))


def test_tritonserver_that_does_not_exist(tmp_path) -> None:
    write_model(tmp_path / "repo", "add_one")
    result = run_cli(tmp_path, "serve", "--foreground", "--user", "--repository", str(tmp_path / "repo"),
                     "--tritonserver", str(tmp_path / "tritonserver"))
    assert_one_line_error(result, str(tmp_path / "tritonserver"), "JetPack")


def run_in_process(capsys, *args: str) -> tuple[int, str]:
    code = run_in_process_code(*args)
    return code, capsys.readouterr().err


def test_not_root_for_the_system_scope(tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.setattr(su, "effective_uid", lambda: 1000)  # tests run as root
    code, err = run_in_process(capsys, "serve", "--repository", str(tmp_path))
    assert code != 0 and err.count("\n") == 1 and "sudo" in err and "--user" in err


def test_no_systemd_suggests_foreground(tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.setattr(su, "SYSTEMD_RUN_DIR", tmp_path / "no-systemd")  # this machine's init is not systemd
    # an empty state dir: a `serve --foreground` record left in this machine's own (/etc/edge-deploy, ~/.config)
    # would make `status` report that server and exit 0
    monkeypatch.setenv("EDGE_DEPLOY_STATE_DIR", str(tmp_path / "state"))
    for args in (["serve", "--repository", str(tmp_path)], ["serve", "--user"], ["stop", "--user"], ["status"]):
        code, err = run_in_process(capsys, *args)
        assert code != 0 and err.count("\n") == 1 and "--foreground" in err, (args, err)
