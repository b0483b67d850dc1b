"""`edge-deploy serve --user` under a REAL systemd user manager, with the real bundled tritonserver.

The manager runs as a child of this test with a private 0700 XDG_RUNTIME_DIR and
HOME in a tmp dir (so units, keys and records never land in the real home).
systemd only acts as a manager once /run/systemd/system exists; the fixture
creates it only when absent and removes it (and anything else it created) at
teardown, stops the manager by its pid and kills leftover processes it started,
even when the test fails. Every wait has a timeout.
"""
from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import numpy as np
import pytest
from cli_process import run_cli
from conftest import free_port
from triton_helpers import ADD_TWO, BROKEN, remove_orphaned_python_backend_regions, write_model
from xdist_shared import exclusive

from edge_deploy.serve.checks import port_in_use

pytestmark = [pytest.mark.systemd, pytest.mark.triton]

SYSTEMD = Path("/lib/systemd/systemd")
RUN_DIR = Path("/run/systemd/system")
# Created by systemd when absent; removed again by the fixture if it created them.
SIDE_EFFECTS = (RUN_DIR, Path("/run/systemd/systemd-units-load"), Path("/run/mount"))
UNIT = "edge-deploy-triton.service"


@dataclass
class UserManager:
    env: dict[str, str]
    home: Path
    base: Path
    pid: int

    def systemctl(self, *args: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["systemctl", "--user", *args], env=self.env, capture_output=True, text=True, timeout=timeout)

    def cli(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return run_cli(args, env=self.env, timeout=timeout)

    def main_pid(self) -> int:
        return int(self.systemctl("show", "--property=MainPID", "--value", UNIT).stdout.strip() or 0)


def _descendants(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found, todo = [], [root]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def _wait_for(predicate, seconds: float, what: str) -> None:  # noqa: ANN001
    deadline = time.monotonic() + seconds
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {seconds} s waiting for {what}")
        time.sleep(0.1)


@pytest.fixture(scope="module")
def user_manager(tmp_path_factory):
    if not SYSTEMD.exists() or shutil.which("systemctl") is None:
        pytest.skip("systemd is not installed")
    if not RUN_DIR.is_dir() and os.geteuid() != 0:
        pytest.skip("creating /run/systemd/system needs root")
    # xdist: never beside tests/serve/test_systemd_unit.py, whose `systemd-analyze` must not meet the manager's
    # /run/systemd/system (nor have its stamp file removed under it)
    with exclusive(tmp_path_factory, "host-systemd"):
        yield from _started_user_manager(tmp_path_factory)


def _started_user_manager(tmp_path_factory) -> Iterator[UserManager]:  # noqa: ANN001
    base = tmp_path_factory.mktemp("systemd-user")
    home, runtime = base / "home", base / "runtime"
    home.mkdir()
    runtime.mkdir(mode=0o700)
    existed = {path: path.exists() for path in SIDE_EFFECTS}
    shm_before = set(Path("/dev/shm").glob("triton_python_backend_shm_region_*"))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("XDG_", "DBUS_", "EDGE_DEPLOY_")) and k != "TRITONSERVER"}
    env.update(HOME=str(home), XDG_RUNTIME_DIR=str(runtime))
    proc = None
    try:
        RUN_DIR.mkdir(exist_ok=True)
        with open(base / "manager.log", "wb") as log:
            proc = subprocess.Popen([str(SYSTEMD), "--user"], env=env, stdout=log, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, start_new_session=True)
        manager = UserManager(env=env, home=home, base=base, pid=proc.pid)
        _wait_for(lambda: (runtime / "systemd" / "private").exists(), 15, "the user manager's socket")
        _wait_for(lambda: manager.systemctl("is-system-running").stdout.strip() in ("running", "degraded"), 15,
                  "the user manager to finish starting")
        yield manager
    finally:
        if proc is not None:
            subprocess.run(["systemctl", "--user", "stop", UNIT], env=env, capture_output=True, timeout=60)
            leftovers = _descendants(proc.pid)
            proc.terminate()
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=15)
            for pid in leftovers:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        # The SIGKILLed server cannot remove its Python-backend regions (the system unit's
        # RemoveIPC= does that for the service user; a user unit runs as us, so we do it here).
        remove_orphaned_python_backend_regions(shm_before)
        for path, was_there in existed.items():
            if not was_there and path.exists():
                path.rmdir() if path.is_dir() else path.unlink()
        shutil.rmtree(base, ignore_errors=True)


