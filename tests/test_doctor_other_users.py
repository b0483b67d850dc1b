"""`doctor` counts only this user's tritonservers in its memory rows (issue 56, item 11): on a shared machine other
users' servers are not this user's to stop, and a row per server buried the table. A fake Jetson root
(tests/data/jetson_root) with three tritonservers in its /proc: this user's, another user's, and the fixture's own
whose status names no user (kept).
"""
from __future__ import annotations

import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from edge_deploy.cli import app

pytest_plugins = ["jetson_fixtures"]  # board, no_tensorrt


@pytest.fixture(autouse=True)
def isolated(tmp_path: Path, monkeypatch, no_tensorrt):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("COLUMNS", "250")
    monkeypatch.delenv("TRITONSERVER", raising=False)


def _server(root: Path, pid: int, uid: int, mib: int) -> None:
    entry = root / "proc" / str(pid)
    entry.mkdir(parents=True)
    (entry / "comm").write_text("tritonserver\n")
    (entry / "status").write_text(f"Name:\ttritonserver\nPid:\t{pid}\nUid:\t{uid}\t{uid}\t{uid}\t{uid}\n"
                                  f"VmRSS:\t {mib * 1024} kB\n")


def test_only_this_users_tritonservers_get_a_memory_row(board) -> None:
    root = board("orin_nano_jp62")
    _server(root, 6161, os.getuid(), 700)
    _server(root, 5151, os.getuid() + 1, 900)
    result = CliRunner().invoke(app, ["doctor", "--for", "serve", "--root", str(root)])
    assert result.exit_code == 0, result.output
    rows = [line for line in result.output.splitlines() if "tritonserver pid" in line]
    assert len(rows) == 2 and "pid 6161 holds 700 MiB" in rows[1] and "pid 4242" in rows[0], rows
    assert "5151" not in result.output
