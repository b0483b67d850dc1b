"""Numeric options: each duration, rate, count, size or coordinate a command takes is a `number(RANGE, ...)` option,
its typer parameter info with a callback that checks the value against the range while the command line is parsed
(before anything runs or is written) and a help text that names the range in the words of the refusal:
"--fps must be a number of frames/s in (0, 1000], not inf." (a NumberError: exit 2).

The ranges are edge_deploy.core.numbers.Range objects; `range_of(info)` gives an option's back (tests/cli/
test_numeric_options.py finds every numeric option of every command through it, so an option without a range fails
that test)."""
from __future__ import annotations

from typing import Any, Callable, Optional

import typer

from ..errors import EdgeDeployError, NumberError
from ..core.numbers import Range

RANGE_ATTRIBUTE = "number_range"


def number(rng: Range, *param_decls: str, help: str = "", error: type[EdgeDeployError] = NumberError,  # noqa: A002
           **kwargs: Any) -> Any:
    """typer.Option(*param_decls, **kwargs) for a number in `rng`: its help ends with what the range takes, and a
    value outside (NaN, an infinity, too small or large, a fraction for a whole range) is refused in one line
    (`error`) as it is parsed. None (an optional option not given) passes."""
    text = f"{help} Takes {rng.describe()}." if help else f"Takes {rng.describe()}."
    return typer.Option(*param_decls, help=text, callback=range_callback(rng, error), **kwargs)


def numbers(rng: Range, *param_decls: str, help: str = "", error: type[EdgeDeployError] = NumberError,  # noqa: A002
            **kwargs: Any) -> Any:
    """typer.Option(*param_decls, **kwargs) for comma-separated numbers, each in `rng` ("1,2,4"): the text is kept
    (the command parses it again), but refused in one line as it is parsed when any part is outside."""
    text = f"{help} Each value: {rng.describe()}." if help else f"Each value: {rng.describe()}."
    return typer.Option(*param_decls, help=text, callback=list_callback(rng, error), **kwargs)


def list_callback(rng: Range, error: type[EdgeDeployError] = NumberError) -> Callable[..., Any]:
    """The typer callback that checks each comma-separated number of an option's text against `rng`."""

    def check_list(param: typer.CallbackParam, value: Optional[str] = None) -> Any:
        if value is not None:
            rng.parse_list(option_name(param), value, error)
        return value

    setattr(check_list, RANGE_ATTRIBUTE, rng)
    setattr(check_list, "comma_separated", True)
    return check_list


def range_callback(rng: Range, error: type[EdgeDeployError] = NumberError) -> Callable[..., Any]:
    """The typer callback that checks an option's value (each value of a repeated option) against `rng`."""

    def check_range(param: typer.CallbackParam, value: Optional[Any] = None) -> Any:
        if value is None:
            return None
        name = option_name(param)
        if isinstance(value, (list, tuple)):
            return type(value)(rng.check(name, v, error) for v in value)
        return rng.check(name, value, error)

    setattr(check_range, RANGE_ATTRIBUTE, rng)
    return check_range


def text_callback(parse: Callable[[str], Any]) -> Callable[..., Any]:
    """The typer callback for an option whose text holds numbers (a size, a shape): `parse(text)` checks it (raising
    its one-line error with the option's bound) while the command line is parsed; the text is kept."""

    def check_text(value: Optional[str] = None) -> Optional[str]:
        if value is not None:
            parse(value)
        return value

    return check_text


def option_name(param: Any) -> str:
    """An option's name in messages: its first long flag (--dla-core of --dla-core/--dla)."""
    opts = list(getattr(param, "opts", None) or ())
    return next((o for o in opts if o.startswith("--")), opts[0] if opts else f"--{param.name.replace('_', '-')}")


def is_list(info: Any) -> bool:
    """Whether a `numbers(...)` option takes comma-separated numbers."""
    return bool(getattr(getattr(info, "callback", None), "comma_separated", False))


def range_of(info: Any) -> Range | None:
    """The Range a `number(...)` option's parameter info checks, or None for any other option."""
    return getattr(getattr(info, "callback", None), RANGE_ATTRIBUTE, None)