def infer(url: str, timeout: float = 5.0) -> np.ndarray:
    import tritonclient.grpc as grpcclient

    client = grpcclient.InferenceServerClient(url)
    try:
        inp = grpcclient.InferInput("X", [4], "FP32")
        inp.set_data_from_numpy(np.arange(4, dtype=np.float32))
        return client.infer("add_one", [inp], client_timeout=timeout).as_numpy("Y")
    finally:
        client.close()


def one_line_error(result: subprocess.CompletedProcess[str], *needles: str) -> None:
    lines = result.stderr.rstrip("\n").splitlines()
    assert result.returncode != 0 and lines and lines[-1].startswith("error: "), result.stderr
    assert "Traceback" not in result.stderr
    for needle in needles:
        assert needle in lines[-1], lines[-1]


def test_serve_user_survives_a_crash_stops_and_uninstalls(user_manager, tmp_path) -> None:
    m = user_manager
    repo = tmp_path / "repo"
    write_model(repo, "add_one")
    port = free_port()
    url = f"127.0.0.1:{port}"
    unit_file = m.home / ".config" / "systemd" / "user" / UNIT

    # A taken port: refused before anything is installed.
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))
        sock.listen()
        one_line_error(m.cli("serve", "--user", "--repository", str(repo), "--grpc-port", str(port)), "already in use")
    assert not unit_file.exists()

    # `serve` returns once the server and the model are ready. journald does not run here, so the
    # output goes to a size-capped file (the default, the journal, would be lost).
    log_file = tmp_path / "logs" / "triton.log"
    result = m.cli("serve", "--user", "--repository", str(repo), "--grpc-port", str(port), "--wait", "60",
                   "--log-file", str(log_file), "--log-max-size", "1M")
    assert result.returncode == 0, result.stderr
    assert f"serving {repo} at {url}" in result.stdout and "add_one: ready, versions served: 1" in result.stdout
    np.testing.assert_array_equal(infer(url), np.arange(1, 5, dtype=np.float32))
    status = m.cli("status", "--user")
    assert status.returncode == 0 and "active (running)" in status.stdout, status.stdout + status.stderr

    # While it runs: other settings are refused and the running service is untouched.
    pid = m.main_pid()
    one_line_error(m.cli("serve", "--user", "--repository", str(repo), "--grpc-port", str(free_port())), "already running")
    assert m.main_pid() == pid
    np.testing.assert_array_equal(infer(url), np.arange(1, 5, dtype=np.float32))

    # `install` finds the server through the record and can hot-load with the key.
    from edge_deploy.serve import admin
    from edge_deploy.serve import server_record as control

    record = _record_for(m, repo)
    assert record["url"] == url and record["unit"] == UNIT and record["scope"] == "user"
    assert oct(Path(record["key_file"]).stat().st_mode & 0o777) == "0o600"
    key = Path(record["key_file"]).read_text().strip()
    write_model(repo, "add_one", code=ADD_TWO, versions=(2,))  # a load brings the new version in
    admin.load_models(control.ServerRecord.from_dict(record), ["add_one"], key=key)
    assert admin.served_versions(url, "add_one") == [2]
    np.testing.assert_array_equal(infer(url), np.arange(2, 6, dtype=np.float32))

    # Crash: tritonserver (under the log pump, the unit's main process) is SIGKILLed; systemd restarts the
    # unit and inference works again.
    (triton,) = [c for c in _descendants(pid) if Path(f"/proc/{c}/comm").read_text().strip() == "tritonserver"]
    killed_at = time.monotonic()
    os.kill(triton, signal.SIGKILL)
    recovered = None
    while time.monotonic() - killed_at < 45:
        try:
            if m.main_pid() not in (0, pid):  # the restarted server loads the newest version, 2
                np.testing.assert_array_equal(infer(url, timeout=2), np.arange(2, 6, dtype=np.float32))
                recovered = time.monotonic() - killed_at
                break
        except Exception:  # noqa: BLE001 - still restarting
            pass
        time.sleep(0.2)
    assert recovered is not None, "the server did not come back within 45 s"
    print(f"\nrestart after SIGKILL: inference works again after {recovered:.1f} s")
    restarts = m.systemctl("show", "--property=NRestarts", "--value", UNIT).stdout.strip()
    assert restarts == "1"

    # logs: the unit's --log-file (written by edge_deploy.serve.logfile, which tritonserver's crash went through)
    logs = m.cli("logs", "--user", "-n", "400")
    assert logs.returncode == 0, logs.stderr
    assert logs.stdout.count("Started GRPCInferenceService") == 2  # before and after the crash
    assert logs.stderr.count("\n") == 1 and f"the unit writes to {log_file}" in logs.stderr
    assert log_file.stat().st_size < 2**20 // 2

    # stop: the port closes; the unit stays installed.
    assert m.cli("stop", "--user").returncode == 0
    assert not port_in_use("127.0.0.1", port)
    assert m.cli("status", "--user").returncode == 3
    assert m.cli("health", "--user").returncode != 0

    # uninstall: no unit, no key, no record.
    result = m.cli("serve", "--user", "--uninstall")
    assert result.returncode == 0, result.stderr
    assert not unit_file.exists() and not Path(record["key_file"]).exists()
    assert _record_for(m, repo, missing_ok=True) is None
    assert m.systemctl("cat", UNIT).returncode != 0


