"""Clean up after a tritonserver that `serve --foreground` started: its leftover processes and shared memory.

The Python backend runs a stub process per model instance and shares a /dev/shm region
(``triton_python_backend_shm_region_<uuid>``) with it. When tritonserver dies without
its own shutdown (SIGKILL, the OOM killer), a stub can outlive it, and the region stays
in /dev/shm (tmpfs: RAM) until someone removes it. So the foreground process makes itself
a child subreaper (orphans of its server are re-parented to it, not to init), remembers
the regions its server's processes map while it runs, and once the server is gone stops
the orphans (SIGTERM, then SIGKILL) and removes the remembered regions that are still there.
The unit needs none of this: systemd kills what is left in its cgroup and RemoveIPC=
removes the service user's regions.
"""
from __future__ import annotations

import ctypes
import os
import signal
import time
from pathlib import Path
from typing import Callable

REGION_PREFIX = "triton_python_backend_shm_region_"
SHM_DIR = Path("/dev/shm")
PR_SET_CHILD_SUBREAPER = 36


def become_subreaper() -> bool:
    """Make orphaned descendants of this process its children (Linux prctl); False where refused."""
    try:
        return ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _parents() -> dict[int, int]:
    """pid -> parent pid for every process (those that vanish meanwhile are skipped)."""
    parents = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            parents[int(stat.parent.name)] = int(stat.read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
    return parents


def children(pid: int) -> list[int]:
    """The direct children of `pid`."""
    return sorted(p for p, parent in _parents().items() if parent == pid)


def descendants(pid: int) -> list[int]:
    """Every process below `pid`."""
    tree: dict[int, list[int]] = {}
    for child, parent in _parents().items():
        tree.setdefault(parent, []).append(child)
    found, todo = [], [pid]
    while todo:
        for child in tree.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return sorted(found)


def mapped_regions(pids: list[int]) -> set[Path]:
    """The Python-backend regions in /dev/shm that these processes map or hold open."""
    regions: set[Path] = set()
    for pid in pids:
        try:
            maps = Path(f"/proc/{pid}/maps").read_text()
        except OSError:
            continue
        for line in maps.splitlines():
            fields = line.split(None, 5)  # address perms offset dev inode [path]
            path = fields[5] if len(fields) == 6 else ""
            if path.startswith(f"{SHM_DIR}/{REGION_PREFIX}") and not path.endswith(" (deleted)"):
                regions.add(Path(path))
    return regions


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def _settle(pids: list[int], seconds: float, still: Callable[[int], bool]) -> bool:
    """Reap exited children until none of `pids` is `still` so; False if some are after `seconds`."""
    deadline = time.monotonic() + seconds
    while True:
        _reap_children()
        if not any(still(p) for p in pids):
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)


def _reap_children() -> None:
    """Collect every child of this process that has exited (no zombie left behind)."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


class Leftovers:
    """What a server's processes hold, remembered while it runs, removed after it is gone."""

    def __init__(self, server_pid: int) -> None:
        self.server_pid = server_pid
        self.regions: set[Path] = set()

    def scan(self) -> None:
        """Remember the regions the server and its descendants map now (call while it runs)."""
        self.regions |= mapped_regions([self.server_pid, *descendants(self.server_pid)])

    def clean(self, grace: float = 3.0) -> list[str]:
        """After the server has exited and been reaped: stop its orphans, remove its regions; what was done, in words.

        Every child of this process is the server's orphan: `serve --foreground` starts no other process.
        """
        notes = []
        # Everything below this process: the server's orphans and their own children (a child of a
        # stub killed here is re-parented to this subreaper, so it is taken in the same sweep).
        orphans = [p for p in descendants(os.getpid()) if p != self.server_pid]
        self.regions |= mapped_regions(orphans)
        if orphans:
            names = sorted({_name(p) for p in orphans})
            for sig in (signal.SIGTERM, signal.SIGKILL):
                for pid in orphans:
                    try:
                        os.kill(pid, sig)
                    except ProcessLookupError:
                        pass
                if _settle(orphans, grace, _alive):
                    break
            # Dead is not gone: a multi-threaded process shows as a zombie before it can be reaped, and
            # one left unreaped when this process exits goes to init, which may never reap it.
            _settle(orphans, grace, lambda pid: Path(f"/proc/{pid}").exists())
            notes.append(
                f"stopped {len(orphans)} process(es) the server left running ({', '.join(names)}: "
                f"PID {', '.join(map(str, orphans))})"
            )
        removed, size = [], 0
        for region in sorted(self.regions):
            try:
                size += region.stat().st_size
                region.unlink()
            except OSError:
                continue
            removed.append(region.name)
        if removed:
            notes.append(f"removed {len(removed)} shared-memory region(s) the server left in {SHM_DIR} "
                         f"({size / 2**20:.1f} MiB)")
        return notes


def _name(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip() or str(pid)
    except OSError:
        return str(pid)
