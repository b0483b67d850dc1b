"""Network namespaces for tests and benchmarks: a server namespace and a client namespace joined by a veth pair.

Names carry the PID so parallel runs never collide; both namespaces (and with them the veth pair)
are removed on exit. Addresses live inside the namespaces only, so they cannot clash with the host's.
"""
from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from edge_deploy.serve.argv import tritonserver_argv
from edge_deploy.serve.process import TritonProcess

SERVER_IP, CLIENT_IP, PREFIX = "10.77.0.1", "10.77.0.2", 24
SUBNET = "10.77.0.0/24"


def _ip(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)


def netns_unavailable() -> str | None:
    """Why network namespaces cannot be made here (None when they can): checked by making one."""
    if shutil.which("ip") is None:
        return "the `ip` command (iproute2) is not installed"
    name = f"edprobe{os.getpid()}"
    made = _ip("netns", "add", name)
    if made.returncode != 0:
        return f"`ip netns add` is not permitted here ({made.stderr.strip() or 'exit ' + str(made.returncode)})"
    _ip("netns", "del", name)
    return None


@dataclass(frozen=True)
class Link:
    """Two namespaces and their addresses on the veth link."""

    server_ns: str
    client_ns: str
    server_ip: str = SERVER_IP
    client_ip: str = CLIENT_IP

    def exec_argv(self, ns: str, argv: list[str]) -> list[str]:
        """`argv` run inside namespace `ns`."""
        return ["ip", "netns", "exec", ns, *argv]


@contextlib.contextmanager
def veth_link(tag: str = "ed") -> Iterator[Link]:
    """Make the two namespaces and the link; remove them (and the link) on exit."""
    pid = os.getpid()
    link = Link(f"{tag}srv{pid}", f"{tag}cli{pid}")
    made: list[str] = []
    try:
        for ns in (link.server_ns, link.client_ns):
            result = _ip("netns", "add", ns)
            if result.returncode != 0:
                raise RuntimeError(f"ip netns add {ns}: {result.stderr.strip()}")
            made.append(ns)
        steps = [
            ("link", "add", f"{tag}vs{pid}"[:15], "netns", link.server_ns, "type", "veth",
             "peer", "name", f"{tag}vc{pid}"[:15], "netns", link.client_ns),
            ("-n", link.server_ns, "addr", "add", f"{SERVER_IP}/{PREFIX}", "dev", f"{tag}vs{pid}"[:15]),
            ("-n", link.client_ns, "addr", "add", f"{CLIENT_IP}/{PREFIX}", "dev", f"{tag}vc{pid}"[:15]),
            ("-n", link.server_ns, "link", "set", f"{tag}vs{pid}"[:15], "up"),
            ("-n", link.client_ns, "link", "set", f"{tag}vc{pid}"[:15], "up"),
            ("-n", link.server_ns, "link", "set", "lo", "up"),
            ("-n", link.client_ns, "link", "set", "lo", "up"),
        ]
        for step in steps:
            result = _ip(*step)
            if result.returncode != 0:
                raise RuntimeError(f"ip {' '.join(step)}: {result.stderr.strip()}")
        yield link
    finally:
        for ns in reversed(made):
            _ip("netns", "del", ns)  # the veth pair goes with its namespaces


class NetnsTriton(TritonProcess):
    """A TritonProcess started inside a network namespace (`ip netns exec` execs tritonserver itself)."""

    def __init__(self, namespace: str, *args, **kwargs) -> None:  # noqa: ANN002, ANN003
        super().__init__(*args, **kwargs)
        self.namespace = namespace

    @property
    def argv(self) -> list[str]:
        return ["ip", "netns", "exec", self.namespace, *tritonserver_argv(self.install, self.options)]


PROBE = Path(__file__).with_name("tls_probe.py")


def probe(link: Link, cases: list[dict], timeout: float = 180.0, python: str | None = None) -> list[dict]:
    """Run LaneDetClient cases (see tls_probe.py) inside the client namespace; their results."""
    import json
    import sys

    argv = link.exec_argv(link.client_ns, [python or sys.executable, str(PROBE), json.dumps(cases)])
    done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        raise RuntimeError(f"probe failed ({done.returncode}): {done.stderr.strip()[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])