def test_model_that_fails_to_load_leaves_nothing_installed(user_manager, tmp_path) -> None:
    m = user_manager
    repo = tmp_path / "repo"
    write_model(repo, "broken", code=BROKEN)
    if not Path("/run/systemd/journal/socket").exists():
        # No journald (this machine): the unit's output is lost, and `serve` says so rather than guess.
        result = m.cli("serve", "--user", "--repository", str(repo), "--grpc-port", str(free_port()), "--wait", "60")
        one_line_error(result, "journald is not running here", "--log-file PATH")
    result = m.cli("serve", "--user", "--repository", str(repo), "--grpc-port", str(free_port()), "--wait", "60",
                   "--log-file", str(tmp_path / "triton.log"))
    one_line_error(result, "weights file is corrupt")
    assert not (m.home / ".config" / "systemd" / "user" / UNIT).exists()
    assert m.systemctl("is-active", UNIT).stdout.strip() in ("inactive", "unknown")


def _record_for(m: UserManager, repo: Path, missing_ok: bool = False) -> dict | None:
    import json

    records = list((m.home / ".config" / "edge-deploy" / "servers").glob("*.json"))
    for path in records:
        data = json.loads(path.read_text())
        if Path(data["repository"]) == repo.resolve():
            return data
    assert missing_ok, f"no server record for {repo} in {records}"
    return None


def test_serve_user_with_mutual_tls(user_manager, tmp_path) -> None:
    """The unit with --tls-*: its ExecStartPost health check, status and health dial over TLS with the
    client identity the service copies hold; a plaintext client is refused; uninstall removes the copies."""
    m = user_manager
    repo = tmp_path / "repo"
    write_model(repo, "add_one")
    # The unit's ExecStartPost runs `python -m edge_deploy health` with the PYTHONPATH of the environment
    # file (this interpreter's site-packages entries), which may hold another checkout's editable install:
    # a "site-packages" folder linking to this checkout, first on PYTHONPATH, makes it import this one.
    shim = tmp_path / "shim" / "site-packages"
    shim.mkdir(parents=True)
    (shim / "edge_deploy").symlink_to(Path(__file__).resolve().parents[2] / "edge_deploy")
    m = UserManager(env={**m.env, "PYTHONPATH": os.pathsep.join([str(shim), m.env.get("PYTHONPATH", "")])},
                    home=m.home, base=m.base, pid=m.pid)
    certs = tmp_path / "tls"
    made = m.cli("certs", "init", "--dir", str(certs), "--name", "orin", "--ip", "10.77.0.1")
    assert made.returncode == 0, made.stderr
    port = free_port()
    issued = certs / "issued"
    result = m.cli("serve", "--user", "--repository", str(repo), "--grpc-port", str(port), "--wait", "60",
                   "--log-file", str(tmp_path / "triton.log"), "--tls-cert", str(issued / "server.pem"),
                   "--tls-key", str(issued / "server.key"), "--tls-ca", str(certs / "ca.pem"))
    assert result.returncode == 0, result.stderr
    assert "add_one: ready" in result.stdout
    copies = m.home / ".config" / "edge-deploy" / "triton-tls"
    assert sorted(p.name for p in copies.iterdir()) == ["ca.pem", "client.key", "client.pem", "server.key", "server.pem"]
    assert all(oct(p.stat().st_mode & 0o777) == "0o600" for p in copies.iterdir())  # user scope: no service group
    status = m.cli("status", "--user")
    assert status.returncode == 0, status.stdout + status.stderr
    assert f"TLS: server certificate {copies / 'server.pem'} expires" in status.stdout
    health = m.cli("health", "--user")
    assert health.returncode == 0, health.stderr
    with pytest.raises(Exception, match="Socket closed|UNAVAILABLE"):
        infer(f"127.0.0.1:{port}", timeout=3)
    removed = m.cli("serve", "--user", "--uninstall")
    assert removed.returncode == 0, removed.stderr
    assert not any(copies.iterdir())


