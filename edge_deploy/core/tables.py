"""Tables for a terminal of 80 columns (rich is imported when one is made).

rich's default table draws a rule between columns and pads each side, so a table of seven columns needs twenty
columns of frame alone, and at 80 columns rich cuts what does not fit with "…": model names such as
lanedet_postprocess among them. `narrow_table` has no vertical rules (two spaces between columns, none at the
edges), and its first column (the name of a model, an image, a check) is never wrapped or cut.
"""
from __future__ import annotations

from typing import Any


def narrow_table(*headers: str, **options: Any) -> Any:
    """A rich Table of these column headers (see the module docstring); `options` go to rich's Table."""
    from rich import box
    from rich.table import Column, Table

    first, *rest = headers
    return Table(Column(first, no_wrap=True), *rest, box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False,
                 padding=(0, 1, 0, 0), **options)


def fits(console: Any, table: Any) -> bool:
    """Whether `table` can be drawn within `console`'s width without cutting a word: each column as wide as its
    longest word (header or cell), plus the padding and the rules between columns."""
    from rich.measure import Measurement
    from rich.text import Text

    options = console.options.update_width(10**4)
    words = 0
    for column in table.columns:
        cells = [column.header, *column.cells]
        words += max(Measurement.get(console, options, Text(c) if isinstance(c, str) else c).minimum for c in cells)
    _top, right, _bottom, left = table.padding
    count = len(table.columns)
    padding = (left + right) * count - (0 if table.pad_edge else left + right)
    rules = (count - 1 if table.box is not None else 0) + (2 if table.box is not None and table.show_edge else 0)
    return words + padding + rules <= console.width
