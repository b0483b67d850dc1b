"""Rollback and prune: serve an older version again, remove old ones, never one that is served.

The repository side (pin a config, prune, history) is file work in edge_deploy.repository; this module asks the
running server to load what was pinned and records what it serves.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass
from pathlib import Path

from ..errors import RepositoryError
from ..core.fsutil import write_bytes_atomic
from ..core.progress import Reporter
from ..repository import model_config as mc
from ..repository.files import check_writable, repository_error, repository_lock
from ..repository.history import check_state, read_history, record_chosen, record_failed, record_served
from ..repository.pinning import version_config
from ..repository.pipelines import bls_version_unchanged
from ..repository.prune import prune_versions
from ..repository.versions import PIPELINE_SUFFIXES, check_name
from ..serve import admin
from ..serve.server_record import ServerRecord
from ..core.triton_layout import CONFIG, policy_now, versions
from .server import load_order, served, server_for


@dataclass
class RollbackResult:
    """What `rollback` did."""

    name: str
    version: int
    previous: list[int]
    models: list[str]
    repository: Path
    served: dict[str, list[int]] | None = None
    server_url: str | None = None

    def summary(self) -> str:
        """A few readable lines."""
        return (
            f"{', '.join(self.models)} pinned to version {self.version} (was {self.previous or 'none'})\n"
            + served_line(self.served, self.server_url, self.repository)
        )

    __str__ = __rich__ = summary  # rich prints the summary too


def served_line(served: dict[str, list[int]] | None, url: str | None, repository: Path) -> str:
    """One line: which versions the server serves now, or that there is no server."""
    if served is None:
        return (
            f"no running edge-deploy server serves {repository}: files written "
            "(a polling server picks them up; a server started later loads them)"
        )
    parts = [f"{m} {', '.join(map(str, v)) or 'none'}" for m, v in served.items()]
    return f"server {url} now serves: " + "; ".join(parts)


def _serve_again(record: ServerRecord, models: list[str]) -> str:
    """After a failed load: ask the server to load `models` from the restored configs again; what it serves, in words."""
    try:
        admin.load_models(record, models)
    except RepositoryError as exc:
        return f"putting back what served before failed too ({exc}): check `edge-deploy models`"
    return "rolled back nothing: " + served_line(served(record, models), record.url, Path()).replace(
        "now serves", "serves again")


def prune(repository: Path, name: str, keep: int) -> dict[str, list[int]]:
    """Remove versions of NAME (and its pipeline models) beyond the newest `keep`, never a served one."""
    check_name(name)
    if keep < 1:
        raise RepositoryError(f"--keep must be at least 1 (got {keep}).")
    repository = Path(repository)
    record = admin.live_server(repository)
    with repository_lock(repository):
        out = {}
        for model in (name, *(name + s for s in PIPELINE_SUFFIXES)):
            if (repository / model / CONFIG).is_file():
                now = admin.served_versions(record.url, model, record.client_tls()) if record is not None else []
                removed = prune_versions(repository, model, keep, now)
                if removed:
                    out[model] = removed
        return out


def _check_rollback(repository: Path, name: str) -> list[int]:
    """NAME's versions; RepositoryError when there is no such repository or model."""
    check_name(name)
    if not repository.is_dir():
        why = "is not a directory" if repository.exists() else "does not exist"
        raise RepositoryError(f"model repository {repository} {why}; pass the --repository that `install` wrote to.")
    if not (repository / name / CONFIG).is_file():
        raise RepositoryError(f"{repository} has no model {name!r}; see `edge-deploy models --repository {repository}`.")
    avail = versions(repository, name)
    check_state(repository)
    return avail


