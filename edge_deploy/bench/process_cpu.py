"""CPU time of this process (the client) and of the tritonserver serving the URL with its Python-backend stubs,
from /proc (Linux); None for a server on another host."""
from __future__ import annotations

import os
import time
from pathlib import Path
from ..client.base import is_local_url

TRITONSERVER = "tritonserver"
DEFAULT_GRPC_PORT = 8001


def _stat(pid: int) -> list[str]:
    with open(f"/proc/{pid}/stat") as fh:
        return fh.read().rsplit(")", 1)[1].split()  # fields from 3 (state) on: ppid at 1, utime at 11


def _cmdline(pid: int) -> list[str]:
    return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")


def _pids() -> list[int]:
    return [int(p) for p in os.listdir("/proc") if p.isdigit()] if os.path.isdir("/proc") else []


def grpc_port_of(argv: list[str]) -> int:
    """The gRPC port a tritonserver command line listens on (its default when none is given)."""
    for i, arg in enumerate(argv):
        if arg.startswith("--grpc-port="):
            return int(arg.split("=", 1)[1])
        if arg == "--grpc-port" and i + 1 < len(argv):
            return int(argv[i + 1])
    return DEFAULT_GRPC_PORT


def find_server_pid(url: str) -> int | None:
    """The tritonserver process on this host that listens on `url`'s port, or None."""
    if not is_local_url(url) or url.startswith("unix:"):
        return None
    try:
        port = int(url.rsplit(":", 1)[1])
    except (IndexError, ValueError):
        port = DEFAULT_GRPC_PORT
    for pid in _pids():
        try:
            argv = _cmdline(pid)
            if Path(argv[0]).name == TRITONSERVER and grpc_port_of(argv) == port:
                return pid
        except (OSError, IndexError, ValueError):
            continue
    return None


class ServerCPU:
    """CPU seconds used so far by the tritonserver process `pid` and its children (Python-backend stubs)."""

    TICK = os.sysconf("SC_CLK_TCK")

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.children = self._children()

    def _children(self) -> list[int]:
        found = []
        for pid in _pids():
            try:
                if int(_stat(pid)[1]) == self.pid:
                    found.append(pid)
            except (OSError, IndexError, ValueError):
                continue
        return found

    def seconds(self) -> float | None:
        """utime + stime of the server and its live children, plus cutime + cstime (children that ended);
        None once the server is gone."""
        for _ in range(3):
            try:
                ticks = sum(int(v) for v in _stat(self.pid)[11:15])
            except OSError:
                return None
            try:
                for child in self.children:
                    ticks += sum(int(v) for v in _stat(child)[11:13])
                return ticks / self.TICK
            except OSError:  # a child ended (its time is now in the server's cutime), or a new one: look again
                self.children = self._children()
        return None

    def refresh(self) -> None:
        """Look for children again (a model loaded since: a new stub)."""
        self.children = self._children()


def client_seconds() -> float:
    """CPU seconds of this process, every thread (the gRPC threads of the client included)."""
    return time.process_time()
