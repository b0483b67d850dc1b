"""Every tritonclient admin call edge-deploy makes: liveness, readiness, served versions, loading models.

A running server is reached by URL; loading needs the key of the restricted
model-repository protocol (see `edge_deploy.serve.server_record`). tritonclient is
imported when a call is made.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from ..errors import RepositoryError, ServerError, one_line
from ..tls.config import SOCKET_CLOSED, TLSConfig, explain_refusal
from .addresses import dial_url
from .server_record import ServerRecord, find_record, read_key

LOAD_TIMEOUT_S = 300.0


@dataclass
class ModelHealth:
    """Readiness of one model, the versions the server serves, and why it (or a version of it) is not ready."""

    name: str
    ready: bool
    versions: list[str]
    reason: str = ""
    failed: bool = False  # no version serves and the server's load of it failed (the repository index says so)


@dataclass
class Health:
    """What the server says about itself and its models."""

    url: str
    live: bool
    ready: bool
    models: list[ModelHealth] = field(default_factory=list)
    error: str = ""

    @property
    def all_ready(self) -> bool:
        """Live and every asked-for model ready; with no model asked for, the server's own readiness.

        The server's readiness alone is not the judge when models are named: with strict
        readiness Triton reports "not ready" for good once any load has failed, even while the
        models it serves are ready (an install whose new version failed to load).
        """
        if not self.live:
            return False
        return all(m.ready for m in self.models) if self.models else self.ready

    @property
    def settled(self) -> bool:
        """Live, some asked-for model ready and every other one failed to load: nothing left to wait for (the server
        serves what loads)."""
        return self.live and any(m.ready for m in self.models) and all(m.ready or m.failed for m in self.models)

    def not_ready(self) -> str:
        """What is not ready, for a message: "model a (why)", "models a (why), b" or "the server"."""
        waiting = [m for m in self.models if not m.ready]
        if not self.live or not waiting:
            return "the server"
        described = ", ".join(f"{m.name} ({m.reason})" if m.reason else m.name for m in waiting)
        return f"model{'s' if len(waiting) > 1 else ''} {described}"


def check_health(
    url: str, models: list[str] | tuple[str, ...] = (), timeout: float = 2.0, *, headers: dict[str, str] | None = None,
    tls: TLSConfig | None = None,
) -> Health:
    """Ask the server at `url` whether it and each model in `models` are ready (never raises).

    With `headers` (the model-repository key), a model that is not ready, or whose newest
    version failed to load, gets the server's reason from its repository index. With `tls`
    (a TLSConfig), the server is dialed over TLS with that identity.
    """
    try:
        client = _client(url, tls)
    except Exception as exc:  # noqa: BLE001 - unreadable TLS files, a bad URL
        return Health(url, False, False, error=_short(exc))
    try:
        try:
            live = client.is_server_live(client_timeout=timeout)
            ready = client.is_server_ready(client_timeout=timeout)
        except Exception as exc:  # noqa: BLE001 - any failure means "not reachable"
            return Health(url, False, False, error=_short(exc))
        result = Health(url, live, ready)
        for name in models:
            try:
                model_ready = client.is_model_ready(name, client_timeout=timeout)
                versions = list(client.get_model_metadata(name, client_timeout=timeout).versions) if model_ready else []
                result.models.append(ModelHealth(name, model_ready, versions,
                                                 "" if model_ready else _unknown(client, name, timeout)))
            except Exception as exc:  # noqa: BLE001
                result.models.append(ModelHealth(name, False, [], _short(exc)))
        _add_reasons(client, result, headers, timeout)
        return result
    finally:
        client.close()


UNKNOWN_MODEL = "the server does not know this model"


def _unknown(client, name: str, timeout: float) -> str:  # noqa: ANN001
    """UNKNOWN_MODEL when the server has no model `name` at all (answered without the key), else ""."""
    try:
        client.get_model_config(name, client_timeout=timeout)
    except Exception as exc:  # noqa: BLE001 - InferenceServerException
        return UNKNOWN_MODEL if "unknown model" in str(exc).lower() else ""
    return ""


def _add_reasons(client, result: Health, headers: dict[str, str] | None, timeout: float) -> None:  # noqa: ANN001
    """Fill in why models failed, from the repository index (key-restricted), when it can be read."""
    if headers is None or not result.models:
        return
    try:
        index = client.get_model_repository_index(headers=headers, client_timeout=timeout)
    except Exception:  # noqa: BLE001 - no key, wrong key: keep the plain answer
        return
    newest: dict[str, tuple[int, str, str]] = {}
    for entry in index.models:
        version = int(entry.version) if entry.version.isdigit() else 0
        if entry.name not in newest or version > newest[entry.name][0]:
            newest[entry.name] = (version, entry.state, entry.reason)
    for model in result.models:
        version, state, reason = newest.get(model.name, (0, "", ""))
        if state == "" and not model.ready and not model.reason:
            model.reason = UNKNOWN_MODEL
        if state in ("", "READY"):
            continue
        if state == "UNAVAILABLE" and reason.strip() == "unloaded":
            continue  # unloaded on request (a rollback, a version policy that moved on): nothing failed
        why = " ".join(reason.split("\n", 1)[0].split()).removeprefix("Internal: ")[:200] or state.lower()
        model.failed = not model.ready and state == "UNAVAILABLE"
        model.reason = f"version {version} {'failed to load' if state == 'UNAVAILABLE' else state.lower()}: {why}"


def wait_healthy(
    url: str,
    models: list[str] | tuple[str, ...] = (),
    timeout: float = 60.0,
    *,
    alive: "Callable[[], str | None] | None" = None,
    headers: dict[str, str] | None = None,
    tls: TLSConfig | None = None,
    probe: "Callable[[], Health] | None" = None,
    settle: bool = False,
    progress: "Callable[[Health, float], None] | None" = None,
    every: float = 5.0,
) -> Health:
    """Poll until the server and `models` are ready (with `settle`: or failed to load, some ready: `Health.settled`);
    ServerError after `timeout`.

    `alive` (optional) returns a reason string once the server has died, so a crash
    fails fast instead of waiting out the timeout. `probe` (optional) asks instead of
    `check_health(url, ...)`, for a caller that decides where and how to dial on every try. `progress` (optional)
    is told the latest answer and the seconds waited every `every` seconds while not ready.
    """
    start = time.monotonic()
    deadline = start + timeout
    reported = start
    health = Health(url, False, False)
    while True:
        if alive is not None:
            dead = alive()
            if dead:
                raise ServerError(dead)
        health = probe() if probe is not None else check_health(url, models, headers=headers, tls=tls)
        if health.all_ready or (settle and health.settled):
            return health
        if settle and health.live and health.models and all(m.failed for m in health.models):
            raise ServerError(f"{health.not_ready()} at {health.url}: no model loaded.")
        if not settle and health.live and any(m.failed for m in health.models):
            # A failed load is final (explicit model control never retries it): no point waiting out the timeout.
            raise ServerError(f"{health.not_ready()} at {health.url}.")
        now = time.monotonic()
        if now >= deadline:
            break
        if progress is not None and now - reported >= every:
            reported = now
            progress(health, now - start)
        time.sleep(0.25)
    reason = f" ({health.error})" if health.error else ""
    raise ServerError(f"{health.not_ready()} at {health.url} not ready after {timeout:.0f} s{reason}.")


def _short(exc: BaseException) -> str:
    text = one_line(exc, 2000, first_line=True)
    if SOCKET_CLOSED in text.lower():
        return ("TLS handshake failed: the server closed the connection (it refused our client certificate, "
                "or it serves TLS and we spoke plaintext)")
    refusal = explain_refusal(None, text)
    if refusal is not None:
        return f"TLS handshake failed: {refusal}"
    return "connection refused: nothing listens there" if "failed to connect to all addresses" in text else text[:200]


GRPC_PROTOCOL_PREFIX = "triton-grpc-protocol-"


def key_headers(record: ServerRecord, key: str) -> dict[str, str]:
    """The gRPC headers that unlock the server's restricted model-repository protocol."""
    header = record.key_header
    if not header.lower().startswith(GRPC_PROTOCOL_PREFIX):
        header = GRPC_PROTOCOL_PREFIX + header
    return {header: key}


