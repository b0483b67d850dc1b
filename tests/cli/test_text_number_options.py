"""The options whose text holds numbers (issue 54, class 4): `convert --workspace` and `serve --log-max-size` (sizes:
"2G", "512M") and `convert --input-shape` ("1,3,360,640"). Any text is either taken, giving a value inside the
option's bound, or refused in one line as the command line is parsed (exit 2) naming the option and its bound: never
a traceback, an internal error, or a size no board has.

Parsed by the real click command with its callback swapped for a recorder (test_numeric_options.parse), so typer's
conversion and the options' callbacks are real and nothing runs."""
from __future__ import annotations

import math
from dataclasses import replace
from typing import Any, Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_numeric_options import OPTIONS, NumericOption, parse

from edge_deploy.cli.convert import _input_shape, _workspace
from edge_deploy.export.source import INPUT_DIM, MAX_INPUT_DIMS, MAX_INPUT_ELEMENTS
from edge_deploy.serve.service import parse_log_max_size
from edge_deploy.core.sizes import MAX_SIZE, MIN_WORKSPACE
from edge_deploy.serve.logfile import MIN_MAX_BYTES


def _option(command: str, name: str, flag: str) -> NumericOption:
    """The option as test_numeric_options.parse takes it (the command's required arguments from its numeric ones)."""
    base = next(o for o in OPTIONS if o.path == (command,))
    return replace(base, name=name, flag=flag, kind=str, rng=None)


def _size_inside(low: int) -> Callable[[Any], bool]:
    return lambda value: isinstance(value, int) and low <= value <= MAX_SIZE


def _shape_inside(value: Any) -> bool:
    return (2 <= len(value) <= MAX_INPUT_DIMS and all(INPUT_DIM.contains(d) for d in value)
            and math.prod(value) <= MAX_INPUT_ELEMENTS)


# option -> (what the command does with the text, whether its value is inside the bound, the bounds as lines say them)
TEXT_OPTIONS = {
    _option("convert", "workspace", "--workspace"): (_workspace, _size_inside(MIN_WORKSPACE), ("from 64 MiB to 1 TiB",)),
    _option("serve", "log_max_size", "--log-max-size"): (parse_log_max_size, _size_inside(MIN_MAX_BYTES),
                                                         ("from 64 KiB to 1 TiB",)),
    _option("convert", "input_shape", "--input-shape"): (_input_shape, _shape_inside,
                                                        ("each a whole number in [1, 32768]", "over the 268435456")),
}

SIZES = st.from_regex(r"\s?[0-9]{0,40}(\.[0-9]{0,4})?\s?[KMGTkmgtx]?(i?B)?", fullmatch=True)
SHAPES = st.lists(st.one_of(st.integers(-2, 70000), st.integers()), max_size=12).map(lambda dims: ",".join(map(str, dims)))
TEXTS = st.one_of(SIZES, SHAPES, st.text(max_size=100), st.sampled_from(["nan", "inf", "1e308", "-1", "0", "", " ",
                                                                          "1.2.3", ".", "9" * 400 + "T", "1,3" * 100]))


def check(option: NumericOption, text: str, tmp_path: Any) -> None:
    use, inside, bounds = TEXT_OPTIONS[option]
    kwargs, refused = parse(option, text, tmp_path)
    if refused is None:
        assert kwargs is not None and kwargs[option.name] == text
        assert inside(use(text)), (option.flag, text)
    else:
        line, code, _usage = refused
        assert code == 2 and "\n" not in line and "internal error" not in line, (option.flag, text, line)
        assert line.startswith(f"{option.flag} ") and any(bound in line for bound in bounds), (option.flag, text, line)
        assert len(line) < 400, line
    assert list(tmp_path.iterdir()) == []  # nothing written


@pytest.mark.parametrize("option, text", [
    (next(iter(TEXT_OPTIONS)), "2G"), (next(iter(TEXT_OPTIONS)), "2T"), (next(iter(TEXT_OPTIONS)), "1.2.3"),
    (next(iter(TEXT_OPTIONS)), "9" * 400 + "T"), (list(TEXT_OPTIONS)[1], "50M"), (list(TEXT_OPTIONS)[1], "1e308"),
    (list(TEXT_OPTIONS)[2], "1,3,360,640"), (list(TEXT_OPTIONS)[2], "1,3,99999,640"),
    (list(TEXT_OPTIONS)[2], "1," + "9" * 5000), (list(TEXT_OPTIONS)[2], "64,3,32768,32768"),
], ids=str)
def test_the_named_texts(option, text, tmp_path) -> None:
    check(option, text, tmp_path)
    if text in ("2G", "50M", "1,3,360,640"):
        assert parse(option, text, tmp_path)[1] is None  # a size or shape people write is taken


@settings(derandomize=True, deadline=None, max_examples=300)
@given(option=st.sampled_from(list(TEXT_OPTIONS)), text=TEXTS)
def test_any_text_is_a_value_inside_the_bound_or_one_line(tmp_path_factory, option, text) -> None:
    where = tmp_path_factory.mktemp("parse")
    with pytest.MonkeyPatch.context() as monkeypatch:
        monkeypatch.chdir(where)
        check(option, text, where)
