"""What the role asks on a vehicle: its state as one JSON object, and the record of its last rollout.

`edge-deploy fleet report` (what `fleet status` shows, and what the role reads before and after
a rollout to know which version to roll back to) and `edge-deploy fleet record` (the last rollout's
result, kept in the state directory: ``<state dir>/fleet/last-rollout.json``).
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..fsutil import write_json_atomic
from ..errors import EdgeDeployError, one_line
from ..machine.facts import device_facts
from ..machine.plan_fit import machine_fingerprint
from ..serve import admin
from ..state import state_dir

LAST_ROLLOUT = "last-rollout.json"


def last_rollout_path(scope: str) -> Path:
    """Where this vehicle keeps the result of its last rollout."""
    return state_dir(scope) / "fleet" / LAST_ROLLOUT


def record_result(scope: str, result: dict[str, Any], repository: Path | None = None,
                  name: str = "lanedet") -> dict[str, Any]:
    """Keep `result` (the role's per-host outcome, plus what is served now) as this vehicle's last rollout.

    `result` is the JSON the role templates (`fleet record` prints what is kept); external JSON, kept as it is."""
    import datetime

    result = dict(result)
    if repository is not None:
        now = report(repository, name, scope)
        result.update(serving=now["served_version"], manifest_sha256=now["manifest_sha256"], health=now["health"])
    result["finished"] = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    path = last_rollout_path(scope)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_json_atomic(path, result)
    return result


def report(repository: Path, name: str, scope: str) -> dict[str, Any]:
    """Served version, its manifest sha256, the server's health, this machine's fingerprint, the last rollout.

    The JSON object `fleet report` prints for the role and `fleet status` (external JSON: its keys are what
    rollout.yml and status.yml read)."""
    repository = Path(repository)
    out: dict[str, Any] = {"name": name, "repository": str(repository), "url": None, "served": [],
                           "served_version": None, "policy": [], "manifest_sha256": None, "versions": [],
                           "health": "no server", "health_detail": "", "fingerprint": None, "last_rollout": None}
    try:
        facts = device_facts()
        out["fingerprint"] = {**machine_fingerprint(facts).to_dict(), "jetpack": facts.jetpack}
    except Exception as exc:  # noqa: BLE001 - a report always comes back
        out["fingerprint_error"] = one_line(exc, 200)
    try:
        out["last_rollout"] = json.loads(last_rollout_path(scope).read_text())
    except (OSError, ValueError):
        pass
    if not (repository / name / "config.pbtxt").is_file():
        out["health"] = "no model"
        out["health_detail"] = f"{repository} has no model {name!r}"
        return out
    try:
        from ..deploy.models import list_models

        info = next(i for i in list_models(repository, name) if i.name == name)
    except (EdgeDeployError, StopIteration) as exc:
        out["health"] = "unreadable"
        out["health_detail"] = one_line(exc, 200)
        return out
    out["versions"] = [v.version for v in info.versions]
    out["policy"] = info.policy
    out["served"] = info.served or []
    current = max(info.served) if info.served else None
    out["served_version"] = current
    by_version = {v.version: v for v in info.versions}
    shown = current if current is not None else (max(info.policy) if info.policy else None)
    if shown in by_version:
        out["manifest_sha256"] = by_version[shown].manifest_sha256
    record = admin.live_server(repository)
    if record is None:
        out["health_detail"] = f"no running edge-deploy server serves {repository}"
        return out
    out["url"] = record.url
    health = admin.check_health(record.url, [name], headers=admin.repository_headers(repository),
                                tls=record.client_tls())
    out["health"] = "ready" if health.all_ready else ("not ready" if health.live else "unreachable")
    out["health_detail"] = "" if health.all_ready else (health.error or health.not_ready())
    return out
