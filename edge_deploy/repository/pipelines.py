"""The server-side pipeline models `install --pipeline` writes beside the lane model NAME, of either kind
(pipeline_kind.py): their version directories, configs and install records.

- ensemble: NAME_preprocess (not for a fused model), NAME_postprocess and the ensemble NAME_pipeline;
- bls: NAME_pipeline only, one Python model calling NAME through BLS (triton_models/bls_model.py).

A BLS pipeline calls whichever version of NAME the server serves, so a new version of NAME that the same
pipeline can serve (`bls_unchanged`) needs no new pipeline loaded: install then writes the pipeline's
version (rollback to it rebuilds the same pipeline) but asks the server to load NAME only; rollback
likewise loads NAME only when the pipeline version it pins would do what the served one does
(`bls_version_unchanged`).
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Callable

from ..artifact.manifest import MANIFEST_NAME, Manifest
from ..errors import EdgeDeployError, RepositoryError
from . import model_config as mc
from .files import NewVersion
from .pipeline_kind import BLS_SPEC, PipelineKind, kind_of_config
from ..core.triton_layout import CONFIG, policy_now, read_config
from .install_record import INSTALL_RECORD, InstallRecord
from .versions import PIPELINE_SUFFIXES
from .triton_models import model_files

# record(runtime, role, pipeline kind or None) -> install.json bytes
Record = Callable[[str, str, "PipelineKind | None"], bytes]


def pipeline_versions(
    kind: PipelineKind, manifest: Manifest, manifest_bytes: bytes, name: str, record: Record,
) -> list[NewVersion]:
    """The new versions of NAME's pipeline models, in the order they are written."""
    family = manifest.lane_family()
    if family is None:
        raise RepositoryError(
            "--pipeline decodes lanes on the server, but this artifact's outputs belong to no lane-model family "
            "(the manifest's family is null); install without --pipeline."
        )
    fused = manifest.fused_frame is not None
    pre, post, pipe = (name + s for s in PIPELINE_SUFFIXES)
    if kind is PipelineKind.BLS:
        spec = json.dumps(mc.bls_spec(manifest, model=name).to_dict(), indent=2, sort_keys=True).encode() + b"\n"
        return [NewVersion(pipe, {
            MANIFEST_NAME: manifest_bytes,  # what rollback rebuilds the config from
            BLS_SPEC: spec,
            **model_files("bls", family, fused=fused),
            INSTALL_RECORD: record("python", "pipeline", kind),
        }, mc.bls_config(manifest, name=pipe))]
    items = []
    if not fused:  # a fused model preprocesses the frame itself
        items.append(NewVersion(pre, {
            MANIFEST_NAME: manifest_bytes,
            **model_files("preprocess", family),
            INSTALL_RECORD: record("python", "preprocess", None),
        }, mc.preprocess_config(manifest, name=pre)))
    items += [
        NewVersion(post, {
            MANIFEST_NAME: manifest_bytes,
            **model_files("postprocess", family, fused=fused),
            INSTALL_RECORD: record("python", "postprocess", None),
        }, mc.postprocess_config(manifest, name=post)),
        NewVersion(pipe, {
            MANIFEST_NAME: manifest_bytes,
            INSTALL_RECORD: record("ensemble", "pipeline", kind),
        }, mc.pipeline_config(manifest, name=pipe, model=name, preprocess=pre, postprocess=post)),
    ]
    return items


def installed_kind(repository: Path, name: str) -> PipelineKind | None:
    """The kind of NAME's installed pipeline, None without one (what `install` without --pipeline keeps)."""
    pipe = Path(repository) / f"{name}_pipeline"
    if not (pipe / CONFIG).is_file():
        return None
    try:
        return kind_of_config(read_config(repository, pipe.name))
    except RepositoryError:
        return PipelineKind.ENSEMBLE


def bls_unchanged(repository: Path, item: NewVersion, selected: list[int] | None = None) -> bool:
    """Whether the BLS pipeline version `item` would do exactly what the version NAME_pipeline's config selects now
    (or the one version in `selected`: what the server serves) does: same config but for its version policy,
    same files but for the manifest and install record."""
    selected = policy_now(repository, item.model) if selected is None else selected
    if len(selected) != 1 or BLS_SPEC not in item.files:
        return False
    vdir = Path(repository) / item.model / str(selected[0])
    try:
        config = read_config(repository, item.model)
    except RepositoryError:
        return False
    if kind_of_config(config) is not PipelineKind.BLS:
        return False
    config.ClearField("version_policy")
    new = type(item.config)()
    new.CopyFrom(item.config)
    new.ClearField("version_policy")
    if mc.config_text(config) != mc.config_text(new):
        return False
    for file, content in item.files.items():
        if file in (MANIFEST_NAME, INSTALL_RECORD):
            continue
        data = content if isinstance(content, bytes) else Path(content).read_bytes()
        try:
            if (vdir / file).read_bytes() != data:
                return False
        except OSError:
            return False
    return True


def bls_version_unchanged(repository: Path, model: str, version: int,
                          served: Callable[[], list[int] | None]) -> bool:
    """Whether version `version` of the BLS pipeline `model`, already on disk, would do what the served version
    does: what rollback needs not load again. `served` (the versions the server serves) is asked only once
    `version` proves to be a readable BLS pipeline; anything unreadable counts as changed (loaded as before)."""
    vdir = Path(repository) / model / str(version)
    record = InstallRecord.read(vdir)
    if record is None or not record.is_bls_pipeline:
        return False
    files: dict[str, Path | bytes] = {f.name: f for f in vdir.iterdir() if f.is_file()}
    if BLS_SPEC not in files:
        return False
    try:
        item = NewVersion(model, files, mc.bls_config(Manifest.read(vdir), name=model, version_policy=version))
    except (EdgeDeployError, OSError, ValueError):
        return False
    selected = served()
    return bool(selected) and bls_unchanged(repository, item, selected)
