"""Progress reporting shared by the pipeline stages.

Library functions take a `Reporter`; the CLI passes a `ConsoleReporter`, tests and library users get the
silent default. Stages are timed so commands can print a closing summary. While a stage runs, the console
reporter shows a spinner with the time elapsed, and a bar where the work is countable (`count`: frames,
checks, calibration batches); on anything but a terminal (a log, a pipe) only the closing line of each stage
is printed.
"""
from __future__ import annotations

import time
from contextlib import contextmanager
from typing import Any, Callable, Iterator

Advance = Callable[[int], None]  # advance(n): n more units of a counted step done


def _nothing(_n: int = 1) -> None:
    return None


class Reporter:
    """Silent reporter; records stage timings. Subclass to show progress."""

    def __init__(self) -> None:
        self.timings: dict[str, float] = {}

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        """Time a named stage of work (a spinner with the time elapsed in the console reporter)."""
        start = time.perf_counter()
        try:
            yield
        finally:
            self.timings[name] = self.timings.get(name, 0.0) + time.perf_counter() - start

    @contextmanager
    def count(self, what: str, total: int | None = None) -> Iterator[Advance]:
        """Countable work inside a stage (frames, checks, batches): yields `advance(n=1)`, called as units finish
        (a bar in the console reporter; `total` None: a count without a bar)."""
        yield _nothing

    def info(self, message: str) -> None:
        """A line worth showing to a person."""

    def warn(self, message: str) -> None:
        """Something the user should know about; never fatal."""


class ConsoleReporter(Reporter):
    """Stages as a spinner with the time elapsed (a bar for counted work) while they run, then a check mark and
    their time (rich). One live display for all of them, so counts nest inside stages; none off a terminal."""

    def __init__(self, console=None) -> None:  # noqa: ANN001 - rich.console.Console
        super().__init__()
        from rich.console import Console

        self.console = console or Console(stderr=True)
        self._live: Any = None  # rich.progress.Progress while some stage or count runs on a terminal
        self._open = 0

    @contextmanager
    def _task(self, description: str, total: int | None) -> Iterator[Advance]:
        if not self.console.is_terminal:
            yield _nothing
            return
        if self._live is None:
            from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

            self._live = Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(bar_width=24),
                                  TextColumn("{task.fields[counted]}"), TimeElapsedColumn(),
                                  console=self.console, transient=True)
            self._live.start()
        self._open += 1
        live = self._live
        task = live.add_task(description, total=total, counted="")

        def advance(n: int = 1) -> None:
            live.advance(task, n)
            done = int(live.tasks[[t.id for t in live.tasks].index(task)].completed)
            live.update(task, counted=f"{done}/{total}" if total is not None else str(done))

        try:
            yield advance
        finally:
            live.refresh()  # its last state shown once, however short it ran
            live.remove_task(task)
            self._open -= 1
            if self._open == 0:
                live.stop()
                self._live = None

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        start = time.perf_counter()
        with self._task(f"{name} ...", None):
            with super().stage(name):
                yield
        self.console.print(f"[green]✓[/] {name} [dim]({time.perf_counter() - start:.1f} s)[/]")

    @contextmanager
    def count(self, what: str, total: int | None = None) -> Iterator[Advance]:
        with self._task(what, total) as advance:
            yield advance

    def info(self, message: str) -> None:
        self.console.print(message)

    def warn(self, message: str) -> None:
        self.console.print(f"[yellow]warning:[/] {message}")


PROGRESS_EVERY_S = 2.0  # a line of progress on stderr at least this often while long work runs (video, drive)


def every_few_seconds(say: Callable[[str], object], line: Callable[[int, float], str],
                      every: float = PROGRESS_EVERY_S) -> Callable[[int, float], None]:
    """`progress(done, seconds)` for work that reports each unit (a video's frames): says `line(done, seconds)` for
    the first unit and then whenever `every` seconds have passed since the last line, whatever the rate (a frame of
    1 s or of 10 ms)."""
    next_at = [0.0]

    def progress(done: int, seconds: float) -> None:
        if done == 1 or seconds >= next_at[0]:
            say(line(done, seconds))
            next_at[0] = seconds + every

    return progress


def counted(items: Iterator[Any], progress: Callable[[int, float], None],
            clock: Callable[[], float] = time.monotonic) -> Iterator[Any]:
    """`items`, calling `progress(done, seconds since the first was asked for)` after each one is made."""
    start = clock()
    for done, item in enumerate(items, 1):
        progress(done, clock() - start)
        yield item
