"""Progress reporting shared by the pipeline stages.

Library functions take a `Reporter`; the CLI passes a rich one, tests and
library users get the silent default. Stages are timed so commands can print a
closing summary.
"""
from __future__ import annotations

import time
from contextlib import contextmanager
from typing import Iterator


class Reporter:
    """Silent reporter; records stage timings. Subclass to show progress."""

    def __init__(self) -> None:
        self.timings: dict[str, float] = {}

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        """Time a named stage of work (shown as a spinner by the CLI reporter)."""
        start = time.perf_counter()
        try:
            yield
        finally:
            self.timings[name] = self.timings.get(name, 0.0) + time.perf_counter() - start

    def info(self, message: str) -> None:
        """A line worth showing to a person."""

    def warn(self, message: str) -> None:
        """Something the user should know about; never fatal."""


class ConsoleReporter(Reporter):
    """Reporter that prints stages with a spinner and a check mark (rich)."""

    def __init__(self, console=None) -> None:  # noqa: ANN001 - rich.console.Console
        super().__init__()
        from rich.console import Console

        self.console = console or Console(stderr=True)

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        start = time.perf_counter()
        with self.console.status(f"{name} ..."):
            with super().stage(name):
                yield
        self.console.print(f"[green]✓[/] {name} [dim]({time.perf_counter() - start:.1f} s)[/]")

    def info(self, message: str) -> None:
        self.console.print(message)

    def warn(self, message: str) -> None:
        self.console.print(f"[yellow]warning:[/] {message}")
