"""Pruning: remove a model's old versions, never one that serves, nor one a failed rollout falls back on."""
from __future__ import annotations

from pathlib import Path

from ..core.triton_layout import policy_now, versions
from .files import remove_tree
from .history import forget_removed, read_history


def prune_versions(
    repository: Path, model: str, keep: int, served: list[int] | tuple[int, ...] = (),
    replaced: list[int] | tuple[int, ...] = (), selected: list[int] | None = None,
) -> list[int]:
    """Remove MODEL's versions beyond the newest `keep` healthy ones; the versions removed.

    Only healthy versions (not refused by a server, not rolled back from: `history`) count towards
    `keep`. Never removed, whatever `keep`: a version the config selects or the server serves
    (`served`), the versions `replaced` (what the config selected before an install: the version a
    failed rollout rolls back to), the newest version a server confirmed serving that nobody rolled
    back from, and the newest version on disk (install numbers versions highest + 1, so a number
    never comes back for other files). The rule is written down in docs/serving.md. `selected`: the versions the
    config selects, when the caller knows them (None: read from config.pbtxt).
    """
    avail = versions(repository, model)
    history = read_history(repository, model)
    selected = policy_now(repository, model) if selected is None else selected
    spared = set(selected) | set(served) | set(replaced) | set(avail[-1:])
    good = history.last_good(avail)
    if good is not None:
        spared.add(good)
    kept = set([v for v in avail if history.healthy(v)][-keep:])
    doomed = [v for v in avail if v not in kept and v not in spared]
    for v in doomed:
        remove_tree(repository / model / str(v))
    if doomed:
        forget_removed(repository, model)
    return doomed
