"""Command-line interface: a thin typer layer over the pipeline's plain functions.

Each command lives in its own module (one per pipeline stage) and registers on
`app`. `main` is the one place that prints errors: an EdgeDeployError is one line on
stderr and its exit code; anything else is caught by category (the operating system,
memory, a bug) so no failure escapes as a traceback unless EDGE_DEPLOY_DEBUG=1.
"""
from __future__ import annotations

import contextlib
import importlib
import os
import sys
import warnings
from typing import Any, Protocol, TypeGuard

from ..errors import EdgeDeployError, Terminated, one_line, os_error_message

# The module of each top-level command (each registers its commands on the typer app, cli/typer_app.py, when
# imported), in the order of the help's list. `edge-deploy NAME ...` imports only NAME's module, so a command starts
# without the imports of all the others (the fleet role runs short commands on every vehicle).
MODULE_OF_COMMAND = {
    "infer": "infer", "sample": "infer", "bench": "bench", "convert": "convert", "doctor": "doctor",
    "evaluate": "evaluate", "families": "families", "rollout": "fleet", "install": "repository",
    "models": "repository", "rollback": "repository", "serve": "serve", "stop": "serve", "status": "serve",
    "logs": "serve", "health": "serve", "certs": "certs", "fleet": "fleet",
}
COMMAND_MODULES = tuple(dict.fromkeys(MODULE_OF_COMMAND.values()))

INTERNAL_ERROR_EXIT = 70  # EX_SOFTWARE: a bug of edge-deploy, not something the user did
TERMINATED_EXIT = 128 + 15  # what a shell reports for a process SIGTERM ended


def terminate_on_sigterm() -> None:
    """SIGTERM raises `Terminated` in the main thread, so the command unwinds: every file being written is removed
    (fsutil.AtomicOutput, the video and MCAP writers) and an earlier file at its path is left as it was. A second
    SIGTERM ends the process at once (the default action), as one would a command that does not stop."""
    import signal

    def terminated(signum: int, frame: Any) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        raise Terminated()

    if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:  # not when an embedding program chose its own
        with contextlib.suppress(ValueError):  # not the main thread: nothing to install
            signal.signal(signal.SIGTERM, terminated)


def register_commands(command: str | None = None) -> None:
    """Import the module of `command` (a top-level command name), or every command module when None or unknown;
    the commands listed in MODULE_OF_COMMAND's order, whichever module was imported first."""
    from .typer_app import app, plain_help

    module = MODULE_OF_COMMAND.get(command) if command is not None else None
    for name in (module,) if module is not None else COMMAND_MODULES:
        importlib.import_module(f"{__name__}.{name}")
    plain_help(app)
    order = {name: i for i, name in enumerate(MODULE_OF_COMMAND)}
    app.registered_commands.sort(key=lambda info: order.get(str(info.name or getattr(info.callback, "__name__", "")),
                                                            -1))
    app.registered_groups.sort(key=lambda info: order.get(str(info.name), -1))


def __getattr__(name: str) -> Any:
    # `from edge_deploy.cli import app`: the application with every command registered.
    if name == "app":
        register_commands()
        from .typer_app import app

        return app
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _warning_line(message: Warning | str, category: type[Warning], *_: Any, **__: Any) -> None:
    """A warning as the CLI prints it: one line on stderr, without the source line Python adds."""
    print(f"warning: {' '.join(str(message).split())}", file=sys.stderr)


def main() -> None:
    """Console-script entry point."""
    try:
        _main()
    except SystemExit as exc:
        _exit(exc.code)


