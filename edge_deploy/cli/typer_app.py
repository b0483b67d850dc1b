"""The typer application object that every command module registers on."""
from __future__ import annotations

import typer
from .._version import __version__

app = typer.Typer(
    name="edge-deploy",
    help=(
        "Take a PyTorch lane-detection model to a TensorRT plan on a Jetson Orin, "
        "install it in a Triton model repository, serve it under systemd, and detect lanes."
    ),
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
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