def _client(url: str, tls: TLSConfig | None = None):  # noqa: ANN202
    import tritonclient.grpc as grpcclient

    if tls is None:
        return grpcclient.InferenceServerClient(url)
    # 0.0.0.0 is dialed as 127.0.0.1, which edge-deploy's server certificates name.
    return grpcclient.InferenceServerClient(dial_url(url), **tls.client_kwargs(), channel_args=tls.channel_args([]))


def server_live(url: str, timeout: float = 3.0, tls: TLSConfig | None = None) -> bool:
    """True when a tritonserver at `url` answers its liveness check (over TLS with `tls`)."""
    try:
        client = _client(url, tls)
    except Exception:  # noqa: BLE001 - a bad URL is "not live"
        return False
    try:
        return bool(client.is_server_live(client_timeout=timeout))
    except Exception:  # noqa: BLE001
        return False
    finally:
        client.close()


def served_versions(url: str, name: str, tls: TLSConfig | None = None) -> list[int]:
    """Versions of `name` the server has loaded and ready ([] when none or not loaded)."""
    client = _client(url, tls)
    try:
        meta = client.get_model_metadata(name, client_timeout=10.0)
        versions = sorted(int(v) for v in meta.versions)
        return [v for v in versions if client.is_model_ready(name, str(v), client_timeout=10.0)]
    except Exception:  # noqa: BLE001 - not loaded / unknown model
        return []
    finally:
        client.close()


def load_models(record: ServerRecord, names: list[str], *, key: str | None = None) -> None:
    """Ask the server to (re)load `names` in order with the key header; RepositoryError with its reason."""
    headers = key_headers(record, key if key is not None else read_key(record))
    client = _client(record.url, record.client_tls())
    try:
        for name in names:
            try:
                client.load_model(name, headers=headers, client_timeout=LOAD_TIMEOUT_S)
            except Exception as exc:  # noqa: BLE001 - InferenceServerException or gRPC errors
                raise RepositoryError(f"the server at {record.url} did not load {name}: {one_line(exc, 400)}") from exc
    finally:
        client.close()


def repository_headers(repository: Path | None) -> dict[str, str] | None:
    """The key headers of the server recorded for `repository` when this user can read its key, else None."""
    if repository is None:
        return None
    record = find_record(repository)
    if record is None:
        return None
    try:
        return key_headers(record, read_key(record))
    except RepositoryError:
        return None


def live_server(repository: Path) -> ServerRecord | None:
    """The record of the server serving `repository` when it answers, else None."""
    record = find_record(repository)
    if record is not None and server_live(record.url, tls=record.client_tls()):
        return record
    return None
