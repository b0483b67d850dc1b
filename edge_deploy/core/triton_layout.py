"""What Triton reads in a model repository: model directories (holding config.pbtxt), numeric version directories,
and the versions a config's version_policy selects.

Triton's rules, not edge-deploy's: the repository stage writes to them and the serving stage checks what a server
will load by them, so they sit below both.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from ..errors import RepositoryError, one_line

MAX_CONFIG_BYTES = 16 << 20  # a config.pbtxt: a few KB; a pipeline's with many steps, a few hundred KB

CONFIG = "config.pbtxt"


def config_pb2():  # noqa: ANN201 - tritonclient.grpc.model_config_pb2
    from tritonclient.grpc import model_config_pb2

    return model_config_pb2


def repository_models(repository: Path) -> list[str]:
    """Names of the models in a Triton model repository (directories holding config.pbtxt)."""
    repository = Path(repository)
    if not repository.is_dir():
        return []
    return sorted(p.name for p in repository.iterdir() if p.is_dir() and (p / CONFIG).is_file())


def versions(repository: Path, name: str) -> list[int]:
    """The numeric version directories of a model, ascending ([] when the model does not exist)."""
    model_dir = Path(repository) / name
    if not model_dir.is_dir():
        return []
    return sorted(int(p.name) for p in model_dir.iterdir() if p.is_dir() and p.name.isdigit() and p.name[0] != "0")


def parse_config(text: str) -> Any:
    """Parse config.pbtxt text into a ModelConfig."""
    from google.protobuf import text_format

    return text_format.Parse(text, config_pb2().ModelConfig())


def read_config(repository: Path, name: str) -> Any:
    """The model's config.pbtxt as a ModelConfig."""
    from .bounded_read import read_regular

    path = Path(repository) / name / CONFIG
    try:  # a regular file (a FIFO would block) of at most MAX_CONFIG_BYTES
        return parse_config(read_regular(path, "config", RepositoryError, "reinstall the model",
                                         MAX_CONFIG_BYTES).decode())
    except RepositoryError:
        raise
    except OSError as exc:
        raise RepositoryError(f"{path} is missing or unreadable ({exc.strerror or exc}); reinstall the model.") from exc
    except Exception as exc:  # noqa: BLE001 - text_format.ParseError
        raise RepositoryError(f"{path} is not a valid config.pbtxt ({one_line(exc, 160)}); reinstall the "
                              "model.") from exc


def policy_versions(config: Any, available: list[int]) -> list[int]:
    """Which of `available` versions a config's version_policy selects (Triton's rule)."""
    which = config.version_policy.WhichOneof("policy_choice")
    ordered = sorted(available)
    if which == "all":
        return ordered
    if which == "specific":
        return [v for v in ordered if v in set(config.version_policy.specific.versions)]
    num = config.version_policy.latest.num_versions if which == "latest" else 1
    return ordered[-max(num, 1):] if ordered else []


def policy_now(repository: Path, model: str) -> list[int]:
    """The versions of MODEL its config.pbtxt selects now ([] without a readable config)."""
    if not (Path(repository) / model / CONFIG).is_file():
        return []
    try:
        return policy_versions(read_config(repository, model), versions(repository, model))
    except RepositoryError:
        return []
