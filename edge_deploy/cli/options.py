"""A command's options as one typed object: the fields of a dataclass, each annotated with its typer parameter,
become the command's parameters, so the command gets them as keyword arguments and builds the object once."""
from __future__ import annotations

import inspect
from dataclasses import MISSING, fields
from typing import Any, Callable, get_type_hints


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
