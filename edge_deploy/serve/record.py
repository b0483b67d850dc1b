"""Talking to a running tritonserver that serves a model repository.

`edge-deploy serve` saves a `ServerRecord` (where the server listens, which
repository it serves, the header and key file of the key-restricted
model-repository protocol). `install` and `rollback` look the record up by the
repository path and, when the server answers, ask it to load the models they
changed (explicit model control), then report which versions are served.

Records live in ``<state_dir>/servers/<sha1 of the resolved repository path>.json``
(a `serve --foreground` server keeps its key beside it, in ``<sha1>.key``; the unit's key
is ``<state_dir>/model-repository.key``);
state_dir is $EDGE_DEPLOY_STATE_DIR, else /etc/edge-deploy (scope "system") or
~/.config/edge-deploy (scope "user").
"""
from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ..errors import RepositoryError
from ..fsutil import write_json_atomic

SYSTEM_STATE_DIR = Path("/etc/edge-deploy")


@dataclass
class ServerRecord:
    """A server launched by `edge-deploy serve` for one repository.

    key_header is the gRPC metadata name that carries the key: ``triton-grpc-protocol-<name>`` for
    ``--grpc-restricted-protocol=model-repository:<name>=<key>`` (a bare <name> is accepted, see
    `key_headers`). key_file holds the key (mode 0600, or 0640 group edge-deploy for the system unit).
    """

    url: str
    repository: Path
    key_header: str
    key_file: Path
    scope: str  # "system" | "user"
    unit: str | None = None

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["repository"] = str(self.repository)
        data["key_file"] = str(self.key_file)
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "ServerRecord":
        return cls(
            url=str(data["url"]),
            repository=Path(data["repository"]),
            key_header=str(data["key_header"]),
            key_file=Path(data["key_file"]),
            scope=str(data.get("scope", "user")),
            unit=data.get("unit"),
        )


def state_dir(scope: str) -> Path:
    """Where records live: $EDGE_DEPLOY_STATE_DIR, else /etc/edge-deploy (system) or ~/.config/edge-deploy (user)."""
    override = os.environ.get("EDGE_DEPLOY_STATE_DIR")
    if override:
        return Path(override)
    if scope == "system":
        return SYSTEM_STATE_DIR
    config_home = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(config_home) / "edge-deploy"


def _record_name(repository: Path) -> str:
    return hashlib.sha1(str(Path(repository).resolve()).encode()).hexdigest() + ".json"


def record_path(scope: str, repository: Path) -> Path:
    """The record file for a repository in a scope's state dir."""
    return state_dir(scope) / "servers" / _record_name(repository)


def save_record(record: ServerRecord) -> Path:
    """Write the record atomically; returns its path."""
    record = ServerRecord(**{**record.__dict__, "repository": Path(record.repository).resolve()})
    path = record_path(record.scope, record.repository)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_json_atomic(path, record.to_dict())
    return path


def find_record(repository: Path) -> ServerRecord | None:
    """The record of a server serving `repository` (user state dir first, then system), or None."""
    resolved = Path(repository).resolve()
    seen: set[Path] = set()
    for scope in ("user", "system"):
        path = record_path(scope, resolved)
        if path in seen or not path.is_file():
            continue
        seen.add(path)
        try:
            record = ServerRecord.from_dict(json.loads(path.read_text()))
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if Path(record.repository).resolve() == resolved:
            return record
    return None


def remove_record(record: ServerRecord) -> None:
    """Delete a record (no error when it is already gone)."""
    record_path(record.scope, record.repository).unlink(missing_ok=True)


def read_key(record: ServerRecord) -> str:
    """The model-repository key, or a one-line RepositoryError saying who can read it."""
    try:
        key = Path(record.key_file).read_text().strip()
    except OSError as exc:
        raise RepositoryError(
            f"cannot read the server key {record.key_file} ({exc.strerror or exc}): "
            "run as root or a member of group edge-deploy."
        ) from exc
    if not key:
        raise RepositoryError(f"the server key {record.key_file} is empty; re-run `edge-deploy serve`.")
    return key
















