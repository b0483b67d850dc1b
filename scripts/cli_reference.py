"""Write docs/cli.md: every command, its arguments and options, from the CLI's own objects (and the table of
built-in lane-model families in docs/families.md, from the registry).

    python scripts/cli_reference.py            # rewrite docs/cli.md and the table in docs/families.md
    python scripts/cli_reference.py --check    # exit 1 when either is not what this prints
    python scripts/cli_reference.py --stdout   # print docs/cli.md instead

It walks the click command tree typer builds (typer.main.get_command) and formats the markdown itself from
the parameter objects (names, help, default, choices), never through typer's rich help renderer, so the page
does not depend on the terminal width. It reads only what typer 0.15.4 (click 8.1) and the newest typer
(its vendored click) both have; choices come from `param.type.choices` or, where typer keeps them there
instead, `param.type_descriptor.choices`. Hidden commands and options (not in --help) are left out.
"""
from __future__ import annotations

import argparse
import enum
import os
import re
import sys
from pathlib import Path, PurePath
from typing import Any, Iterator

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "cli.md"
FAMILIES_PAGE = ROOT / "docs" / "families.md"
TABLE_START, TABLE_END = "<!-- families:start -->\n", "<!-- families:end -->"
REGENERATE = "python scripts/cli_reference.py"

# typer's rich markup ([bold], [/], [green] ...), never a bracket of the text such as "[B, H, W, 3]"
_RICH_TAG = re.compile(
    r"\[/?(?:bold|b|italic|i|underline|u|dim|strike|s|code|red|green|yellow|blue|magenta|cyan|white|"
    r"bright_\w+)?\]"
)
_CODE_SPAN = re.compile(r"(`[^`]*`)")


def root_command() -> Any:
    """The click command typer builds for the `edge-deploy` app, with every command module registered."""
    import typer.main

    from edge_deploy.cli import app  # importing the package registers every command module

    return typer.main.get_command(app)


def walk(command: Any, path: tuple[str, ...] = ("edge-deploy",)) -> Iterator[tuple[tuple[str, ...], Any]]:
    """(path, command) for the root and every visible command under it, groups before their subcommands,
    in the order the CLI registers them (the order of --help)."""
    yield path, command
    for name, sub in (getattr(command, "commands", None) or {}).items():
        if getattr(sub, "hidden", False):
            continue
        yield from walk(sub, (*path, name))


def visible_params(command: Any) -> list[Any]:
    return [p for p in command.params if not getattr(p, "hidden", False)]


def is_option(param: Any) -> bool:
    # click.Option and typer's own both carry secondary_opts; arguments are told by their class name
    # so that click and typer's vendored click (typer >= 0.22) are both understood.
    return "Argument" not in type(param).__name__


def option_names(param: Any) -> list[str]:
    """Every name an option answers to: long and short forms, then the --no- forms."""
    return [*param.opts, *(param.secondary_opts or [])]


def heading(path: tuple[str, ...]) -> str:
    """`## edge-deploy` and `## edge-deploy convert`; `### edge-deploy certs issue` for a group's commands."""
    return ("##" if len(path) <= 2 else "###") + " " + " ".join(path)


def anchor(path: tuple[str, ...]) -> str:
    return "-".join(path)


def _plain(text: str | None) -> str:
    """Help text as markdown: click's \\f cut honoured, \\b markers dropped, rich tags removed, each
    paragraph on one line, and outside code spans the characters markdown would take as markup escaped."""
    if not text:
        return ""
    text = text.split("\f", 1)[0]
    text = _RICH_TAG.sub("", text)
    paragraphs = []
    for block in re.split(r"\n\s*\n", text.strip()):
        lines = [ln.strip() for ln in block.splitlines() if ln.strip() not in ("", "\b")]
        if lines:
            paragraphs.append(" ".join(lines))
    return "\n\n".join(_escape(p) for p in paragraphs)


def _escape(text: str) -> str:
    parts = _CODE_SPAN.split(text)
    for i in range(0, len(parts), 2):  # the even parts are outside code spans
        parts[i] = parts[i].replace("<", "&lt;").replace(">", "&gt;").replace("*", "\\*")
    return "".join(parts)


def _value(value: Any) -> str:
    if isinstance(value, enum.Enum):
        return str(value.value)
    if isinstance(value, PurePath):
        return value.as_posix()
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def default_text(param: Any) -> str | None:
    """The default as --help would give it, or None where there is none to state."""
    show = getattr(param, "show_default", None)
    if isinstance(show, str):
        return show
    if show is False or getattr(param, "required", False):
        return None
    default = param.default
    if callable(default):
        return "(dynamic)"
    if default is None:
        return None
    if is_option(param) and getattr(param, "is_flag", False) and isinstance(default, bool):
        if param.secondary_opts:  # --x/--no-x: name the form that is the default
            return param.opts[0] if default else param.secondary_opts[0]
        return None  # a plain flag is off unless given
    if isinstance(default, (list, tuple)):
        if not default:
            return None
        return ", ".join(_value(v) for v in default)
    return _value(default)


