"""Is it serving? The installed unit's state (`edge-deploy status`) and the health judgement (`edge-deploy health`).

Health judges the models: the server live, and every model asked for (default: every model of
the repository) ready. The key and TLS identity come from the server record of the repository.
"""
from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from ..tls.certs import ADMIN_CLIENT, EXPIRY_WARN_DAYS, CertificateAuthority, cert_not_after, default_dir
from ..errors import CertificateError, ClientError, NotServingError, ServerError
from ..core.state import state_dir
from ..tls.config import TLSConfig
from . import systemd as su
from .admin import UNKNOWN_MODEL, Health, check_health, repository_headers, wait_healthy
from ..core.triton_layout import repository_models
from .server_record import KEY_LIMIT, find_record, foreground_records, read_server_file
from .service import foreground_scope, key_paths, scope_of
from .addresses import is_loopback
from .argv import GRPC_KEY_HEADER
from .locate import DEFAULT_URL, FoundServer, locate_server

__all__ = ["DEFAULT_URL", "FoundServer", "server_health", "serving_status"]


def record_tls(repository: Path | None) -> TLSConfig | None:
    """The TLSConfig the server record of `repository` names (None: plaintext, or no record)."""
    record = find_record(repository) if repository is not None else None
    return record.client_tls() if record is not None else None


def certificate_expiry(cert: Path) -> str:
    """"server certificate PATH expires 2028-11-22 (730 days)", "expires soon" inside 30 days, "EXPIRED" after."""
    try:
        expires = cert_not_after(cert)
    except CertificateError as exc:
        return str(exc)
    left = (expires - dt.datetime.now(dt.timezone.utc)).days
    state = "EXPIRED" if left < 0 else ("expires soon" if left < EXPIRY_WARN_DAYS else "expires")
    return f"server certificate {cert} {state} {expires:%Y-%m-%d} ({left} days)"


@dataclass
class UnitStatus:
    """The installed unit: its systemd properties and what its server says."""

    scope: str
    unit: su.InstalledUnit
    properties: dict[str, str]
    health: Health

    @property
    def serving(self) -> bool:
        """Active, with the server and every model of the repository ready."""
        return self.properties.get("ActiveState") == "active" and self.health.all_ready

    @property
    def server_state(self) -> str:
        """"ready", "live, not ready" or "not reachable (why)"."""
        health = self.health
        return "ready" if health.all_ready else ("live, not ready" if health.live else f"not reachable ({health.error})")

    def certificate(self) -> str | None:
        """The TLS server certificate's expiry (`certificate_expiry`); None for a plaintext unit."""
        return certificate_expiry(self.unit.server_cert) if self.unit.server_cert is not None else None


@dataclass
class ForegroundStatus:
    """A `serve --foreground` server that runs now (from its record) and what it says."""

    record: Any  # edge_deploy.serve.server_record.ServerRecord
    health: Health

    @property
    def serving(self) -> bool:
        return self.health.all_ready

    @property
    def server_state(self) -> str:
        health = self.health
        return "ready" if health.all_ready else ("live, not ready" if health.live else f"not reachable ({health.error})")

    def certificate(self) -> str | None:
        """The TLS server certificate's expiry (`certificate_expiry`); None for a plaintext server (or a record
        written before records named the certificate)."""
        cert = (self.record.tls or {}).get("server_cert")
        return certificate_expiry(Path(cert)) if cert else None


@dataclass
class ServingStatus:
    """What `edge-deploy status` reports: the unit (None: not installed, or no systemd: `no_systemd` says
    why) and every `serve --foreground` server running now."""

    unit: UnitStatus | None
    foreground: list[ForegroundStatus]
    no_systemd: str | None = None

    @property
    def serving(self) -> bool:
        """The unit, or a foreground server, serves with every model ready."""
        return bool(self.unit is not None and self.unit.serving) or any(f.serving for f in self.foreground)


def foreground_status(user: bool = False) -> list[ForegroundStatus]:
    """The `serve --foreground` servers running now (in this user's state dirs) and their health."""
    out = []
    for record in foreground_records((foreground_scope(user), scope_of(user))):
        health = check_health(record.url, repository_models(record.repository),
                              headers=repository_headers(record.repository), tls=record.client_tls())
        out.append(ForegroundStatus(record, health))
    return out