def _exit(code: object) -> None:
    """End the process with `code` (sys.exit's), not waiting for a thread edge-deploy did not start.

    Every thread edge-deploy starts is a daemon, so a non-daemon thread still running once the command is done is one
    a plug-in family started (imported by `convert PLUGIN`), and the interpreter would wait for it forever. Then the
    exit is the interpreter's but for that wait: the exit handlers run, the streams are flushed, and os._exit ends the
    process with the same code. Least surprising: the command's output and exit code are what they would be, nothing
    of edge-deploy is cut short, and without such a thread nothing changes (SystemExit as before). Listing families
    and converting a built-in one never import a plug-in here (they are probed in a child process that ends the same
    way)."""
    import threading

    stray = [t.name for t in threading.enumerate() if not t.daemon and t is not threading.main_thread() and t.is_alive()]
    if not stray:
        raise SystemExit(code)
    import atexit

    print(f"warning: not waiting for thread{'s' if len(stray) > 1 else ''} {', '.join(stray[:3])} that edge-deploy "
          "did not start (a plug-in family's?) to end; exiting.", file=sys.stderr)
    if code is None:
        status = 0
    elif isinstance(code, int):
        status = code
    else:
        print(code, file=sys.stderr)
        status = 1
    try:
        atexit._run_exitfuncs()  # what the interpreter runs at exit, after joining the threads it would wait for
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:  # noqa: BLE001, S110 - a closed pipe: nothing left to say to it
                pass
        os._exit(status)


def _main() -> None:
    import typer

    from .typer_app import app

    register_commands(sys.argv[1] if len(sys.argv) > 1 else None)
    terminate_on_sigterm()
    if os.environ.get("EDGE_DEPLOY_DEBUG") != "1":
        warnings.showwarning = _warning_line
    try:
        code = app(standalone_mode=False)  # usage errors come here too, to be printed in one line
    except (KeyboardInterrupt, typer.Abort):
        print("error: interrupted", file=sys.stderr)
        sys.exit(130)
    except Terminated:
        print("error: terminated (SIGTERM); the files it was writing were removed, earlier ones are as they were.",
              file=sys.stderr)
        sys.exit(TERMINATED_EXIT)
    except BrokenPipeError:
        # `edge-deploy models | head`: the reader is gone; nothing left to say to it.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(141)
    except Exception as exc:  # noqa: BLE001 - the one place errors are printed
        if os.environ.get("EDGE_DEPLOY_DEBUG") == "1":
            raise
        if _is_usage_error(exc) and type(exc).__name__ == "NoArgsIsHelpError":
            exc.show()  # `edge-deploy` alone: the help text, as before
            sys.exit(int(exc.exit_code))
        message, code = error_line(exc)
        print(f"error: {message}", file=sys.stderr)
        sys.exit(code)
    sys.exit(code if isinstance(code, int) else 0)


class _UsageError(Protocol):
    ctx: Any
    exit_code: int

    def format_message(self) -> str: ...
    def show(self) -> None: ...


def _is_usage_error(exc: BaseException) -> TypeGuard[_UsageError]:
    # click's UsageError (vendored by typer >= 0.22 as typer._click): told by its interface, not its module.
    return all(hasattr(exc, attr) for attr in ("format_message", "show", "ctx", "exit_code"))


def error_line(exc: Exception) -> tuple[str, int]:
    """The one line printed for an exception that reached the top, and the exit code."""
    if isinstance(exc, EdgeDeployError):
        return str(exc), exc.exit_code
    if _is_usage_error(exc):
        ctx = getattr(exc, "ctx", None)
        command = getattr(ctx, "command_path", None) or "edge-deploy"
        return f"{one_line(exc.format_message(), 300).rstrip('.')} (see `{command} --help`).", int(exc.exit_code)
    if isinstance(exc, OSError):
        return os_error_message(exc), 1
    if isinstance(exc, MemoryError):
        return "out of memory; close other programs or use a machine with more memory, then run it again.", 1
    return (
        f"internal error ({type(exc).__name__}: {one_line(exc, 160, first_line=True)}); this is a bug of "
        "edge-deploy: run again with EDGE_DEPLOY_DEBUG=1 for the traceback and report it.",
        INTERNAL_ERROR_EXIT,
    )