def choices(param: Any) -> list[str]:
    found = getattr(getattr(param, "type", None), "choices", None)
    if found is None:
        descriptor = getattr(param, "type_descriptor", None)
        if descriptor is not None and getattr(descriptor, "is_choice", False):
            found = getattr(descriptor, "choices", None)
    return [_value(c) for c in (found or ())]


def _details(param: Any) -> str:
    parts = []
    help_text = _plain(getattr(param, "help", None))
    if help_text:
        parts.append(help_text)
    notes = []
    if not is_option(param):
        notes.append("required" if param.required else "optional")
        if param.nargs == -1:
            notes.append("any number")
    elif getattr(param, "required", False):
        notes.append("required")
    if is_option(param) and getattr(param, "multiple", False) and "repeat" not in help_text.lower():
        notes.append("repeatable")
    listed = choices(param)
    if listed:
        notes.append("one of " + ", ".join(f"`{c}`" for c in listed))
    default = default_text(param)
    if default is not None:
        notes.append(f"default: `{default}`")
    if getattr(param, "envvar", None):
        envvars = param.envvar if isinstance(param.envvar, (list, tuple)) else [param.envvar]
        notes.append("environment: " + ", ".join(f"`{e}`" for e in envvars))
    if notes:
        parts.append("(" + "; ".join(notes) + ")")
    return " ".join(parts)


def argument_name(param: Any) -> str:
    return param.metavar or param.name.upper()


def render() -> str:
    root = root_command()
    commands = list(walk(root))
    out = [
        f"Generated from the CLI by scripts/cli_reference.py, not edited by hand: regenerate with `{REGENERATE}`.",
        "",
        "# Command-line reference",
        "",
        "Every `edge-deploy` command with its arguments and options, as `--help` gives them (each command "
        "also takes `--help`); the other docs pages say when and why to use them. Hidden commands and "
        "options (what the Ansible role and the tests call, not in `--help`) are not listed.",
        "",
    ]
    for path, _cmd in commands[1:]:
        out.append("  " * (len(path) - 2) + f"- [{' '.join(path[1:])}](#{anchor(path)})")
    out.append("")
    for path, cmd in commands:
        out.append(heading(path))
        out.append("")
        help_text = _plain(cmd.help)
        if help_text:
            out += [help_text, ""]
        subcommands = [name for name, sub in (getattr(cmd, "commands", None) or {}).items()
                       if not getattr(sub, "hidden", False)]
        if subcommands and len(path) > 1:  # the root's are the contents list above
            out += ["Commands: " + ", ".join(f"[{n}](#{anchor((*path, n))})" for n in subcommands) + ".", ""]
        arguments = [p for p in visible_params(cmd) if not is_option(p)]
        options = [p for p in visible_params(cmd) if is_option(p)]
        if arguments:
            out += ["Arguments:", ""]
            out += [f"- `{argument_name(p)}`: {_details(p)}".rstrip(": ") for p in arguments]
            out.append("")
        if options:
            out += ["Options:", ""]
            for p in options:
                names = ", ".join(f"`{n}`" for n in option_names(p))
                details = _details(p)
                out.append(f"- {names}: {details}" if details else f"- {names}")
            out.append("")
    return "\n".join(out).rstrip("\n") + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--check", action="store_true", help="exit 1 when docs/cli.md is out of date")
    mode.add_argument("--stdout", action="store_true", help="print the page instead of writing it")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    page = render()
    if args.stdout:
        sys.stdout.write(page)
        return 0
    pages = {PAGE: page, FAMILIES_PAGE: families_page()}
    if args.check:
        stale = [path for path, text in pages.items() if (path.read_text(encoding="utf-8") if path.exists() else "") != text]
        for path in stale:
            print(f"{os.path.relpath(path)} is out of date: run `{REGENERATE}`", file=sys.stderr)
        return 1 if stale else 0
    for path, text in pages.items():
        path.write_text(text, encoding="utf-8")
        print(f"wrote {os.path.relpath(path)}")
    return 0


def families_page() -> str:
    """docs/families.md with its table replaced by `edge-deploy families --markdown` of the built-in families."""
    from edge_deploy.cli.families import markdown_table
    from edge_deploy.lanedet.family import family_origin, known_families

    table = markdown_table([f.describe() for f in known_families() if family_origin(f.name) == "built-in"])
    head, rest = FAMILIES_PAGE.read_text(encoding="utf-8").split(TABLE_START, 1)
    return head + TABLE_START + table + TABLE_END + rest.split(TABLE_END, 1)[1]


if __name__ == "__main__":
    sys.exit(main())
