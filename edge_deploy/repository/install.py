"""The Triton model repository: install artifacts as versions, list, prune and roll back.

Layout written by `install`::

    <repo>/<name>/config.pbtxt          generated (edge_deploy.repository.model_config)
    <repo>/<name>/<V>/manifest.json     the artifact's manifest, verbatim
    <repo>/<name>/<V>/install.json      runtime + install options (rollback rebuilds the config from it)
    <repo>/<name>/<V>/model.plan | model.onnx [+ model.py for the Python-backend ONNX Runtime runner]
    <repo>/<name>_preprocess/<V>/  <repo>/<name>_postprocess/<V>/  <repo>/<name>_pipeline/<V>/   (--pipeline)

Writing is atomic as seen by a polling Triton and serialised per repository
(edge_deploy.repository.files).

Versions and rollback: a new version is the highest + 1 and the config's
version_policy is ``latest { num_versions: 1 }``, so the newest version is served.
`rollback NAME --to V` rewrites the config for version V (from V's own manifest and
install options) with ``specific { versions: [V] }``; the next install goes back to
``latest 1``. Newer versions stay on disk until pruned with `--keep`.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .._version import __version__
from ..artifact import (
    FP16_ONNX_NAME,
    ONNX_NAME,
    PLAN_NAME,
    MANIFEST_NAME,
    Manifest,
    read_manifest,
    sha256_file,
    verify_files,
)
from ..engine.fingerprint import plan_mismatch
from ..errors import EdgeDeployError, RepositoryError
from ..fsutil import write_bytes_atomic
from ..progress import Reporter
from . import model_config as mc
from .files import (
    CONFIG,
    NewVersion,
    check_writable,
    clean_leftovers,
    publish,
    remove_tree,
    repository_error,
    repository_lock,
)
from .versions import (
    DEFAULT_REPOSITORY,
    INSTALL_RECORD,
    PIPELINE_SUFFIXES,
    check_name,
    read_config,
    read_json,
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
    served: dict[str, list[int]] | None = None  # None: no running server for this repository
    server_url: str | None = None
    evaluation: str | None = None  # the F1 convert --eval-data recorded, one line

    def summary(self) -> str:
        """What a person wants to read after an install (a few lines)."""
        lines = [f"installed {', '.join(self.models)} version {self.version} ({self.runtime}) in {self.repository}"]
        if self.evaluation:
            lines.append(self.evaluation)
        lines += [f"pruned {m} versions {', '.join(map(str, v))}" for m, v in self.pruned.items()]
        lines.append(served_line(self.served, self.server_url, self.repository))
        return "\n".join(lines)

    __str__ = __rich__ = summary  # rich prints the summary too


@dataclass
class RollbackResult:
    """What `rollback` did."""

    name: str
    version: int
    previous: list[int]
    models: list[str]
    repository: Path
    served: dict[str, list[int]] | None = None
    server_url: str | None = None

    def summary(self) -> str:
        """A few readable lines."""
        return (
            f"{', '.join(self.models)} pinned to version {self.version} (was {self.previous or 'none'})\n"
            + served_line(self.served, self.server_url, self.repository)
        )

    __str__ = __rich__ = summary  # rich prints the summary too


def served_line(served: dict[str, list[int]] | None, url: str | None, repository: Path) -> str:
    """One line: which versions the server serves now, or that there is no server."""
    if served is None:
        return (
            f"no running edge-deploy server serves {repository}: files written "
            "(a polling server picks them up; a server started later loads them)"
        )
    parts = [f"{m} {', '.join(map(str, v)) or 'none'}" for m, v in served.items()]
    return f"server {url} now serves: " + "; ".join(parts)






# ---------------------------------------------------------------- reading a repository














# ---------------------------------------------------------------- runtime and checks


def _server_backends(tritonserver: Path | str | None) -> list[str] | None:
    from ..serve.tritonserver import find_tritonserver

    try:
        return find_tritonserver(tritonserver).backends()
    except EdgeDeployError:
        return None


def choose_runtime(artifact: Path, requested: str | None, tritonserver: Path | str | None = None,
                   *, fp16: bool = False) -> tuple[str, str]:
    """(runtime, why): the runtime follows the artifact's files and the server's backends.

    fp16: serve model_fp16.onnx, so an ONNX Runtime runtime (the plan is not considered).
    """
    onnx_name = FP16_ONNX_NAME if fp16 else ONNX_NAME
    has_plan = (artifact / PLAN_NAME).is_file() and not fp16
    has_onnx = (artifact / onnx_name).is_file()
    if fp16 and requested == "tensorrt":
        raise RepositoryError(
            f"--fp16 serves {FP16_ONNX_NAME} with ONNX Runtime; a plan (built from it on TensorRT 10+) is "
            "installed with --runtime tensorrt and without --fp16."
        )
    if fp16 and not has_onnx:
        raise RepositoryError(
            f"--fp16 needs {FP16_ONNX_NAME}, which {artifact} does not have; convert with --precision fp16."
        )
    if requested is not None:
        if requested not in mc.RUNTIMES:
            raise RepositoryError(f"unknown runtime {requested!r}; use one of {', '.join(mc.RUNTIMES)}.")
        needed = PLAN_NAME if requested == "tensorrt" else onnx_name
        if not (artifact / needed).is_file():
            raise RepositoryError(
                f"--runtime {requested} needs {needed}, which {artifact} does not have; "
                "pick another runtime or convert again."
            )
        return requested, "requested with --runtime"
    if not has_plan and not has_onnx:
        raise RepositoryError(f"{artifact} has neither model.plan nor model.onnx; re-run `edge-deploy convert`.")
    backends = _server_backends(tritonserver)
    if has_plan and (backends is None or "tensorrt" in backends or not has_onnx):
        return "tensorrt", "the artifact has a TensorRT plan"
    if backends is not None and "onnxruntime" in backends:
        return "onnxruntime", "the server has the ONNX Runtime backend"
    if backends is None:
        return "python", "no tritonserver found here to ask for backends: ONNX Runtime in a Python-backend model"
    return "python", "the server has no ONNX Runtime backend: ONNX Runtime (CPU) in a Python-backend model"


def check_plan_fingerprint(manifest: dict[str, Any], force: bool, reporter: Reporter) -> None:
    """Refuse a plan built for another device/TensorRT unless `force`."""
    try:
        differences = list(plan_mismatch(Manifest(manifest).plan))
    except EdgeDeployError as exc:
        differences = [f"this machine's fingerprint cannot be read ({exc})"]
    if differences and not force:
        raise RepositoryError(
            f"model.plan does not fit this machine ({'; '.join(differences)}): rebuild it here with "
            "`edge-deploy convert`, or install anyway with --force."
        )
    if differences:
        reporter.warn(f"installing a plan that does not fit this machine because of --force: {'; '.join(differences)}")


def check_model_signature(artifact: Path, manifest: dict[str, Any], runtime: str, options: mc.ConfigOptions,
                          force: bool, reporter: Reporter) -> None:
    """The file the runtime serves must have the manifest's I/O (config.pbtxt is written from the manifest)."""
    from .signature import check_onnx_signature, check_plan_signature

    view = Manifest(manifest)
    io = mc.served_io(manifest, runtime, options)
    if runtime != "tensorrt":
        check_onnx_signature(artifact / (FP16_ONNX_NAME if options.fp16 else ONNX_NAME), io)
        return
    check_plan_fingerprint(manifest, force, reporter)
    if force:
        return  # a plan for another device may not even deserialize here; the server's load decides
    plan = view.plan or {}
    if not check_plan_signature(artifact / PLAN_NAME, io, plan.get("dla_core")):
        reporter.info("TensorRT is not installed here: the plan's I/O is checked when the server loads it")


