"""Which server a command talks to when it is not given --url: the one `status` shows.

Every command that dials a server (`health`, `infer`, `bench`) finds it the same way, from the records `edge-deploy
serve` keeps in the state directory (server_record.py): `--url` when given; else the server of `--repository`; else,
without --repository, the server of the default repository (`model_repository`, serve's default), the installed
unit's, or the one `serve --foreground` server running here; else 127.0.0.1:8001. The command says which on one
line of stderr (`FoundServer.line`).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from . import systemd as su
from .server_record import ServerRecord, find_record, foreground_records, record_at
from .service import foreground_scope, scope_of

DEFAULT_URL = "127.0.0.1:8001"
DEFAULT_REPOSITORY = Path("model_repository")  # `serve`'s default --repository, relative to where it runs


@dataclass(frozen=True)
class FoundServer:
    """Where a command dials: the address, the record of the server edge-deploy started there (its key and TLS
    identity; None when none is known), the repository it serves (None: unknown) and how it was found, in words."""

    url: str
    record: ServerRecord | None
    repository: Path | None
    how: str
    given: bool = False  # --url

    def line(self) -> str:
        """The one line a command prints on stderr: which server, and why that one."""
        return f"server {self.url}: {self.how}"


def _of_record(record: ServerRecord, why: str = "") -> FoundServer:
    return FoundServer(record.url, record, Path(record.repository),
                       f"{record.describe()} serving {record.repository}{why} (--url picks another)")


def locate_server(url: str | None, repository: Path | None = None, *, user: bool = False) -> FoundServer:
    """The server a command given `url` (or None) and `repository` (or None) talks to (module docstring)."""
    scope = scope_of(user)
    if url is not None:
        # the record only for its TLS identity: a command given --url alone judges the models it is told of
        return FoundServer(url, record_at(url), repository, "given with --url", given=True)
    if repository is not None:
        record = find_record(repository)
        if record is not None:
            return _of_record(record)
    elif DEFAULT_REPOSITORY.is_dir():
        record = find_record(DEFAULT_REPOSITORY)
        if record is not None:
            return _of_record(record, ", the default repository")
    installed = su.read_installed_unit(scope)
    if installed is not None:
        serves = Path(installed.repository)
        record = find_record(serves)
        return FoundServer(record.url if record is not None else installed.url, record, serves,
                           f"the installed {su.UNIT_NAME} ({scope}) serving {serves} (--url picks another)")
    if repository is None:
        running = foreground_records((foreground_scope(user), scope))
        if len(running) == 1:
            return _of_record(running[0], ", the one server running here")
        record = record_at(DEFAULT_URL)
        if record is not None:
            return _of_record(record)
        if running:
            return FoundServer(DEFAULT_URL, None, None, f"the default address; {len(running)} servers run here "
                               "(`edge-deploy status` lists them): pass --repository or --url to pick one")
        return FoundServer(DEFAULT_URL, None, None, "the default address (no server `edge-deploy serve` started is "
                           "recorded here; --url picks another)")
    return FoundServer(DEFAULT_URL, record_at(DEFAULT_URL), repository,
                       f"the default address (no server `edge-deploy serve` started is recorded for {repository}; "
                       "--url picks another)")
