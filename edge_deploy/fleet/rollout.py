"""`edge-deploy rollout`: the payload to every host of an inventory, canary first, batch by batch.

Each batch is one `ansible-playbook` run of the shipped playbook limited to the batch's hosts
(Ansible runs them in parallel, one fork per host). Every host reports its result to the run
directory; a host with no report (unreachable, or Ansible itself failed) counts as failed. When a
batch has more failures than --max-fail (the canary: any failure) the rollout stops, and the
hosts of later batches are never contacted.
"""
from __future__ import annotations

import json
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable

from ..core.fsutil import write_text_atomic
from ..artifact.records import RecordError, json_value
from .ansible import playbook, run_playbook
from .inventory import inventory_hosts
from .payload import archive, make_payload, payload_id
from .policy import Amount, FleetError, batches, exceeds
from .reports import HostResult, VehicleReport
from .role_vars import RoleVars

__all__ = ["HostResult", "RolloutResult", "VehicleReport", "check_keep", "default_run_root", "fleet_status", "rollout"]


@dataclass
class RolloutResult:
    """What a rollout did, host by host."""

    payload: str
    run_dir: Path
    batches: list[list[str]]
    results: dict[str, HostResult] = field(default_factory=dict)
    untouched: list[str] = field(default_factory=list)
    stopped: str | None = None  # why the rollout stopped early (None: it reached every host)
    seconds: float = 0.0

    @property
    def failed(self) -> list[str]:
        return [h for h, r in self.results.items() if not r.ok]

    def to_dict(self) -> dict[str, Any]:
        return {"payload": self.payload, "run_dir": str(self.run_dir), "batches": self.batches,
                "results": json_value(self.results), "untouched": self.untouched, "stopped": self.stopped,
                "seconds": round(self.seconds, 2), "ok": not self.failed and self.stopped is None}


def check_keep(keep: Any) -> int:
    """Versions kept per vehicle (--keep, edge_deploy_keep; -e gives it as a string): at least 2, because the
    previous version is what a failed vehicle rolls back to. One-line FleetError otherwise."""
    count = keep
    if isinstance(keep, str):
        try:
            count = int(keep)
        except ValueError:
            count = None
    if isinstance(count, bool) or not isinstance(count, int):
        raise FleetError(f"--keep must be a whole number of versions, at least 2 (got {keep!r}).")
    if count < 2:
        raise FleetError(f"--keep must be at least 2 (got {keep}): the previous version is what a failed "
                         "vehicle rolls back to.")
    return count


def default_run_root() -> Path:
    """Where rollouts keep their payloads, plan caches, logs and results: ~/.cache/edge-deploy/fleet."""
    import os

    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "edge-deploy" / "fleet"


