"""Talking to a running tritonserver that serves a model repository.

`edge-deploy serve` saves a `ServerRecord` (where the server listens, which
repository it serves, the header and key file of the key-restricted
model-repository protocol). `install` and `rollback` look the record up by the
repository path and, when the server answers, ask it to load the models they
changed (explicit model control), then report which versions are served.

Records live in ``<state_dir>/servers/<sha1 of the resolved repository path>.json`` for the
unit (its key is ``<state_dir>/model-repository.key``) and ``<sha1>.foreground.json`` for a
`serve --foreground` server, whose key sits beside it (``<sha1>.foreground.key``) and which
holds the repository's ``.edge-deploy-server.lock`` while it runs (``<sha1>.foreground.lock`` in the state dir
where the repository is read-only). Two kinds, two files: neither ever writes or
removes the other's record. state_dir is $EDGE_DEPLOY_STATE_DIR, else /etc/edge-deploy (scope
"system") or ~/.config/edge-deploy (scope "user").

A foreground record names the process that owns it (PID and its start time, so a reused PID is
not mistaken for it). When that process is gone (SIGKILL, power loss) the record is stale:
`find_record` ignores it and `prune_stale_records` removes it.
"""
from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Iterator

from ..errors import RepositoryError, ServerError
from ..core.fsutil import write_json_atomic
from ..core.state import read_state_file, state_dir
from ..tls.config import TLSConfig
from .addresses import dial_url



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
    pid: int | None = None  # the `serve --foreground` process that owns the record (None: the unit's)
    pid_start: int | None = None  # that process's start time (clock ticks after boot, /proc/PID/stat)
    tls: dict[str, str] | None = None  # {"ca", "cert", "key"}: the client identity to dial a TLS server with

    def client_tls(self) -> TLSConfig | None:
        """The TLSConfig for edge-deploy's own calls to this server (None: plaintext)."""
        if not self.tls:
            return None
        return TLSConfig(ca=self.tls.get("ca"), cert=self.tls.get("cert"), key=self.tls.get("key"))

    @property
    def kind(self) -> str:
        """"foreground" for a `serve --foreground` server, "unit" otherwise."""
        return "foreground" if self.pid is not None else "unit"

    def owner_alive(self) -> bool:
        """False when the process that owns a foreground record is gone (a unit's record: True)."""
        return self.pid is None or process_start(self.pid) == self.pid_start

    def describe(self) -> str:
        """Who serves: "`serve --foreground` (PID 123)" or "edge-deploy-triton.service (user)"."""
        if self.pid is not None:
            return f"`edge-deploy serve --foreground` (PID {self.pid})"
        return f"{self.unit or 'a server'} ({self.scope})"

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
            pid=int(data["pid"]) if data.get("pid") is not None else None,
            pid_start=int(data["pid_start"]) if data.get("pid_start") is not None else None,
            tls=dict(data["tls"]) if data.get("tls") else None,
        )


def tls_record(tls) -> dict[str, str] | None:  # noqa: ANN001 - argv.ServerTLS | None
    """The record's `tls` entry for a server's TLS settings: the client identity edge-deploy dials it with, and the
    server's certificate (whose expiry `status` shows)."""
    if tls is None:
        return None
    entry = {"ca": str(tls.ca), "server_cert": str(tls.cert)}
    if tls.client_cert is not None and tls.client_key is not None:
        entry.update(cert=str(tls.client_cert), key=str(tls.client_key))
    return entry


