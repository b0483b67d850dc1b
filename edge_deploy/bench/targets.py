"""The served lane models a bench measures: each lane model (client-side pre/post, or fused) and its
NAME_pipeline (ensemble or BLS), told apart by what the server says about them."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import BenchError, ModelMismatchError, one_line
from .config import BenchConfig
from ..client.base import CHANNEL_ARGS, to_client_error
from ..client.served_model import describe_model
from ..lanedet.contract import PARAM_PIPELINE
from ..serve.admin import repository_headers
from ..tls.config import client_options
from ..core.triton_layout import repository_models

PIPELINE_SUFFIX = "_pipeline"


@dataclass(frozen=True)
class BenchTarget:
    """One served model as a bench row: `name` is what the client asks for, `model` the lane model it serves."""

    name: str
    model: str
    pipeline: str  # "client-side" (raw model), "fused" (preprocessing in the model), "ensemble", "bls"
    family: str

    @property
    def label(self) -> str:
        return f"{self.name} ({self.pipeline})"


def grpc_client(url: str, tls: Any) -> Any:
    """A tritonclient gRPC client with LaneDetClient's channel settings and TLS."""
    import tritonclient.grpc as grpcclient


    return grpcclient.InferenceServerClient(url, **client_options(tls, CHANNEL_ARGS))


def model_names(client: Any, repository: Path | None, timeout: float) -> list[str]:
    """Every model the server knows: from --repository's directories, else the server's repository index."""
    if repository is not None:
        names = repository_models(repository)
        if not names:
            raise BenchError(f"{repository} holds no model; install one with `edge-deploy install`, or pass --url.")
        return names

    try:
        index = client.get_model_repository_index(headers=repository_headers(repository), client_timeout=timeout)
    except Exception as exc:  # noqa: BLE001 - a key-restricted server refuses the index without its key
        raise BenchError(f"cannot list the server's models ({one_line(exc, 160)}); name them with --model NAME or "
                         "pass --repository DIR.") from None
    return sorted({entry.name for entry in index.models})


def describe(client: Any, name: str, timeout: float) -> BenchTarget:
    """The BenchTarget of a served model, or ModelMismatchError when it is not a lane model or pipeline."""
    metadata = client.get_model_metadata(name, client_timeout=timeout)
    config = client.get_model_config(name, client_timeout=timeout).config
    model = describe_model(metadata, config)
    if model.kind == "pipeline":
        kind = config.parameters[PARAM_PIPELINE].string_value if PARAM_PIPELINE in config.parameters else ""
        pipeline = kind or ("ensemble" if config.platform == "ensemble" else "bls")
        base = name[: -len(PIPELINE_SUFFIX)] if name.endswith(PIPELINE_SUFFIX) else name
        return BenchTarget(name, base, pipeline, model.family.name)
    return BenchTarget(name, name, "fused" if model.kind == "fused" else "client-side", model.family.name)


def served_targets(client: Any, named: tuple[str, ...], repository: Path | None, timeout: float) -> list[BenchTarget]:
    """The models to bench: those named (each must be a ready lane model or pipeline), else every ready lane model
    and pipeline the server serves; ordered by lane model, the model itself first."""
    from tritonclient.utils import InferenceServerException

    names = list(named) or model_names(client, repository, timeout)
    found = []
    for name in names:
        try:
            ready = client.is_model_ready(name, client_timeout=timeout)
            if ready:
                found.append(describe(client, name, timeout))
                continue
            why = "the server does not serve it, or it is not ready"
        except ModelMismatchError as exc:
            why = str(exc)
        except InferenceServerException as exc:
            why = one_line(exc, 160)
        if named:
            raise BenchError(f"--model {name} cannot be benched: {why.rstrip('.')}; see `edge-deploy models`.")
    if not found:
        raise BenchError(f"the server serves no lane model ({', '.join(names) or 'no models'}); install one with "
                         "`edge-deploy install`, or name it with --model.")
    return sorted(found, key=lambda t: (t.model, t.name != t.model, t.name))


def live_targets(stats_client: Any, config: BenchConfig) -> list[BenchTarget]:
    """The models to bench on the server `config.url` names (`served_targets`), or a BenchError when it is not live
    or does not answer."""
    from tritonclient.utils import InferenceServerException


    try:
        if not stats_client.is_server_live(client_timeout=config.timeout):
            raise BenchError(f"Triton at {config.url} is not live; start it with `edge-deploy serve` or check --url.")
        return served_targets(stats_client, config.models, config.repository, config.timeout)
    except InferenceServerException as exc:
        raise BenchError(str(to_client_error(exc, config.url, "(any)", config.timeout, config.tls))) from None
