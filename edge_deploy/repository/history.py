"""What each version of a model has done: served, refused by the server, rolled back from.

Pruning needs a memory: a version the server refused, or one a rollback moved away from, must not
count as one of the K versions `install --keep K` keeps, and the newest version a server confirmed
serving is what a vehicle falls back on. The versions on disk cannot say that, so install and
rollback record it in ``<repo>/.edge-deploy-state.json`` (one entry per model)::

    {"format": 1, "models": {"lanedet": {"served": [2, 4], "failed": {"4": "rolled back to version 2"}}}}

The file sits at the top of the repository, where Triton looks for model directories only (it never
reloads a model because this file changed). Callers hold the repository lock. The state is advice:
an unreadable or damaged file (wrong types) reads as empty, a file of a newer format is refused (never rewritten), and a write that fails (a full disk) is skipped, since the rule
that matters most (an install never prunes the version it replaced) does not depend on it.
"""
from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from .._version import __version__
from ..errors import RepositoryError
from ..core.fsutil import write_json_atomic

STATE_NAME = ".edge-deploy-state.json"
FORMAT = 1


@dataclass
class VersionHistory:
    """One model's record: versions a server confirmed serving, and versions that failed (with why)."""

    served: list[int] = field(default_factory=list)
    failed: dict[int, str] = field(default_factory=dict)

    def healthy(self, version: int) -> bool:
        """Not refused by a server and not rolled back from."""
        return version not in self.failed

    def last_good(self, present: Iterable[int]) -> int | None:
        """The newest version on disk that a server confirmed serving and nobody rolled back from."""
        good = [v for v in present if v in self.served and self.healthy(v)]
        return max(good) if good else None

    def to_dict(self) -> dict[str, Any]:
        return {"served": sorted(self.served), "failed": {str(v): why for v, why in sorted(self.failed.items())}}

    @classmethod
    def from_dict(cls, data: Any) -> "VersionHistory":
        """A model's entry; an entry of the wrong shape is damaged and reads as empty, like unreadable JSON."""
        if not isinstance(data, dict):
            return cls()
        served, failed = data.get("served") or [], data.get("failed") or {}
        if not isinstance(served, list) or not isinstance(failed, dict):
            return cls()
        versions = [int(v) for v in served if (isinstance(v, int) and not isinstance(v, bool)) or str(v).isdigit()]
        reasons = {int(v): str(why) for v, why in failed.items() if str(v).isdigit()}
        return cls(sorted(set(versions)), reasons)


def state_path(repository: Path) -> Path:
    return Path(repository) / STATE_NAME


def _read_all(repository: Path) -> dict[str, object]:
    """The state file's models (model name -> its raw entry, which VersionHistory.from_dict checks)."""
    try:
        data = json.loads(state_path(repository).read_text())
    except (OSError, ValueError):
        return {}
    if isinstance(data, dict):
        _check_format(repository, data)
    models = data.get("models") if isinstance(data, dict) else None
    return models if isinstance(models, dict) else {}


def _check_format(repository: Path, data: dict[str, object]) -> None:
    """RepositoryError for a state file a newer edge-deploy wrote: reading it as empty would rewrite it, losing it."""
    found = data.get("format")
    if isinstance(found, int) and not isinstance(found, bool) and found > FORMAT:
        tool = data.get("tool")
        version = tool.get("version") if isinstance(tool, dict) else None
        writer = f"edge-deploy {version}" if isinstance(version, str) else "a newer edge-deploy"
        raise RepositoryError(
            f"{state_path(repository)} is format {found}, written by {writer}; this edge-deploy "
            f"({__version__}) reads format {FORMAT} only and will not overwrite it: use {writer} or newer."
        )


def check_state(repository: Path) -> None:
    """Before install or rollback touches anything: RepositoryError when the state file is of a newer format."""
    _read_all(repository)


def read_history(repository: Path, model: str) -> VersionHistory:
    """MODEL's record (empty when there is none or the file cannot be read)."""
    return VersionHistory.from_dict(_read_all(repository).get(model))


def _update(repository: Path, model: str, change: Any) -> None:
    models = _read_all(repository)
    history = VersionHistory.from_dict(models.get(model))
    change(history)
    present = {int(p.name) for p in (Path(repository) / model).glob("*")
               if p.name.isdigit() and p.name[0] != "0" and p.is_dir()}
    history.served = [v for v in history.served if v in present]  # pruned or removed by hand: forget it
    history.failed = {v: why for v, why in history.failed.items() if v in present}
    if history.served or history.failed:
        models[model] = history.to_dict()
    else:
        models.pop(model, None)
    if not models and not state_path(repository).exists():
        return
    with contextlib.suppress(OSError):  # advice only (see the module docstring)
        write_json_atomic(state_path(repository), {"format": FORMAT, "tool": {"name": "edge-deploy", "version": __version__},
                                                   "models": models})


def record_served(repository: Path, model: str, versions: Iterable[int]) -> None:
    """A server confirmed serving `versions` of MODEL: they are good again (no longer failed)."""
    versions = list(versions)

    def change(history: VersionHistory) -> None:
        history.served = sorted(set(history.served) | set(versions))
        for v in versions:
            history.failed.pop(v, None)

    _update(repository, model, change)


def record_failed(repository: Path, model: str, versions: Iterable[int], why: str) -> None:
    """`versions` of MODEL failed (`why`: "the server refused to load it", "rolled back to version 2")."""
    versions = list(versions)

    def change(history: VersionHistory) -> None:
        for v in versions:
            history.failed[v] = why

    _update(repository, model, change)


def record_chosen(repository: Path, model: str, version: int) -> None:
    """Someone rolled back (or forward) to `version`: whatever failed before, it is not counted as failed now."""
    _update(repository, model, lambda history: history.failed.pop(version, None))


def forget_removed(repository: Path, model: str) -> None:
    """Drop what is recorded about versions of MODEL that are no longer on disk (after pruning)."""
    _update(repository, model, lambda history: None)