def rollout(
    artifact: Path,
    inventory: Path,
    *,
    canary: int = 1,
    batch: str = "25%",
    max_fail: str = "0",
    limit: str | None = None,
    extra_vars: RoleVars | None = None,  # Ansible's extra vars (role_vars): JSON for the playbook
    run_root: Path | None = None,
    batch_timeout: float = 3600.0,
    on_batch: Callable[[int, list[str], dict[str, HostResult]], None] | None = None,
    keep: int | None = None,
) -> RolloutResult:
    """Roll `artifact` out to the hosts of `inventory`; returns every host's result (never raises for a host).

    `keep`: versions kept per vehicle (the role's edge_deploy_keep, install --keep; at least 2), over
    an edge_deploy_keep in `extra_vars`, which is checked the same way.
    """
    started = time.monotonic()
    extra_vars = dict(extra_vars or {})  # a copy: the caller's stays as given
    if keep is not None:
        extra_vars["edge_deploy_keep"] = keep
    if "edge_deploy_keep" in extra_vars:
        check_keep(extra_vars["edge_deploy_keep"])
    size = Amount.parse(batch, "--batch")
    allowed = Amount.parse(max_fail, "--max-fail")
    hosts = inventory_hosts(Path(inventory), limit)
    plan = batches(hosts, canary, size)
    root = Path(run_root) if run_root is not None else default_run_root()
    root.mkdir(parents=True, exist_ok=True)
    staging = root / f".payload-{time.strftime('%Y%m%dT%H%M%S')}-{id(plan)}"
    make_payload(Path(artifact), staging)
    pid = payload_id(staging)
    payload_dir = root / "payloads" / pid
    if payload_dir.exists():
        import shutil

        shutil.rmtree(staging)
    else:
        payload_dir.parent.mkdir(parents=True, exist_ok=True)
        staging.rename(payload_dir)
    if not Path(f"{payload_dir}.tar").is_file():
        archive(payload_dir)
    run_dir = root / "runs" / f"{time.strftime('%Y%m%dT%H%M%S')}-{pid}"
    run_dir.mkdir(parents=True, exist_ok=True)
    cache = root / "plans" / pid
    cache.mkdir(parents=True, exist_ok=True)
    result = RolloutResult(payload=pid, run_dir=run_dir, batches=plan)
    variables = {**(extra_vars or {}), "edge_deploy_payload": str(payload_dir), "edge_deploy_payload_id": pid,
                 "edge_deploy_plan_cache": str(cache)}
    for index, group in enumerate(plan):
        reports = run_dir / f"batch{index}"
        reports.mkdir()
        vars_file = run_dir / f"batch{index}.vars.json"
        write_text_atomic(vars_file, json.dumps({**variables, "edge_deploy_report_dir": str(reports)}, indent=2))
        code = run_playbook(playbook("rollout.yml"), Path(inventory), group, vars_file, run_dir / "ansible.log",
                            forks=len(group), timeout=batch_timeout)
        for host in group:
            result.results[host] = replace(_host_result(reports / f"{host}.json", host, code, run_dir), batch=index)
        failed = sum(1 for h in group if not result.results[h].ok)
        if on_batch is not None:
            on_batch(index, group, {h: result.results[h] for h in group})
        is_canary = index == 0 and canary > 0
        if exceeds(failed, len(group), allowed, is_canary):
            what = "the canary batch" if is_canary else f"batch {index + 1}"
            result.stopped = f"{failed} of {len(group)} host(s) of {what} failed (allowed: {max_fail})"
            result.untouched = [h for later in plan[index + 1:] for h in later]
            break
    result.seconds = time.monotonic() - started
    write_text_atomic(run_dir / "result.json", json.dumps(result.to_dict(), indent=2))
    return result


def _host_result(path: Path, host: str, code: int, run_dir: Path) -> HostResult:
    """The report the host wrote to the run directory, or "unreachable" when there is none (or it is not JSON)."""
    try:
        return HostResult.from_dict(json.loads(path.read_text()), f"{path}")
    except (OSError, ValueError):
        return HostResult(host=host, status="failed", step="unreachable",
                          message=f"no result from the host (ansible-playbook exit {code}; see {run_dir / 'ansible.log'})")


def fleet_status(inventory: Path, extra_vars: RoleVars | None = None, limit: str | None = None,
                 run_root: Path | None = None, timeout: float = 600.0) -> dict[str, VehicleReport]:
    """Each host's report (served version, manifest sha256, fingerprint, health, last rollout), or why none came.

    The reports are what `edge-deploy fleet report` printed on each vehicle, read with their keys as they came
    (`fleet status --json` prints them so)."""
    import tempfile

    hosts = inventory_hosts(Path(inventory), limit)
    root = Path(run_root) if run_root is not None else default_run_root()
    root.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=root, prefix=".status-") as tmp:
        reports = Path(tmp)
        vars_file = reports / "vars.json"
        write_text_atomic(vars_file, json.dumps({**(extra_vars or {}), "edge_deploy_report_dir": str(reports)}))
        code = run_playbook(playbook("status.yml"), Path(inventory), hosts, vars_file, reports / "ansible.log",
                            forks=min(len(hosts), 32), timeout=timeout)
        out: dict[str, VehicleReport] = {}
        for host in hosts:
            try:
                out[host] = VehicleReport.from_dict(json.loads((reports / f"{host}.json").read_text()), host)
            except RecordError as exc:  # JSON, but not a report this version reads
                out[host] = VehicleReport.unreachable(f"its report is not readable: {exc}"[:200])
            except (OSError, ValueError):
                log = (reports / "ansible.log").read_text(errors="replace")
                reason = next((ln.strip() for ln in log.splitlines() if host in ln and
                               ("UNREACHABLE" in ln or "FAILED" in ln)), f"ansible-playbook exit {code}")
                out[host] = VehicleReport.unreachable(reason[:200])
    return out