# ---------------------------------------------------------------- install


def _copy_lanedet_module(module: str) -> bytes:
    from importlib import resources

    return resources.files("edge_deploy.lanedet").joinpath(module).read_bytes()


def _install_record(runtime: str, role: str, options: mc.ConfigOptions, artifact: Path) -> bytes:
    return json.dumps({
        "tool": {"name": "edge-deploy", "version": __version__},
        "installed": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "artifact": str(artifact),
        "role": role,
        "runtime": runtime,
        "options": options.to_dict(),
    }, indent=2).encode() + b"\n"


def _plan_versions(
    artifact: Path, manifest: dict[str, Any], name: str, runtime: str, options: mc.ConfigOptions, pipeline: bool,
) -> list[NewVersion]:
    from .triton_models import source

    manifest_bytes = (artifact / MANIFEST_NAME).read_bytes()
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
    if pipeline:
        io = mc.served_io(manifest, runtime, options)
        if io != Manifest(manifest).io:
            raise RepositoryError(
                "--pipeline needs the served model to have model.onnx's FP32 inputs and outputs, but this one has "
                "FP16 I/O (--fp16-io); install without --pipeline (LaneDetClient handles FP16 I/O), or convert "
                "without --fp16-io."
            )
        plain = mc.ConfigOptions()
        pre, post, ens = (name + s for s in PIPELINE_SUFFIXES)
        if mc.fused_frame(manifest) is None:  # a fused model preprocesses the frame itself
            items.append(NewVersion(pre, {
                MANIFEST_NAME: manifest_bytes,
                "model.py": source("preprocess_model.py"),
                "preprocess.py": _copy_lanedet_module("preprocess.py"),
                INSTALL_RECORD: _install_record("python", "preprocess", plain, artifact),
            }, mc.preprocess_config(manifest, name=pre)))
        items += [
            NewVersion(post, {
                MANIFEST_NAME: manifest_bytes,
                "model.py": source("postprocess_model.py"),
                "decode.py": _copy_lanedet_module("decode.py"),
                INSTALL_RECORD: _install_record("python", "postprocess", plain, artifact),
            }, mc.postprocess_config(manifest, name=post)),
            NewVersion(ens, {
                MANIFEST_NAME: manifest_bytes,
                INSTALL_RECORD: _install_record("ensemble", "pipeline", plain, artifact),
            }, mc.pipeline_config(manifest, name=ens, model=name, preprocess=pre, postprocess=post)),
        ]
    return items


