"""Is it serving? The installed unit's state (`edge-deploy status`) and the health judgement (`edge-deploy health`).

Health judges the models: the server live, and every model asked for (default: every model of
the repository) ready. The key and TLS identity come from the server record of the repository.
"""
from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import ServerError
from . import systemd as su
from .admin import Health, check_health, repository_headers, wait_healthy
from .checks import repository_models
from .record import find_record
from .service import scope_of

DEFAULT_URL = "127.0.0.1:8001"


def record_tls(repository: Path | None) -> Any:
    """The TLSConfig the server record of `repository` names (None: plaintext, or no record)."""
    record = find_record(repository) if repository is not None else None
    return record.client_tls() if record is not None else None


def certificate_expiry(cert: Path) -> str:
    """"server certificate PATH expires 2028-11-22 (730 days)", "expires soon" inside 30 days, "EXPIRED" after."""
    from ..certs import EXPIRY_WARN_DAYS, cert_not_after
    from ..errors import CertificateError

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
) -> tuple[str, Health]:
    """(the address asked, its health) once the server and every model are ready; else ServerError saying what is not.

    url/repository default to the installed unit's (else 127.0.0.1:8001, no repository); models to
    every model of the repository. wait > 0 waits up to that many seconds, 0 asks once. tls_ca,
    tls_cert, tls_key: dial over TLS with these files (default: as the repository's server record
    says). main_pid: the server's PID while systemd starts it (ExecStartPost='s $MAINPID); waiting
    stops when it is gone.
    """
    if not wait >= 0:
        raise ServerError(f"--wait must be 0 (ask once) or more seconds (got {wait:g}).")
    installed = su.read_installed_unit(scope_of(user)) if url is None or (repository is None and not models) else None
    target = url or (installed.url if installed else DEFAULT_URL)
    repo = repository or (installed.repository if installed else None)
    names = list(models) if models else (repository_models(repo) if repo else [])

    def server_gone() -> str | None:
        if main_pid and not Path(f"/proc/{main_pid}").exists():
            return f"tritonserver (PID {main_pid}) exited before it was ready"
        return None

    headers = repository_headers(repo)
    if tls_ca or tls_cert or tls_key:
        from ..client.tls import TLSConfig

        tls = TLSConfig(ca=tls_ca, cert=tls_cert, key=tls_key)
    else:
        tls = record_tls(repo)
    if wait > 0:
        return target, wait_healthy(target, names, wait, alive=server_gone, headers=headers, tls=tls)
    result = check_health(target, names, headers=headers, tls=tls)
    if not result.all_ready:
        what = result.not_ready()
        verb = "are" if what.startswith("models") else "is"
        reason = f" ({result.error})" if result.error else ""
        failed = any("failed to load" in m.reason for m in result.models if not m.ready)
        advice = ("install a version that loads, or roll back with `edge-deploy rollback NAME`" if failed else
                  "start it with `edge-deploy serve` or wait with --wait SECONDS")
        raise ServerError(f"{what} at {target} {verb} not ready{reason}; {advice}.")
    return target, result
