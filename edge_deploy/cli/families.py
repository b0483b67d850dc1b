"""`edge-deploy families`: the lane-model families this installation knows (built in and from packages)."""
from __future__ import annotations

from typing import Annotated, Any

import typer

from ..core import strict_json
from ..lanedet.description import FamilyDescription
from .typer_app import app
from ..lanedet.family import described_families


@app.command()
def families(
    as_json: Annotated[bool, typer.Option("--json", help="Print the families as JSON.")] = False,
    markdown: Annotated[bool, typer.Option(
        "--markdown", help="Print the table as Markdown (docs/families.md is this output for the built-in ones).")] = False,
) -> None:
    """List the lane-model families `convert NAME` takes: backbones, data sets, own options, where each comes from."""
    # Plug-ins are described out of process (bounded in time, each failure one warning line): docs/families.md.
    described = described_families()
    if as_json:
        typer.echo(strict_json.dumps([row.to_dict() for row in described], indent=2))
    elif markdown:
        typer.echo(markdown_table(described), nl=False)
    else:
        from rich.console import Console

        print_families(described, Console())


COLUMNS = ("name", "family", "backbones", "data sets", "own options", "from")
TABLE_MIN_WIDTH = 120  # narrower, each family is a block of "column: value" lines, so nothing is cut


def print_families(described: list[FamilyDescription], console: Any) -> None:
    """The table on a wide terminal; on a narrow one (80 columns) one block per family."""
    title = "lane-model families (edge-deploy convert NAME)"
    if console.width < TABLE_MIN_WIDTH:
        console.print(title, highlight=False)
        for row in described:
            cells = dict(zip(COLUMNS, _cells(row)))
            console.print(f"{cells['name']}: {cells['family']} ({cells['from']})", highlight=False)
            for column in COLUMNS[2:5]:
                console.print(f"  {column}: {cells[column]}", highlight=False)
        return
    from rich.table import Table

    table = Table(title=title, title_justify="left")
    for column in COLUMNS:
        table.add_column(column)
    for row in described:
        table.add_row(*_cells(row))
    console.print(table)


def _cells(row: FamilyDescription) -> list[str]:
    backbones = ", ".join(f"{b} (default)" if b == row.default_backbone else b for b in row.backbones) or "-"
    datasets = ", ".join(f"{name} {size[1]}x{size[0]}" if size else name for name, size in row.datasets.items()) or "-"
    options = ", ".join(o.flag for o in row.options) or "-"
    return [row.name, row.title, backbones, datasets, options, row.origin]


def markdown_table(described: list[FamilyDescription]) -> str:
    lines = ["| `convert NAME` | family | `--backbone` | `--dataset` (frame size) | own options | from |",
             "|---|---|---|---|---|---|"]
    lines += ["| " + " | ".join(_cells(row)) + " |" for row in described]
    return "\n".join(lines) + "\n"
