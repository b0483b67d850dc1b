"""`python -m edge_deploy ARGS` for the tests, in a process that starts warm.

`run_cli(args, env=..., cwd=..., timeout=...)` gives what `subprocess.run([sys.executable, "-m",
"edge_deploy", *args], capture_output=True, text=True, ...)` gives: a CompletedProcess of a separate process, with
its exit status, stdout and stderr (text, universal newlines), run in `env` and `cwd`, killed at `timeout`. The
difference is where the process comes from: each worker of the suite keeps one server interpreter that has already
imported edge_deploy's command modules and the packages they load (torch, ONNX, ONNX Runtime, OpenCV, the
tritonclient); a call forks it, and the child sets the environment, directory and standard streams and runs
edge_deploy the way `python -m` does (runpy), then exits the way the interpreter does (threads joined, atexit
handlers run, streams flushed). A command then costs its own work, not 0.5-3 s of imports: the suite makes about
300 such calls.

What a forked child does not repeat is the interpreter's start and those imports. Tests that are about them start
real new interpreters: tests/test_package.py, tests/cli/test_command_modules.py (what each command imports), the
README walk, the fleet role's commands on the vehicles, the demos. A call whose environment changes how Python
starts or imports (PYTHON*, LD_*, GLIBC_TUNABLES, the locale, a $PYTHONPATH entry the server does not import from)
runs a new interpreter as before, and so does every call while EDGE_DEPLOY_TEST_NEW_INTERPRETER=1 is set in the
test process (scripts/test_py310.sh sets it: CI runs the suite both ways).
"""
from __future__ import annotations

import atexit
import json
import os
import selectors
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Mapping, Sequence

NEW_INTERPRETER_ENV = "EDGE_DEPLOY_TEST_NEW_INTERPRETER"
# What the server imports once: each command module and the heavy packages the commands import when they run.
PRELOAD = ("typer.main", "typer._adapters", "typer.rich_utils", "numpy", "cv2", "onnx", "onnxruntime", "torch",
           "tritonclient.grpc", "tritonclient.http", "edge_deploy.engine.convert", "edge_deploy.export.pipeline",
           "edge_deploy.lanedet.laneatt.model", "edge_deploy.cli",
           *(f"edge_deploy.cli.{m}" for m in ("infer", "bench", "convert", "doctor", "evaluate", "families", "fleet",
                                              "repository", "serve", "certs")))
_STARTUP_PREFIXES = ("PYTHON", "LD_", "LC_")
_STARTUP_NAMES = {"GLIBC_TUNABLES", "LANG", "LANGUAGE", NEW_INTERPRETER_ENV}


def run_cli(args: Sequence[str | os.PathLike[str]], *, env: Mapping[str, str] | None = None,
            cwd: str | os.PathLike[str] | None = None,
            timeout: float | None = None) -> subprocess.CompletedProcess[str]:
    """`python -m edge_deploy *args`, output captured as text (see the module's docstring)."""
    argv = [str(a) for a in args]
    environ = dict(os.environ if env is None else env)
    server = None if NEW_INTERPRETER_ENV in os.environ else warm_server()
    if server is None or not server.starts_like(environ):
        return subprocess.run([sys.executable, "-m", "edge_deploy", *argv], env=environ, cwd=cwd, timeout=timeout,
                              stdin=subprocess.DEVNULL, capture_output=True, text=True)
    with tempfile.TemporaryDirectory(prefix="cli-") as scratch:
        streams = {name: os.path.join(scratch, name) for name in ("stdout", "stderr")}
        request = {"argv": argv, "env": environ, "cwd": os.path.abspath(cwd or os.getcwd()), **streams}
        code = server.run(request, timeout)
        out, err = (_text(Path(streams[name]).read_bytes()) for name in ("stdout", "stderr"))
    full = [sys.executable, "-m", "edge_deploy", *argv]
    if code is None:
        raise subprocess.TimeoutExpired(full, timeout or 0, output=out, stderr=err)
    return subprocess.CompletedProcess(full, code, out, err)


def _text(data: bytes) -> str:
    # subprocess.run(text=True): the locale's encoding, universal newlines
    return data.decode().replace("\r\n", "\n").replace("\r", "\n")


