"""Running Ansible: finding its tools, the role shipped with the package, one `ansible-playbook` run."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from .policy import FleetError

ANSIBLE_DIR = Path(__file__).resolve().parent / "ansible"
ROLES_DIR = ANSIBLE_DIR / "roles"


def playbook(name: str) -> Path:
    """A playbook shipped with the package: rollout.yml or status.yml."""
    return ANSIBLE_DIR / name


def find_tool(name: str) -> str:
    """An Ansible command: beside this Python (a venv), else on PATH."""
    beside = Path(sys.executable).with_name(name)
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    found = shutil.which(name)
    if found is None:
        raise FleetError(f"{name} is not installed; install Ansible with pip install 'edge-deploy[fleet]'.")
    return found


def ansible_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment Ansible runs in: the package's roles on the role path, no retry files, no cows."""
    env = dict(os.environ)
    roles = [str(ROLES_DIR)] + [p for p in env.get("ANSIBLE_ROLES_PATH", "").split(":") if p]
    env.update(ANSIBLE_ROLES_PATH=":".join(roles), ANSIBLE_RETRY_FILES_ENABLED="0", ANSIBLE_NOCOWS="1",
               ANSIBLE_FORCE_COLOR="0", ANSIBLE_NOCOLOR="1")
    env.setdefault("ANSIBLE_PYTHON_INTERPRETER", "auto_silent")
    # One SSH round trip per task instead of four (mkdir, put, run, rm); needs no `requiretty` in sudoers.
    env.setdefault("ANSIBLE_PIPELINING", "True")
    env.update(extra or {})
    return env


def run_playbook(book: Path, inventory: Path, hosts: list[str], extra_vars: Path, log: Path,
                 forks: int, timeout: float) -> int:
    """Run `book` on `hosts` of `inventory` with the variables file `extra_vars`; output appended to `log`."""
    argv = [find_tool("ansible-playbook"), "-i", str(inventory), str(book), "--limit", ",".join(hosts),
            "-e", f"@{extra_vars}", "--forks", str(max(1, forks))]
    import time

    started = time.monotonic()
    with open(log, "a") as out:
        out.write(f"$ {' '.join(argv)}\n")
        out.flush()
        try:
            # ANSIBLE_LOG_PATH: the same output with a time stamp per line, to see which step takes the time.
            env = ansible_env({"ANSIBLE_LOG_PATH": str(Path(log).with_suffix(".timed.log"))})
            code = subprocess.run(argv, stdout=out, stderr=subprocess.STDOUT, env=env,
                                  timeout=timeout).returncode
        except subprocess.TimeoutExpired:
            code = 124
            out.write(f"ansible-playbook did not finish within {timeout:.0f} s\n")
        out.write(f"# exit {code} after {time.monotonic() - started:.1f} s\n")
        return code
