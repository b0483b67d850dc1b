"""`edge-deploy models`: what a repository holds (edge_deploy.repository.versions) and what its server serves."""
from __future__ import annotations

from pathlib import Path

from ..errors import RepositoryError
from ..repository.model_config import scheduling
from ..repository.versions import (
    DEFAULT_REPOSITORY,
    PIPELINE_SUFFIXES,
    ModelInfo,
    check_name,
    config_role,
    version_info,
)
from ..serve import admin
from ..repository.served_config import config_disagreement
from ..core.triton_layout import policy_versions, read_config, repository_models, versions


def list_models(repository: Path = DEFAULT_REPOSITORY, name: str | None = None) -> list[ModelInfo]:
    """Models (or one model and its pipeline companions) with versions and served versions."""
    repository = Path(repository)
    names = repository_models(repository)
    if name is not None:
        check_name(name)
        family = [name, *(name + s for s in PIPELINE_SUFFIXES)]
        names = [n for n in names if n in family]
        if not names:
            raise RepositoryError(f"{repository} has no model {name!r}; see `edge-deploy models --repository {repository}`.")
    record = admin.live_server(repository)
    infos = []
    for model in names:
        avail = versions(repository, model)
        shown = None
        try:
            config = read_config(repository, model)
        except RepositoryError:
            role, policy = "unreadable config.pbtxt", []
        else:
            role = config_role(config)
            policy = policy_versions(config, avail)
            shown = scheduling(config)
        served = admin.served_versions(record.url, model, record.client_tls()) if record else None
        infos.append(ModelInfo(
            name=model,
            role=role,
            versions=[version_info(repository, model, v) for v in avail],
            policy=policy,
            served=served,
            warning=config_disagreement(repository, model, served) if served else None,
            priority=shown.priority if shown else None,
            instances=shown.instances if shown else None,
            placement=shown.placement if shown else None,
        ))
    return infos
