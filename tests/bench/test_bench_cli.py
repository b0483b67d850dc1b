"""`edge-deploy bench` without a server: its options checked in one line, the progress bar on a terminal."""
from __future__ import annotations

import io

import pytest
from triton_helpers import run_cli

from edge_deploy.bench.config import BenchConfig, parse_concurrency
from edge_deploy.errors import BenchError


def test_concurrency_and_config_are_checked() -> None:
    assert parse_concurrency("1, 2,4,2") == (1, 2, 4)
    for bad in ("", "0", "1,x", "-1"):
        with pytest.raises(BenchError, match="--concurrency"):
            parse_concurrency(bad)
    with pytest.raises(BenchError, match="--seconds must be more than 0"):
        BenchConfig(seconds=0)
    with pytest.raises(BenchError, match="--max-frames"):
        BenchConfig(max_frames=0)


def test_repository_without_a_server_and_a_plot_that_is_not_png(tmp_path) -> None:
    run = run_cli(tmp_path, "bench", "--repository", str(tmp_path))
    assert run.returncode != 0 and run.stderr.strip() == (
        f"error: no running `edge-deploy serve` server for {tmp_path}; start one, or pass --url."), run.stderr
    run = run_cli(tmp_path, "bench", "--repository", str(tmp_path / "nope"))
    assert "is not a directory" in run.stderr and len(run.stderr.strip().splitlines()) == 1
    run = run_cli(tmp_path, "bench", "--plot", str(tmp_path / "out.svg"))
    assert "must name a .png file" in run.stderr and len(run.stderr.strip().splitlines()) == 1


def test_progress_bar_on_a_terminal(monkeypatch) -> None:
    from rich.console import Console

    import edge_deploy.bench.runner as runner
    from edge_deploy.cli.bench import _run_with_progress

    def fake_run(config, on_progress=None):  # noqa: ANN001, ANN202
        on_progress("lane x4", 1, 2, 0.5)
        return "report"

    monkeypatch.setattr(runner, "run_bench", fake_run)
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=100)
    assert _run_with_progress(BenchConfig(), console) == "report"
    assert "lane x4 (2/2)" in out.getvalue() and "75%" in out.getvalue()
