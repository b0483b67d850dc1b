"""A new version of a model (and of its pipeline models) in the Triton model repository: what goes in it, where it
may go, its number. File work only: `edge_deploy.deploy.install` has a running server load it.

Layout written by `install`::

    <repo>/<name>/config.pbtxt          generated (edge_deploy.repository.model_config)
    <repo>/<name>/<V>/manifest.json     the artifact's manifest, verbatim
    <repo>/<name>/<V>/install.json      runtime + install options (rollback rebuilds the config from it)
    <repo>/<name>/<V>/model.plan | model.onnx [+ model.py for the Python-backend ONNX Runtime runner]
    <repo>/<name>_preprocess/<V>/  <repo>/<name>_postprocess/<V>/  <repo>/<name>_pipeline/<V>/   (--pipeline)
    <repo>/<name>_pipeline/<V>/   one Python model calling <name> through BLS   (--pipeline bls; pipelines.py)

Writing is atomic as seen by a polling Triton and serialised per repository
(edge_deploy.repository.files).

Versions and rollback: a new version is the highest + 1 and the config's
version_policy is ``latest { num_versions: 1 }``, so the newest version is served.
`rollback NAME --to V` rewrites the config for version V (from V's own manifest and
install options) with ``specific { versions: [V] }``; the next install goes back to
``latest 1``. Newer versions stay on disk until pruned with `--keep`, which never removes the
version an install replaced nor one that serves (`prune.prune_versions`; what served and what
failed is recorded by `history`).
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

from ..artifact.manifest import FORMAT, MANIFEST_NAME, ONNX_NAME, PLAN_NAME, Manifest
from ..core.triton_layout import CONFIG, versions
from ..errors import RepositoryError
from . import model_config as mc
from .files import NewVersion
from .pipeline_kind import PipelineKind
from .pipelines import pipeline_versions
from .install_record import INSTALL_RECORD, InstallRecord
from .versions import PIPELINE_SUFFIXES, check_role_free, config_role
from .triton_models import source

DEFAULT_NAME = "lanedet"  # the name LaneDetClient and `convert --install` default to


def _installed_manifest(artifact: Path, manifest: Manifest) -> bytes:
    """What a version directory's manifest.json holds: the artifact's, verbatim, or migrated from an older format
    (the server-side pipeline models read only the current format)."""
    raw = (artifact / MANIFEST_NAME).read_bytes()
    return raw if json.loads(raw).get("format") == FORMAT else manifest.to_json().encode()


def plan_versions(
    artifact: Path, manifest: Manifest, name: str, runtime: str, options: mc.ConfigOptions,
    pipeline: PipelineKind | None,
) -> list[NewVersion]:
    manifest_bytes = _installed_manifest(artifact, manifest)
    manifest_sha = hashlib.sha256(manifest_bytes).hexdigest()
    files: dict[str, Path | bytes] = {MANIFEST_NAME: manifest_bytes}
    if runtime == "tensorrt":
        files[PLAN_NAME] = artifact / PLAN_NAME
    else:  # Triton's ONNX Runtime backend and the Python runner both load model.onnx
        files[ONNX_NAME] = artifact / options.onnx_file
    if runtime == "python":
        files["model.py"] = source("onnx_runner.py")
    files[INSTALL_RECORD] = InstallRecord.new(runtime, "model", options, artifact).to_json()
    items = [NewVersion(name, files, mc.model_config(manifest, name=name, runtime=runtime, options=options,
                                                    manifest_sha256=manifest_sha))]
    if pipeline is not None:
        io = mc.served_io(manifest, runtime, options)
        if io != manifest.io:
            raise RepositoryError(
                "--pipeline needs the served model to have model.onnx's FP32 inputs and outputs, but this one has "
                "FP16 I/O (--fp16-io); install without --pipeline (LaneDetClient handles FP16 I/O), or convert "
                "without --fp16-io."
            )
        plain = mc.ConfigOptions()
        items += pipeline_versions(pipeline, manifest, manifest_bytes, name,
                                   lambda rt, role, kind: InstallRecord.new(rt, role, plain, artifact, kind).to_json())
    return items


def check_new_models(repository: Path, items: list[NewVersion]) -> None:
    """RepositoryError when a model of `items` would go where edge-deploy did not write, or over a model of
    another role."""
    for item in items:
        model_dir = Path(repository) / item.model
        if model_dir.exists() and not (model_dir / CONFIG).is_file():
            raise RepositoryError(
                f"{model_dir} exists but has no {CONFIG}, so edge-deploy did not make it; "
                "pick another --name or move it away."
            )
        check_role_free(repository, item.model, config_role(item.config))


def next_version(repository: Path, name: str, items: list[NewVersion]) -> int:
    """The number of the new version: above every version of NAME's models, pipeline models left on disk included."""
    family = {i.model for i in items} | {name + s for s in PIPELINE_SUFFIXES}
    return max([0, *(v for m in family for v in versions(repository, m))]) + 1
