"""The systemd unit that keeps tritonserver running: render, install, start, remove.

`render_unit` fills the template edge_deploy/serve/templates/edge-deploy-triton.service
(string.Template) with the command line from `server.tritonserver_argv`, so the
unit and `serve --foreground` run the same server. The system variant runs as a
dedicated user in group `video` and is hardened; the --user variant drops what a
user manager cannot apply (see USER_SCOPE_DROPS).

The model-repository key never appears in the unit: ExecStart refers to
${EDGE_DEPLOY_MODEL_KEY}, which systemd reads from an environment file only root
(and, for the key file `install` uses, group edge-deploy) can read.
"""
from __future__ import annotations

import contextlib
import grp
import os
import pwd
import shutil
import stat
import string
import subprocess
import sys
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from ..errors import ServerError
from ..core.bounded_read import read_regular, special_kind
from ..core.fsutil import write_bytes_atomic, write_text_atomic
from .admin import ModelHealth, check_health
from .logfile import DEFAULT_MAX_BYTES, pump_argv
from .addresses import dial_url, is_loopback
from .server_record import ServerRecord, find_record, record_path, save_record, tls_record
from .argv import GRPC_KEY_HEADER, KEY_ENV, RESTRICTED_KEY_NAME, ServerOptions, ServerTLS, tritonserver_argv
from .discovery import TritonInstall
import edge_deploy
from ..core.progress import Reporter
from .checks import check_ports_free, check_repository
from .log_reason import last_error_line, reason_from_log

TLS_FILE_LIMIT = 1 << 20  # a PEM certificate or key: a few KiB
UNIT_NAME = "edge-deploy-triton.service"
SERVICE_USER = "edge-deploy"
SYSTEM_UNIT_DIR = Path("/etc/systemd/system")
SYSTEMD_RUN_DIR = Path("/run/systemd/system")  # exists only when systemd is the running init
JOURNAL_SOCKET = Path("/run/systemd/journal/socket")
SYSUSERS_FILE = Path("/etc/sysusers.d/edge-deploy.conf")
DEFAULT_HEALTH_WAIT = 300  # s; TensorRT plans on an Orin can take minutes to deserialize
SYSTEMCTL_TIMEOUT = 30.0

# Settings a user manager cannot apply (they need privileges, mount namespaces,
# or BPF cgroup programs it does not have); the --user unit leaves them out.
USER_SCOPE_DROPS = frozenset(
    {
        "User", "Group", "SupplementaryGroups", "CapabilityBoundingSet", "AmbientCapabilities",
        "ProtectSystem", "ProtectHome", "BindReadOnlyPaths", "PrivateTmp", "PrivateMounts", "ProtectKernelTunables",
        "ProtectKernelModules", "ProtectKernelLogs", "ProtectControlGroups", "ProtectClock",
        "ProtectHostname", "ProtectProc", "DevicePolicy", "DeviceAllow", "IPAddressDeny", "IPAddressAllow",
        "RemoveIPC", "LogsDirectory", "ReadWritePaths",
    }
)
# Home-like trees that ProtectHome= hides from the system service.
HOME_TREES = (Path("/home"), Path("/root"), Path("/run/user"))
# Jetson (nvgpu/nvhost/nvmap) and discrete/OpenRM (nvidia*) GPU device nodes.
GPU_DEVICE_GLOBS = (
    "nvmap", "nvhost-*", "nvgpu/*/*", "nvidia*", "nvidia-caps/*", "host1x-fence", "nvsciipc", "dri/renderD*",
)


def template_text() -> str:
    """The unit template shipped with the package (identical to systemd/edge-deploy-triton.service)."""
    return (resources.files("edge_deploy.serve") / "templates" / UNIT_NAME).read_text()


def unit_dir(scope: str) -> Path:
    """Where `serve` installs the unit: /etc/systemd/system or ~/.config/systemd/user."""
    if scope == "system":
        return SYSTEM_UNIT_DIR
    config_home = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(config_home) / "systemd" / "user"