def serving_status(user: bool = False) -> ServingStatus:
    """The unit's state and every foreground server's; ServerError (suggesting --foreground) only when there
    is no systemd and no foreground server either."""
    foreground = foreground_status(user)
    try:
        unit = unit_status(user)
    except ServerError as exc:
        if not foreground:
            raise NotServingError(str(exc)) from exc  # nothing serves: exit 3, as for a unit that is not installed
        return ServingStatus(None, foreground, no_systemd=str(exc))
    return ServingStatus(unit, foreground)


def unit_status(user: bool = False) -> UnitStatus | None:
    """The installed unit's state and its server's health; None when no unit is installed (systemd needed)."""
    scope = scope_of(user)
    su.require_systemd(scope)
    installed = su.read_installed_unit(scope)
    if installed is None:
        return None
    props = su.unit_properties(scope, "ActiveState", "SubState", "UnitFileState", "MainPID", "NRestarts")
    health = check_health(installed.url, repository_models(installed.repository),
                          headers=repository_headers(installed.repository), tls=record_tls(installed.repository))
    return UnitStatus(scope=scope, unit=installed, properties=props, health=health)


def certs_dir_tls(scope: str) -> TLSConfig | None:
    """edge-deploy's own client identity from `edge-deploy certs`' directory (what `serve` beyond loopback
    uses unless told otherwise), when it is there: the scope's, else the one `certs` defaults to."""
    for directory in dict.fromkeys([state_dir(scope) / "tls", default_dir()]):
        authority = CertificateAuthority(directory)
        cert = authority.cert_path(ADMIN_CLIENT)
        if authority.ca_cert.is_file() and cert.is_file():
            try:
                return TLSConfig(ca=authority.ca_cert, cert=cert, key=authority.key_path(ADMIN_CLIENT))
            except ClientError:  # not readable by this user
                continue
    return None


@dataclass
class HealthTarget:
    """How `health` dials: the address and, in order, the TLS settings to try (None: plaintext)."""

    url: str
    tls_choices: list[Any]
    headers: dict[str, str] | None

    def probe(self, models: list[str]) -> Health:
        """The first answer from a live server over the choices, else the first choice's answer."""
        first = None
        for tls in self.tls_choices:
            health = check_health(self.url, models, headers=self.headers, tls=tls)
            if health.live:
                return health
            first = first or health
        assert first is not None
        return first


def unit_key_headers(scope: str) -> dict[str, str] | None:
    """The key headers of the scope's systemd unit, read from its key file; None when it cannot be read."""
    data = read_server_file(key_paths(scope)[1], "server key", KEY_LIMIT)
    key = data.decode(errors="replace").strip() if data is not None else None
    return {GRPC_KEY_HEADER: key} if key else None


def health_target(
    *, scope: str, found: FoundServer, repository: Path | None, explicit_tls: Any = None,
) -> HealthTarget:
    """Where `health` dials now, and over what.

    The address: `found`'s (locate.locate_server: --url, else the server record of the repository, ...). TLS:
    `explicit_tls`, else the record's (the repository's, else the one found at the address; plaintext when its
    server is plaintext); without a record yet (a server still starting writes it once ready), beyond loopback the
    identity of `edge-deploy certs`' directory first (serve speaks only mutual TLS there unless --insecure), then
    plaintext.
    """
    record = (find_record(repository) if repository is not None else None) or found.record
    target = found.url
    if explicit_tls is not None:
        choices = [explicit_tls]
    elif record is not None:
        choices = [record.client_tls()]
    else:
        host = target.rpartition(":")[0].strip("[]") or "127.0.0.1"
        guess = None if is_loopback(host) or host in ("0.0.0.0", "::") else certs_dir_tls(scope)
        choices = [guess, None] if guess is not None else [None]
    return HealthTarget(target, choices, repository_headers(repository))


WAIT_REPORT_EVERY_S = 5.0  # `health --wait`: a line this often while it waits