def install(
    artifact_dir: Path,
    repository: Path = DEFAULT_REPOSITORY,
    name: str = DEFAULT_NAME,
    *,
    runtime: str | None = None,
    pipeline: bool | None = None,
    max_queue_delay_us: int | None = None,
    instances: int = 1,
    warmup: bool = False,
    keep: int | None = None,
    force: bool = False,
    tritonserver: Path | str | None = None,
    reporter: Reporter | None = None,
    fp16: bool = False,
) -> InstallResult:
    """Install an artifact as the next version of NAME (and its pipeline with `pipeline`).

    pipeline=None installs the pipeline models when NAME already has them (so the ensemble
    never pairs a new model with a stale pre/postprocess); True/False force it on/off.
    Everything is checked before the repository is touched. When a server launched
    by `edge-deploy serve` serves the repository, it is asked to load the new version;
    a refused load fails the command (the server keeps serving the old version, and the
    config is pinned back to it).
    """
    from ..serve import admin

    reporter = reporter or Reporter()
    artifact = Path(artifact_dir)
    repository = Path(repository)
    check_name(name)
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
            manifest = read_manifest(artifact)
            verify_files(artifact, manifest)
        except RepositoryError:
            raise
        except EdgeDeployError as exc:
            raise RepositoryError(str(exc)) from exc
        chosen, why = choose_runtime(artifact, runtime, tritonserver, fp16=fp16)
        options = mc.ConfigOptions(max_queue_delay_us=max_queue_delay_us, instances=instances, warmup=warmup,
                                   fp16=fp16)
        check_model_signature(artifact, manifest, chosen, options, force, reporter)
        if pipeline is None:
            pipeline = (repository / f"{name}_pipeline" / CONFIG).is_file()
        items = _plan_versions(artifact, manifest, name, chosen, options, pipeline)
        check_writable(repository)
        for item in items:
            model_dir = repository / item.model
            if model_dir.exists() and not (model_dir / CONFIG).is_file():
                raise RepositoryError(
                    f"{model_dir} exists but has no {CONFIG}, so edge-deploy did not make it; "
                    "pick another --name or move it away."
                )
        record = _server_for(repository, reporter)
    reporter.info(f"runtime: {chosen} ({why})")
    from ..evaluate.record import evaluation_summary

    result = InstallResult(name=name, version=0, runtime=chosen, repository=repository,
                           models=[i.model for i in items], evaluation=evaluation_summary(manifest.get("evaluation")))
    with repository_lock(repository):
        try:
            clean_leftovers(repository)
            family = {i.model for i in items} | {name + s for s in PIPELINE_SUFFIXES}
            version = max([0, *(v for m in family for v in versions(repository, m))]) + 1
            previous = {i.model: _policy_now(repository, i.model) for i in items}
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
                    admin.load_models(record, _load_order(result.models))
                except RepositoryError:
                    _pin(repository, previous)
                    raise
            result.served = {m: admin.served_versions(record.url, m, record.client_tls()) for m in result.models}
        if keep is not None:
            # Only now: the new version is complete on disk and, with a server, confirmed served.
            # A failed load above has raised, so the versions that still serve are never pruned.
            try:
                for item in items:
                    served = (result.served or {}).get(item.model, [])
                    pruned = _prune(repository, item.model, keep, served)
                    if pruned:
                        result.pruned[item.model] = pruned
            except OSError as exc:
                raise repository_error(f"prune old versions in {repository}", exc) from exc
    return result


