"""`serve --foreground`: the same tritonserver command line as the unit, without systemd.

One foreground server per repository: it holds the repository's foreground lock and
refuses to start while another live server (foreground or unit) serves it. When its
tritonserver dies, the processes and shared memory that server left behind are removed
(`edge_deploy.serve.leftovers`).
"""
from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path
from typing import Callable

from ..errors import ServerError
from ..core.state import state_dir
from .admin import Health, server_live
from .argv import GRPC_KEY_HEADER, RESTRICTED_KEY_NAME, ServerOptions, generate_key
from .checks import check_ports_free, check_repository
from .discovery import TritonInstall
from .leftovers import Leftovers, become_subreaper
from .logfile import DEFAULT_MAX_BYTES
from .process import TritonProcess
from .server_record import (
    ServerRecord,
    tls_record,
    find_record,
    foreground_claim,
    process_start,
    prune_stale_records,
    record_path,
    remove_record,
    save_record,
)
from .systemd import write_private
from ..core.progress import Reporter



def run_foreground(
    install: TritonInstall,
    options: ServerOptions,
    log_path: Path,
    *,
    ready_timeout: float = 300.0,
    on_ready: "Callable[[Health], None] | None" = None,
    on_note: "Callable[[str], None] | None" = None,
    log_max_bytes: int = DEFAULT_MAX_BYTES,
    echo: bool = False,
    reporter: "Reporter | None" = None,
) -> int:
    """Run tritonserver in this process's foreground until SIGINT/SIGTERM; its exit code.

    The signal is forwarded to tritonserver, which finishes in-flight requests
    (up to the exit timeout) and exits; 0 means a clean stop. Whatever the server
    left behind (orphaned backend stubs, shared-memory regions) is removed and
    reported through `on_note`. tritonserver's output goes to `log_path` only (with `echo`, to stderr too);
    `reporter` shows the wait for readiness.
    """
    reporter = reporter or Reporter()
    models = check_repository(options.model_repository, reporter.warn)
    check_ports_free(options)
    server = TritonProcess(install, options, log_path, echo=echo, die_with_parent=True, log_max_bytes=log_max_bytes)
    stop_requested = threading.Event()
    become_subreaper()
    leftovers: Leftovers | None = None

    def forward(signum: int, _frame: object) -> None:
        stop_requested.set()
        if server.proc is not None and server.proc.poll() is None:
            server.proc.send_signal(signal.SIGTERM)

    previous = {sig: signal.signal(sig, forward) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        server.start()
        assert server.proc is not None
        leftovers = Leftovers(server.proc.pid)
        try:
            with reporter.stage(f"starting tritonserver at {options.url} (waiting for every model to be ready)"):
                health = server.wait_ready(ready_timeout, models, settle=True)  # serve what loads
        except ServerError:
            if stop_requested.is_set():
                return _finish(server, options)
            server.stop(timeout=options.exit_timeout + 5)
            raise
        leftovers.scan()
        if on_ready is not None:
            on_ready(health)
        last_scan = time.monotonic()
        while server.proc is not None and server.proc.poll() is None:
            time.sleep(0.2)
            if time.monotonic() - last_scan > 2.0:  # models loaded later bring their own regions
                leftovers.scan()
                last_scan = time.monotonic()
        return _finish(server, options)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        server.stop(timeout=options.exit_timeout + 5)
        if leftovers is not None:
            for note in leftovers.clean():
                if on_note is not None:
                    on_note(note)


def foreground_log(scope: str, repository: Path) -> Path:
    """Where `serve --foreground` of `repository` keeps tritonserver's output by default (capped like --log-file):
    one file per server (a repository has one foreground server at a time), beside its record."""
    return record_path(scope, repository, "foreground").with_suffix(".log")


def latest_foreground_log(scope: str) -> Path | None:
    """The log of the newest `serve --foreground` server of a scope's state dir (None: none has run)."""
    logs = sorted((state_dir(scope) / "servers").glob("*.foreground.log"), key=lambda p: p.stat().st_mtime)
    return logs[-1] if logs else None


def _finish(server: TritonProcess, options: ServerOptions) -> int:
    code = server.stop(timeout=options.exit_timeout + 5)
    return 0 if code in (0, None) else (code if code > 0 else 128 - code)


def serve_foreground(
    install: TritonInstall,
    options: ServerOptions,
    scope: str,
    *,
    ready_timeout: float,
    on_ready: "Callable[[Health], None] | None" = None,
    on_note: "Callable[[str], None] | None" = None,
    log_file: Path | None = None,
    log_max_bytes: int = DEFAULT_MAX_BYTES,
    echo: bool = False,
    reporter: "Reporter | None" = None,
) -> tuple[int, Path]:
    """Run tritonserver with its own model-repository key and server record; (exit code, log path).

    Refused (ServerError, nothing started) while another live server serves the
    repository. The record and key are written once the server is ready (so `install`
    can reach it) and removed when it exits. The key file sits beside the record: the
    unit's key file of this scope keeps the unit's key.
    """
    repository = options.model_repository
    with foreground_claim(scope, repository, options.url):
        for note in prune_stale_records(repository):
            if on_note is not None:
                on_note(note)
        other = find_record(repository)
        if other is not None and (other.kind == "foreground" or server_live(other.url, tls=other.client_tls())):
            raise ServerError(
                f"{Path(repository).resolve()} is already served by {other.describe()} at {other.url}; "
                "stop that server first (two servers of one repository would fight over its versions), "
                "or serve another repository."
            )
        return _serve_claimed(install, options, scope, ready_timeout=ready_timeout, on_ready=on_ready,
                              on_note=on_note, log_file=log_file, log_max_bytes=log_max_bytes, echo=echo,
                              reporter=reporter)


def _serve_claimed(
    install: TritonInstall,
    options: ServerOptions,
    scope: str,
    *,
    ready_timeout: float,
    on_ready: "Callable[[Health], None] | None",
    on_note: "Callable[[str], None] | None",
    log_file: Path | None,
    log_max_bytes: int,
    echo: bool = False,
    reporter: "Reporter | None" = None,
) -> tuple[int, Path]:
    key = generate_key()
    key_file = record_path(scope, options.model_repository, "foreground").with_suffix(".key")
    options.restricted_key = (RESTRICTED_KEY_NAME, key)
    pid = os.getpid()
    record = ServerRecord(url=options.url, repository=options.model_repository, key_header=GRPC_KEY_HEADER,
                          key_file=key_file, scope=scope, unit=None, pid=pid, pid_start=process_start(pid),
                          tls=tls_record(options.tls))
    saved = False

    def ready(health: Health) -> None:
        nonlocal saved
        write_private(key_file, key + "\n")
        save_record(record)
        saved = True
        if on_ready is not None:
            on_ready(health)

    log_path = log_file or foreground_log(scope, options.model_repository)
    try:
        code = run_foreground(install, options, log_path, ready_timeout=ready_timeout, on_ready=ready,
                              on_note=on_note, log_max_bytes=log_max_bytes, echo=echo, reporter=reporter)
    finally:
        if saved:
            remove_record(record)
            key_file.unlink(missing_ok=True)
    return code, log_path
