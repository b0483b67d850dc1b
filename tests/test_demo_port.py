"""`scripts/demo.sh` with a PORT another server holds stops before it does anything, saying why (issue 45 #3: it
carried on against the other server). The whole demo, which checks its own server answers, is tests/test_demo.py."""
from __future__ import annotations

import os
import socket
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_a_taken_port_stops_the_demo_at_once_with_why(tmp_path: Path) -> None:
    with socket.socket() as other:  # somebody else's server
        other.bind(("127.0.0.1", 0))
        other.listen()
        port = other.getsockname()[1]
        env = {**os.environ, "OUT": str(tmp_path / "demo"), "PORT": str(port)}
        done = subprocess.run(["bash", "scripts/demo.sh"], cwd=ROOT, env=env, capture_output=True, text=True,
                              timeout=60)
    assert done.returncode == 1
    assert done.stderr == (f"demo: stopped: PORT={port}: 127.0.0.1:{port} is already in use (another server?); "
                           "give a free PORT, or none to let the demo choose one\n"), done.stderr
    assert done.stdout == "" and not (tmp_path / "demo").exists()  # no setup, no convert, no server
