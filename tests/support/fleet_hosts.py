"""Test vehicles: network namespaces, each with a real sshd and its own served tritonserver.

Each vehicle is a network namespace (named with the test run's PID) joined to the host by a
veth pair on its own /30, running Debian's OpenSSH sshd on its address with a generated host
key and an authorized key generated for the run. The namespaces share the file system, so each
vehicle gets its own directories: model repository, HOME, state directory (EDGE_DEPLOY_STATE_DIR),
payload stage directory. Its tritonserver is `edge-deploy serve --foreground --user` started
inside the namespace, listening on 127.0.0.1:8001 of that namespace (every vehicle on the same
port, as real vehicles would be), or with `tls=True` on the vehicle's own address with mutual TLS
(a CA made by `edge-deploy certs init` in its state directory). Ansible reaches them over real SSH. Used by tests/fleet and
benchmarks/fleet_rollout.py.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
SSHD = "/usr/sbin/sshd"
GRPC_PORT = 8001


def missing_parts() -> str | None:
    """Why vehicles cannot be made here (None: they can)."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    if not Path(SSHD).is_file():
        return "sshd is not installed (apt-get install openssh-server; scripts/setup.sh does it as root)"
    if shutil.which("ip") is None or shutil.which("ssh-keygen") is None:
        return "iproute2 / openssh-client is missing"
    if not Path(sys.executable).with_name("ansible-playbook").exists() and shutil.which("ansible-playbook") is None:
        return "ansible-core is not installed (pip install -e '.[dev]')"
    return None


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=30)


@dataclass
class Vehicle:
    """One test vehicle."""

    name: str
    netns: str
    address: str
    root: Path
    sshd: subprocess.Popen | None = None
    server: subprocess.Popen | None = None
    server_signalled: bool = False
    env: dict[str, str] = field(default_factory=dict)

    @property
    def repository(self) -> Path:
        return self.root / "model_repository"

    @property
    def state(self) -> Path:
        return self.root / "state"

    def cli(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        """`edge-deploy ARGS` on this vehicle (inside its namespace, with its environment)."""
        return subprocess.run(["ip", "netns", "exec", self.netns, sys.executable, "-m", "edge_deploy", *args],
                              env=self.env, capture_output=True, text=True, timeout=timeout)

    def report(self, name: str = "lanedet") -> dict:
        done = self.cli("fleet", "report", "--repository", str(self.repository), "--name", name, "--user")
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)

    def start_server(self, *, tls: bool = False) -> None:
        """`edge-deploy serve --foreground --user` in the namespace; returns once it has started.

        tls: serve on the vehicle's address (beyond loopback: mutual TLS, with certificates that
        `certs init` makes in its state directory) instead of 127.0.0.1.
        """
        address: list[str] = []
        if tls:
            done = self.cli("certs", "init", "--ip", self.address, "--name", self.name)
            assert done.returncode == 0, done.stderr
            address = ["--grpc-address", self.address]
        log = open(self.root / "serve.log", "w")  # noqa: SIM115 - kept open by the child
        self.server = subprocess.Popen(
            ["ip", "netns", "exec", self.netns, sys.executable, "-m", "edge_deploy", "serve", "--foreground",
             "--user", "--repository", str(self.repository), "--grpc-port", str(GRPC_PORT), "--wait", "180",
             "--exit-timeout", "5", *address],
            env=self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)

    def wait_serving(self, timeout: float = 180) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.server is not None and self.server.poll() is not None:
                raise RuntimeError(f"{self.name}: serve exited: {(self.root / 'serve.log').read_text()[-2000:]}")
            if "(Ctrl-C to stop)" in (self.root / "serve.log").read_text(errors="replace"):
                return
            time.sleep(0.5)
        raise RuntimeError(f"{self.name}: not serving after {timeout} s")

    def signal_server(self) -> None:
        """SIGTERM to the server's process group (once), without waiting: `stop_server` waits."""
        if self.server is not None and self.server.poll() is None and not self.server_signalled:
            os.killpg(self.server.pid, signal.SIGTERM)
            self.server_signalled = True

    def stop_server(self) -> None:
        if self.server is not None and self.server.poll() is None:
            self.signal_server()
            try:
                self.server.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.server.pid, signal.SIGKILL)
                self.server.wait(timeout=10)


