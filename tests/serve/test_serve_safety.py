"""A server left running for months: one server per repository, honest health, nothing left behind (issue 13).

Real tritonserver (the bundled one) under `edge-deploy serve --foreground` subprocesses,
with HOME and the state dir in tmp_path. Every process a test starts is killed at the
end even when it fails; shared-memory regions a test provokes are removed too.
"""
from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from conftest import free_port
from triton_helpers import BROKEN, cli_env, run_cli, write_model

from edge_deploy.serve import admin
from edge_deploy.serve import server_record as control
from edge_deploy.serve.leftovers import descendants, mapped_regions

pytestmark = pytest.mark.triton


@pytest.fixture(autouse=True)
def _state_dir(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("EDGE_DEPLOY_STATE_DIR", str(tmp_path / "state"))  # what the CLI subprocesses use


class Foreground:
    """`edge-deploy serve --foreground` as a subprocess; stdout and stderr read by threads."""

    def __init__(self, tmp_path: Path, repo: Path, port: int) -> None:
        self.url = f"127.0.0.1:{port}"
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "edge_deploy", "serve", "--foreground", "--user", "--repository", str(repo),
             "--grpc-port", str(port), "--exit-timeout", "5", "--wait", "60"],
            env=cli_env(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        self.out: queue.Queue[str] = queue.Queue()
        self.err: list[str] = []
        self.stubs: list[int] = []  # processes a test stopped (cleaned up at teardown whoever their parent is)
        threading.Thread(target=self._pump, args=(self.proc.stdout, self.out.put), daemon=True).start()
        threading.Thread(target=self._pump, args=(self.proc.stderr, self.err.append), daemon=True).start()

    @staticmethod
    def _pump(stream, sink) -> None:  # noqa: ANN001
        for line in stream:
            sink(line)

    def wait_serving(self, seconds: float = 90) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            try:
                if "serving" in self.out.get(timeout=0.5):
                    return
            except queue.Empty:
                if self.proc.poll() is not None:
                    break
        raise AssertionError(f"not serving within {seconds} s: {''.join(self.err)[-2000:]}")

    def server_pid(self) -> int:
        (pid,) = [p for p in descendants(self.proc.pid) if Path(f"/proc/{p}/comm").read_text().strip() == "tritonserver"]
        return pid

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@pytest.fixture
def foreground(tmp_path):
    started: list[Foreground] = []

    def start(repo: Path, port: int | None = None) -> Foreground:
        server = Foreground(tmp_path, repo, port or free_port())
        started.append(server)
        return server

    yield start
    for server in started:
        pids = descendants(server.proc.pid) + server.stubs
        regions = mapped_regions(pids)
        server.stop()
        for pid in pids:  # whatever a test left (a stopped stub, a server that outlived its parent)
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        for region in regions:  # only this test's servers' regions: other servers may run on this machine
            region.unlink(missing_ok=True)


def _record(tmp_path: Path) -> Path:
    (path,) = (tmp_path / "state" / "servers").glob("*.json")
    return path


def test_a_second_foreground_server_on_the_same_repository_is_refused(tmp_path, foreground) -> None:
    repo = tmp_path / "repo"
    write_model(repo, "add_one")
    first = foreground(repo)
    first.wait_serving()
    record_file = _record(tmp_path)
    record_bytes = record_file.read_bytes()
    record = control.ServerRecord.from_dict(json.loads(record_bytes))
    key_bytes = record.key_file.read_bytes()

    second = foreground(repo)
    try:
        code = second.proc.wait(60)
    except subprocess.TimeoutExpired:
        second.stop()
        raise AssertionError("the second server started instead of refusing") from None
    last = "".join(second.err).strip().splitlines()[-1]
    assert code != 0 and last.startswith("error: ") and "Traceback" not in "".join(second.err)
    assert f"PID {first.proc.pid}" in last and first.url in last and "already serve" in last, last

    # The first server's record and key are untouched, and it can still be managed.
    assert record_file.read_bytes() == record_bytes and record.key_file.read_bytes() == key_bytes
    assert control.find_record(repo) == record
    admin.load_models(record, ["add_one"])


def test_health_judges_the_served_models_and_says_which_failed_and_why(tmp_path, foreground) -> None:
    repo = tmp_path / "repo"
    write_model(repo, "add_one")
    server = foreground(repo)
    server.wait_serving()
    record = control.ServerRecord.from_dict(json.loads(_record(tmp_path).read_text()))

    # A new version that fails to load: version 1 keeps serving, so the repository is healthy.
    (repo / "add_one" / "2").mkdir()
    (repo / "add_one" / "2" / "model.py").write_text(BROKEN)
    with pytest.raises(Exception, match="weights file is corrupt"):
        admin.load_models(record, ["add_one"])
    health = run_cli(tmp_path, "health", "--url", server.url, "--repository", str(repo))
    assert health.returncode == 0, health.stderr
    assert "add_one: ready, versions served: 1 (version 2 failed to load: RuntimeError: weights file is corrupt)" \
        in health.stdout

    # A model that does not load at all: health names it and says why.
    write_model(repo, "broken", code=BROKEN)
    with pytest.raises(Exception, match="weights file is corrupt"):
        admin.load_models(record, ["broken"])
    health = run_cli(tmp_path, "health", "--url", server.url, "--repository", str(repo))
    lines = health.stderr.strip().splitlines()
    assert health.returncode != 0 and len(lines) == 1, health.stderr
    assert "model broken (version 1 failed to load: RuntimeError: weights file is corrupt)" in lines[0]
    assert "rollback" in lines[0]


def test_a_killed_server_leaves_no_stub_and_no_shared_memory(tmp_path, foreground) -> None:
    repo = tmp_path / "repo"
    write_model(repo, "add_one")
    server = foreground(repo)
    server.wait_serving()
    triton = server.server_pid()
    stubs = server.stubs = descendants(triton)
    regions = mapped_regions([triton, *stubs])
    assert stubs and regions
    # A stub that cannot react (stopped: it ignores SIGTERM and cannot clean up), then the server dies.
    for stub in stubs:
        os.kill(stub, signal.SIGSTOP)
    os.kill(triton, signal.SIGKILL)
    server.proc.wait(60)
    err = "".join(server.err)
    assert server.proc.returncode != 0 and err.strip().splitlines()[-1].startswith("error: ")
    assert not [p for p in stubs if Path(f"/proc/{p}").exists()]  # not even a zombie: init may never reap it
    assert not [r for r in regions if r.exists()]
    assert "stopped 1 process(es) the server left running" in err and "removed 1 shared-memory region" in err


def test_a_record_whose_process_is_gone_is_stale(tmp_path, foreground) -> None:
    repo = tmp_path / "repo"
    write_model(repo, "add_one")
    first = foreground(repo)
    first.wait_serving()
    triton = first.server_pid()
    first.proc.kill()  # SIGKILL: no chance to remove its record
    first.proc.wait(10)
    deadline = time.monotonic() + 30
    while Path(f"/proc/{triton}").exists() and time.monotonic() < deadline:  # the server follows its parent
        time.sleep(0.2)
    assert _record(tmp_path).exists()
    assert control.find_record(repo) is None  # the record of a dead server is not believed

    second = foreground(repo)
    second.wait_serving()
    err = "".join(second.err)
    assert f"removed the stale record of a server that is gone (`edge-deploy serve --foreground` (PID {first.proc.pid})" \
        in err, err
    assert control.find_record(repo).pid == second.proc.pid
