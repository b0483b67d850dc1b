"""scripts/docs_figures.py, the check of the figures the docs quote from a command (issue 45 #4): each figure is
found exactly once where it is quoted, and a figure its command no longer gives fails the check, naming both. The
measurement itself (minutes: the demo's artifact on 200 frames) runs after the demo in tests/test_demo.py."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def load_script():
    spec = importlib.util.spec_from_file_location("docs_figures", REPO / "scripts" / "docs_figures.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_every_figure_is_quoted_once_with_its_command() -> None:
    script = load_script()
    assert script.FIGURES
    for figure in script.FIGURES:
        assert float(figure.quoted()) > 0


def test_a_figure_its_command_no_longer_gives_fails_the_check(monkeypatch, capsys, tmp_path) -> None:
    script = load_script()
    quoted = script.FIGURES[0].quoted()
    monkeypatch.setattr(script.Figure, "measure", lambda self, artifact: quoted)
    assert script.main([str(tmp_path)]) == 0
    monkeypatch.setattr(script.Figure, "measure", lambda self, artifact: "0.123")
    assert script.main([str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert f"README.md quotes {quoted}, its command gives 0.123" in err and "--write" in err
