"""Everything edge-deploy prints fits a terminal of 80 columns, and nothing is cut with "…" (issue 56, item 6).

- every command's --help (each command of the live CLI, groups' commands too): no "…", no line over 80 columns, every
  option's names (--x and --no-x, -s) whole, no `<bool>` placeholder after a flag, and the options of a panel
  (`rich_help_panel`, e.g. infer's "Decoding") under its heading;
- `models` on a real pseudo-terminal of 80 columns (as a user sees it, rich measuring the terminal itself): the
  `lanedet_*` names whole;
- the `bench --realtime` table and `infer`'s image table, rendered by the commands' own functions at 80 columns.
"""
from __future__ import annotations

import fcntl
import io
import os
import pty
import re
import struct
import subprocess
import sys
import termios
from pathlib import Path

import pytest
from small_artifact import make_artifact

from edge_deploy.deploy.install import install
from edge_deploy.deploy.options import InstallOptions

WIDTH = 80
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def _commands() -> list[tuple[list[str], object]]:
    """(argv, click command) for every command --help shows."""
    import typer.main

    from edge_deploy.cli import app

    found = []

    def walk(command, path):
        found.append((path, command))
        for name, sub in (getattr(command, "commands", None) or {}).items():
            if not sub.hidden:
                walk(sub, [*path, name])

    walk(typer.main.get_command(app), [])
    return found


def test_every_help_fits_80_columns_whole(monkeypatch, capsys) -> None:
    """Each --help rendered in this process by the CLI's own click command (what `edge-deploy ... --help` prints;
    a process per command would cost about 0.6 s each)."""
    import typer.main

    from edge_deploy.cli import app

    monkeypatch.setenv("COLUMNS", str(WIDTH))
    root = typer.main.get_command(app)
    commands = _commands()
    assert len(commands) > 20
    problems = []
    for path, command in commands:
        code = root.main([*path, "--help"], prog_name="edge-deploy", standalone_mode=False)
        text = capsys.readouterr().out
        where = " ".join(["edge-deploy", *path])
        if code not in (0, None) or not text:
            problems.append(f"{where}: exit {code}")
            continue
        problems += [f"{where}: cut: {line!r}" for line in text.splitlines() if "…" in line]
        problems += [f"{where}: {len(line)} columns: {line!r}" for line in text.splitlines() if len(line) > WIDTH]
        problems += [f"{where}: a flag shows <bool>" for line in text.splitlines() if "<bool>" in line]
        words = set(re.findall(r"(?<![\w-])-{1,2}[\w][\w-]*", text))
        for param in command.params:
            if getattr(param, "hidden", False) or "Argument" in type(param).__name__:
                continue
            problems += [f"{where}: {name} not whole" for name in [*param.opts, *param.secondary_opts]
                         if name not in words]
            panel = getattr(param, "rich_help_panel", None)  # its options are listed under that heading
            if panel and f"\n{panel}:\n" not in text:
                problems.append(f"{where}: no heading {panel!r} for {param.opts[0]}")
    assert not problems, "\n".join(problems)


def _on_a_terminal(args: list[str], env: dict[str, str], cwd: Path) -> str:
    """What `edge-deploy ARGS` shows on a pseudo-terminal of 80 columns (colours off, escapes stripped)."""
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 50, WIDTH, 0, 0))
    proc = subprocess.Popen([sys.executable, "-m", "edge_deploy", *args], stdin=subprocess.DEVNULL, stdout=follower,
                            stderr=follower, env={**env, "NO_COLOR": "1", "COLUMNS": str(WIDTH)}, cwd=cwd)
    os.close(follower)
    out = b""
    try:
        while True:
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # EIO: the terminal's other end closed
                break
            if not chunk:
                break
            out += chunk
    finally:
        os.close(leader)
        proc.wait(60)
    return ANSI.sub("", out.decode(errors="replace")).replace("\r\n", "\n")


def test_models_on_an_80_column_terminal_keeps_the_names(tmp_path, laneatt_data) -> None:
    art = make_artifact(tmp_path / "art", laneatt_data / "anchors_2784x77.npy", n=100)
    repo = tmp_path / "repo"
    install(InstallOptions(art, repo, "lanedet", runtime="python", pipeline=True))
    env = {**os.environ, "EDGE_DEPLOY_STATE_DIR": str(tmp_path / "state"), "HOME": str(tmp_path)}
    shown = _on_a_terminal(["models", "--repository", str(repo)], env, tmp_path)
    lines = shown.splitlines()
    rows = [line for line in lines if not line.startswith("(no running")]  # the note: a line the terminal wraps
    assert "…" not in shown and all(len(line) <= WIDTH for line in rows), shown
    for name in ("lanedet", "lanedet_preprocess", "lanedet_postprocess", "lanedet_pipeline"):
        assert sum(line.split()[:1] == [name] for line in lines) == 2, (name, shown)  # a version row, a serving row
    assert "by config" in shown and "postprocess" in shown


def _rendered(print_table, report) -> str:
    from rich.console import Console

    out = io.StringIO()
    print_table(report, Console(file=out, width=WIDTH, force_terminal=False, color_system=None))
    return out.getvalue()


@pytest.mark.parametrize("cameras", [1, 4])
def test_the_realtime_table_fits_80_columns(cameras) -> None:
    from edge_deploy.bench.realtime import RealtimeCell, RealtimeReport, StreamRow, print_realtime

    states = {"fresh": 1234, "stale": 56, "unavailable": 7, "failed": 1}
    rows = [StreamRow(camera=i, frames_read=3000, frames_processed=1297, frames_dropped=1703, frames_failed=1,
                      frames_per_s=129.7, latency_p50_ms=1234.5, latency_p99_ms=23456.7, states=states)
            for i in range(cameras)]
    report = RealtimeReport("127.0.0.1:8001", "32 synthetic 1640x590 frames", [
        RealtimeCell(name, cameras, 30.0, 0.1, 10.0, rows, 123.4)
        for name in ("lanedet", "lanedet_pipeline", "lanedet_postprocess")])
    shown = _rendered(print_realtime, report)
    assert "…" not in shown and all(len(line) <= WIDTH for line in shown.splitlines()), shown
    for name in ("lanedet_pipeline", "lanedet_postprocess", "unavailable", "1703/3000", "23456.7"):
        assert name in shown, (name, shown)
