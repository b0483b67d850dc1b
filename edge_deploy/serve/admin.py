"""Every tritonclient admin call edge-deploy makes: liveness, readiness, served versions, loading models.

A running server is reached by URL; loading needs the key of the restricted
model-repository protocol (see `edge_deploy.serve.record`). tritonclient is
imported when a call is made.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from ..errors import RepositoryError, ServerError, one_line
from .record import ServerRecord, find_record, read_key

LOAD_TIMEOUT_S = 300.0


@dataclass
class ModelHealth:
    """Readiness of one model and the versions the server serves."""

    name: str
    ready: bool
    versions: list[str]
    reason: str = ""


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
        """Live, ready, and every asked-for model ready."""
        return self.live and self.ready and all(m.ready for m in self.models)

    def not_ready(self) -> str:
        """What is not ready, for a message: "models a, b" or "the server"."""
        waiting = [m.name for m in self.models if not m.ready]
        return f"models {', '.join(waiting)}" if self.live and waiting else "the server"


def check_health(url: str, models: list[str] | tuple[str, ...] = (), timeout: float = 2.0) -> Health:
    """Ask the server at `url` whether it and each model in `models` are ready (never raises)."""
    import tritonclient.grpc as grpcclient

    client = grpcclient.InferenceServerClient(url)
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
                result.models.append(ModelHealth(name, model_ready, versions))
            except Exception as exc:  # noqa: BLE001
                result.models.append(ModelHealth(name, False, [], _short(exc)))
        return result
    finally:
        client.close()


def wait_healthy(
    url: str,
    models: list[str] | tuple[str, ...] = (),
    timeout: float = 60.0,
    *,
    alive: "Callable[[], str | None] | None" = None,
) -> Health:
    """Poll until the server and `models` are ready; ServerError after `timeout`.

    `alive` (optional) returns a reason string once the server has died, so a crash
    fails fast instead of waiting out the timeout.
    """
    deadline = time.monotonic() + timeout
    health = Health(url, False, False)
    while True:
        if alive is not None:
            dead = alive()
            if dead:
                raise ServerError(dead)
        health = check_health(url, models)
        if health.all_ready:
            return health
        if time.monotonic() >= deadline:
            break
        time.sleep(0.25)
    raise ServerError(f"{health.not_ready()} at {url} not ready after {timeout:.0f} s ({health.error or 'not ready'}).")


def _short(exc: BaseException) -> str:
    text = one_line(exc, first_line=True)
    return "connection refused: nothing listens there" if "failed to connect to all addresses" in text else text


GRPC_PROTOCOL_PREFIX = "triton-grpc-protocol-"


def key_headers(record: ServerRecord, key: str) -> dict[str, str]:
    """The gRPC headers that unlock the server's restricted model-repository protocol."""
    header = record.key_header
    if not header.lower().startswith(GRPC_PROTOCOL_PREFIX):
        header = GRPC_PROTOCOL_PREFIX + header
    return {header: key}


def _client(url: str):
    import tritonclient.grpc as grpcclient

    return grpcclient.InferenceServerClient(url)


def server_live(url: str, timeout: float = 3.0) -> bool:
    """True when a tritonserver at `url` answers its liveness check."""
    try:
        client = _client(url)
    except Exception:  # noqa: BLE001 - a bad URL is "not live"
        return False
    try:
        return bool(client.is_server_live(client_timeout=timeout))
    except Exception:  # noqa: BLE001
        return False
    finally:
        client.close()


def served_versions(url: str, name: str) -> list[int]:
    """Versions of `name` the server has loaded and ready ([] when none or not loaded)."""
    client = _client(url)
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
    client = _client(record.url)
    try:
        for name in names:
            try:
                client.load_model(name, headers=headers, client_timeout=LOAD_TIMEOUT_S)
            except Exception as exc:  # noqa: BLE001 - InferenceServerException or gRPC errors
                raise RepositoryError(f"the server at {record.url} did not load {name}: {one_line(exc, 400)}") from exc
    finally:
        client.close()


def live_server(repository: Path) -> ServerRecord | None:
    """The record of the server serving `repository` when it answers, else None."""
    record = find_record(repository)
    if record is not None and server_live(record.url):
        return record
    return None