def _startup(env: Mapping[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if (k.startswith(_STARTUP_PREFIXES) or k in _STARTUP_NAMES)
            and k != "PYTHONPATH"}


class WarmServer:
    """The test process's side: the warm interpreter, started on the first call, stopped when the process exits."""

    _one: WarmServer | None = None
    _lock = threading.Lock()

    def __init__(self) -> None:
        self.env = dict(os.environ)
        self.dir = tempfile.mkdtemp(prefix="cli-server-")
        self.address = os.path.join(self.dir, "socket")
        # its stdin is the lifeline: the server exits when this process is gone
        self.proc = subprocess.Popen([sys.executable, __file__, self.address], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, env=self.env, cwd=self.dir)
        ready = self.proc.stdout.readline() if self.proc.stdout else b""
        if not ready.startswith(b"{"):
            raise RuntimeError(f"the warm edge-deploy interpreter did not start (exit {self.proc.wait()})")
        self.import_path = set(json.loads(ready)["import_path"])
        self.forked = 0  # calls run in a forked child
        atexit.register(self.stop)

    def starts_like(self, env: Mapping[str, str]) -> bool:
        """Whether a new interpreter in `env` would start as this one did: the same settings of the interpreter,
        loader and locale, and nothing on $PYTHONPATH that this one cannot import from already."""
        wanted = {os.path.abspath(p) for p in env.get("PYTHONPATH", "").split(os.pathsep) if p}
        return _startup(env) == _startup(self.env) and wanted <= self.import_path

    def stop(self) -> None:
        if self.proc.stdin:
            self.proc.stdin.close()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        shutil.rmtree(self.dir, ignore_errors=True)

    def run(self, request: dict, timeout: float | None) -> int | None:
        """The child's exit status (negative: killed by that signal), or None when `timeout` passed first."""
        self.forked += 1
        with socket.socket(socket.AF_UNIX) as conn:
            conn.connect(self.address)
            conn.sendall(json.dumps(request).encode() + b"\n")
            replies = conn.makefile("rb")
            pid = int(replies.readline())
            conn.settimeout(timeout)
            try:
                return int(replies.readline())
            except (TimeoutError, socket.timeout):
                os.kill(pid, signal.SIGKILL)
                conn.settimeout(None)
                conn.makefile("rb").readline()  # reaped: the server sends its status (a timed-out file reads no more)
                return None


def warm_server() -> WarmServer:
    with WarmServer._lock:
        if WarmServer._one is None:
            WarmServer._one = WarmServer()
        return WarmServer._one


# --------------------------------------------------------------------------- the warm interpreter's side


def _serve(address: str) -> None:
    import importlib

    sys.path[0] = os.getcwd()  # as `python -m` leaves it; set again to the command's directory in each child
    import edge_deploy

    for name in PRELOAD:
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - absent or broken here (tritonclient without its http extra): a child
            pass  # that needs it imports it as a new interpreter would, and meets the same error
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(address)
    listener.listen(64)
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    signal.set_wakeup_fd(wake_w)
    waiting: dict[int, socket.socket] = {}
    events = selectors.DefaultSelector()
    events.register(listener, selectors.EVENT_READ)
    events.register(wake_r, selectors.EVENT_READ)
    events.register(sys.stdin, selectors.EVENT_READ)
    # where it imports from: sys.path, and the directory holding edge_deploy (an editable install's finder is not
    # on sys.path); the test process compares a call's $PYTHONPATH with these
    import_path = {os.path.abspath(p) for p in sys.path if p} | {os.path.dirname(os.path.dirname(edge_deploy.__file__))}
    sys.stdout.write(json.dumps({"import_path": sorted(import_path)}) + "\n")
    sys.stdout.flush()
    while True:
        for key, _ in events.select():
            if key.fileobj is sys.stdin:
                return  # the test process is gone (its end of the pipe closed): so is every reason to stay
            if key.fileobj is listener:
                conn, _ = listener.accept()
                request = json.loads(conn.makefile("rb").readline())
                sys.stdout.flush()
                sys.stderr.flush()
                pid = os.fork()
                if pid == 0:
                    _child(request, [listener.fileno(), wake_r, wake_w, conn.fileno(),
                                     *(waiter.fileno() for waiter in waiting.values())])
                conn.sendall(f"{pid}\n".encode())
                waiting[pid] = conn
            else:
                os.read(wake_r, 512)
        while waiting:
            pid, status = os.waitpid(-1, os.WNOHANG)
            if pid == 0:
                break
            conn = waiting.pop(pid, None)
            if conn is not None:
                with conn:
                    conn.sendall(f"{os.waitstatus_to_exitcode(status)}\n".encode())


def _child(request: dict, server_fds: list[int]) -> None:
    import importlib
    import runpy

    code = 1
    try:
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        for fd in server_fds:
            os.close(fd)
        for fd, path, flags in ((0, os.devnull, os.O_RDONLY), (1, request["stdout"], os.O_WRONLY | os.O_CREAT),
                                (2, request["stderr"], os.O_WRONLY | os.O_CREAT)):
            opened = os.open(path, flags, 0o600)
            os.dup2(opened, fd)
            os.close(opened)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        sys.path[0] = request["cwd"]
        importlib.invalidate_caches()
        sys.argv = ["-m", *request["argv"]]
        try:
            runpy.run_module("edge_deploy", run_name="__main__", alter_sys=True)
            code = 0
        except SystemExit as exc:
            code = _exit_code(exc.code)
        except BaseException:  # noqa: BLE001 - what the interpreter does with an exception nobody caught
            sys.excepthook(*sys.exc_info())
            code = 1
        threading._shutdown()  # type: ignore[attr-defined]  # non-daemon threads, as at the interpreter's exit
        atexit._run_exitfuncs()
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                code = code or 120
    finally:
        os._exit(code)


def _exit_code(value: object) -> int:
    if value is None:
        return 0
    if isinstance(value, int):
        return value
    print(value, file=sys.stderr)
    return 1


if __name__ == "__main__":
    _serve(sys.argv[1])
