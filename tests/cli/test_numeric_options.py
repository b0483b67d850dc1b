"""Every numeric option of every command has a documented range, and the command line holds to it (issue 54, class 4:
"numbers nobody bounded"): a value inside is taken, a value outside (0, negative, NaN, inf, -inf, 1e308, 1e-308, the
range's own bounds one step out) is refused in one line that names the range, with exit 2, as the command line is
parsed: before anything runs or is written.

The options come from the typer app itself (every command, its groups, the lane families' own convert flags), so an
option added without a range fails `test_every_numeric_option_has_a_range`. Each command is parsed by its real click
command with its callback swapped for a recorder: the parsing, typer's conversion and the range callbacks are real,
and a value that passes is seen arriving at the command without running it (no server, no convert). The refusal is
printed as `edge-deploy` prints it (cli.error_line)."""
from __future__ import annotations

import functools
import math
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import typer
import typer.main
from typer.models import ArgumentInfo
from typer.utils import get_params_from_function

from edge_deploy.cli import app, error_line
from edge_deploy.cli import _is_usage_error
from edge_deploy.cli.numeric import is_list, range_of
from edge_deploy.core.numbers import Range

EDGES = ("0", "-1", "nan", "inf", "-inf", "1e308", "1e-308", "-0.5", "99999999999999999999999")


@dataclass(frozen=True)
class NumericOption:
    path: tuple[str, ...]  # the command: ("infer",), ("certs", "init")
    name: str  # the parameter's name
    flag: str  # its long flag
    kind: type  # int or float (str for a comma-separated list)
    rng: Range | None
    arguments: tuple[str, ...]  # what the command's required arguments and options get

    def __str__(self) -> str:
        return f"{' '.join(self.path)} {self.flag}"


def _commands(group: typer.Typer, path: tuple[str, ...] = ()) -> typing.Iterator[tuple[tuple[str, ...], Any]]:
    for info in group.registered_commands:
        yield (*path, info.name or info.callback.__name__.replace("_", "-")), info.callback
    for sub in group.registered_groups:
        yield from _commands(sub.typer_instance, (*path, sub.name))


def _base(annotation: Any) -> Any:
    """int, float, str ... of an annotation, through Optional[...] and list[...]."""
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    if typing.get_origin(annotation) is typing.Union and args:
        annotation = args[0]
    if typing.get_origin(annotation) is list:
        annotation = typing.get_args(annotation)[0]
    return annotation


@functools.lru_cache(maxsize=1)
def _root() -> Any:
    """The click command of the whole app, made once (typer builds it anew on every call)."""
    return typer.main.get_command(app)


def _click(path: tuple[str, ...]) -> Any:
    command = _root()
    for part in path:
        command = command.commands[part]
    return command


def numeric_options() -> list[NumericOption]:
    """Each option of each command whose value is a number (int or float), or that takes comma-separated numbers."""
    found = []
    for path, callback in _commands(app):
        params = get_params_from_function(callback)
        click_params = {p.name: p for p in _click(path).params}
        required = tuple("x" for name, meta in params.items() if isinstance(meta.default, ArgumentInfo)
                         and click_params[name].required)
        required += tuple(f"{click_params[name].opts[0]}=x" for name, meta in params.items()
                          if not isinstance(meta.default, ArgumentInfo) and click_params[name].required)
        for name, meta in params.items():
            if isinstance(meta.default, ArgumentInfo):
                continue
            kind = _base(meta.annotation)
            listed = is_list(meta.default)
            if kind not in (int, float) and not listed:
                continue
            opts = click_params[name].opts
            flag = next(o for o in opts if o.startswith("--"))
            found.append(NumericOption(path, name, flag, str if listed else kind, range_of(meta.default), required))
    return found


OPTIONS = numeric_options()


def parse(option: NumericOption, value: str, tmp_path: Path) -> tuple[dict[str, Any] | None, tuple[str, int] | None]:
    """The command's keyword arguments when `option VALUE` parses, else the (line, exit code) edge-deploy prints."""
    command = _click(option.path)
    seen: dict[str, Any] = {}
    original = command.callback
    command.callback = lambda **kwargs: seen.update(kwargs)
    try:
        command.main([*option.arguments, f"{option.flag}={value}"], prog_name="edge-deploy",
                     standalone_mode=False)
    except Exception as exc:  # noqa: BLE001 - what main() would print
        return None, error_line(exc) + (_is_usage_error(exc),)
    finally:
        command.callback = original
    return seen, None


def inside(rng: Range, value: float | int | None) -> bool:
    """The test's own reading of a range (not Range.contains, which it checks): finite, within the bounds as each is
    open or closed, whole where the range is."""
    if value is None or not math.isfinite(value) or (rng.whole and value != int(value)):
        return False
    above = value > rng.low if rng.low_open else value >= rng.low
    below = value < rng.high if rng.high_open else value <= rng.high
    return above and below


def expected(option: NumericOption, text: str) -> bool | None:
    """Whether the option's range takes `text`; None where the text is no number of the option's type (an int
    option given 1e308 or nan: refused by typer as no integer, before the range)."""
    assert option.rng is not None
    if option.kind is str:
        return all(inside(option.rng, _number(part)) for part in text.split(","))
    if option.kind is int:
        try:
            return inside(option.rng, int(text))
        except ValueError:
            return None
    return inside(option.rng, float(text))