def unit_path(scope: str) -> Path:
    """The unit file of `scope` (system or user)."""
    return unit_dir(scope) / UNIT_NAME


def systemd_quote(arg: str) -> str:
    """Quote one ExecStart= word: escape specifiers and variables, except ${EDGE_DEPLOY_MODEL_KEY}."""
    placeholder = "${" + KEY_ENV + "}"
    parts = arg.split(placeholder)
    escaped = [p.replace("\\", "\\\\").replace('"', '\\"').replace("%", "%%").replace("$", "$$") for p in parts]
    word = placeholder.join(escaped)
    return f'"{word}"' if any(c.isspace() for c in word) or word == "" else word


def environment_file_text(env: dict[str, str]) -> str:
    """KEY="value" lines for systemd's EnvironmentFile=."""
    lines = []
    for key, value in sorted(env.items()):
        value = value.replace("\\", "\\\\").replace('"', '\\"')
        lines.append(f'{key}="{value}"')
    return "\n".join(lines) + "\n"


def gpu_device_nodes(root: Path = Path("/")) -> list[Path]:
    """The GPU device nodes present under `root`/dev, as /dev/... paths (DeviceAllow= lines)."""
    dev = root / "dev"
    found: set[Path] = set()
    for pattern in GPU_DEVICE_GLOBS:
        found.update(Path("/dev") / p.relative_to(dev) for p in dev.glob(pattern) if not p.is_dir())
    return sorted(found)


def journald_available() -> bool:
    """True when journald runs (its socket exists), so unit output lands in the journal."""
    return JOURNAL_SOCKET.exists()


LOG_ROOT = Path("/var/log")


def log_directory_lines(scope: str, log_file: Path | None) -> str:
    """What lets the sandboxed system service write its log file (nothing for the journal or a user unit).

    Under /var/log, LogsDirectory= makes systemd create the directory for the service
    user; elsewhere ReadWritePaths= opens the directory in ProtectSystem=strict.
    """
    if log_file is None or scope != "system":
        return ""
    directory = Path(log_file).parent
    if LOG_ROOT in directory.parents:
        return f"LogsDirectory={systemd_quote(str(directory.relative_to(LOG_ROOT)))}"
    return f"ReadWritePaths={systemd_quote(str(directory))}"


@dataclass
class UnitConfig:
    """Everything the unit depends on, besides the template."""

    scope: str  # "system" | "user"
    install: TritonInstall
    options: ServerOptions  # restricted_key is replaced by the ${EDGE_DEPLOY_MODEL_KEY} reference
    environment_file: Path
    health_wait: int = DEFAULT_HEALTH_WAIT
    python: str = sys.executable
    user: str = SERVICE_USER
    log_file: Path | None = None  # None: the journal; else a size-capped file (edge_deploy.serve.logfile)
    log_max_bytes: int = DEFAULT_MAX_BYTES
    restart_sec: int = 2
    start_limit_interval: int = 600
    start_limit_burst: int = 5
    device_nodes: list[Path] = field(default_factory=list)
    allow_from: list[str] = field(default_factory=list)  # CIDRs IPAddressAllow= admits beyond localhost
    tls_sources: ServerTLS | None = None  # the files given to `serve`; options.tls names the service's copies

    def server_options(self) -> ServerOptions:
        """The options with the key replaced by the environment-file reference (what ExecStart= shows)."""
        from dataclasses import replace

        return replace(self.options, restricted_key=(RESTRICTED_KEY_NAME, "${" + KEY_ENV + "}"))


