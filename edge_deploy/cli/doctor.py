"""`edge-deploy doctor`: one table of what this machine has, stage by stage."""
from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from ..core import strict_json
from .typer_app import app


_STYLE = {"ok": "green", "warn": "yellow", "fail": "red", "info": "dim"}


@app.command()
def doctor(
    for_: Annotated[str, typer.Option(
        "--for", help="Judge readiness for these stages: convert, serve, all or a comma list "
                      "(exit 0 when ready, 1 otherwise).")] = "all",
    repository: Annotated[Optional[Path], typer.Option(
        help="Also check each model's plan in this Triton model repository against this machine.")] = None,
    root: Annotated[Optional[Path], typer.Option(
        hidden=True, help="Read /etc, /proc and /sys under this directory (tests).")] = None,
    as_json: Annotated[bool, typer.Option(
        "--json", help="Print the checks, readiness and this machine's plan fingerprint as JSON.")] = False,
) -> None:
    """Show what this machine has for convert and serve, and whether each stage is ready."""
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    from ..deploy.doctor import ready, report, run_checks, stages_for

    stages = stages_for(for_)
    checks = run_checks(root=root, repository=repository)
    if as_json:
        data = report(checks, stages, root)
        typer.echo(strict_json.dumps(data.to_dict(), indent=2))
        raise typer.Exit(0 if data.ready else 1)
    table = Table(title="edge-deploy doctor", show_lines=False)
    table.add_column("check")
    table.add_column("status")
    table.add_column("needed for")
    table.add_column("detail", overflow="fold")
    for check in checks:
        style = _STYLE.get(check.status, "")
        table.add_row(escape(check.name), f"[{style}]{check.status}[/]", ", ".join(check.needed_for),
                      escape(check.detail))
    console = Console()
    console.print(table)
    verdicts = []
    for stage in stages:
        ok = ready(checks, (stage,))
        verdicts.append(ok)
        blockers = [c.name for c in checks if c.status == "fail" and stage in c.needed_for]
        if ok:
            console.print(f"[green]{stage}: ready[/]")
        else:
            console.print(f"[red]{stage}: not ready[/] ({', '.join(dict.fromkeys(blockers))})")
    raise typer.Exit(0 if all(verdicts) else 1)
