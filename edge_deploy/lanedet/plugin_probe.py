"""Plug-in families probed out of process: each entry point imported, checked and described in a child interpreter
(`plugin_child.py`), bounded in time, so that listing the families (`families`, `convert`'s flags) never imports a
plug-in here. A plug-in whose import never returns, whose property raises, that exits the interpreter or that leaves a
thread running costs at most EDGE_DEPLOY_PLUGIN_TIMEOUT seconds and one warning line; nothing of it runs in this
process.

The child reads this process's sys.path (so it finds the same distributions, first one on the path winning) and the
names to probe on stdin, writes one JSON line per event on a private copy of its stdout (its fd 1 is pointed at
stderr: what a plug-in prints goes there, never into a command's output), and ends with os._exit after flushing, so
a non-daemon thread a plug-in started cannot keep it alive. On a timeout the child's whole process group is killed
and the plug-in it was probing is reported broken; the rest are probed again in a fresh child.
"""
from __future__ import annotations

import json
import math
import os
import selectors
import signal
import subprocess
import sys
import time
from typing import Any

from ..errors import PluginError

__all__ = ["DEFAULT_TIMEOUT_S", "TIMEOUT_ENV", "probe_plugins", "probe_timeout"]

TIMEOUT_ENV = "EDGE_DEPLOY_PLUGIN_TIMEOUT"
DEFAULT_TIMEOUT_S = 30.0  # a plug-in importing torch on a busy Jetson takes seconds; one that hangs, forever
_TIMEOUT_RANGE = (0.1, 3600.0)
# The child: this process's sys.path first (the same distributions), then the probe. Its fd 1 becomes stderr; the
# results go to a duplicate of the original fd 1.
_BOOT = ("import json, os, sys\n"
         "request = json.loads(sys.stdin.read())\n"
         "sys.path[:] = request['path']\n"
         "out = os.dup(1)\n"
         "os.dup2(2, 1)\n"
         "from edge_deploy.lanedet.plugin_child import main\n"
         "main(request['names'], out)\n")


def probe_timeout() -> float:
    """Seconds one plug-in may take to import and describe itself: EDGE_DEPLOY_PLUGIN_TIMEOUT, default 30."""
    text = os.environ.get(TIMEOUT_ENV, "").strip()
    if not text:
        return DEFAULT_TIMEOUT_S
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    low, high = _TIMEOUT_RANGE
    if not (math.isfinite(value) and low <= value <= high):
        raise PluginError(f"{TIMEOUT_ENV}={text!r} is not a number of seconds from {low:g} to {high:g}; set it to "
                          f"one (the time one plug-in family may take to import), or unset it for {DEFAULT_TIMEOUT_S:g}.")
    return value


def probe_plugins(names: list[str], timeout: float | None = None) -> dict[str, tuple[str, Any]]:
    """name -> ("ok", its FamilyDescription.to_dict()) or ("broken", why: a phrase for `family_fault`), for each of
    `names` (entry points of the group), probed in child processes, each plug-in within `timeout` seconds."""
    limit = probe_timeout() if timeout is None else timeout
    results: dict[str, tuple[str, Any]] = {}
    remaining = list(names)
    while remaining:
        _probe_once(remaining, limit, results)
        remaining = [name for name in remaining if name not in results]
    return results


def _probe_once(names: list[str], limit: float, results: dict[str, tuple[str, Any]]) -> None:
    """One child for `names`: what it reports goes into `results`; the plug-in it was probing when it hung or died is
    reported broken (at least one name is always settled, so the caller's loop ends)."""
    child = subprocess.Popen([sys.executable, "-c", _BOOT], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             start_new_session=True)  # its own process group: killed whole, grandchildren too
    assert child.stdin is not None and child.stdout is not None
    current: str | None = None
    try:
        try:
            child.stdin.write(json.dumps({"path": sys.path, "names": names}).encode())
            child.stdin.close()
        except BrokenPipeError:
            pass
        buffer = b""
        deadline = time.monotonic() + limit
        with selectors.DefaultSelector() as selector:
            selector.register(child.stdout, selectors.EVENT_READ)
            while True:
                left = deadline - time.monotonic()
                if left <= 0 or not selector.select(left):
                    what = f"importing and describing it did not finish within {limit:g} s ({TIMEOUT_ENV})"
                    _settle(names, current, what, results)
                    return
                chunk = os.read(child.stdout.fileno(), 65536)
                if not chunk:
                    _kill_group(child)  # what the child left running, before its process group id can be reused
                    code = child.returncode
                    if current is not None or any(name not in results for name in names):
                        how = f"killed by signal {-code}" if code < 0 else f"exit code {code}"
                        _settle(names, current, f"the process probing it ended ({how}) before it was described",
                                results)
                    return
                buffer += chunk
                while b"\n" in buffer:
                    line, buffer = buffer.split(b"\n", 1)
                    event = json.loads(line)
                    if "start" in event:
                        current = str(event["start"])
                    elif "name" in event:
                        results[str(event["name"])] = ("ok", event["description"]) if "description" in event \
                            else ("broken", str(event["broken"]))
                        current = None
                    deadline = time.monotonic() + limit
    finally:
        _kill_group(child)


def _settle(names: list[str], current: str | None, what: str, results: dict[str, tuple[str, Any]]) -> None:
    """The plug-in being probed is broken; when none was (the child hung or died before its first), every name left."""
    for name in [current] if current is not None else [n for n in names if n not in results]:
        results[name] = ("broken", what)


def _kill_group(child: subprocess.Popen[bytes]) -> None:
    if child.returncode is None:  # not reaped yet: its pid still names its process group
        try:
            os.killpg(child.pid, signal.SIGKILL)  # what a plug-in left running (threads die with the child)
        except (ProcessLookupError, PermissionError):
            pass
        child.wait()
    if child.stdout is not None and not child.stdout.closed:
        child.stdout.close()