def readable_paths(config: UnitConfig) -> list[Path]:
    """Paths the service must read: interpreter, this package, tritonserver, backends, repository."""
    paths = [
        Path(sys.prefix), Path(sys.base_prefix), Path(edge_deploy.__file__).resolve().parent.parent,
        config.install.binary.resolve().parent.parent, Path(config.options.model_repository).resolve(),
    ]
    if config.install.backend_dir is not None:
        paths.append(config.install.backend_dir)  # (the bundle's links point into its root, above)
    for entry in config.install.env.get("LD_LIBRARY_PATH", "").split(os.pathsep):
        if entry:
            paths.append(Path(entry))
    # Keep the outermost paths only: a bind mount of a directory covers what is inside.
    unique = sorted(set(paths), key=lambda p: len(p.parts))
    return [p for i, p in enumerate(unique) if not any(q in p.parents for q in unique[:i])]


def _under_home(path: Path) -> bool:
    return any(path == tree or tree in path.parents for tree in HOME_TREES)


def render_unit(config: UnitConfig) -> str:
    """The unit file text for `config` (system or user variant)."""
    options = config.server_options()
    argv = tritonserver_argv(config.install, options)
    if config.log_file is not None:
        argv = pump_argv(config.python, Path(config.log_file), config.log_max_bytes, argv)
    health = [
        config.python, "-m", "edge_deploy", "health", "--wait", str(config.health_wait),
        "--url", dial_url(options.url), "--repository", str(options.model_repository),
        *(["--user"] if config.scope == "user" else []),  # the unit's state dir: its key, while no record exists yet
    ]
    if options.tls is not None:
        health += ["--tls-ca", str(options.tls.ca)]
        if options.tls.client_cert is not None and options.tls.client_key is not None:
            health += ["--tls-cert", str(options.tls.client_cert), "--tls-key", str(options.tls.client_key)]
    home_paths = [p for p in readable_paths(config) if _under_home(p)]
    loopback = all(is_loopback(addr) for _, addr, _ in options.ports())
    allowed = " ".join(["localhost", *config.allow_from])
    values = {
        "repository": str(options.model_repository).replace("%", "%%"),
        "user": config.user,
        "group": config.user,
        "environment_file": str(config.environment_file),
        "exec_start": " ".join(systemd_quote(a) for a in argv),
        "exec_start_post": " ".join(systemd_quote(a) for a in health),
        "timeout_start": str(config.health_wait + 30),
        "timeout_stop": str(options.exit_timeout + 15),
        "restart_sec": str(config.restart_sec),
        "start_limit_interval": str(config.start_limit_interval),
        "start_limit_burst": str(config.start_limit_burst),
        "standard_output": "journal",
        "log_directory": log_directory_lines(config.scope, config.log_file),
        # tmpfs over /home etc., with only what the service needs bound back read-only.
        "protect_home": "tmpfs" if home_paths else "yes",
        "bind_read_only_paths": "\n".join(f"BindReadOnlyPaths={systemd_quote(str(p))}" for p in home_paths),
        # Beyond loopback, only the --allow-from networks (default: the listen address's own subnet).
        "ip_address_policy": f"IPAddressDeny=any\nIPAddressAllow={'localhost' if loopback else allowed}",
        "device_allow": "\n".join(f"DeviceAllow={systemd_quote(str(p))} rw" for p in config.device_nodes),
        "wanted_by": "multi-user.target" if config.scope == "system" else "default.target",
    }
    text = string.Template(template_text()).substitute(values)
    if config.scope == "user":
        text = _drop_system_only(text)
    return _squeeze_blank_lines(text)


def _drop_system_only(text: str) -> str:
    kept = []
    for line in text.splitlines():
        key = line.split("=", 1)[0].strip()
        if "=" in line and not line.lstrip().startswith("#") and key in USER_SCOPE_DROPS:
            continue
        if line.startswith("# system only"):
            continue
        kept.append(line)
    return "\n".join(kept) + "\n"


def _squeeze_blank_lines(text: str) -> str:
    out: list[str] = []
    for line in text.splitlines():
        if line.strip() == "" and out and out[-1].strip() == "":
            continue
        out.append(line)
    return "\n".join(out).rstrip("\n") + "\n"


# ---------------------------------------------------------------- systemctl


