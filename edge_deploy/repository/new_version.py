"""The Triton model repository: install artifacts as versions, list, prune and roll back.

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
version an install replaced nor one that serves (`rollback.prune_versions`; what served and what
failed is recorded by `history`).
"""
from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass, field
from pathlib import Path

from .._version import __version__
from ..artifact import FORMAT, FP16_ONNX_NAME, MANIFEST_NAME, ONNX_NAME, PLAN_NAME, Manifest
from ..errors import EdgeDeployError, RepositoryError
from ..progress import Reporter
from . import model_config as mc
from .files import CONFIG, NewVersion, check_writable, clean_leftovers, publish, repository_error, repository_lock
from .history import check_state, record_failed, record_served
from .pipeline_kind import PipelineKind, pipeline_kind
from .pipelines import bls_unchanged, installed_kind, pipeline_versions
from .rollback import prune_versions, served_line
from .runtime import check_model_signature, check_plan_for_server, choose_runtime
from .serving import load_order, pin_previous, policy_now, server_for
from .versions import (
    DEFAULT_REPOSITORY,
    INSTALL_RECORD,
    PIPELINE_SUFFIXES,
    check_name,
    check_role_free,
    config_role,
    versions,
)

DEFAULT_NAME = "lanedet"  # the name LaneDetClient and `convert --install` default to


@dataclass
class InstallResult:
    """What `install` did."""

    name: str
    version: int
    runtime: str
    repository: Path
    models: list[str]
    pruned: dict[str, list[int]] = field(default_factory=dict)
    kept: dict[str, list[int]] = field(default_factory=dict)  # what is left of a model --keep pruned
    served: dict[str, list[int]] | None = None  # None: no running server for this repository
    server_url: str | None = None
    evaluation: str | None = None  # the F1 convert --eval-data recorded, one line

    def summary(self) -> str:
        """What a person wants to read after an install (a few lines)."""
        lines = [f"installed {', '.join(self.models)} version {self.version} ({self.runtime}) in {self.repository}"]
        if self.evaluation:
            lines.append(self.evaluation)
        lines += [f"pruned {m} versions {', '.join(map(str, v))} (kept {', '.join(map(str, self.kept.get(m, [])))})"
                  for m, v in self.pruned.items()]
        lines.append(served_line(self.served, self.server_url, self.repository))
        return "\n".join(lines)

    __str__ = __rich__ = summary  # rich prints the summary too


# ---------------------------------------------------------------- reading a repository

# ---------------------------------------------------------------- install


def _install_record(runtime: str, role: str, options: mc.ConfigOptions, artifact: Path,
                    pipeline: PipelineKind | None = None) -> bytes:
    return json.dumps({
        "tool": {"name": "edge-deploy", "version": __version__},
        "installed": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "artifact": str(artifact),
        "role": role,
        "runtime": runtime,
        "options": options.to_dict(),
        **({"pipeline": pipeline.value} if pipeline is not None else {}),  # NAME_pipeline: which kind (rollback)
    }, indent=2).encode() + b"\n"


def _installed_manifest(artifact: Path, manifest: Manifest) -> bytes:
    """What a version directory's manifest.json holds: the artifact's, verbatim, or migrated from an older format
    (the server-side pipeline models read only the current format)."""
    raw = (artifact / MANIFEST_NAME).read_bytes()
    return raw if json.loads(raw).get("format") == FORMAT else manifest.to_json().encode()


def _plan_versions(
    artifact: Path, manifest: Manifest, name: str, runtime: str, options: mc.ConfigOptions,
    pipeline: PipelineKind | None,
) -> list[NewVersion]:
    from .triton_models import source

    manifest_bytes = _installed_manifest(artifact, manifest)
    manifest_sha = hashlib.sha256(manifest_bytes).hexdigest()
    files: dict[str, Path | bytes] = {MANIFEST_NAME: manifest_bytes}
    if runtime == "tensorrt":
        files[PLAN_NAME] = artifact / PLAN_NAME
    else:  # Triton's ONNX Runtime backend and the Python runner both load model.onnx
        files[ONNX_NAME] = artifact / (FP16_ONNX_NAME if options.fp16 else ONNX_NAME)
    if runtime == "python":
        files["model.py"] = source("onnx_runner.py")
    files[INSTALL_RECORD] = _install_record(runtime, "model", options, artifact)
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
                                   lambda rt, role, kind: _install_record(rt, role, plain, artifact, kind))
    return items