def _load_order(models: list[str]) -> list[str]:
    """What to ask the server to load: just the ensemble when there is one.

    Loading an ensemble in explicit mode reloads its changed composing models with it, as
    one step; loading the lane model alone first would make Triton re-check the ensemble
    against the old pre/postprocess configs (and fail) whenever the I/O dims change.
    """
    ensembles = [m for m in models if m.endswith("_pipeline")]
    return ensembles or models


def _server_for(repository: Path, reporter: Reporter) -> Any:
    """The live server record for the repository, its key checked readable before anything is written."""
    from ..serve import admin
    from ..serve.record import find_record, prune_stale_records, read_key

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


def _policy_now(repository: Path, model: str) -> list[int]:
    if not (repository / model / CONFIG).is_file():
        return []
    try:
        return mc.policy_versions(read_config(repository, model), versions(repository, model))
    except RepositoryError:
        return []


def _pin(repository: Path, previous: dict[str, list[int]]) -> None:
    """After a refused load: pin each model's config to the version it served before (best effort)."""
    for model, served in previous.items():
        if served:
            with contextlib.suppress(EdgeDeployError, OSError):
                _write_config_for(repository, model, served[-1])


# ---------------------------------------------------------------- prune and rollback


def _prune(repository: Path, model: str, keep: int, served: list[int] | tuple[int, ...] = ()) -> list[int]:
    """Remove the oldest versions beyond `keep`, never one the config selects or the server serves."""
    avail = versions(repository, model)
    spared = set(_policy_now(repository, model)) | set(served)
    doomed = [v for v in avail[:-keep] if v not in spared] if len(avail) > keep else []
    for v in doomed:
        remove_tree(repository / model / str(v))
    return doomed


def prune(repository: Path, name: str, keep: int) -> dict[str, list[int]]:
    """Remove versions of NAME (and its pipeline models) beyond the newest `keep`, never a served one."""
    from ..serve import admin

    check_name(name)
    if keep < 1:
        raise RepositoryError(f"--keep must be at least 1 (got {keep}).")
    repository = Path(repository)
    record = admin.live_server(repository)
    with repository_lock(repository):
        out = {}
        for model in (name, *(name + s for s in PIPELINE_SUFFIXES)):
            if (repository / model / CONFIG).is_file():
                served = admin.served_versions(record.url, model, record.client_tls()) if record is not None else []
                removed = _prune(repository, model, keep, served)
                if removed:
                    out[model] = removed
        return out