def _target(repository: Path, name: str, avail: list[int], current: list[int], to: int | None, *,
            prefer_served: bool = False) -> int:
    """The version to roll back to: `to`, else the newest healthy one below the served one; with a server serving
    (`prefer_served`), the newest of those a server confirmed serving when there is one (install and rollback record
    what the server serves before they change it), not one no server loaded (an install cut off before its load)."""
    if to is None:
        older = [v for v in avail if current and v < min(current)]
        if not older:
            raise RepositoryError(
                f"{name} has no version older than the served {current or 'none'} (versions: "
                f"{', '.join(map(str, avail)) or 'none'}); pass --to V."
            )
        history = read_history(repository, name)
        healthy = [v for v in older if history.healthy(v)]
        served = [v for v in healthy if v in history.served] if prefer_served else []
        to = (served or healthy or older)[-1]  # skip versions that failed before
    if to not in avail:
        raise RepositoryError(
            f"{name} has no version {to} (versions: {', '.join(map(str, avail)) or 'none'}); pick one of them with --to."
        )
    return to


def rollback(
    repository: Path, name: str, to: int | None = None, *, reporter: Reporter | None = None,
) -> RollbackResult:
    """Serve an older version of NAME again (default: the newest one below the served one).

    The config is rewritten for that version with version_policy specific [V]; the
    pipeline models follow when they have version V. A running server is asked to load them, but for
    a BLS pipeline that would do what the served one does (it calls the served NAME: nothing to
    reload; `pipelines.bls_version_unchanged`). An ensemble is loaded again with its steps, as before.
    """
    reporter = reporter or Reporter()
    repository = Path(repository)
    avail = _check_rollback(repository, name)
    record = server_for(repository, reporter)
    serving = admin.served_versions(record.url, name, record.client_tls()) if record else []
    # The server, when one answers, is the witness of what serves: a config can say otherwise after an install or
    # rollback was cut off between its config write and the load.
    current = serving or policy_now(repository, name)
    to = _target(repository, name, avail, current, to, prefer_served=bool(serving))
    models = [name] + [name + s for s in PIPELINE_SUFFIXES if (repository / (name + s) / str(to)).is_dir()
                       and (repository / (name + s) / CONFIG).is_file()]
    result = RollbackResult(name=name, version=to, previous=current, models=models, repository=repository)
    check_writable(repository)
    with repository_lock(repository):
        if serving:
            record_served(repository, name, serving)
        _pin_and_load(repository, name, to, record, result, reporter)
        # What pruning must know: the versions moved away from failed; the one chosen is good again.
        for model in models:
            record_chosen(repository, model, to)
            record_failed(repository, model, [v for v in current if v > to], f"rolled back to version {to}")
            if result.served is not None and to in result.served.get(model, []):
                record_served(repository, model, [to])
    return result


def _pin_and_load(repository: Path, name: str, to: int, record: ServerRecord | None, result: RollbackResult,
                  reporter: Reporter) -> None:
    """Pin each of `result.models` to version `to` and have the server (if any) load them; on any failure the
    configs are put back as they were."""
    models = result.models
    # Everything the rollback needs, before anything is touched: each model's config for `to`, its files.
    pinned = {m: mc.config_text(version_config(repository, m, to)).encode() for m in models}
    saved = {m: (repository / m / CONFIG).read_bytes() for m in models}
    # Before the configs are pinned: a served BLS pipeline that version `to` leaves as it is keeps serving.
    pipe = name + "_pipeline"
    keep_serving = []
    if record is not None and pipe in models and bls_version_unchanged(
            repository, pipe, to, lambda: admin.served_versions(record.url, pipe, record.client_tls())):
        keep_serving.append(pipe)

    def restore() -> None:
        for model, text in saved.items():
            with contextlib.suppress(OSError):
                write_bytes_atomic(repository / model / CONFIG, text)

    try:
        for model in models:
            write_bytes_atomic(repository / model / CONFIG, pinned[model])
    except OSError as exc:
        restore()
        raise repository_error(f"write the config of {name}", exc) from exc
    if record is None:
        return
    result.server_url = record.url
    with reporter.stage(f"load {name} version {to} on {record.url}"):
        loads = load_order([m for m in models if m not in keep_serving])
        try:
            admin.load_models(record, loads)
        except RepositoryError as exc:
            restore()  # the configs say what served before again; the server is asked to serve it again
            for model in models:
                record_failed(repository, model, [to], "the server refused to load it")
            raise RepositoryError(f"{exc}; {_serve_again(record, loads)}") from exc
    result.served = served(record, models)