class Fleet:
    """N vehicles and the inventory that names them; `close()` removes every namespace and process."""

    def __init__(self, workdir: Path, count: int, tag: str = "") -> None:
        self.workdir = Path(workdir)
        self.vehicles: list[Vehicle] = []
        self.key = self.workdir / "id_ed25519"
        pid = os.getpid()
        self.prefix = f"edf{tag}{pid % 100000}"
        # A /30 per vehicle in 10.<pid>/16 space, so parallel runs do not share addresses.
        self.net = (10, 64 + (pid >> 8) % 128, pid % 256)
        self.count = count

    def open(self) -> "Fleet":
        self.workdir.mkdir(parents=True, exist_ok=True)
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(self.key)], check=True, timeout=30)
        Path("/run/sshd").mkdir(exist_ok=True)  # sshd's privilege-separation directory
        for i in range(self.count):
            self._add(i)
        return self

    def _add(self, i: int) -> None:
        a, b, c = self.net  # vehicle i: 10.b.c.(4i)/30, host side .1, vehicle .2 (up to 63 vehicles)
        host_ip, ns_ip = f"{a}.{b}.{c}.{4 * i + 1}", f"{a}.{b}.{c}.{4 * i + 2}"
        name = f"vehicle{i + 1}"
        netns = f"{self.prefix}v{i}"
        root = self.workdir / name
        for sub in ("model_repository", "state", "home", "stage", "ssh"):
            (root / sub).mkdir(parents=True, exist_ok=True)
        vehicle = Vehicle(name, netns, ns_ip, root)
        self.vehicles.append(vehicle)  # before anything that can fail, so close() removes it
        _ip("netns", "add", netns)
        host_if, ns_if = f"{self.prefix}h{i}"[:15], f"{self.prefix}n{i}"[:15]
        _ip("link", "add", host_if, "type", "veth", "peer", "name", ns_if)
        _ip("link", "set", ns_if, "netns", netns)
        _ip("addr", "add", f"{host_ip}/30", "dev", host_if)
        _ip("link", "set", host_if, "up")
        _ip("netns", "exec", netns, "ip", "addr", "add", f"{ns_ip}/30", "dev", ns_if)
        _ip("netns", "exec", netns, "ip", "link", "set", ns_if, "up")
        _ip("netns", "exec", netns, "ip", "link", "set", "lo", "up")
        ssh = root / "ssh"
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(ssh / "host_key")], check=True,
                       timeout=30)
        shutil.copy(f"{self.key}.pub", ssh / "authorized_keys")
        (ssh / "sshd_config").write_text(
            f"ListenAddress {ns_ip}\nPort 22\nHostKey {ssh / 'host_key'}\nPidFile {ssh / 'sshd.pid'}\n"
            f"AuthorizedKeysFile {ssh / 'authorized_keys'}\nPermitRootLogin prohibit-password\n"
            "PasswordAuthentication no\nKbdInteractiveAuthentication no\nUsePAM no\nStrictModes no\n"
            "MaxSessions 50\nMaxStartups 50\nSubsystem sftp /usr/lib/openssh/sftp-server\n")
        vehicle.sshd = subprocess.Popen(
            ["ip", "netns", "exec", netns, SSHD, "-D", "-e", "-f", str(ssh / "sshd_config")],
            stdout=open(ssh / "sshd.log", "w"), stderr=subprocess.STDOUT, start_new_session=True)  # noqa: SIM115
        env = dict(os.environ)
        for var in ("XDG_CONFIG_HOME", "XDG_CACHE_HOME", "TRITONSERVER", "EDGE_DEPLOY_DEBUG"):
            env.pop(var, None)
        env.update(HOME=str(root / "home"), EDGE_DEPLOY_STATE_DIR=str(root / "state"), PYTHONPATH=str(REPO_ROOT))
        vehicle.env = env

    def wait_ssh(self, timeout: float = 30) -> None:
        for vehicle in self.vehicles:
            deadline = time.monotonic() + timeout
            while True:
                done = subprocess.run(
                    ["ssh", "-i", str(self.key), "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
                     "-o", "BatchMode=yes", "-o", "ConnectTimeout=3", f"root@{vehicle.address}", "true"],
                    capture_output=True, text=True, timeout=30)
                if done.returncode == 0:
                    break
                if time.monotonic() > deadline:
                    raise RuntimeError(f"ssh to {vehicle.name} ({vehicle.address}) fails: {done.stderr.strip()}")
                time.sleep(0.3)

    def inventory(self, path: Path, extra: dict[str, dict] | None = None) -> Path:
        """An Ansible YAML inventory (written as JSON, which is YAML) of the vehicles."""
        hosts = {}
        for v in self.vehicles:
            hosts[v.name] = {
                "ansible_host": v.address,
                "ansible_user": "root",
                "ansible_ssh_private_key_file": str(self.key),
                "ansible_ssh_common_args": "-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null",
                "ansible_python_interpreter": sys.executable,
                "ansible_remote_tmp": str(v.root / "ansible-tmp"),
                "edge_deploy_command": [sys.executable, "-m", "edge_deploy"],
                "edge_deploy_environment": {k: v.env[k] for k in ("HOME", "EDGE_DEPLOY_STATE_DIR", "PYTHONPATH")},
                "edge_deploy_repository": str(v.repository),
                "edge_deploy_stage_dir": str(v.root / "stage"),
                "edge_deploy_scope": "user",
                "edge_deploy_health_wait": 60,
                **((extra or {}).get(v.name, {})),
            }
        path.write_text(json.dumps({"vehicles": {"hosts": hosts}}, indent=2))
        return path

    def close(self) -> None:
        for vehicle in self.vehicles:  # the servers stop together (each takes ~2 s to unload its models)
            vehicle.signal_server()
        for vehicle in self.vehicles:
            vehicle.stop_server()
            if vehicle.sshd is not None and vehicle.sshd.poll() is None:
                os.killpg(vehicle.sshd.pid, signal.SIGTERM)
                try:
                    vehicle.sshd.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    os.killpg(vehicle.sshd.pid, signal.SIGKILL)
            subprocess.run(["ip", "netns", "del", vehicle.netns], capture_output=True, timeout=30)
            for i in range(self.count):
                subprocess.run(["ip", "link", "del", f"{self.prefix}h{i}"[:15]], capture_output=True, timeout=30)
            shutil.rmtree(vehicle.root / "ssh", ignore_errors=True)  # host key and authorized key of the run
        for key in (self.key, self.key.with_name(self.key.name + ".pub")):  # the run's SSH identity
            key.unlink(missing_ok=True)


def controller_env(workdir: Path) -> dict[str, str]:
    """The environment of `edge-deploy rollout` in tests: this checkout, caches and Ansible's home in `workdir`."""
    env = dict(os.environ)
    env.update(PYTHONPATH=str(REPO_ROOT), XDG_CACHE_HOME=str(workdir / "cache"), ANSIBLE_HOME=str(workdir / "ansible"),
               ANSIBLE_LOCAL_TEMP=str(workdir / "ansible" / "tmp"), HOME=str(workdir / "controller-home"))
    env.pop("EDGE_DEPLOY_DEBUG", None)
    return env
