"""Every file edge-deploy writes, written one way: a reader sees the old file or the new one, never half of one, and
nothing that is not ours is replaced.

Data goes to a temporary file beside the target, named ``.<name>.<pid>.<random>.tmp`` (created with O_EXCL, so two
runs writing the same target never share one), is fsynced, renamed over the target with os.replace, and the
directory is fsynced. The temporary file is removed on any error and on any BaseException (Ctrl-C, the CLI's SIGTERM,
`Terminated`). A target that exists and is not a regular file (a directory, a device node such as /dev/null, a FIFO,
a socket), or that is one of the command's inputs (the same file, however reached: a symbolic or hard link), is
refused in one line before anything is written, and checked again just before the rename.

`atomic_path` (a context manager yielding the temporary path, for a library that writes by name: OpenCV, torch,
onnx) and `AtomicOutput` (for a file written over a whole run: a video, an MCAP recording, JSON lines) are the two
shapes; `write_bytes_atomic`, `write_text_atomic` and `write_json_atomic` are built on them.
"""
from __future__ import annotations

import hashlib

import contextlib
import os
import stat
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO, Any, BinaryIO
from ..errors import EdgeDeployError, OutputError
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


def _kind(mode: int) -> str | None:
    """What a file that is not a regular one is, in a word or two (None for a regular file)."""
    for test, name in ((stat.S_ISDIR, "a directory"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
                       (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return None if stat.S_ISREG(mode) else "not a regular file"


def _identity(path: Path) -> tuple[int, int] | None:
    with contextlib.suppress(OSError, ValueError):
        st = os.stat(path)
        return st.st_dev, st.st_ino
    return None


def check_target(path: Path, *, what: str | None = None, inputs: Iterable[Path | str] = (),
                 error: type[EdgeDeployError] = OutputError) -> Path:
    """`path` if a file may be written there, else a one-line `error`: a target that exists and is not a regular
    file (followed through a symbolic link), or that is one of `inputs` (the same file: st_dev and st_ino, so a
    symbolic or hard link to an input is refused too). `what` names the option (--mcap) in the message."""
    path = Path(path)
    name = f"{what} {path}" if what else str(path)
    try:
        st = os.stat(path)
    except FileNotFoundError:
        st = None
    except OSError as exc:  # a symbolic-link loop, a path through a file, a name too long
        raise error(f"cannot write {name}: {exc.strerror or exc}; pass a path to a regular file in a directory "
                    "that exists.") from None
    if st is not None:
        kind = _kind(st.st_mode)
        if kind is not None:
            hint = f"pass a file name inside it, such as {path / 'out'}" if stat.S_ISDIR(st.st_mode) else \
                "pass the path of a regular file (edge-deploy replaces only regular files)"
            raise error(f"{name} is {kind}, not a regular file, so it will not be replaced; {hint}.")
        for source in inputs:
            if _identity(Path(source)) == (st.st_dev, st.st_ino):
                raise error(f"{name} is the input {source}: writing it would replace what is being read; pass "
                            "another path.")
    return path


def temporary_beside(path: Path, suffix: str = "") -> Path:
    """A new empty file beside `path`, named `.<name>.<pid>.<random>.tmp<suffix>` (created O_EXCL: no other run
    shares it), mode 0600 until its owner sets it."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.{os.getpid()}.", suffix=f".tmp{suffix}", dir=path.parent)
    os.close(fd)
    return Path(tmp)


class AtomicOutput:
    """A file written under a temporary name beside `path` (see the module's docstring): `commit()` fsyncs it and
    renames it over `path` (after checking the target again), `discard()` removes it. As a context manager it
    commits when the block ends normally and discards on any exception.

    `mode`: the new file's mode (None: 0o666 minus the umask, as open() gives); `group`: its owner group (needs
    privilege); both set before anything is written, so a secret is never readable by others. `suffix` ends the
    temporary name (a video writer chooses its container by it)."""

    def __init__(self, path: Path, *, mode: int | None = None, group: str | None = None, suffix: str = "",
                 what: str | None = None, inputs: Iterable[Path | str] = (),
                 error: type[EdgeDeployError] = OutputError) -> None:
        self.inputs = tuple(inputs)
        self.what, self.error = what, error
        self.path = check_target(path, what=what, inputs=self.inputs, error=error)
        self.tmp = temporary_beside(self.path, suffix)
        self.done = False
        try:
            os.chmod(self.tmp, _default_mode() if mode is None else mode)
            if group is not None:
                import grp

                os.chown(self.tmp, -1, grp.getgrnam(group).gr_gid)
        except BaseException:
            self.discard()
            raise

    def open(self, mode: str = "wb", **kwargs: Any) -> IO[Any]:
        """The temporary file opened for writing (a new handle each call)."""
        return open(self.tmp, mode, **kwargs)  # noqa: SIM115 - the caller closes it

    def commit(self) -> Path:
        """Flush the temporary file to disk and rename it over the target; returns the target. On failure the
        temporary file is removed and the target is what it was."""
        try:
            fd = os.open(self.tmp, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
            check_target(self.path, what=self.what, inputs=self.inputs, error=self.error)  # replaced meanwhile?
            os.replace(self.tmp, self.path)
        except BaseException:
            self.discard()
            raise
        self.done = True
        fsync_dir(self.path.parent)
        return self.path

    def discard(self) -> None:
        """Remove the temporary file (the target is left as it was); idempotent."""
        if not self.done:
            self.done = True
            with contextlib.suppress(OSError):
                self.tmp.unlink()

    def __enter__(self) -> "AtomicOutput":
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is None:
            self.commit()
        else:
            self.discard()


@contextlib.contextmanager
def atomic_path(path: Path, **kwargs: Any) -> Iterator[Path]:
    """The temporary path to write `path` through (for a library that writes by name); committed when the block
    ends normally, removed on any exception. Keywords as `AtomicOutput`'s."""
    with AtomicOutput(path, **kwargs) as output:
        yield output.tmp


def write_bytes_atomic(path: Path, data: bytes, mode: int | None = None, *, group: str | None = None,
                       inputs: Iterable[Path | str] = ()) -> Path:
    """Replace `path` with `data` atomically; returns the path.

    mode=None gives the usual mode of a new file (0o666 minus the umask; mkstemp
    alone would make it 0600). Mode and `group` (owner group, needs privilege)
    are set before any data is written, so a secret is never readable by others.
    """
    with AtomicOutput(path, mode=mode, group=group, inputs=inputs) as output:
        with output.open("wb") as fh:
            fh.write(data)
    return output.path


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
