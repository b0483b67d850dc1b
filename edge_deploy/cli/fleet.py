"""`edge-deploy rollout` and `edge-deploy fleet ...`: a model to a fleet of vehicles with Ansible."""
from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Optional

import typer

from ..fleet.role_vars import parse_extra_vars
from ..core import strict_json
from .typer_app import HELP_MARKUP, app
from .numeric import number
from ..fleet.policy import HOSTS
from ..core.numbers import whole

FLEET_KEEP = whole(2, 1000, "versions")  # at least 2: the previous version is what a failed vehicle rolls back to

if TYPE_CHECKING:
    from ..fleet.reports import HostResult

fleet_app = typer.Typer(help="A fleet of vehicles: status, and the commands the Ansible role runs on a vehicle.",
                        no_args_is_help=True, rich_markup_mode=HELP_MARKUP)
app.add_typer(fleet_app, name="fleet")

InventoryOpt = Annotated[Path, typer.Option("--inventory", "-i", help="Ansible inventory of the vehicles.")]
VarsOpt = Annotated[Optional[list[str]], typer.Option(
    "--extra-vars", "-e", help="Role variables for every host: KEY=VALUE, JSON, or @FILE (repeatable).")]
LimitOpt = Annotated[Optional[str], typer.Option("--limit", help="Only these hosts (an Ansible host pattern).")]
UserOpt = Annotated[bool, typer.Option("--user", help="The user scope's state directory (serve --user).")]


@app.command()
def rollout(
    artifact: Annotated[Path, typer.Argument(help="Artifact directory written by `edge-deploy convert`.")],
    inventory: InventoryOpt,
    canary: Annotated[int, number(HOSTS, help="Hosts in the first batch; any failure there stops the rollout.")] = 1,
    batch: Annotated[str, typer.Option(help="Hosts per batch after the canary: N or P% of all hosts.")] = "25%",
    max_fail: Annotated[str, typer.Option(
        "--max-fail", help="Failures a batch may have before the rollout stops: N or P% of the batch.")] = "0",
    name: Annotated[Optional[str], typer.Option(help="Model name on the vehicles (edge_deploy_model_name).")] = None,
    keep: Annotated[Optional[int], number(FLEET_KEEP, help="Versions kept per vehicle (install --keep).")] = None,
    extra_vars: VarsOpt = None,
    limit: LimitOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the result as JSON.")] = False,
) -> None:
    """Roll ARTIFACT out to the vehicles: canary, then batches; a failed host rolls back; too many stop it."""
    from ..fleet.policy import FleetError
    from ..fleet.rollout import rollout as do_rollout

    variables = parse_extra_vars(extra_vars)
    if name is not None:
        variables["edge_deploy_model_name"] = name

    def progress(index: int, group: list[str], results: dict[str, HostResult]) -> None:
        if as_json:
            return
        label = "canary" if index == 0 and canary > 0 else f"batch {index + 1}"
        for host in group:
            typer.echo(f"{label}: {_result_line(host, results[host])}")

    result = do_rollout(artifact, inventory, canary=canary, batch=batch, max_fail=max_fail, limit=limit,
                        extra_vars=variables, on_batch=progress, keep=keep)  # keep: checked by rollout()
    if as_json:
        typer.echo(strict_json.dumps(result.to_dict(), indent=2))
    else:
        done = len(result.results) - len(result.failed)
        typer.echo(f"payload {result.payload}: {done} host(s) updated, {len(result.failed)} failed, "
                   f"{len(result.untouched)} untouched, {result.seconds:.1f} s (log: {result.run_dir / 'ansible.log'})")
    if result.stopped:
        raise FleetError(f"rollout stopped: {result.stopped}; untouched: {', '.join(result.untouched) or 'none'}.")
    if result.failed:
        raise FleetError(f"rollout finished with {len(result.failed)} failed host(s) ({', '.join(result.failed)}), "
                         "each rolled back to the version it served before.")


def _result_line(host: str, r: HostResult) -> str:
    if r.ok:
        plan = r.plan if isinstance(r.plan, dict) else {}
        how = " (plan reused)" if plan.get("reused") else " (plan built)" if plan.get("built") else ""
        return f"{host} ok, serving version {r.serving}{how}"
    back = "rolled back, " if r.rolled_back in (True, "True", "true") else ""
    return f"{host} FAILED at {r.step}: {r.message} ({back}serving version {r.serving})"


