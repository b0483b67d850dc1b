"""The typer application object that every command module registers on."""
from __future__ import annotations

import typer

app = typer.Typer(
    name="edge-deploy",
    help=(
        "Take a PyTorch lane-detection model (LaneATT) to a TensorRT plan on a Jetson Orin, "
        "install it in a Triton model repository, serve it under systemd, and detect lanes."
    ),
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
