"""Which server log `edge-deploy logs` shows, and its last lines.

The unit's --log-file when it has one (a size-capped file and its one rotated predecessor,
PATH.1), else the journal; with no unit installed, the `serve --foreground` log.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..errors import ServerError
from . import systemd as su
from ..core.state import state_dir
from .foreground import foreground_log, latest_foreground_log
from .service import foreground_scope, scope_of
from .server_record import foreground_records


@dataclass(frozen=True)
class LogSource:
    """A server's log: a capped file (`path`, with `note` saying which and why) or, when `path` is None, the journal."""

    user: bool
    lines: int
    path: Path | None = None
    note: str = ""

    def text(self) -> str:
        """The file's last `lines` lines (from PATH.1 too when PATH holds fewer); ServerError when there is no log yet."""
        assert self.path is not None, "the journal is read with journal_argv()"
        path = self.path
        if not path.exists():
            raise ServerError(f"no log yet at {path}; start the server with `edge-deploy serve`.")
        previous = path.with_name(path.name + ".1")
        text = path.read_bytes().decode(errors="replace").splitlines(keepends=True)
        if len(text) < self.lines and previous.is_file():
            text = previous.read_bytes().decode(errors="replace").splitlines(keepends=True) + text
        return "".join(text[-self.lines:])

    def follow_argv(self) -> list[str]:
        """The command that prints the file's new lines as they come (through rotations)."""
        return ["tail", "-n", "0", "-F", str(self.path)]

    def journal_argv(self, follow: bool = False) -> list[str]:
        """journalctl for the unit's last `lines` lines (and, with `follow`, the new ones)."""
        argv = ["journalctl", "--user-unit" if self.user else "--unit", su.UNIT_NAME, "-n", str(self.lines), "--no-pager"]
        return argv + (["-f"] if follow else [])


def foreground_source(user: bool, lines: int) -> LogSource | None:
    """The log of the `serve --foreground` server that runs now (the first, when several do), else of the last
    one that ran; None when none has run here."""
    scope = foreground_scope(user)
    running = foreground_records((scope,))
    if running:
        record = running[0]
        path = foreground_log(scope, record.repository)
        return LogSource(user, lines, path, f"no {su.UNIT_NAME} is installed; showing the log of "
                                            f"{record.describe()} serving {record.repository}: {path}")
    latest = latest_foreground_log(scope)
    if latest is None:
        return None
    return LogSource(user, lines, latest, f"no {su.UNIT_NAME} is installed; showing the last `serve --foreground` "
                                          f"log {latest}")


def log_source(user: bool = False, lines: int = 200) -> LogSource:
    """Where the server's log is; ServerError when nothing was served here or the journal did not keep it."""
    if lines < 1:
        raise ServerError(f"--lines must be at least 1 (got {lines}).")
    scope = scope_of(user)
    installed = su.read_installed_unit(scope)
    if installed is not None and installed.log_file is not None:
        return LogSource(user, lines, installed.log_file, f"the unit writes to {installed.log_file} (--log-file)")
    if installed is None:
        fallback = foreground_source(user, lines)
        if fallback is not None:
            return fallback
        where = state_dir(foreground_scope(user)) / "servers"
        raise ServerError(
            f"no {su.UNIT_NAME} is installed ({scope}) and no `serve --foreground` log exists in {where}: "
            "nothing has been served here yet."
        )
    if not su.journald_available():
        raise ServerError(
            "journald is not running on this machine, so the unit's output (StandardOutput=journal) was not kept; "
            f"re-run `edge-deploy serve{' --user' if user else ''} --log-file PATH` to keep it in a size-capped file."
        )
    return LogSource(user, lines)
