"""A command's options as one typed object: the fields of a dataclass become the command's parameters, so the
command gets them as keyword arguments and builds the object once. A dataclass of the CLI annotates each field with
its typer parameter (`takes_options`); a library's options dataclass, which knows nothing of typer, gets them from
a table in the command's module (`takes_fields`)."""
from __future__ import annotations

import inspect
from dataclasses import MISSING, fields
from types import UnionType
from typing import Annotated, Any, Callable, Mapping, Optional, Union, get_args, get_origin, get_type_hints


def takes_options(options_type: type, *, var_keyword: str | None = None) -> Callable[[Any], Any]:
    """Decorator: `command(**given)` whose parameters are the fields of the dataclass `options_type`, in their order
    (typer reads __signature__), then **`var_keyword` when given (more parameters added later, such as the lane
    families' own flags of `convert`). A field of that name is not a parameter."""
    hints = get_type_hints(options_type, include_extras=True)
    parameters = [inspect.Parameter(f.name, inspect.Parameter.KEYWORD_ONLY, annotation=hints[f.name],
                                    default=inspect.Parameter.empty if f.default is MISSING else f.default)
                  for f in fields(options_type) if f.name != var_keyword]
    if var_keyword is not None:
        parameters.append(inspect.Parameter(var_keyword, inspect.Parameter.VAR_KEYWORD, annotation=Any))

    def decorate(command: Any) -> Any:
        command.__signature__ = inspect.Signature(parameters, return_annotation=None)
        return command

    return decorate


class Only:
    """A parameter of the command line alone, in `takes_fields`' table: its type (with its typer parameter info, in
    `Annotated`) and default. For a field of the options type, it replaces the field's type and default where the
    command line spells the field differently (a repeatable option for a tuple, a choice for a Precision)."""

    def __init__(self, annotation: Any, default: Any = inspect.Parameter.empty) -> None:
        self.annotation, self.default = annotation, default


def takes_fields(options_type: type, table: Mapping[str, Any]) -> Callable[[Any], Any]:
    """Decorator: `command(**given)` whose parameters are the fields of the plain dataclass `options_type` (a
    library's options, which knows nothing of typer), in the order of `table`: for each name, the typer parameter
    info (`typer.Option(...)`) of the field of that name, which keeps the field's type and default, or an `Only`.
    Every field made by `__init__` must have its entry: none is left off the command line unnoticed."""
    hints = get_type_hints(options_type)
    own = {f.name: f for f in fields(options_type) if f.init}
    missing = [name for name in own if name not in table]
    if missing:
        raise TypeError(f"{options_type.__name__}: no command-line parameter for {', '.join(missing)}")
    parameters = []
    for name, info in table.items():
        if isinstance(info, Only):
            annotation, default = info.annotation, info.default
        elif name in own:
            default = own[name].default
            annotation = Annotated[_optional(hints[name]), info]
            if default is MISSING:
                default = inspect.Parameter.empty
        else:
            raise TypeError(f"{options_type.__name__} has no field {name}: give its type with Only(...)")
        parameters.append(inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, annotation=annotation,
                                            default=default))

    def decorate(command: Any) -> Any:
        command.__signature__ = inspect.Signature(parameters, return_annotation=None)
        return command

    return decorate


# Any: typer's **kwargs in, `options_type(**...)` keyword arguments out; the dataclass types each field
def options_of(options_type: type, given: Mapping[str, Any]) -> dict[str, Any]:
    """The keyword arguments of `given` that are fields of `options_type` (the rest are the command line's own)."""
    names = {f.name for f in fields(options_type) if f.init}
    return {name: value for name, value in given.items() if name in names}


def _optional(hint: Any) -> Any:
    """`X | None` as `Optional[X]`, which every typer this project supports reads."""
    args = get_args(hint)
    if get_origin(hint) in (Union, UnionType) and type(None) in args:
        rest = tuple(a for a in args if a is not type(None))
        return Optional[rest[0]] if len(rest) == 1 else Optional[Union[rest]]
    return hint