def systemctl(scope: str, *args: str, timeout: float = SYSTEMCTL_TIMEOUT, check: bool = True) -> subprocess.CompletedProcess[str]:
    """Run systemctl (with --user for the user scope); ServerError with its message on failure."""
    argv = ["systemctl", *(["--user"] if scope == "user" else []), *args]
    try:
        result = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        raise ServerError(f"`{' '.join(argv)}` did not finish within {timeout:.0f} s.") from exc
    if check and result.returncode != 0:
        message = (result.stderr or result.stdout).strip().splitlines()
        raise ServerError(f"`{' '.join(argv)}` failed: {message[-1] if message else f'exit {result.returncode}'}")
    return result


def unit_properties(scope: str, *names: str) -> dict[str, str]:
    """`systemctl show -p ...` as a dict ({} when systemd cannot be asked)."""
    result = systemctl(scope, "show", UNIT_NAME, *(f"--property={n}" for n in names), check=False)
    props: dict[str, str] = {}
    for line in result.stdout.splitlines():
        if "=" in line:
            key, value = line.split("=", 1)
            props[key] = value
    return props


def require_systemd(scope: str, run_dir: Path | None = None) -> None:
    """ServerError (suggesting --foreground) when there is no systemd manager for `scope`."""
    run_dir = SYSTEMD_RUN_DIR if run_dir is None else run_dir
    if shutil.which("systemctl") is None or not run_dir.is_dir():
        raise ServerError(
            f"systemd is not running on this machine (no {run_dir}); "
            "run the server without it: `edge-deploy serve --foreground`."
        )
    if scope == "user":
        runtime = os.environ.get("XDG_RUNTIME_DIR")
        if not runtime or not (Path(runtime) / "systemd" / "private").exists():
            raise ServerError(
                "no systemd user manager for this user (XDG_RUNTIME_DIR/systemd/private is missing); "
                "log in through a session (or `loginctl enable-linger`), or use `edge-deploy serve --foreground`."
            )


def effective_uid() -> int:
    """os.geteuid(); a function so tests (which run as root) can pretend otherwise."""
    return os.geteuid()


def require_root(scope: str, euid: int | None = None) -> None:
    """ServerError when installing a system unit without root."""
    if scope == "system" and (effective_uid() if euid is None else euid) != 0:
        raise ServerError(
            "installing the system service needs root: run `sudo edge-deploy serve ...`, "
            "or serve as your own user with `edge-deploy serve --user`."
        )


def ensure_service_user(user: str = SERVICE_USER) -> None:
    """Create the system user (group `video` for the Jetson GPU) with systemd-sysusers if absent."""
    try:
        pwd.getpwnam(user)
        return
    except KeyError:
        pass
    SYSUSERS_FILE.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(SYSUSERS_FILE, f'u {user} - "edge-deploy Triton server" /nonexistent /usr/sbin/nologin\n'
                                     f"m {user} video\n", 0o644)
    result = subprocess.run(["systemd-sysusers", str(SYSUSERS_FILE)], capture_output=True, text=True, timeout=30)
    if result.returncode != 0:
        raise ServerError(f"cannot create the system user {user}: {result.stderr.strip() or 'systemd-sysusers failed'}")


def check_service_can_read(paths: list[Path]) -> None:
    """ServerError when a path is not readable by other users (the system service user)."""
    for path in paths:
        for part in [*reversed(path.parents), path]:
            try:
                mode = part.stat().st_mode
            except OSError:
                break
            if part.is_dir() and not mode & 0o001:
                raise ServerError(
                    f"the service user {SERVICE_USER} cannot reach {path} ({part} is not searchable by others); "
                    "install Triton, Python and the repository where other users can read them (e.g. under /opt), "
                    "or use `edge-deploy serve --user`."
                )


# ---------------------------------------------------------------- install / start / remove


