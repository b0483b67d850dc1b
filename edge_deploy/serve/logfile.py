"""A log file that cannot fill the disk, and the small pump that feeds it tritonserver's output.

The unit logs to journald by default (journald rotates and rate-limits; size it with
SystemMaxUse= in journald.conf). `serve --log-file PATH` keeps the output in a file
instead; systemd can only append to a file without limit, so then the unit's ExecStart
is this file (see `pump_argv`):

    python -I .../edge_deploy/serve/logfile.py --log-file=PATH --max-bytes=N -- tritonserver ...

It starts tritonserver with its output on a pipe, passes SIGTERM/SIGINT/SIGHUP on to it,
writes the output to PATH and exits with tritonserver's exit code (128 + signal when it
was killed), so Restart=on-failure behaves as with tritonserver itself. When PATH would
pass half of N it becomes PATH.1 (replacing the previous PATH.1): the two files together
never hold more than N bytes, whatever the uptime. No logrotate is needed, and nothing
outside the unit has to signal the server. `serve --foreground` writes its log the same way.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

DEFAULT_MAX_BYTES = 50 * 2**20  # the log and its predecessor together
MIN_MAX_BYTES = 64 * 2**10


class CappedLog:
    """Append to `path`; at half of `max_bytes` it is renamed to `path`.1 and a new one starts."""

    def __init__(self, path: Path, max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        self.path = Path(path)
        self.half = max(1, max_bytes // 2)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file = open(self.path, "ab")
        self.size = self._file.tell()

    @property
    def previous(self) -> Path:
        """The rotated file (older lines)."""
        return self.path.with_name(self.path.name + ".1")

    def write(self, data: bytes) -> None:
        """Write `data` (whole lines, so a line is never split across the two files) and flush."""
        if self.size and self.size + len(data) > self.half:
            self._file.close()
            os.replace(self.path, self.previous)
            self._file = open(self.path, "ab")
            self.size = 0
        data = data[: self.half]  # one monstrous line cannot break the cap either
        self._file.write(data)
        self._file.flush()
        self.size += len(data)

    def flush(self) -> None:
        """Flush (`write` already does; here so a CappedLog stands in for a file)."""
        self._file.flush()

    @property
    def closed(self) -> bool:
        return self._file.closed

    def close(self) -> None:
        """Close the file."""
        self._file.close()

    def __enter__(self) -> "CappedLog":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def pump_argv(python: str, log_file: Path, max_bytes: int, argv: list[str]) -> list[str]:
    """The ExecStart= words that run `argv` with its output in a capped `log_file`.

    This file runs as a script (it needs only the standard library), in isolated mode
    (-I: no script directory or user site on sys.path): the pump is the very code that
    rendered the unit, whatever else the interpreter can import.
    """
    return [python, "-I", str(Path(__file__).resolve()), f"--log-file={log_file}", f"--max-bytes={max_bytes}",
            "--", *argv]


def run(argv: list[str], log_file: Path, max_bytes: int) -> int:
    """Run `argv` with stdout and stderr written to a CappedLog; its exit code (128 + signal when killed)."""
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                            preexec_fn=_term_when_parent_dies)

    def forward(signum: int, _frame: object) -> None:
        if proc.poll() is None:
            proc.send_signal(signum)

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, forward)
    assert proc.stdout is not None
    stdout = proc.stdout
    lock = threading.Lock()
    log = CappedLog(log_file, max_bytes)

    def pump() -> None:
        for line in stdout:
            with lock:
                if log.closed:
                    return
                log.write(line)

    # The pipe is read in a thread and the exit is judged by the process itself: when tritonserver is
    # killed, its Python-backend stubs still hold the pipe open, so EOF may never come, and a pump that
    # waited for it would keep the unit "running" with no server (no restart).
    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    code = proc.wait()
    reader.join(timeout=2.0)
    with lock:
        log.close()
    return code if code >= 0 else 128 - code


def _term_when_parent_dies() -> None:
    # In the child before exec: if the pump is killed (OOM killer), tritonserver gets SIGTERM and stops
    # cleanly, rather than lingering in the unit's cgroup until the stop timeout.
    import ctypes

    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def main(args: list[str] | None = None) -> int:
    """`python -I logfile.py --log-file=PATH --max-bytes=N -- COMMAND...`."""
    args = list(sys.argv[1:] if args is None else args)
    if "--" not in args:
        print("usage: python -I logfile.py --log-file=PATH --max-bytes=N -- COMMAND...",
              file=sys.stderr)
        return 2
    split = args.index("--")
    options = dict(a[2:].split("=", 1) for a in args[:split] if a.startswith("--") and "=" in a)
    return run(args[split + 1:], Path(options["log-file"]), int(options.get("max-bytes", DEFAULT_MAX_BYTES)))


if __name__ == "__main__":
    sys.exit(main())