def _number(text: str) -> float | int | None:
    for kind in (int, float):
        try:
            return kind(text.strip())
        except ValueError:
            pass
    return None


def edge_values(rng: Range) -> list[str]:
    """The range's bounds and one step past each (the next float, or 1 for a whole range), then EDGES."""
    values = []
    for bound, outward in ((rng.low, -math.inf), (rng.high, math.inf)):
        if rng.whole:
            values += [str(int(bound)), str(int(bound) + (1 if outward > 0 else -1))]
        else:
            values += [repr(float(bound)), repr(math.nextafter(float(bound), outward))]
    return values + list(EDGES)


def check(option: NumericOption, text: str, tmp_path: Path) -> None:
    before = sorted(tmp_path.iterdir())
    kwargs, refused = parse(option, text, tmp_path)
    want = expected(option, text)
    if want:
        assert refused is None, f"{option} {text}: refused ({refused}) though {option.rng} takes it"
        assert kwargs is not None and option.name in kwargs
    else:
        assert refused is not None, f"{option} {text}: taken ({kwargs and kwargs.get(option.name)!r}) though " \
                                    f"outside {option.rng}"
        line, code, usage = refused
        assert code == 2 and "\n" not in line, (option, text, line, code)
        if want is None:  # no integer: typer's own usage line, which points at --help (that shows the range)
            assert usage and "integer" in line.lower() and "--help" in line, (option, text, line)
        else:
            assert str(option.rng) in line and option.flag in line, (option, text, line)
    assert sorted(tmp_path.iterdir()) == before  # nothing written


def test_the_options_are_found() -> None:
    found = {str(o) for o in OPTIONS}
    # the named cases of issue 54, a family's own flag and a comma-separated list among them
    assert {"infer --max-age", "bench --fps", "bench --concurrency", "bench --cameras", "convert --topk-anchors",
            "serve --grpc-port", "certs init --days", "rollback --to"} <= found
    assert len(found) >= 50


def test_every_numeric_option_has_a_range() -> None:
    """An option added as typer.Option(...) for a number, not numeric.number(RANGE, ...), is named here."""
    assert [str(o) for o in OPTIONS if o.rng is None] == []


@pytest.mark.parametrize("option", OPTIONS, ids=str)
def test_each_option_at_its_edges_is_taken_inside_and_refused_outside_in_one_line(option, tmp_path,
                                                                                   monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert option.rng is not None, f"{option} has no range"
    for text in edge_values(option.rng):
        check(option, text, tmp_path)


@st.composite
def option_and_value(draw: Any) -> tuple[NumericOption, str]:
    option = draw(st.sampled_from([o for o in OPTIONS if o.rng is not None]))
    rng = option.rng
    span = max(abs(rng.low), abs(rng.high), 1.0)
    if option.kind is float:
        value = draw(st.one_of(st.floats(allow_nan=True, allow_infinity=True),
                               st.floats(min_value=rng.low - span, max_value=rng.high + span)))
        return option, repr(value)
    number = draw(st.one_of(st.integers(), st.integers(min_value=int(rng.low - span), max_value=int(rng.high + span))))
    if option.kind is str and draw(st.booleans()):
        return option, f"{int(rng.low)},{number}"
    return option, str(number)


@settings(derandomize=True, max_examples=250, deadline=None)
@given(option_and_value())
def test_any_value_of_any_option_is_taken_inside_its_range_and_refused_outside(tmp_path_factory, case) -> None:
    option, text = case
    where = tmp_path_factory.mktemp("parse")
    with pytest.MonkeyPatch.context() as monkeypatch:
        monkeypatch.chdir(where)
        check(option, text, where)


def test_the_help_shows_each_range() -> None:
    for option in OPTIONS:
        param = next(p for p in _click(option.path).params if p.name == option.name)
        assert option.rng is not None and str(option.rng) in (param.help or ""), option


@pytest.mark.parametrize("args, line", [
    (["infer", "--realtime", "--max-age", "1e308", "drive.mp4"],
     "error: --max-age must be a number of seconds in (0, 60], not 1e+308."),  # exit 70, then an abort, before
    (["bench", "--realtime", "--fps", "inf"],
     "error: --fps must be a number of frames/s in (0, 1000], not inf."),  # an UnboundLocalError before
    (["bench", "--concurrency", "100000"],
     "error: --concurrency '100000' is not a list of comma-separated values, each a whole number of frames in flight "
     "in [1, 64]."),  # exit 70 before (campaign 4's B15)
    (["serve", "--foreground", "--exit-timeout", "nan"], None),
])
def test_the_named_cases_are_one_line_with_exit_2_and_write_nothing(tmp_path, args, line) -> None:
    import os

    from cli_process import run_cli

    env = {k: v for k, v in os.environ.items() if k != "EDGE_DEPLOY_DEBUG"}
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[2])
    done = run_cli(args, env=env, cwd=tmp_path, timeout=120)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1, done.stderr
    assert lines[0] == line if line is not None else "--exit-timeout" in lines[0], lines
    assert list(tmp_path.iterdir()) == []
