"""docs/cli.md, the generated CLI reference, keeps every option of `--help` (issue 22: nothing documented is lost).

(1) every name of every visible option (short and --no- forms too) and every argument of every command in the
live CLI is in docs/cli.md under that command's heading; (2) the committed page is what
scripts/cli_reference.py writes now. The generator reads only what typer 0.15.4 (click 8.1, the Python 3.10 CI
run) and the newest typer (its vendored click) both have, so (2) holds on both runs.
"""
from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "cli.md"


def _generator():
    spec = importlib.util.spec_from_file_location("cli_reference", ROOT / "scripts" / "cli_reference.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _live_commands():
    """(path, command) for every command of the live CLI that --help shows, walked here, not by the generator."""
    import typer.main

    from edge_deploy.cli import app

    found = []

    def walk(command, path):
        found.append((path, command))
        for name, sub in (getattr(command, "commands", None) or {}).items():
            if not sub.hidden:
                walk(sub, f"{path} {name}")

    walk(typer.main.get_command(app), "edge-deploy")
    return found


def _sections(page: str) -> dict[str, str]:
    """Heading text -> the text up to the next heading."""
    sections: dict[str, str] = {}
    current = None
    for line in page.splitlines():
        match = re.match(r"#{2,6} (.+)$", line)
        if match:
            current = match.group(1).strip()
            assert current not in sections, f"docs/cli.md has two headings {current!r}"
            sections[current] = ""
        elif current is not None:
            sections[current] += line + "\n"
    return sections


def test_every_option_of_every_command_is_under_its_heading():
    sections = _sections(PAGE.read_text(encoding="utf-8"))
    commands = _live_commands()
    assert len(commands) > 20  # the walk reached the groups' commands (certs issue, fleet reference, ...)
    missing = []
    for path, command in commands:
        if path not in sections:
            missing.append(f"heading `{path}`")
            continue
        for param in command.params:
            if param.hidden:
                continue
            if "Argument" in type(param).__name__:
                names = [param.metavar or param.name.upper()]
            else:
                names = [*param.opts, *param.secondary_opts]
            missing += [f"{path} {name}" for name in names if f"`{name}`" not in sections[path]]
    assert not missing, (
        "docs/cli.md lacks what --help has: " + ", ".join(missing) + "; run `python scripts/cli_reference.py`"
    )


def test_committed_page_is_what_the_generator_writes():
    generated = _generator().render()
    if PAGE.read_text(encoding="utf-8") != generated:
        pytest.fail("docs/cli.md is out of date: run `python scripts/cli_reference.py` and commit docs/cli.md")


def test_the_families_page_lists_every_built_in_family_as_the_cli_does():
    """docs/families.md's table is `edge-deploy families --markdown` for the built-in families (run
    `python scripts/cli_reference.py`), and the README names each of them: a family added to the registry
    and not to the docs fails here."""
    from edge_deploy.cli.families import markdown_table
    from edge_deploy.lanedet.family import family_origin, known_families

    built_in = [family for family in known_families() if family_origin(family.name) == "built-in"]
    page = (ROOT / "docs" / "families.md").read_text(encoding="utf-8")
    table = page.split("<!-- families:start -->\n", 1)[1].split("<!-- families:end -->", 1)[0]
    assert table == markdown_table([family.describe() for family in built_in]), \
        "docs/families.md is out of date: run `python scripts/cli_reference.py`"
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert [f.title for f in built_in if f.title not in readme] == []
