"""Pin a model's config to one of its versions (rollback, and the way back after a refused load)."""
from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

from ..artifact.manifest import MANIFEST_NAME, ONNX_NAME, PLAN_NAME, Manifest, sha256_file
from ..errors import EdgeDeployError, RepositoryError
from ..core.fsutil import write_bytes_atomic
from . import model_config as mc
from ..core.triton_layout import CONFIG
from .install_record import INSTALL_RECORD, InstallRecord
from .pipeline_kind import BLS_SPEC


def pin_previous(repository: Path, previous: dict[str, list[int]]) -> None:
    """After a refused load: pin each model's config to the version it served before (best effort)."""
    for model, served in previous.items():
        if served:
            with contextlib.suppress(EdgeDeployError, OSError):
                pin_config(repository, model, served[-1])


def pin_config(repository: Path, model: str, version: int) -> None:
    """Rewrite MODEL's config for `version` (its own manifest and install options), pinned to it."""
    write_bytes_atomic(repository / model / CONFIG, mc.config_text(version_config(repository, model, version)).encode())


def version_config(repository: Path, model: str, version: int) -> Any:
    """MODEL's config pinned to `version`, from that version's own manifest and install options; RepositoryError
    when the version directory lacks what it needs to load (checked before anything is written)."""
    vdir = repository / model / str(version)
    record = InstallRecord.read(vdir)
    try:
        manifest = Manifest.read(vdir) if record is not None else None
    except EdgeDeployError:
        manifest = None
    if manifest is None or record is None:
        raise RepositoryError(f"{vdir} has no readable {MANIFEST_NAME}/{INSTALL_RECORD}; it was not installed by edge-deploy.")
    role = record.role
    if role == "preprocess":
        config = mc.preprocess_config(manifest, name=model, version_policy=version)
    elif role == "postprocess":
        config = mc.postprocess_config(manifest, name=model, version_policy=version)
    elif record.is_bls_pipeline:
        config = mc.bls_config(manifest, name=model, version_policy=version)
    elif role == "pipeline":
        base = model[: -len("_pipeline")]
        config = mc.pipeline_config(manifest, name=model, model=base, preprocess=base + "_preprocess",
                                    postprocess=base + "_postprocess", version_policy=version)
    elif record.runtime is None:  # install always writes it: a damaged record
        raise RepositoryError(f"{vdir / INSTALL_RECORD} names no runtime; it was not installed by edge-deploy.")
    else:
        config = mc.model_config(manifest, name=model, runtime=record.runtime, options=record.options,
                                 version_policy=version, manifest_sha256=sha256_file(vdir / MANIFEST_NAME))
    missing = [f for f in _needed_files(config, record) if not (vdir / f).is_file()]
    if missing:
        raise RepositoryError(
            f"{vdir} has no {', '.join(missing)}, so version {version} of {model} cannot load; "
            f"install the artifact again, or pick another version."
        )
    return config


def _needed_files(config: Any, record: InstallRecord) -> list[str]:
    """The files a version directory must hold for its config to load (what install wrote there)."""
    needed = [config.default_model_filename or "model.py"] if config.backend == "python" else []
    if record.role == "model" and config.platform != "ensemble":
        needed.append(PLAN_NAME if record.runtime == "tensorrt" else ONNX_NAME)
    if record.is_bls_pipeline:
        needed.append(BLS_SPEC)
    return needed
