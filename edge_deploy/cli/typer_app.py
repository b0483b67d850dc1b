"""The typer application object that every command module registers on."""
from __future__ import annotations

from typing import Any

import typer
from typer.core import TyperCommand

from .._version import __version__

# --help is click's plain formatter (rich_markup_mode=None), never typer's rich tables: it wraps each description at
# the terminal's width and never cuts an option's name or a word of its help with "…" (rich's tables did at 80
# columns), shows no <bool> placeholder for a flag, and looks the same under typer 0.15.4 and the newest typer.
HELP_MARKUP: Any = None


class HelpCommand(TyperCommand):
    """A command whose --help lists its arguments, then its options under their panels (`rich_help_panel`, e.g.
    "Decoding"), in click's plain format."""

    def format_options(self, ctx: Any, formatter: Any) -> None:
        sections: dict[str, list[tuple[str, str]]] = {}
        for param in self.get_params(ctx):
            record = param.get_help_record(ctx)
            if record is None:
                continue
            record = (record[0], record[1].replace("\\[", "["))  # typer 0.15.4 escapes "[required]" for rich
            if param.param_type_name == "argument":
                heading = "Arguments"
            else:
                heading = getattr(param, "rich_help_panel", None) or "Options"
            sections.setdefault(heading, []).append(record)
        order = ["Arguments", "Options"] + [h for h in sections if h not in ("Arguments", "Options")]
        for heading in order:
            if heading in sections:
                with formatter.section(heading):
                    formatter.write_dl(sections[heading])


def plain_help(application: typer.Typer) -> None:
    """Give every command registered on `application` (and on its sub-applications) HelpCommand's --help."""
    for info in application.registered_commands:
        if info.cls in (None, TyperCommand):  # typer's default (None in 0.15.4, TyperCommand in newer ones)
            info.cls = HelpCommand
    for group in application.registered_groups:
        if group.typer_instance is not None:
            plain_help(group.typer_instance)


app = typer.Typer(
    name="edge-deploy",
    help=(
        "Take a PyTorch lane-detection model to a TensorRT plan on a Jetson Orin, "
        "install it in a Triton model repository, serve it under systemd, and detect lanes."
    ),
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=HELP_MARKUP,
)


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"edge-deploy {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", callback=_print_version, is_eager=True, help="Print the version and exit."
    ),
) -> None:
    """Set EDGE_DEPLOY_DEBUG=1 to see tracebacks for errors."""
