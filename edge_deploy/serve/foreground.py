"""`serve --foreground`: the same tritonserver command line as the unit, without systemd."""
from __future__ import annotations

import signal
import threading
import time
from pathlib import Path
from typing import Callable

from ..errors import ServerError
from .admin import Health
from .record import ServerRecord, record_path, remove_record, save_record, state_dir
from .systemd import write_private
from .tritonserver import (
    GRPC_KEY_HEADER,
    RESTRICTED_KEY_NAME,
    ServerOptions,
    TritonInstall,
    TritonProcess,
    check_ports_free,
    check_repository,
    generate_key,
)


def run_foreground(
    install: TritonInstall,
    options: ServerOptions,
    log_path: Path,
    *,
    ready_timeout: float = 300.0,
    on_ready: "Callable[[Health], None] | None" = None,
) -> int:
    """Run tritonserver in this process's foreground until SIGINT/SIGTERM; its exit code.

    The signal is forwarded to tritonserver, which finishes in-flight requests
    (up to the exit timeout) and exits; 0 means a clean stop.
    """
    models = check_repository(options.model_repository)
    check_ports_free(options)
    server = TritonProcess(install, options, log_path, echo=True, die_with_parent=True)
    stop_requested = threading.Event()

    def forward(signum: int, _frame: object) -> None:
        stop_requested.set()
        if server.proc is not None and server.proc.poll() is None:
            server.proc.send_signal(signal.SIGTERM)

    previous = {sig: signal.signal(sig, forward) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        server.start()
        try:
            health = server.wait_ready(ready_timeout, models)
        except ServerError:
            if stop_requested.is_set():
                return _finish(server, options)
            server.stop(timeout=options.exit_timeout + 5)
            raise
        if on_ready is not None:
            on_ready(health)
        while server.proc is not None and server.proc.poll() is None:
            time.sleep(0.2)
        return _finish(server, options)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        server.stop(timeout=options.exit_timeout + 5)


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
) -> tuple[int, Path]:
    """Run tritonserver with its own model-repository key and server record; (exit code, log path).

    The record and key are written once the server is ready (so `install` can
    reach it) and removed when it exits. The key file sits beside the record: the
    unit's key file of this scope keeps the unit's key.
    """
    key = generate_key()
    key_file = record_path(scope, options.model_repository).with_suffix(".key")
    options.restricted_key = (RESTRICTED_KEY_NAME, key)
    record = ServerRecord(url=options.url, repository=options.model_repository, key_header=GRPC_KEY_HEADER,
                          key_file=key_file, scope=scope, unit=None)
    saved = False

    def ready(health: Health) -> None:
        nonlocal saved
        write_private(key_file, key + "\n")
        save_record(record)
        saved = True
        if on_ready is not None:
            on_ready(health)

    log_path = state_dir(scope) / "triton-foreground.log"
    try:
        code = run_foreground(install, options, log_path, ready_timeout=ready_timeout, on_ready=ready)
    finally:
        if saved:
            remove_record(record)
            key_file.unlink(missing_ok=True)
    return code, log_path
