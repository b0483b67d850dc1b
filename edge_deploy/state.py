"""edge-deploy's state directory: server records and keys (serve), the vehicle CA (certs), the last rollout (fleet).

Below every stage that keeps state, so that none of them imports another to find it.
"""
from __future__ import annotations

import os
from pathlib import Path

from .errors import ServerError

SYSTEM_STATE_DIR = Path("/etc/edge-deploy")


def state_dir(scope: str) -> Path:
    """Where records live: $EDGE_DEPLOY_STATE_DIR, else /etc/edge-deploy (system) or ~/.config/edge-deploy (user)."""
    override = os.environ.get("EDGE_DEPLOY_STATE_DIR")
    if override:
        if Path(override).exists() and not Path(override).is_dir():
            # Read as "no server here", it would make install write configs past a running server.
            raise ServerError(
                f"EDGE_DEPLOY_STATE_DIR={override} is not a directory, so the servers recorded there cannot be "
                "found; point it at a directory (or unset it)."
            )
        return Path(override)
    if scope == "system":
        return SYSTEM_STATE_DIR
    config_home = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(config_home) / "edge-deploy"