def server_health(
    *,
    user: bool = False,
    url: str | None = None,
    repository: Path | None = None,
    models: list[str] | tuple[str, ...] = (),
    wait: float = 0.0,
    tls_ca: Path | None = None,
    tls_cert: Path | None = None,
    tls_key: Path | None = None,
    main_pid: str | None = None,
    on_found: Callable[[FoundServer], object] | None = None,
    on_wait: Callable[[str], object] | None = None,
) -> tuple[str, Health]:
    """(the address asked, its health) once the server and every model are ready; else ServerError saying what is not.

    Without `url`, the server is found as every command finds it (locate.locate_server: the server record of
    `repository`, else of the default repository, the installed unit, the one foreground server running here, else
    127.0.0.1:8001) and `on_found` is told which; the repository defaults to the one that server serves; models to
    every model of the repository. wait > 0 waits up to that many seconds, 0 asks once; while waiting, the server is
    looked up again on every try, so a server that writes its record once ready is dialed as it serves, and
    `on_wait` gets a line every WAIT_REPORT_EVERY_S seconds (what the server says, how long waited). tls_ca,
    tls_cert, tls_key: dial over TLS with these files. main_pid: the server's PID while systemd starts it
    (ExecStartPost='s $MAINPID); waiting stops when it is gone.
    """
    if not wait >= 0:
        raise ServerError(f"--wait must be 0 (ask once) or more seconds (got {wait:g}).")
    for name in models:
        if not name.strip():
            raise ServerError(f"--model {name!r} names no model; pass a model's name (see `edge-deploy models`).")
    if repository is not None and not Path(repository).is_dir():
        why = "is not a directory" if Path(repository).exists() else "does not exist"
        raise ServerError(f"model repository {repository} {why}; pass the --repository the server serves.")
    scope = scope_of(user)
    found = locate_server(url, repository, user=user)
    if url is not None and found.repository is None and repository is None and not models:
        installed = su.read_installed_unit(scope)  # --url alone: the installed unit's repository names the models
        found = FoundServer(found.url, found.record, installed.repository if installed else None, found.how, True)
    if on_found is not None and not found.given:
        on_found(found)

    def server_gone() -> str | None:
        if main_pid and not Path(f"/proc/{main_pid}").exists():
            return f"tritonserver (PID {main_pid}) exited before it was ready"
        return None

    explicit = None
    if tls_ca or tls_cert or tls_key:
        explicit = TLSConfig(ca=tls_ca, cert=tls_cert, key=tls_key)

    def probe() -> Health:
        here = found if found.given or found.record is not None else locate_server(None, repository, user=user)
        repo = repository or here.repository
        names = list(models) if models else (repository_models(repo) if repo else [])
        target = health_target(scope=scope, found=here, repository=repo, explicit_tls=explicit)
        if main_pid and target.headers is None:
            # The unit starting (ExecStartPost=): its record is written once it is ready, but its key is already in
            # the state dir; with it the repository index tells a model that failed to load from one still loading.
            target.headers = unit_key_headers(scope)
        return target.probe(names)

    if wait > 0:
        # Starting the unit (ExecStartPost=, $MAINPID): a model that failed to load must not fail the server that
        # serves the others; `status` and `health` name it.
        def waiting(health: Health, waited: float) -> None:
            if on_wait is not None:
                state = "answers, not ready" if health.live else f"not reachable ({health.error or 'no answer'})"
                on_wait(f"waiting for the server at {health.url}: {state}; {waited:.0f} s of {wait:g} s")

        try:
            result = wait_healthy("", (), wait, alive=server_gone, probe=probe, settle=bool(main_pid),
                                  progress=waiting, every=WAIT_REPORT_EVERY_S)
        except ServerError as exc:
            raise NotServingError(str(exc)) from exc
        return result.url, result
    result = probe()
    if not result.all_ready:
        raise NotServingError(not_ready_message(result))
    return result.url, result


def not_ready_message(result: Health) -> str:
    """One line for a health answer that is not ready: what is not, and what to do about it."""
    waiting = [m for m in result.models if not m.ready]
    if result.live and not result.models:
        return (f"the server at {result.url} answers but is not ready: a model is still loading or failed to load; "
                "pass --repository DIR or --model M to see which.")
    what = result.not_ready()
    verb = "are" if what.startswith("models") else "is"
    reason = f" ({result.error})" if result.error else ""
    if any(m.failed or "failed to load" in m.reason for m in waiting):
        advice = "install a version that loads, or roll back with `edge-deploy rollback NAME`"
    elif result.live and waiting and all(m.reason == UNKNOWN_MODEL for m in waiting):
        advice = "check the name (`edge-deploy models --repository DIR` lists them)"
    elif result.live:
        advice = "wait with --wait SECONDS, or see why with `edge-deploy logs`"
    else:
        advice = "start it with `edge-deploy serve` or wait with --wait SECONDS"
    return f"{what} at {result.url} {verb} not ready{reason}; {advice}."
