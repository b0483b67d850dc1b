"""`edge-deploy serve --foreground` (a real tritonserver, no systemd) and `serve`'s answers to bad input.

CLI runs are subprocesses (`python3 -m edge_deploy ...`) with HOME and the state
dir in tmp_path, so nothing lands in the real home or /etc. Two conditions cannot
be produced for real here, because tests run as root on a machine where
systemd is not init: "not root" (the `effective_uid` seam) and "no systemd"
(`SYSTEMD_RUN_DIR` pointed at a missing directory); those run the CLI in-process.
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
from edge_deploy.serve import record as control
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
def test_foreground_serves_and_stops_cleanly_on_sigterm(tmp_path) -> None:
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
        # `status` reports this server, though systemd is not running here (issue 26: it exited 2 saying so)
        assert not su.SYSTEMD_RUN_DIR.is_dir()
        for args in (["status", "--user"], ["status"]):
            shown = run_cli(tmp_path, *args)
            assert shown.returncode == 0, shown.stderr
            assert f"`edge-deploy serve --foreground` (PID {proc.pid}): server 127.0.0.1:{port}: ready" in shown.stdout
            assert "add_one: ready, versions served: 1" in shown.stdout and "systemd is not running" in shown.stdout
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
    assert not (tmp_path / "state" / "triton-foreground.log").exists()


def test_tritonserver_that_does_not_exist(tmp_path) -> None:
    write_model(tmp_path / "repo", "add_one")
    result = run_cli(tmp_path, "serve", "--foreground", "--user", "--repository", str(tmp_path / "repo"),
                     "--tritonserver", str(tmp_path / "tritonserver"))
    assert_one_line_error(result, str(tmp_path / "tritonserver"), "JetPack")


def run_in_process(capsys, *args: str) -> tuple[int, str]:
    from edge_deploy.cli import main

    old = sys.argv
    sys.argv = ["edge-deploy", *args]
    try:
        with pytest.raises(SystemExit) as exit_info:
            main()
    finally:
        sys.argv = old
    return exit_info.value.code, capsys.readouterr().err


def test_not_root_for_the_system_scope(tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.setattr(su, "effective_uid", lambda: 1000)  # tests run as root
    code, err = run_in_process(capsys, "serve", "--repository", str(tmp_path))
    assert code != 0 and err.count("\n") == 1 and "sudo" in err and "--user" in err


def test_no_systemd_suggests_foreground(tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.setattr(su, "SYSTEMD_RUN_DIR", tmp_path / "no-systemd")  # this machine's init is not systemd
    for args in (["serve", "--repository", str(tmp_path)], ["serve", "--user"], ["stop", "--user"], ["status"]):
        code, err = run_in_process(capsys, *args)
        assert code != 0 and err.count("\n") == 1 and "--foreground" in err, (args, err)