def prepare_log_directory(scope: str, log_file: Path, user: str = SERVICE_USER) -> None:
    """Create the log file's directory; for the system service outside /var/log, owned by the service user.

    A directory that already exists is not taken over: ServerError unless the service user owns it.
    """
    directory = log_file.parent
    if scope == "system" and LOG_ROOT in directory.parents:
        return  # LogsDirectory=: systemd creates it for the service user
    if scope != "system":
        directory.mkdir(parents=True, exist_ok=True)
        return
    entry = pwd.getpwnam(user)
    if not directory.exists():
        directory.mkdir(parents=True)
        os.chown(directory, entry.pw_uid, entry.pw_gid)
        directory.chmod(0o750)
    elif directory.stat().st_uid != entry.pw_uid:
        raise ServerError(
            f"the service user {user} cannot be trusted to write {directory} (it does not own it); "
            f"use a --log-file under /var/log, a new directory, or `chown {user} {directory}`."
        )


def write_private(path: Path, text: str, *, group: str | None = None) -> None:
    """Write `text` atomically, mode 0600 (0640 with `group` as owner group): secrets."""
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(path, text, 0o640 if group else 0o600, group=group)


def write_public(path: Path, text: str) -> None:
    """Write a non-secret file (the unit) atomically, mode 0644."""
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(path, text, 0o644)


TLS_DIR_NAME = "triton-tls"


def service_tls(tls: ServerTLS, state: Path) -> ServerTLS:
    """Where the service's copies of the TLS files go (<state dir>/triton-tls/, written by `install_and_start`).

    The service user reads copies kept beside the model-repository key, 0640 root:edge-deploy,
    so the files given to `serve` may stay where only root reads them.
    """
    directory = state / TLS_DIR_NAME
    has_client = tls.client_cert is not None and tls.client_key is not None
    return ServerTLS(cert=directory / "server.pem", key=directory / "server.key", ca=directory / "ca.pem",
                     mutual=tls.mutual, client_cert=directory / "client.pem" if has_client else None,
                     client_key=directory / "client.key" if has_client else None)


def _copy_tls(sources: ServerTLS, copies: ServerTLS, group: str | None) -> None:
    for role, src in sources.files().items():
        try:
            data = read_regular(src, f"TLS {role} file", ServerError, "give the PEM file itself",
                                TLS_FILE_LIMIT).decode()
        except OSError as exc:
            raise ServerError(f"cannot read the TLS {role} file {src} ({exc.strerror or exc}).") from exc
        except UnicodeDecodeError:
            raise ServerError(f"the TLS {role} file {src} is not PEM text; give the PEM file itself.") from None
        write_private(copies.files()[role], data, group=group)


@dataclass
class InstalledUnit:
    """What an installed unit serves, read back from its ExecStart= and StandardOutput= lines."""

    path: Path
    url: str
    repository: Path
    log_file: Path | None
    server_cert: Path | None = None  # --grpc-server-cert: the unit serves TLS


def read_installed_unit(scope: str) -> InstalledUnit | None:
    """Parse the installed unit of `scope`, or None when there is none."""
    import shlex

    path = unit_path(scope)
    kind = special_kind(path)
    if kind is not None:  # reading it would block (a FIFO) or never end
        raise ServerError(f"the unit file {path} is {kind}, not a file; remove it and run `edge-deploy serve` again.")
    try:
        text = path.read_text()
    except OSError:
        return None
    address, port, repository, log_file, server_cert = "127.0.0.1", "8001", Path("."), None, None
    for line in text.splitlines():
        if line.startswith("ExecStart="):
            for word in shlex.split(line[len("ExecStart="):].replace("$$", "$").replace("%%", "%")):
                key, _, value = word.partition("=")
                if key == "--grpc-address":
                    address = value
                elif key == "--grpc-port":
                    port = value
                elif key == "--model-repository":
                    repository = Path(value)
                elif key == "--grpc-server-cert":
                    server_cert = Path(value)
                elif key == "--log-file":  # edge_deploy.serve.logfile's (tritonserver's own is never used)
                    log_file = Path(value)
        elif line.startswith("StandardOutput=append:"):  # units written by older versions
            log_file = Path(line.split(":", 1)[1])
    return InstalledUnit(path=path, url=f"{address}:{port}", repository=repository, log_file=log_file,
                         server_cert=server_cert)


