"""Logs that cannot fill the disk (issue 13): the capped log file, the pump the unit runs with --log-file, the unit."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from cli_process import run_cli

from edge_deploy.serve import systemd as su
from edge_deploy.serve.logfile import CappedLog
from edge_deploy.serve.argv import ServerOptions
from edge_deploy.serve.discovery import find_tritonserver

REPO_ROOT = Path(__file__).resolve().parents[2]


def test_a_capped_log_never_holds_more_than_its_cap(tmp_path) -> None:
    path = tmp_path / "triton.log"
    with CappedLog(path, max_bytes=64 * 1024) as log:
        for i in range(20000):  # ~1.2 MB of lines through a 64 KiB cap
            log.write(f"I1122 12:00:00.{i:06d} 1234 grpc_server.cc:2558] line {i}\n".encode())
    total = path.stat().st_size + log.previous.stat().st_size
    assert total <= 64 * 1024
    assert path.read_text().endswith("line 19999\n")  # the newest lines are kept
    first_kept = int(log.previous.read_text().splitlines()[0].rsplit(" ", 1)[1])
    assert first_kept > 19000
    with CappedLog(path, max_bytes=64 * 1024) as log:  # a restart appends to the same pair
        log.write(b"after restart\n")
    assert path.read_text().endswith("after restart\n")


def test_the_pump_caps_the_output_passes_signals_and_the_exit_code(tmp_path) -> None:
    script = tmp_path / "chatty.py"
    script.write_text(textwrap.dedent("""
        import signal, sys, time
        def bye(signum, frame):
            print("got SIGTERM, stopping", flush=True)
            sys.exit(3)
        signal.signal(signal.SIGTERM, bye)
        for i in range(5000):
            print(f"line {i} " + "x" * 60, flush=True)
        print("ready", flush=True)
        time.sleep(60)
    """))
    log = tmp_path / "out" / "server.log"
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    from edge_deploy.serve.logfile import pump_argv

    proc = subprocess.Popen(pump_argv(sys.executable, log, 65536, [sys.executable, str(script)]), env=env)
    deadline = time.monotonic() + 30
    while not (log.is_file() and log.read_text().endswith("ready\n")):
        assert time.monotonic() < deadline and proc.poll() is None, "the pump did not pass the output on"
        time.sleep(0.1)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(30) == 3  # the child's own exit code
    assert log.read_text().endswith("got SIGTERM, stopping\n")
    assert log.stat().st_size + Path(f"{log}.1").stat().st_size <= 65536


def test_the_pump_exits_with_its_child_while_a_grandchild_holds_the_pipe(tmp_path) -> None:
    # As when tritonserver is SIGKILLed and its Python-backend stubs live on with its stdout: the pump
    # must end with the server, or systemd never sees the unit fail and never restarts it.
    from edge_deploy.serve.logfile import pump_argv

    log = tmp_path / "server.log"
    pid_file = tmp_path / "grandchild.pid"
    argv = ["/bin/sh", "-c", f"sleep 60 & echo $! > {pid_file}; echo started; kill -KILL $$"]
    started = time.monotonic()
    proc = subprocess.Popen(pump_argv(sys.executable, log, 65536, argv))
    try:
        assert proc.wait(20) == 128 + signal.SIGKILL
    finally:
        proc.kill()
        if pid_file.is_file():
            os.kill(int(pid_file.read_text()), signal.SIGKILL)
    assert time.monotonic() - started < 20 and log.read_text() == "started\n"


def test_the_system_unit_logs_to_the_journal_by_default_and_caps_a_log_file(tmp_path) -> None:
    install = find_tritonserver(cache_dir=tmp_path / "cache")
    repo = tmp_path / "repo"
    repo.mkdir()
    base = dict(scope="system", install=install, options=ServerOptions(model_repository=repo),
                environment_file=tmp_path / "triton.env")
    default = "\n".join(ln for ln in su.render_unit(su.UnitConfig(**base)).splitlines() if not ln.startswith("#"))
    assert "StandardOutput=journal" in default and "append:" not in default and "logfile" not in default
    capped = su.render_unit(su.UnitConfig(**base, log_file=Path("/var/log/edge-deploy/triton.log"),
                                          log_max_bytes=20 * 2**20))
    exec_start = next(line for line in capped.splitlines() if line.startswith("ExecStart="))
    assert "edge_deploy/serve/logfile.py --log-file=/var/log/edge-deploy/triton.log --max-bytes=20971520 --" \
        in exec_start
    assert "LogsDirectory=edge-deploy" in capped.splitlines()
    elsewhere = su.render_unit(su.UnitConfig(**base, log_file=Path("/data/logs/triton.log")))
    assert "ReadWritePaths=/data/logs" in elsewhere.splitlines()
    user = su.render_unit(su.UnitConfig(**{**base, "scope": "user"}, log_file=tmp_path / "triton.log"))
    assert "LogsDirectory" not in user and "ReadWritePaths" not in user


def test_logs_without_journald_or_a_log_file_tells_the_truth(tmp_path) -> None:
    if Path("/run/systemd/journal/socket").exists():
        pytest.skip("journald runs here")
    home = tmp_path / "home"
    home.mkdir()
    env = {**{k: v for k, v in os.environ.items() if not k.startswith(("XDG_", "EDGE_DEPLOY_"))},
           "HOME": str(home), "PYTHONPATH": str(REPO_ROOT), "EDGE_DEPLOY_STATE_DIR": str(tmp_path / "state")}

    def logs() -> str:
        result = run_cli(["logs", "--user"], env=env, timeout=60)
        lines = result.stderr.strip().splitlines()
        assert result.returncode != 0 and len(lines) == 1 and lines[0].startswith("error: "), result.stderr
        return lines[0]

    line = logs()  # nothing installed, nothing served
    assert "no edge-deploy-triton.service is installed (user)" in line and "install the unit" not in line
    unit = home / ".config" / "systemd" / "user" / su.UNIT_NAME
    unit.parent.mkdir(parents=True)
    unit.write_text(su.render_unit(su.UnitConfig(scope="user", install=find_tritonserver(cache_dir=tmp_path / "c"),
                                                 options=ServerOptions(model_repository=tmp_path),
                                                 environment_file=tmp_path / "env")))
    line = logs()  # a unit that logs to a journal nobody keeps
    assert "journald is not running on this machine" in line and "--log-file PATH" in line
