"""Command-line interface: a thin typer layer over the pipeline's plain functions.

Each command lives in its own module (one per pipeline stage) and registers on
`app`. `main` turns EdgeDeployError into one line on stderr and its exit code.
"""
from __future__ import annotations

import os
import sys

from ..errors import EdgeDeployError

# Registering commands: each module adds its commands to `app` on import.
from . import convert, doctor, evaluate, infer, repository, serve  # noqa: E402,F401
from .app import app


def main() -> None:
    """Console-script entry point."""
    try:
        app(standalone_mode=True)
    except EdgeDeployError as exc:
        if os.environ.get("EDGE_DEPLOY_DEBUG") == "1":
            raise
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        sys.exit(130)