@fleet_app.command("status")
def status(
    inventory: InventoryOpt,
    extra_vars: VarsOpt = None,
    limit: LimitOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")] = False,
) -> None:
    """One row per vehicle: served version, manifest sha256, fingerprint, health, last rollout."""
    from ..fleet.rollout import fleet_status

    reports = fleet_status(inventory, parse_extra_vars(extra_vars), limit)
    if as_json:
        typer.echo(strict_json.dumps({host: r.to_dict() for host, r in reports.items()}, indent=2))
        return
    from rich.console import Console
    from rich.table import Table

    table = Table("host", "served version", "manifest sha256", "fingerprint", "health", "last rollout")
    for host, r in reports.items():
        fp = r.fingerprint
        finger = " ".join(str(v) for v in (fp.gpu, fp.tensorrt, fp.jetpack) if v) if fp is not None else ""
        finger = finger or ("no TensorRT (ONNX Runtime)" if fp is not None else "?")
        last = r.last_rollout
        last_text = f"{last.status} {last.payload or ''}" if last is not None else "-"
        if last is not None and not last.ok:
            last_text += f" at {last.step}"
        health = (r.health or "?") + (f" ({r.health_detail})" if r.health_detail else "")
        table.add_row(host, str(r.served_version if r.served_version is not None else "-"),
                      (r.manifest_sha256 or "-")[:16], finger, health, last_text)
    console = Console()
    if not console.is_terminal:
        console = Console(width=200)
    console.print(table)


@fleet_app.command("report", hidden=True)
def report(
    repository: Annotated[Path, typer.Option(help="The model repository.")] = Path("model_repository"),
    name: Annotated[str, typer.Option(help="Model name.")] = "lanedet",
    user: UserOpt = False,
) -> None:
    """(on a vehicle, run by the role) This vehicle's state as JSON."""
    from ..fleet.device import report as device_report

    typer.echo(strict_json.dumps(device_report(repository, name, "user" if user else "system").to_dict(), indent=2))


@fleet_app.command("record", hidden=True)
def record(
    result: Annotated[str, typer.Argument(help="The rollout result (JSON).")],
    repository: Annotated[Optional[Path], typer.Option(help="Add what this repository serves now.")] = None,
    name: Annotated[str, typer.Option(help="Model name.")] = "lanedet",
    user: UserOpt = False,
) -> None:
    """(on a vehicle, run by the role) Keep the last rollout's result, with what is served now; print it."""
    from ..fleet.device import record_result
    from ..fleet.policy import FleetError
    from ..fleet.reports import HostResult
    from ..artifact.records import RecordError

    try:
        data = json.loads(result)
    except ValueError as exc:
        raise FleetError(f"the rollout result is not JSON ({exc}).") from exc
    try:
        data = HostResult.from_dict(data)
    except RecordError as exc:
        raise FleetError(f"the rollout result is not a JSON object ({exc}).") from exc
    typer.echo(strict_json.dumps(record_result("user" if user else "system", data, repository, name).to_dict()))


@fleet_app.command("smoke")
def smoke(
    smoke_dir: Annotated[Path, typer.Argument(help="The smoke/ directory of an artifact (frames + reference.json).")],
    repository: Annotated[Path, typer.Option(help="The model repository a running server serves.")] = Path("model_repository"),
    name: Annotated[str, typer.Option(help="Model name.")] = "lanedet",
    url: Annotated[Optional[str], typer.Option(help="Server gRPC address (default: the server of --repository).")] = None,
) -> None:
    """Run the reference frames through the served model; exit 0 when its lanes match the recorded ones."""
    from ..fleet.policy import FleetError
    from ..fleet.smoke import check_served
    from ..serve import admin

    record = admin.live_server(repository)
    if url is None:
        if record is None:
            raise FleetError(f"no running edge-deploy server serves {repository}; start one with `edge-deploy serve`.")
        url = record.url
    result = check_served(smoke_dir, url, name, tls=record.client_tls() if record is not None else None)
    if not result.passed:
        raise FleetError(result.summary() + "; the served model does not give the artifact's lanes.")
    typer.echo(result.summary())


@fleet_app.command("reference")
def reference(
    artifact: Annotated[Path, typer.Argument(help="Artifact directory: smoke/ is written into it.")],
) -> None:
    """Record the smoke reference of an artifact: synthetic frames and the lanes its model.onnx gives."""
    from ..fleet.smoke import record_reference

    typer.echo(f"wrote {record_reference(artifact)}")
