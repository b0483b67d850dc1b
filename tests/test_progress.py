"""The console reporter (issue 45 #5): while a stage runs, a spinner with the time elapsed; a bar with the count for
counted work (nested in a stage); on anything but a terminal only each stage's closing line."""
from __future__ import annotations

import io
import re

import pytest
from rich.console import Console

from edge_deploy.core.progress import ConsoleReporter, Reporter


def run_stage(reporter: Reporter) -> None:
    with reporter.stage("FP16 ONNX"):
        with reporter.count("frames", 3) as advance:
            for _ in range(3):
                advance(1)


def plain(text: str) -> str:
    return re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", text)


def test_a_terminal_sees_the_stage_running_with_its_time_and_the_count() -> None:
    out = io.StringIO()
    reporter = ConsoleReporter(Console(file=out, force_terminal=True, width=80))
    run_stage(reporter)
    shown = plain(out.getvalue())
    assert re.search(r"FP16 ONNX \.\.\. .*\d:\d\d:\d\d", shown), shown  # while it runs: its elapsed time
    assert re.search(r"frames .*3/3 .*\d:\d\d:\d\d", shown), shown  # the bar's count, inside the stage
    assert shown.rstrip().splitlines()[-1].startswith("✓ FP16 ONNX ("), shown
    assert set(reporter.timings) == {"FP16 ONNX"}


def test_a_log_or_a_pipe_gets_only_the_closing_lines() -> None:
    out = io.StringIO()
    run_stage(ConsoleReporter(Console(file=out, force_terminal=False, width=80)))
    assert re.fullmatch(r"✓ FP16 ONNX \(\d+\.\d s\)\n", out.getvalue()), out.getvalue()


def test_a_failed_stage_leaves_no_display_and_no_check_mark() -> None:
    out = io.StringIO()
    reporter = ConsoleReporter(Console(file=out, force_terminal=True, width=80))
    with pytest.raises(RuntimeError):
        with reporter.stage("export ONNX"):
            raise RuntimeError("boom")
    assert "✓" not in out.getvalue() and reporter._live is None
    run_stage(reporter)  # the next stage gets a fresh display
    assert "✓ FP16 ONNX" in plain(out.getvalue())


def test_the_silent_reporter_counts_nothing_aloud() -> None:
    reporter = Reporter()
    run_stage(reporter)
    assert set(reporter.timings) == {"FP16 ONNX"}
