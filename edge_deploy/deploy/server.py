"""The running server of a model repository, as install and rollback see it: find it, ask what it can load (its
backends, its TensorRT), ask it to load, ask what it serves."""
from __future__ import annotations

from pathlib import Path

from ..artifact.manifest import Manifest
from ..errors import EdgeDeployError, RepositoryError
from ..core.progress import Reporter
from ..serve import admin
from ..serve.server_record import ServerRecord, find_record, prune_stale_records, read_key
from ..serve.discovery import find_tritonserver
from ..serve.server_tensorrt import plan_refusal, server_tensorrt


def server_for(repository: Path, reporter: Reporter) -> ServerRecord | None:
    """The live server record for the repository, its key checked readable before anything is written."""
    for note in prune_stale_records(repository):
        reporter.warn(note)
    record = find_record(repository)
    if record is None:
        return None
    if not admin.server_live(record.url, tls=record.client_tls()):
        reporter.warn(f"the server recorded for {repository} ({record.url}) does not answer; writing files only.")
        return None
    read_key(record)
    return record


def served(record: ServerRecord, models: list[str]) -> dict[str, list[int]]:
    """The versions of each of `models` the server has ready."""
    return {m: admin.served_versions(record.url, m, record.client_tls()) for m in models}


def load_order(models: list[str]) -> list[str]:
    """What to ask the server to load: just the ensemble when there is one, else every model, the lane model
    before its BLS pipeline.

    Loading an ensemble in explicit mode reloads its changed composing models with it, as
    one step; loading the lane model alone first would make Triton re-check the ensemble
    against the old pre/postprocess configs (and fail) whenever the I/O dims change. A BLS
    pipeline (`install --pipeline bls`) composes nothing Triton knows of, so the model it calls goes
    first. The names tell the kinds apart: a version of an ensemble pipeline always comes with a
    NAME_postprocess of the same version, a BLS pipeline's never does.
    """
    ensembles = [m for m in models if m.endswith("_pipeline") and m[: -len("_pipeline")] + "_postprocess" in models]
    if ensembles:
        return ensembles
    return sorted(models, key=lambda m: m.endswith("_pipeline"))


def server_backends(tritonserver: Path | str | None) -> list[str] | None:
    """The backends of the tritonserver found here (None: none found, so none to ask)."""
    try:
        return find_tritonserver(tritonserver).backends()
    except EdgeDeployError:
        return None


def check_plan_for_server(manifest: Manifest, tritonserver: Path | str | None, force: bool,
                          reporter: Reporter) -> None:
    """Refuse a plan the tritonserver found here cannot deserialize (its TensorRT backend links another
    TensorRT than the one the plan was built with) unless `force`; nothing to check without a server."""
    try:
        found = find_tritonserver(tritonserver, prepare=False)
    except EdgeDeployError:
        return
    server = server_tensorrt(found)
    line = plan_refusal("this artifact", manifest, server, found) if server is not None else None
    if line and not force:
        raise RepositoryError(f"{line}; --force installs it anyway.")
    if line:
        reporter.warn(f"installing because of --force: {line}")