def failure_reason(scope: str, log_file: Path | None, log_offset: int = 0, since: float | None = None) -> str:
    """Why the server did not come up: the most telling line of its output."""
    if log_file is not None:
        return last_error_line(log_file, log_offset) if log_file.is_file() else f"no server log at {log_file}"
    if not journald_available():
        return ("its output was not kept because journald is not running here; run `edge-deploy serve` again "
                "with --log-file PATH to see why")
    argv = ["journalctl", "--user-unit" if scope == "user" else "--unit", UNIT_NAME, "-o", "cat", "-n", "300", "--no-pager"]
    if since is not None:
        argv += ["--since", f"@{int(since)}"]
    try:
        text = subprocess.run(argv, capture_output=True, text=True, timeout=15).stdout
    except (OSError, subprocess.TimeoutExpired):
        return "see `edge-deploy logs`"
    return reason_from_log(text)


@dataclass
class ServeResult:
    """What `install_and_start` did."""

    unit_file: Path
    url: str
    models: list[ModelHealth]
    already_running: bool = False


def install_and_start(
    config: UnitConfig,
    *,
    key: str,
    key_file: Path,
    reporter: Reporter | None = None,
) -> ServeResult:
    """Install the unit of `config`, enable and start it; return once the server and models are ready.

    Checks come first (the caller checked root/systemd); an active unit with other
    settings or a taken port stop here with nothing changed. When the new unit
    fails to start, the previous files come back and the reason from the server's
    log is raised.
    """
    import time


    reporter = reporter or Reporter()
    scope, options = config.scope, config.options
    models = check_repository(options.model_repository, reporter.warn)
    other = find_record(options.model_repository)
    if other is not None and other.kind == "foreground":
        raise ServerError(
            f"{options.model_repository} is already served by {other.describe()} at {other.url}; "
            "stop it first (Ctrl-C), then run `edge-deploy serve` again."
        )
    text = render_unit(config)
    path = unit_path(scope)
    state = unit_properties(scope, "ActiveState", "UnitFileState")
    if state.get("ActiveState") in ("active", "activating", "reloading"):
        if path.is_file() and path.read_text() == text:
            health = check_health(options.url, models, tls=options.tls.client() if options.tls else None)
            return ServeResult(path, options.url, health.models, already_running=True)
        raise ServerError(
            f"{UNIT_NAME} is already running with other settings; nothing was changed. "
            f"Stop it first (`edge-deploy stop{' --user' if scope == 'user' else ''}`) to serve with new settings."
        )
    check_ports_free(options)
    if scope == "system":
        ensure_service_user(config.user)
        check_service_can_read(readable_paths(config))
    group = config.user if scope == "system" else None

    env = {**config.install.env, KEY_ENV: key}
    tls_files = list(options.tls.files().values()) if options.tls is not None else []
    saved = {p: _kept(p) for p in (path, config.environment_file, key_file, *tls_files)}
    was_enabled = state.get("UnitFileState") == "enabled"
    log_offset = config.log_file.stat().st_size if config.log_file and config.log_file.is_file() else 0
    started_at = time.time()
    try:
        write_private(key_file, key + "\n", group=group)
        if config.tls_sources is not None and options.tls is not None and config.tls_sources != options.tls:
            _copy_tls(config.tls_sources, options.tls, group)
        write_private(config.environment_file, environment_file_text(env))
        if config.log_file is not None:
            prepare_log_directory(scope, Path(config.log_file), config.user)
        write_public(path, text)
        systemctl(scope, "daemon-reload")
        systemctl(scope, "reset-failed", UNIT_NAME, check=False)
        systemctl(scope, "enable", UNIT_NAME)
        with reporter.stage(f"starting {UNIT_NAME} (waiting for every model to be ready)"):
            result = systemctl(scope, "start", UNIT_NAME, timeout=config.health_wait + 60, check=False)
            if result.returncode != 0:
                reason = failure_reason(scope, config.log_file, log_offset, started_at)
                raise ServerError(f"{UNIT_NAME} did not start: {reason}")
    except BaseException:
        _restore(scope, saved, was_enabled)
        raise
    health = check_health(options.url, models, tls=options.tls.client() if options.tls else None)
    _record_unit(options, key_file, scope)
    return ServeResult(path, options.url, health.models)