def _write_config_for(repository: Path, model: str, version: int) -> None:
    """Rewrite MODEL's config for `version` (its own manifest and install options), pinned to it."""
    vdir = repository / model / str(version)
    manifest = read_json(vdir / MANIFEST_NAME)
    record = read_json(vdir / INSTALL_RECORD)
    if manifest is None or record is None:
        raise RepositoryError(f"{vdir} has no readable {MANIFEST_NAME}/{INSTALL_RECORD}; it was not installed by edge-deploy.")
    role = record.get("role", "model")
    if role == "preprocess":
        config = mc.preprocess_config(manifest, name=model, version_policy=version)
    elif role == "postprocess":
        config = mc.postprocess_config(manifest, name=model, version_policy=version)
    elif role == "pipeline":
        base = model[: -len("_pipeline")]
        config = mc.pipeline_config(manifest, name=model, model=base, preprocess=base + "_preprocess",
                                    postprocess=base + "_postprocess", version_policy=version)
    else:
        config = mc.model_config(manifest, name=model, runtime=record["runtime"],
                                 options=mc.ConfigOptions.from_dict(record.get("options") or {}),
                                 version_policy=version, manifest_sha256=sha256_file(vdir / MANIFEST_NAME))
    write_bytes_atomic(repository / model / CONFIG, mc.config_text(config).encode())


def rollback(
    repository: Path, name: str, to: int | None = None, *, reporter: Reporter | None = None,
) -> RollbackResult:
    """Serve an older version of NAME again (default: the newest one below the served one).

    The config is rewritten for that version with version_policy specific [V]; the
    pipeline models follow when they have version V. A running server is asked to load.
    """
    from ..serve import admin

    reporter = reporter or Reporter()
    repository = Path(repository)
    check_name(name)
    if not (repository / name / CONFIG).is_file():
        raise RepositoryError(f"{repository} has no model {name!r}; see `edge-deploy models --repository {repository}`.")
    avail = versions(repository, name)
    record = _server_for(repository, reporter)
    current = (admin.served_versions(record.url, name, record.client_tls()) if record else []) or _policy_now(repository, name)
    if to is None:
        older = [v for v in avail if current and v < min(current)]
        if not older:
            raise RepositoryError(
                f"{name} has no version older than the served {current or 'none'} (versions: "
                f"{', '.join(map(str, avail)) or 'none'}); pass --to V."
            )
        to = older[-1]
    if to not in avail:
        raise RepositoryError(
            f"{name} has no version {to} (versions: {', '.join(map(str, avail)) or 'none'}); pick one of them with --to."
        )
    models = [name] + [name + s for s in PIPELINE_SUFFIXES if (repository / (name + s) / str(to)).is_dir()
                       and (repository / (name + s) / CONFIG).is_file()]
    result = RollbackResult(name=name, version=to, previous=current, models=models, repository=repository)
    check_writable(repository)
    with repository_lock(repository):
        saved = {m: (repository / m / CONFIG).read_bytes() for m in models}

        def restore() -> None:
            for model, text in saved.items():
                with contextlib.suppress(OSError):
                    write_bytes_atomic(repository / model / CONFIG, text)

        try:
            for model in models:
                _write_config_for(repository, model, to)
        except OSError as exc:
            restore()
            raise repository_error(f"write the config of {name}", exc) from exc
        except RepositoryError:
            restore()
            raise
        if record is not None:
            result.server_url = record.url
            with reporter.stage(f"load {name} version {to} on {record.url}"):
                try:
                    admin.load_models(record, _load_order(models))
                except RepositoryError:
                    restore()  # the server keeps serving what it served: make the configs say so again
                    raise
            result.served = {m: admin.served_versions(record.url, m, record.client_tls()) for m in models}
    return result
