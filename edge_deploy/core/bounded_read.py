"""Files a user names are read only when they are regular files: one helper under every reader of outside data
(recordings, images, videos given as files, checkpoints, manifests, calibration files, ONNX models).

A FIFO opened for reading blocks until something writes to it (forever, as `infer drive.mcap` did when drive.mcap
was a named pipe), a device node may do anything when opened (/dev/watchdog arms a watchdog) and never ends
(/dev/zero), and a socket cannot be opened at all. So a reader first asks `stat` what the path is, refuses anything
but a regular file in one line of the caller's error class ("is a FIFO (named pipe), not a regular file"), and
`open_regular` opens without blocking (O_NONBLOCK) and checks what it opened again (fstat), so a path swapped for a
FIFO between the two is refused too. See docs/failures.md ("Bounded reading").

Imports nothing of edge_deploy but errors.py and sizes.py, so every stage may use it.
"""
from __future__ import annotations

import errno
import os
import stat
from pathlib import Path
from typing import BinaryIO

from ..errors import EdgeDeployError
from .sizes import size_words

__all__ = ["kind_of", "open_regular", "read_regular", "regular_file", "special_kind"]


_KINDS = ((stat.S_ISREG, "a regular file"), (stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
          (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"))


def kind_of(mode: int) -> str:
    """What a stat mode names, for a message: "a regular file", "a directory", "a FIFO (named pipe)", ..."""
    return next((name for test, name in _KINDS if test(mode)), "not a file")


def special_kind(path: str | os.PathLike[str]) -> str | None:
    """What `path` is when it exists but is neither a regular file nor a directory (a FIFO, a socket, a device node),
    else None: for readers that take directories too, or that say "missing" in their own words."""
    try:
        mode = os.stat(path).st_mode
    except (OSError, ValueError):
        return None
    return None if stat.S_ISREG(mode) or stat.S_ISDIR(mode) else kind_of(mode)


def _stat_problem(path: Path, exc: OSError) -> str:
    if exc.errno == errno.ENOENT:
        return "does not exist"
    if exc.errno == errno.ENOTDIR:
        return "does not exist (a part of its path is a file, not a directory)"
    if exc.errno == errno.ELOOP:
        return "is a symbolic link loop"
    if exc.errno in (errno.EACCES, errno.EPERM):
        return "cannot be read (permission denied)"
    if exc.errno == errno.ENAMETOOLONG:
        return "is a name too long for the file system"
    return f"cannot be read ({exc.strerror or type(exc).__name__})"


def regular_file(path: str | os.PathLike[str], what: str, error: type[EdgeDeployError], hint: str) -> Path:
    """`path` when it names a regular file (links followed); else error("<what> <path> <is what>; <hint>.") in one
    line: missing, a directory, a FIFO, a socket or a device node ("..., not a regular file")."""
    path = Path(path)
    try:
        mode = os.stat(path).st_mode
    except OSError as exc:
        raise error(f"{what} {path} {_stat_problem(path, exc)}; {hint}.") from None
    except ValueError:  # a NUL in the name
        raise error(f"{what} {path!r} is not a valid path; {hint}.") from None
    if not stat.S_ISREG(mode):
        raise error(f"{what} {path} is {kind_of(mode)}, not a regular file; {hint}.")
    return path


def open_regular(path: str | os.PathLike[str], what: str, error: type[EdgeDeployError], hint: str) -> BinaryIO:
    """`path` opened for reading (binary) when it is a regular file, never blocking on a FIFO: checked before
    (`regular_file`), opened with O_NONBLOCK, and checked again on what was opened."""
    path = regular_file(path, what, error, hint)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise error(f"{what} {path} {_stat_problem(path, exc)}; {hint}.") from None
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):  # replaced between the stat and the open
        os.close(fd)
        raise error(f"{what} {path} is {kind_of(mode)}, not a regular file; {hint}.")
    os.set_blocking(fd, True)
    return os.fdopen(fd, "rb")


def read_regular(path: str | os.PathLike[str], what: str, error: type[EdgeDeployError], hint: str,
                 limit: int) -> bytes:
    """The bytes of a regular file (`open_regular`), refused in one line when it holds more than `limit` bytes
    (read no further than limit + 1, whatever the file says of its size)."""
    with open_regular(path, what, error, hint) as fh:
        data = fh.read(limit + 1)
    if len(data) > limit:
        raise error(f"{what} {path} is over {size_words(limit)}, more than a {what} holds; {hint}.")
    return data