def install(
    artifact_dir: Path,
    repository: Path = DEFAULT_REPOSITORY,
    name: str = DEFAULT_NAME,
    *,
    runtime: str | None = None,
    pipeline: bool | str | PipelineKind | None = None,
    max_queue_delay_us: int | None = None,
    instances: int = 1,
    warmup: bool = False,
    keep: int | None = None,
    force: bool = False,
    tritonserver: Path | str | None = None,
    reporter: Reporter | None = None,
    fp16: bool | None = None,
) -> InstallResult:
    """Install an artifact as the next version of NAME (and its pipeline with `pipeline`).

    pipeline=None installs the pipeline models when NAME already has them, of the kind it has (so a
    pipeline never pairs a new model with a stale pre/postprocess); True (the ensemble, as before kinds),
    "ensemble", "bls" (one Python model calling NAME through BLS: pipeline_kind.py) or False force it.
    Everything is checked before the repository is touched. When a server launched
    by `edge-deploy serve` serves the repository, it is asked to load the new version;
    a refused load fails the command (the server keeps serving the old version, and the
    config is pinned back to it). fp16: None serves what convert recorded (model_fp16.onnx for an FP16
    artifact where no plan is served); True/False override (`--fp16/--no-fp16`).
    """
    from ..serve import admin

    reporter = reporter or Reporter()
    artifact = Path(artifact_dir)
    repository = Path(repository)
    check_name(name)
    kind = pipeline_kind(pipeline)
    if instances < 1:
        raise RepositoryError(f"--instances must be at least 1 (got {instances}).")
    if keep is not None and keep < 1:
        raise RepositoryError(f"--keep must be at least 1 (got {keep}).")
    if max_queue_delay_us is not None and max_queue_delay_us < 0:
        raise RepositoryError(f"--max-queue-delay-us must be >= 0 (got {max_queue_delay_us}).")
    if not artifact.is_dir():
        raise RepositoryError(f"artifact directory {artifact} does not exist; create it with `edge-deploy convert`.")
    with reporter.stage("check artifact"):
        try:
            manifest = Manifest.read(artifact)
            manifest.verify_files(artifact)
        except RepositoryError:
            raise
        except EdgeDeployError as exc:
            raise RepositoryError(str(exc)) from exc
        if pipeline is None:
            kind = installed_kind(repository, name)
        choice = choose_runtime(artifact, manifest, runtime, tritonserver, fp16=fp16, pipeline=kind is not None)
        chosen, why = choice.runtime, choice.why
        options = mc.ConfigOptions(max_queue_delay_us=max_queue_delay_us, instances=instances, warmup=warmup,
                                   fp16=choice.fp16)
        if chosen == "tensorrt":
            check_plan_for_server(manifest, tritonserver, force, reporter)
        check_model_signature(artifact, manifest, chosen, options, force, reporter)
        items = _plan_versions(artifact, manifest, name, chosen, options, kind)
        check_writable(repository)
        check_state(repository)
        for item in items:
            model_dir = repository / item.model
            if model_dir.exists() and not (model_dir / CONFIG).is_file():
                raise RepositoryError(
                    f"{model_dir} exists but has no {CONFIG}, so edge-deploy did not make it; "
                    "pick another --name or move it away."
                )
            check_role_free(repository, item.model, config_role(item.config))
        record = server_for(repository, reporter)
    reporter.info(f"runtime: {chosen} ({why})")
    from ..evaluate.record import evaluation_summary

    result = InstallResult(name=name, version=0, runtime=chosen, repository=repository,
                           models=[i.model for i in items], evaluation=evaluation_summary(manifest.evaluation))
    with repository_lock(repository):
        try:
            clean_leftovers(repository)
            family = {i.model for i in items} | {name + s for s in PIPELINE_SUFFIXES}
            version = max([0, *(v for m in family for v in versions(repository, m))]) + 1
            previous = {i.model: policy_now(repository, i.model) for i in items}
            # A BLS pipeline that would do what the served one does keeps serving: it calls the new NAME itself.
            keep_serving = [i.model for i in items if kind is PipelineKind.BLS and bls_unchanged(repository, i)]
            result.version = version
            with reporter.stage(f"write {name} version {version}"):
                for item in items:
                    publish(repository, version, item)
        except OSError as exc:
            raise repository_error(f"install into {repository}", exc) from exc
        if record is not None:
            result.server_url = record.url
            with reporter.stage(f"load on {record.url}"):
                try:
                    admin.load_models(record, load_order([m for m in result.models if m not in keep_serving]))
                except RepositoryError:
                    pin_previous(repository, previous)
                    for model in result.models:  # counts for nothing when --keep prunes
                        record_failed(repository, model, [version], "the server refused to load it")
                    raise
            result.served = {m: admin.served_versions(record.url, m, record.client_tls()) for m in result.models}
            for model, served in result.served.items():
                record_served(repository, model, served)
        if keep is not None:
            # Only now: the new version is complete on disk and, with a server, confirmed served.
            # A failed load above has raised, so the versions that still serve are never pruned; nor is
            # the version this install replaced (what a failed rollout rolls back to): prune_versions.
            try:
                for item in items:
                    served = (result.served or {}).get(item.model, [])
                    pruned = prune_versions(repository, item.model, keep, served, replaced=previous[item.model])
                    if pruned:
                        result.pruned[item.model] = pruned
                        result.kept[item.model] = versions(repository, item.model)
            except OSError as exc:
                raise repository_error(f"prune old versions in {repository}", exc) from exc
    return result
