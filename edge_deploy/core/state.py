"""edge-deploy's state directory: server records and keys (serve), the vehicle CA (certs), the last rollout (fleet).

Below every stage that keeps state, so that none of them imports another to find it.
"""
from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from ..errors import EdgeDeployError, ServerError
from .bounded_read import read_regular, special_kind

SYSTEM_STATE_DIR = Path("/etc/edge-deploy")


def state_dir(scope: str) -> Path:
    """Where records live: $EDGE_DEPLOY_STATE_DIR, else /etc/edge-deploy (system) or ~/.config/edge-deploy (user).

    A path that exists and is not a directory, lies below a file, or is a symbolic-link loop is a one-line
    ServerError: read as "no server here", it would make install write configs past a running server. A path that
    does not exist yet is fine (nothing is recorded there)."""
    override = os.environ.get("EDGE_DEPLOY_STATE_DIR")
    if override:
        return _checked(Path(override), f"EDGE_DEPLOY_STATE_DIR={override}", "point it at a directory (or unset it)")
    if scope == "system":
        return _checked(SYSTEM_STATE_DIR, str(SYSTEM_STATE_DIR), f"make {SYSTEM_STATE_DIR} a directory")
    xdg = os.environ.get("XDG_CONFIG_HOME")
    config_home = xdg or str(Path.home() / ".config")
    where = f"XDG_CONFIG_HOME={xdg} gives {Path(config_home) / 'edge-deploy'}, which" if xdg else \
        str(Path(config_home) / "edge-deploy")
    return _checked(Path(config_home) / "edge-deploy", where, "point XDG_CONFIG_HOME at a directory (or unset it)"
                    if xdg else f"make {Path(config_home) / 'edge-deploy'} a directory")


def _checked(path: Path, named: str, advice: str) -> Path:
    """`path` unless it cannot be a state directory (see state_dir)."""
    try:
        is_dir = stat.S_ISDIR(os.stat(path).st_mode)
    except FileNotFoundError:
        return path
    except OSError as exc:
        if exc.errno == errno.ENOTDIR:
            blocker = next((str(p) for p in reversed(path.parents) if p.exists() and not p.is_dir()), "a part of it")
            why = f"lies below {blocker}, which is a file"
        elif exc.errno == errno.ELOOP:
            why = "is a symbolic-link loop"
        else:
            return path  # permissions: what reads it says so, as before
        raise ServerError(f"{named} {why}, so the servers recorded there cannot be found; {advice}.") from None
    if not is_dir:
        raise ServerError(f"{named} is not a directory, so the servers recorded there cannot be found; {advice}.")
    return path


def read_state_file(path: Path, what: str, limit: int, error: type[EdgeDeployError], hint: str) -> bytes | None:
    """The bytes of a file in the state directory (a server record or key, the last rollout) that is a regular file
    this user can read; None when it is missing, unreadable (permissions), a directory or over `limit` bytes (not one
    edge-deploy wrote). A FIFO, socket or device node is a one-line `error` ending in `hint` (bounded_read): reading it
    would block, or never end."""
    try:
        return read_regular(path, what, error, hint, limit)
    except error:
        if special_kind(path) is not None:
            raise
        return None
