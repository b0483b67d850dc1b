"""What the role asks on a vehicle: its state as one JSON object, and the record of its last rollout.

`edge-deploy fleet report` (what `fleet status` shows, and what the role reads before and after
a rollout to know which version to roll back to) and `edge-deploy fleet record` (the last rollout's
result, kept in the state directory: ``<state dir>/fleet/last-rollout.json``).
"""
from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from ..core.fsutil import write_json_atomic
from ..errors import EdgeDeployError, one_line
from ..machine.facts import device_facts
from ..machine.plan_fit import host_fingerprint
from ..serve import admin
from ..core.state import read_state_file, state_dir
from .policy import FleetError
from .reports import HostResult, VehicleReport

LAST_ROLLOUT = "last-rollout.json"


LAST_ROLLOUT_LIMIT = 1 << 20  # one host's result: a few hundred bytes


def last_rollout_path(scope: str) -> Path:
    """Where this vehicle keeps the result of its last rollout."""
    return state_dir(scope) / "fleet" / LAST_ROLLOUT


def record_result(scope: str, result: HostResult, repository: Path | None = None,
                  name: str = "lanedet") -> HostResult:
    """Keep `result` (the role's per-host outcome, plus what is served now) as this vehicle's last rollout.

    `result` is read from the JSON the role templates (`fleet record` prints what is kept); its keys stay as
    they came."""
    import datetime

    if repository is not None:
        now = report(repository, name, scope)
        result = result.updated(serving=now.served_version, manifest_sha256=now.manifest_sha256, health=now.health)
    result = result.updated(finished=datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"))
    path = last_rollout_path(scope)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_json_atomic(path, result.to_dict())
    return result


def report(repository: Path, name: str, scope: str) -> VehicleReport:
    """Served version, its manifest sha256, the server's health, this machine's fingerprint, the last rollout.

    What `fleet report` prints for the role and `fleet status` (its keys are what rollout.yml and status.yml
    read)."""
    repository = Path(repository)
    out = replace(VehicleReport.empty(name, str(repository)), last_rollout=_last_rollout(scope))
    try:
        facts = device_facts()
        out = replace(out, fingerprint=host_fingerprint(facts))
    except Exception as exc:  # noqa: BLE001 - a report always comes back
        out = replace(out, fingerprint_error=one_line(exc, 200))
    if not (repository / name / "config.pbtxt").is_file():
        return replace(out, health="no model", health_detail=f"{repository} has no model {name!r}")
    try:
        from ..deploy.models import list_models

        info = next(i for i in list_models(repository, name) if i.name == name)
    except (EdgeDeployError, StopIteration) as exc:
        return replace(out, health="unreadable", health_detail=one_line(exc, 200))
    current = max(info.served) if info.served else None
    by_version = {v.version: v for v in info.versions}
    shown = current if current is not None else (max(info.policy) if info.policy else None)
    out = replace(out, versions=tuple(v.version for v in info.versions), policy=tuple(info.policy),
                  served=tuple(info.served or ()), served_version=current,
                  manifest_sha256=by_version[shown].manifest_sha256 if shown in by_version else None)
    record = admin.live_server(repository)
    if record is None:
        return replace(out, health_detail=f"no running edge-deploy server serves {repository}")
    health = admin.check_health(record.url, [name], headers=admin.repository_headers(repository),
                                tls=record.client_tls())
    return replace(out, url=record.url,
                   health="ready" if health.all_ready else ("not ready" if health.live else "unreachable"),
                   health_detail="" if health.all_ready else (health.error or health.not_ready()))


def _last_rollout(scope: str) -> HostResult | None:
    """The result `fleet record` kept, or None (none kept, or not a JSON object)."""
    path = last_rollout_path(scope)
    data = read_state_file(path, "last rollout", LAST_ROLLOUT_LIMIT, FleetError,  # a FIFO: one line, not read for ever
                           "remove it; the next rollout writes it anew")
    if data is None:
        return None
    try:
        return HostResult.from_dict(json.loads(data), str(path))
    except ValueError:
        return None
