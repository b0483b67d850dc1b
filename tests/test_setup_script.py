"""scripts/setup.sh says what it does (issue 56, item 7): each step on a line of its own, and pip's own progress
(not `pip -q`), and where the demo's environment is and how to activate it (item 8).

The script runs as written, on a copy of the checkout's scripts/ beside a `.venv/bin/python` that records its
arguments instead of running pip: the double stands for pip's downloads (torch alone is hundreds of MB), which a
test cannot make. The system steps need systemd, sshd and ip already here (as the suite does), so nothing is
installed.
"""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_setup_prints_each_step_and_leaves_pips_progress(tmp_path) -> None:
    if not (Path("/lib/systemd/systemd").exists() and Path("/usr/sbin/sshd").exists() and shutil.which("ip")
            and shutil.which("systemd-analyze") and shutil.which("ssh")):
        pytest.skip("systemd, sshd or ip is missing here: setup.sh would install them with apt-get")
    (tmp_path / "scripts").mkdir()
    shutil.copy(ROOT / "scripts" / "setup.sh", tmp_path / "scripts" / "setup.sh")
    calls = tmp_path / "pip-calls"
    python = tmp_path / ".venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text(f'#!/bin/sh\necho "$*" >> {calls}\necho "pip ran: $*"\n')
    python.chmod(0o755)
    done = subprocess.run(["bash", str(tmp_path / "scripts" / "setup.sh")], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    out = done.stdout.splitlines()
    steps = [line for line in out if line.startswith("setup: [")]
    assert [s.split("]")[0] for s in steps] == [f"setup: [{i}/4" for i in range(1, 5)], done.stdout
    pip = calls.read_text().splitlines()
    assert pip == ["-m pip install torch==2.13.0", "-m pip install -e .[dev]"], pip  # no -q: its progress shows
    assert out.index(steps[2]) < out.index("pip ran: -m pip install torch==2.13.0") < out.index(steps[3])
    assert "source .venv/bin/activate" in out[-1], out[-1]
