"""Atomic file writes: a reader sees the old file or the new one, never half of one.

Data goes to a temporary file in the target's directory (``.<name>.<random>.tmp``),
is fsynced, renamed over the target with os.replace, and the directory is fsynced.
"""
from __future__ import annotations

import hashlib

import contextlib
import os
import tempfile
from pathlib import Path
from typing import Any, BinaryIO
from .strict_json import dumps


def fsync_dir(path: Path) -> None:
    """Flush a directory's entries (renames, new files) to disk; best effort."""
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def fsync_tree(path: Path) -> None:
    """Flush every file and directory under `path` (and `path` itself) to disk; best effort."""
    for root, _, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):
                fd = os.open(os.path.join(root, name), os.O_RDONLY)
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)
        fsync_dir(Path(root))


def _default_mode() -> int:
    """0o666 minus the umask: the mode open() would give a new file."""
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


def write_bytes_atomic(path: Path, data: bytes, mode: int | None = None, *, group: str | None = None) -> Path:
    """Replace `path` with `data` atomically; returns the path.

    mode=None gives the usual mode of a new file (0o666 minus the umask; mkstemp
    alone would make it 0600). Mode and `group` (owner group, needs privilege)
    are set before any data is written, so a secret is never readable by others.
    """
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, _default_mode() if mode is None else mode)
        if group is not None:
            import grp

            os.fchown(fd, -1, grp.getgrnam(group).gr_gid)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)
    return path


def write_text_atomic(path: Path, text: str, mode: int | None = None, *, group: str | None = None) -> Path:
    """`write_bytes_atomic` for UTF-8 text."""
    return write_bytes_atomic(path, text.encode(), mode, group=group)


def write_json_atomic(path: Path, data: Any, mode: int | None = None, *, indent: int = 2) -> Path:
    """`write_bytes_atomic` for JSON (indented, newline-terminated)."""
    return write_bytes_atomic(path, (dumps(data, indent=indent) + "\n").encode(), mode)


def sha256_file(path: Path, chunk: int = 1 << 20) -> str:
    """Hex sha256 of a file, read in chunks."""
    with open(path, "rb") as fh:
        return sha256_stream(fh, chunk)


def sha256_stream(fh: BinaryIO, chunk: int = 1 << 20) -> str:
    """Hex sha256 of what is left to read in an open binary file."""
    digest = hashlib.sha256()
    while block := fh.read(chunk):
        digest.update(block)
    return digest.hexdigest()
