"""A tritonserver child process: started, waited on until ready, stopped (`serve --foreground`, tests)."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import BinaryIO, cast

from ..errors import ServerError
from .addresses import dial_url
from .admin import GRPC_PROTOCOL_PREFIX, Health, wait_healthy
from .argv import ServerOptions, tritonserver_argv
from .discovery import INSTALL_HINT, TritonInstall
from .log_reason import last_error_line
from .logfile import CappedLog



class TritonProcess:
    """A tritonserver child process (used by `serve --foreground` and by tests).

    Output goes to `log_path` (capped at `log_max_bytes` when given; with `echo=True`, to stderr as well).
    `wait_ready` polls gRPC readiness; `stop` sends SIGTERM, then SIGKILL after the timeout.
    """

    def __init__(
        self, install: TritonInstall, options: ServerOptions, log_path: Path, *, echo: bool = False,
        die_with_parent: bool = False, log_max_bytes: int | None = None,
    ) -> None:
        self.install = install
        self.log_max_bytes = log_max_bytes  # cap the log (edge_deploy.serve.logfile.CappedLog)
        self.options = options
        self.log_path = Path(log_path)
        self.echo = echo
        self.die_with_parent = die_with_parent
        self.proc: subprocess.Popen[bytes] | None = None
        self._tee: threading.Thread | None = None
        self._log_start = 0  # where this run's output begins in an appended-to log

    @property
    def _pumped(self) -> bool:
        """Output read through a pipe (to echo it, or to cap its log) rather than written to the log directly."""
        return self.echo or self.log_max_bytes is not None

    @property
    def url(self) -> str:
        """The gRPC address (host:port)."""
        return self.options.url

    @property
    def argv(self) -> list[str]:
        """The command line (`tritonserver_argv`)."""
        return tritonserver_argv(self.install, self.options)

    def start(self) -> "TritonProcess":
        """Launch tritonserver in its own session, output appended to the log; returns self."""
        env = {**os.environ, **self.install.env}
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log: CappedLog | BinaryIO
        if self._pumped and self.log_max_bytes is not None:
            log = CappedLog(self.log_path, self.log_max_bytes)
            self._log_start = log.size
        else:
            log = open(self.log_path, "ab")
            self._log_start = log.seek(0, os.SEEK_END)
        try:
            self.proc = subprocess.Popen(
                self.argv,
                stdout=subprocess.PIPE if self._pumped else cast(BinaryIO, log),  # not pumped: the file
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
                preexec_fn=_term_when_parent_dies if self.die_with_parent else None,
            )
        except OSError as exc:
            log.close()
            raise ServerError(f"cannot start {self.install.binary}: {exc}; {INSTALL_HINT}.") from exc
        if self._pumped:
            self._tee = threading.Thread(target=self._copy_output, args=(log,), daemon=True)
            self._tee.start()
        else:
            log.close()
        return self

    def _copy_output(self, log) -> None:  # noqa: ANN001 - binary file
        assert self.proc is not None and self.proc.stdout is not None
        with log:
            for line in self.proc.stdout:
                log.write(line)
                log.flush()
                if self.echo:
                    sys.stderr.buffer.write(line)
                    sys.stderr.flush()

    def exited(self) -> str | None:
        """None while running; otherwise why it stopped (exit code and the log's reason)."""
        if self.proc is None or self.proc.poll() is None:
            return None
        if self._tee is not None:
            self._tee.join(timeout=2)
        return f"tritonserver exited with code {self.proc.returncode}: {self.reason()}"

    def wait_ready(self, timeout: float = 60.0, models: list[str] | tuple[str, ...] = (), *,
                   settle: bool = False) -> Health:
        """Block until the server (and `models`) report ready, or raise ServerError with the log's reason.

        settle: return as well once every model that is not ready failed to load and some model is ready (the
        server serves what loads; the failed ones carry the server's reason)."""
        try:
            tls = self.options.tls.client() if self.options.tls is not None else None
            key = self.options.restricted_key
            # The key opens the repository index (the reasons of failed loads); without one the index is open.
            headers = {GRPC_PROTOCOL_PREFIX + key[0]: key[1]} if key is not None else {}
            return wait_healthy(dial_url(self.url), models, timeout, alive=self.exited, tls=tls, headers=headers,
                                settle=settle)
        except ServerError as exc:
            if self.exited():
                raise
            raise ServerError(f"{exc} Last log line: {self.reason()}") from None

    def reason(self) -> str:
        """The most informative line this run wrote to the log (earlier runs' lines are ignored)."""
        return last_error_line(self.log_path, self._log_start)

    def wait(self) -> int:
        """Wait for the process to end; its exit code."""
        assert self.proc is not None
        code = self.proc.wait()
        if self._tee is not None:
            self._tee.join(timeout=2)
        return code

    def stop(self, timeout: float | None = None) -> int | None:
        """SIGTERM, wait up to the exit timeout (+5 s), then SIGKILL. Returns the exit code."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout if timeout is not None else self.options.exit_timeout + 5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self._tee is not None:
            self._tee.join(timeout=2)
        return self.proc.returncode

    def __enter__(self) -> "TritonProcess":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _term_when_parent_dies() -> None:
    # Runs in the child before exec: Linux sends it SIGTERM when its parent dies, so a
    # killed `serve --foreground` does not leave an orphaned server holding the port.
    import ctypes

    PR_SET_PDEATHSIG = 1
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