def _record_unit(options: ServerOptions, key_file: Path, scope: str) -> None:
    """The record that lets `install`, `status` and `health` find the unit's server, its key and TLS identity."""
    save_record(ServerRecord(
        url=options.url,
        repository=Path(options.model_repository).resolve(),
        key_header=GRPC_KEY_HEADER,
        key_file=key_file,
        scope=scope,
        unit=UNIT_NAME,
        tls=tls_record(options.tls),
    ))


@dataclass(frozen=True)
class KeptFile:
    """A file `serve` replaces, as it was (its bytes, mode and group), for `_restore` to put back."""

    data: bytes
    mode: int
    gid: int


def _kept(path: Path) -> KeptFile | None:
    """`path` as it is now; None when there is no regular file there."""
    if not path.is_file():
        return None
    st = path.stat()
    return KeptFile(path.read_bytes(), stat.S_IMODE(st.st_mode), st.st_gid)


def _put_back(path: Path, kept: KeptFile) -> None:
    """Write `kept` back at `path` the one way the package writes a file (fsutil: atomically, never through a link
    or into what replaced it), with its mode and group."""
    group = None
    if kept.gid != os.getegid():
        with contextlib.suppress(KeyError):  # a group gone since: the file keeps ours
            group = grp.getgrgid(kept.gid).gr_name
    write_bytes_atomic(path, kept.data, kept.mode, group=group)


def _restore(scope: str, saved: dict[Path, KeptFile | None], was_enabled: bool) -> None:
    """Put back the files a failed `serve` replaced, and leave the unit stopped."""
    systemctl(scope, "stop", UNIT_NAME, check=False, timeout=120)
    for file, kept in saved.items():
        if kept is None:
            file.unlink(missing_ok=True)
        else:
            _put_back(file, kept)
    systemctl(scope, "daemon-reload", check=False)
    if not was_enabled:
        systemctl(scope, "disable", UNIT_NAME, check=False)
    systemctl(scope, "reset-failed", UNIT_NAME, check=False)


def stop_unit(scope: str) -> bool:
    """Stop the unit (it stays enabled); False when it is not installed."""
    if read_installed_unit(scope) is None:
        return False
    systemctl(scope, "stop", UNIT_NAME, timeout=120)
    return True


def uninstall_unit(scope: str, environment_file: Path, key_file: Path) -> list[Path]:
    """Stop, disable and remove the unit, its environment and key files and the server record."""

    installed = read_installed_unit(scope)
    removed: list[Path] = []
    if installed is not None:
        systemctl(scope, "stop", UNIT_NAME, check=False, timeout=120)
        systemctl(scope, "disable", UNIT_NAME, check=False)
        installed.path.unlink(missing_ok=True)
        removed.append(installed.path)
        systemctl(scope, "daemon-reload", check=False)
        systemctl(scope, "reset-failed", UNIT_NAME, check=False)
        unit_record = record_path(scope, installed.repository, "unit")  # never a foreground server's record
        if unit_record.is_file():
            unit_record.unlink()
            removed.append(unit_record)
    tls_copies = sorted((key_file.parent / TLS_DIR_NAME).glob("*")) if (key_file.parent / TLS_DIR_NAME).is_dir() else []
    for file in (environment_file, key_file, *tls_copies):
        if file.exists():
            file.unlink()
            removed.append(file)
    return removed
