"""Readers tried in a child interpreter with a timeout, so a reader that blocks (a FIFO opened for reading waits for
a writer for ever) fails its test instead of hanging the suite. A script calls `attempt(NAME, CALL)` per reader; each
prints one line, "NAME READ [what it returned]" or "NAME <error class> <message>", and `read_in_child` gives them as
{NAME: rest of the line}."""
from __future__ import annotations

import subprocess
import sys
from collections.abc import Mapping

ATTEMPT = """
import pathlib, sys
from edge_deploy.errors import EdgeDeployError
P = pathlib.Path
def attempt(name, call):
    try:
        print(name, "READ", call())
    except EdgeDeployError as exc:
        print(name, type(exc).__name__, str(exc).replace(chr(10), " "))
    sys.stdout.flush()
"""


def read_in_child(script: str, *args: str, env: Mapping[str, str] | None = None, timeout: float = 60) -> dict[str, str]:
    """Run ATTEMPT + `script` in a fresh interpreter (argv: `args`); its lines by reader name. A child that fails or
    prints nothing fails the assertion with its output."""
    done = subprocess.run([sys.executable, "-c", ATTEMPT + script, *args], env=None if env is None else dict(env),
                          capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    lines = dict(line.split(" ", 1) for line in done.stdout.splitlines())
    assert done.returncode == 0 and lines, (done.stdout, done.stderr[-2000:])
    return lines
