"""`edge-deploy` commands for this stage (see edge_deploy/cli/__init__.py)."""
from __future__ import annotations

from .app import app  # noqa: F401