def test_a_lane_stream_rides_through_a_crash_of_the_systemd_unit(user_manager, tmp_path, laneatt_data) -> None:
    """Issue 42: a LaneStream on a model `serve --user` serves; tritonserver is SIGKILLed and systemd (Restart=)
    starts it again. The stream says "unavailable" soon after the kill, "ok" again once the unit serves, the app's
    calls never block, and stop() leaves no region in /dev/shm and none registered on the server."""
    import threading

    import tritonclient.grpc as grpcclient
    from camera_stub import Camera
    from small_artifact import make_artifact

    from edge_deploy.client.shm import leftover_regions
    from edge_deploy.client.sync_client import LaneDetClient
    from edge_deploy.deploy.install import install
    from edge_deploy.deploy.options import InstallOptions
    from edge_deploy.media.stream import LaneStream

    m, repo, port = user_manager, tmp_path / "repo", free_port()
    install(InstallOptions(make_artifact(tmp_path / "artifact", laneatt_data / "anchors_2784x77.npy"), repo, "tiny", runtime="python"))
    result = m.cli("serve", "--user", "--repository", str(repo), "--grpc-port", str(port), "--wait", "90",
                   "--log-file", str(tmp_path / "triton.log"))
    assert result.returncode == 0, result.stderr
    url, max_age = f"127.0.0.1:{port}", 0.2
    camera = Camera()
    timeline: list[tuple[float, str]] = []
    longest = 0.0
    try:
        with LaneDetClient(url, "tiny", connect=False) as client:
            stream = LaneStream(client, camera, max_age=max_age).start()
            try:
                _wait_for(lambda: stream.latest().state == "ok", 30, "the first lanes")
                pid = m.main_pid()
                (triton,) = [c for c in _descendants(pid)
                             if Path(f"/proc/{c}/comm").read_text().strip() == "tritonserver"]
                os.kill(triton, signal.SIGKILL)
                killed_at = time.monotonic()
                while time.monotonic() - killed_at < 60:
                    now = time.monotonic()
                    state = stream.latest().state
                    longest = max(longest, time.monotonic() - now)
                    timeline.append((now, state))
                    if now - killed_at > 1 and m.main_pid() not in (0, pid) and \
                            all(s == "ok" for _, s in timeline[-20:]):
                        break
                    time.sleep(0.01)
            finally:
                stats = stream.stop()
                camera.close()
            assert not [t for t in threading.enumerate() if t.name.startswith("lanestream")]
            assert leftover_regions(os.getpid()) == [] and client.shm_regions == []
            status = grpcclient.InferenceServerClient(url).get_system_shared_memory_status(as_json=True)
            assert not status.get("regions")
    finally:
        m.cli("stop", "--user")
    down = next(t for t, s in timeline if s == "unavailable")
    assert down - killed_at < max_age + 1 / 30 + 0.5  # max_age + one frame period, and a margin for a loaded machine
    assert timeline[-1][1] == "ok" and stats.frames_failed > 0
    assert longest < max_age
    print(f"\nsystemd restart: unavailable {1000 * (down - killed_at):.0f} ms after the kill, ok again "
          f"{next(t for t, s in timeline if t > down and s == 'ok') - killed_at:.1f} s after it")