def process_start(pid: int) -> int | None:
    """When process `pid` started (clock ticks after boot), or None when there is no such live process."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    if fields[0] in ("Z", "X"):  # a zombie is gone for our purposes
        return None
    return int(fields[19])


KINDS = ("foreground", "unit")
RECORD_LIMIT = 64 << 10  # bytes: a record is a few hundred; what is larger is not one edge-deploy wrote


def read_server_file(path: Path, what: str, limit: int) -> bytes | None:
    """A server record or key (core.state.read_state_file): None when missing or unreadable, a FIFO refused."""
    return read_state_file(path, what, limit, ServerError, "remove it; `edge-deploy serve` writes it anew")


def _load(path: Path) -> ServerRecord | None:
    """The record in `path`; None when it cannot be read or is no record (another user's, half-written, gone)."""
    data = read_server_file(path, "server record", RECORD_LIMIT)
    if data is None:
        return None
    try:
        return ServerRecord.from_dict(json.loads(data))
    except (ValueError, KeyError, TypeError):
        return None


def _record_stem(repository: Path) -> str:
    return hashlib.sha1(str(Path(repository).resolve()).encode()).hexdigest()


def record_path(scope: str, repository: Path, kind: str = "unit") -> Path:
    """The record file of a server of `kind` ("unit" or "foreground") for a repository in a scope's state dir."""
    suffix = ".foreground.json" if kind == "foreground" else ".json"
    return state_dir(scope) / "servers" / (_record_stem(repository) + suffix)


def save_record(record: ServerRecord) -> Path:
    """Write the record atomically; returns its path."""
    record = ServerRecord(**{**record.__dict__, "repository": Path(record.repository).resolve()})
    path = record_path(record.scope, record.repository, record.kind)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_json_atomic(path, record.to_dict())
    return path


def _read_records(repository: Path) -> Iterator[tuple[Path, ServerRecord]]:
    """(path, record) for every readable record of `repository`: user state dir first, foreground first."""
    resolved = Path(repository).resolve()
    seen: set[Path] = set()
    for scope in ("user", "system"):
        for kind in KINDS:
            path = record_path(scope, resolved, kind)
            if path in seen or not path.is_file():
                continue
            seen.add(path)
            record = _load(path)
            if record is None:
                continue
            if Path(record.repository).resolve() == resolved:
                yield path, record


def find_record(repository: Path) -> ServerRecord | None:
    """The record of a server serving `repository`, or None; stale foreground records are skipped."""
    for _path, record in _read_records(repository):
        if record.owner_alive():
            return record
    return None


def foreground_records(scopes: list[str] | tuple[str, ...] = ("user", "system")) -> list[ServerRecord]:
    """The records of the `serve --foreground` servers that run now, in the state dirs of `scopes`."""
    out: list[ServerRecord] = []
    for directory in dict.fromkeys(state_dir(scope) / "servers" for scope in scopes):
        for path in sorted(directory.glob("*.foreground.json")):
            record = _load(path)
            if record is None:
                continue
            if record.owner_alive():
                out.append(record)
    return out


def record_at(url: str) -> ServerRecord | None:
    """The record of a running server edge-deploy started that listens where `url` dials (a `serve --foreground`
    server before a unit), in this user's and the system's state dirs; None when none does. How a command given
    only --url (bench) finds the server's key and TLS identity, as `status` does."""
    def where(address: str) -> str:
        host, _, port = dial_url(address).rpartition(":")
        return f"{'127.0.0.1' if host == 'localhost' else host}:{port}"

    wanted = where(url)
    for directory in dict.fromkeys(state_dir(scope) / "servers" for scope in ("user", "system")):
        paths = sorted(directory.glob("*.json"), key=lambda p: (not p.name.endswith(".foreground.json"), p.name))
        for path in paths:
            record = _load(path)
            if record is None:
                continue
            if where(record.url) == wanted and record.owner_alive():
                return record
    return None


def prune_stale_records(repository: Path) -> list[str]:
    """Remove the records (and keys) of foreground servers whose process is gone; what was removed, in words."""
    removed = []
    for path, record in _read_records(repository):
        if record.owner_alive():
            continue
        try:
            path.unlink(missing_ok=True)
            Path(record.key_file).unlink(missing_ok=True)
        except OSError:
            continue  # another user's state dir: leave it to them
        removed.append(f"removed the stale record of a server that is gone ({record.describe()} at {record.url})")
    return removed


def remove_record(record: ServerRecord) -> None:
    """Delete a record if it is still this one (a record another server wrote since stays)."""
    path = record_path(record.scope, record.repository, record.kind)
    current = _load(path)
    if current is None:
        return
    if (current.url, current.pid, current.pid_start) == (record.url, record.pid, record.pid_start):
        path.unlink(missing_ok=True)


SERVER_LOCK_NAME = ".edge-deploy-server.lock"  # in the repository: held by the foreground server that serves it


def _open_claim(scope: str, repository: Path) -> tuple[int, Path]:
    """The lock file a foreground server of `repository` holds: the repository's own, so servers with other state
    directories (root and a user, another EDGE_DEPLOY_STATE_DIR) see each other; where it cannot be created or
    opened (a read-only repository), the state directory's ``<sha1>.foreground.lock``."""
    path = Path(repository) / SERVER_LOCK_NAME
    for flags in (os.O_RDWR | os.O_CREAT, os.O_RDONLY):  # another user's lock file is still lockable read-only
        with contextlib.suppress(OSError):
            return os.open(path, flags, 0o644), path
    path = record_path(scope, repository, "foreground").with_suffix(".lock")
    path.parent.mkdir(parents=True, exist_ok=True)
    return os.open(path, os.O_RDWR | os.O_CREAT, 0o600), path


@contextlib.contextmanager
def foreground_claim(scope: str, repository: Path, url: str) -> Iterator[Path]:
    """Hold the repository's server lock while a foreground server runs; ServerError when another one holds it.

    An flock dies with its process, so a SIGKILLed server never blocks the next one.
    The lock file says who holds it (PID and URL) for the refusal message.
    """
    fd, path = _open_claim(scope, repository)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise ServerError(
                f"another `edge-deploy serve --foreground` ({_holder(fd)}) already serves "
                f"{Path(repository).resolve()}; stop it first, or serve another repository."
            ) from None
        with contextlib.suppress(OSError):  # a lock file opened read-only cannot say who holds it
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()} {url}\n".encode(), 0)
        yield path
    finally:
        os.close(fd)


def _holder(fd: int) -> str:
    """Who holds a server lock, from what its holder wrote in it: "PID 123 at 127.0.0.1:8001"."""
    holder = os.pread(fd, 4096, 0).decode(errors="replace").split()
    return f"PID {holder[0]} at {holder[1]}" if len(holder) >= 2 else "another process"


def claim_holder(repository: Path) -> str | None:
    """Who holds the repository's server lock (a running `serve --foreground`, whatever its state directory), in
    words; None when nobody does."""
    try:
        fd = os.open(Path(repository) / SERVER_LOCK_NAME, os.O_RDONLY | os.O_NONBLOCK)  # a FIFO: no wait
    except OSError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)  # only a test: released at once
        except BlockingIOError:
            return _holder(fd)
        return None
    finally:
        os.close(fd)


KEY_LIMIT = 4096  # bytes: a key is 64 hex digits


def read_key(record: ServerRecord) -> str:
    """The model-repository key, or a one-line RepositoryError saying who can read it."""
    data = read_server_file(Path(record.key_file), "server key", KEY_LIMIT)
    key = data.decode(errors="replace").strip() if data is not None else None
    if key is None:
        raise RepositoryError(f"cannot read the server key {record.key_file} (missing, or not readable by this "
                              "user): run as root or a member of group edge-deploy.")
    if not key:
        raise RepositoryError(f"the server key {record.key_file} is empty; re-run `edge-deploy serve`.")
    return key
