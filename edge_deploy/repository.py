"""The Triton model repository: install artifacts as versions, list, prune and roll back.

Layout written by `install`::

    <repo>/<name>/config.pbtxt          generated (edge_deploy.model_config)
    <repo>/<name>/<V>/manifest.json     the artifact's manifest, verbatim
    <repo>/<name>/<V>/install.json      runtime + install options (rollback rebuilds the config from it)
    <repo>/<name>/<V>/model.plan | model.onnx [+ model.py for the Python-backend ONNX Runtime runner]
    <repo>/<name>_preprocess/<V>/  <repo>/<name>_postprocess/<V>/  <repo>/<name>_pipeline/<V>/   (--pipeline)

Atomicity (a polling Triton never sees a partial version or config):

- A new version of an existing model is written into ``<repo>/<name>/.edge-deploy-tmp-*``.
  Triton ignores non-numeric subdirectories of a model directory ("ignore version
  directory ... which fails to convert to integral number", verified with the bundled
  2.51 server), so the staging directory is invisible; it is renamed to ``<V>`` when complete.
- A new model is staged as a whole (config + first version) and renamed into the
  repository. Every top-level directory of a repository is a model to Triton, even a
  dot-prefixed one (verified: it tries and fails to load it), so this staging area sits
  beside the repository (``<parent>/.<repo name>.edge-deploy-staging``); when a rename from
  there is impossible (the repository is a mount point, or its parent is not writable) it
  falls back to ``<repo>/.edge-deploy-staging`` (a polling server may then log a transient
  failed load for that directory).
- config.pbtxt is replaced last with os.replace (a temporary *file* in the model
  directory is ignored by Triton).
- Installs and rollbacks of one repository are serialised by an flock on
  ``<repo>/.edge-deploy.lock``; leftovers of a killed install are removed under that lock.

Versions and rollback: a new version is the highest + 1 and the config's
version_policy is ``latest { num_versions: 1 }``, so the newest version is served.
`rollback NAME --to V` rewrites the config for version V (from V's own manifest and
install options) with ``specific { versions: [V] }``; the next install goes back to
``latest 1``. Newer versions stay on disk until pruned with `--keep`.
"""
from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import os
import re
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

from . import __version__
from . import model_config as mc
from .errors import EdgeDeployError, RepositoryError
from .manifest import MANIFEST_NAME, read_manifest, sha256_file, verify_files
from .progress import Reporter

DEFAULT_REPOSITORY = Path("model_repository")
DEFAULT_NAME = "lanedet"  # the name LaneDetClient and `convert --install` default to
INSTALL_RECORD = "install.json"
CONFIG = "config.pbtxt"
LOCK_NAME = ".edge-deploy.lock"
TMP_PREFIX = ".edge-deploy-tmp-"
STAGING_DIR = ".edge-deploy-staging"
NAME_RE = re.compile(r"[A-Za-z0-9_-]+")
PIPELINE_SUFFIXES = ("_preprocess", "_postprocess", "_pipeline")


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
    notes: list[str] = field(default_factory=list)

    def summary(self) -> str:
        """What a person wants to read after an install (a few lines)."""
        lines = [f"installed {', '.join(self.models)} version {self.version} ({self.runtime}) in {self.repository}"]
        lines += [f"pruned {m} versions {', '.join(map(str, v))}" for m, v in self.pruned.items()]
        lines.append(served_line(self.served, self.server_url, self.repository))
        return "\n".join(lines)

    __str__ = summary

    def __rich__(self) -> str:
        return self.summary()


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

    __str__ = summary

    def __rich__(self) -> str:
        return self.summary()


def served_line(served: dict[str, list[int]] | None, url: str | None, repository: Path) -> str:
    """One line: which versions the server serves now, or that there is no server."""
    if served is None:
        return (
            f"no running edge-deploy server serves {repository}: files written "
            "(a polling server picks them up; a server started later loads them)"
        )
    parts = [f"{m} {', '.join(map(str, v)) or 'none'}" for m, v in served.items()]
    return f"server {url} now serves: " + "; ".join(parts)


@dataclass
class VersionInfo:
    """One version directory of a model."""

    version: int
    runtime: str | None
    manifest_sha256: str | None
    plan: dict[str, Any] | None
    installed: str | None
    plan_mismatch: list[str] | None = None  # why the plan would not run here ([] = fits; None = not checked)


@dataclass
class ModelInfo:
    """One model of a repository, its versions, and which are (or would be) served."""

    name: str
    role: str
    versions: list[VersionInfo]
    policy: list[int]  # versions the config's version_policy selects
    served: list[int] | None  # from the running server; None without one


# ---------------------------------------------------------------- small file helpers


def _fsync_dir(path: Path) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _write_bytes(path: Path, data: bytes) -> None:
    with open(path, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())


def _copy_file(src: Path, dst: Path) -> None:
    with open(src, "rb") as fin, open(dst, "wb") as fout:
        shutil.copyfileobj(fin, fout, 1 << 20)
        fout.flush()
        os.fsync(fout.fileno())


def _replace_file(path: Path, data: bytes) -> None:
    """Atomically replace `path` (temporary file in the same directory, fsync, os.replace)."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    _fsync_dir(path.parent)


def _remove_tree(path: Path) -> None:
    """Remove a directory so no reader sees it half-deleted: rename to a hidden name first."""
    if not path.exists():
        return
    hidden = path.parent / f"{TMP_PREFIX}rm-{path.name}-{os.getpid()}-{time.monotonic_ns()}"
    os.rename(path, hidden)
    shutil.rmtree(hidden, ignore_errors=True)


def _oserror(action: str, exc: OSError) -> RepositoryError:
    where = f" {exc.filename}" if exc.filename else ""
    return RepositoryError(
        f"cannot {action}:{where}: {exc.strerror or exc}; check the repository path and its permissions."
    )


# ---------------------------------------------------------------- reading a repository


def check_name(name: str) -> str:
    """Validate a model name (letters, digits, _ and - only)."""
    if not isinstance(name, str) or not NAME_RE.fullmatch(name) or len(name) > 200:
        raise RepositoryError(
            f"illegal model name {name!r}: use letters, digits, _ and - only (for example --name lanedet)."
        )
    return name


def versions(repository: Path, name: str) -> list[int]:
    """The numeric version directories of a model, ascending ([] when the model does not exist)."""
    model_dir = Path(repository) / name
    if not model_dir.is_dir():
        return []
    return sorted(int(p.name) for p in model_dir.iterdir() if p.is_dir() and p.name.isdigit() and p.name[0] != "0")


def read_config(repository: Path, name: str) -> Any:
    """The model's config.pbtxt as a ModelConfig."""
    path = Path(repository) / name / CONFIG
    try:
        return mc.parse_config(path.read_text())
    except OSError as exc:
        raise RepositoryError(f"{path} is missing or unreadable ({exc.strerror or exc}); reinstall the model.") from exc
    except Exception as exc:  # noqa: BLE001 - text_format.ParseError
        raise RepositoryError(f"{path} is not a valid config.pbtxt ({exc}); reinstall the model.") from exc


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def version_info(repository: Path, name: str, version: int) -> VersionInfo:
    """Runtime, manifest sha256 and plan fingerprint of one version directory."""
    vdir = Path(repository) / name / str(version)
    record = _read_json(vdir / INSTALL_RECORD) or {}
    manifest_path = vdir / MANIFEST_NAME
    manifest = _read_json(manifest_path) or {}
    info = VersionInfo(
        version=version,
        runtime=record.get("runtime"),
        manifest_sha256=sha256_file(manifest_path) if manifest_path.is_file() else None,
        plan=manifest.get("plan") if (vdir / "model.plan").is_file() else None,
        installed=record.get("installed"),
    )
    if (vdir / "model.plan").is_file():
        try:
            from .engine import plan_mismatch
        except ImportError:
            pass
        else:
            with contextlib.suppress(EdgeDeployError):
                info.plan_mismatch = list(plan_mismatch(info.plan))
    return info


def _model_names(repository: Path) -> list[str]:
    repo = Path(repository)
    if not repo.is_dir():
        return []
    return sorted(p.name for p in repo.iterdir() if p.is_dir() and (p / CONFIG).is_file())


def list_models(repository: Path = DEFAULT_REPOSITORY, name: str | None = None) -> list[ModelInfo]:
    """Models (or one model and its pipeline companions) with versions and served versions."""
    from . import control

    repository = Path(repository)
    names = _model_names(repository)
    if name is not None:
        check_name(name)
        family = [name, *(name + s for s in PIPELINE_SUFFIXES)]
        names = [n for n in names if n in family]
        if not names:
            raise RepositoryError(f"{repository} has no model {name!r}; see `edge-deploy models --repository {repository}`.")
    record = control.live_server(repository)
    infos = []
    for model in names:
        avail = versions(repository, model)
        try:
            config = read_config(repository, model)
        except RepositoryError:
            role, policy = "unreadable config.pbtxt", []
        else:
            role = config.parameters[mc.PARAM_ROLE].string_value if mc.PARAM_ROLE in config.parameters else ""
            role = role or ("pipeline" if config.platform == "ensemble" else "model")
            policy = mc.policy_versions(config, avail)
        infos.append(ModelInfo(
            name=model,
            role=role,
            versions=[version_info(repository, model, v) for v in avail],
            policy=policy,
            served=control.served_versions(record.url, model) if record else None,
        ))
    return infos


# ---------------------------------------------------------------- runtime and checks


def _server_backends(tritonserver: Path | str | None) -> list[str] | None:
    from .server import find_tritonserver

    try:
        return find_tritonserver(tritonserver).backends()
    except EdgeDeployError:
        return None


def choose_runtime(artifact: Path, requested: str | None, tritonserver: Path | str | None = None) -> tuple[str, str]:
    """(runtime, why): the runtime follows the artifact's files and the server's backends."""
    has_plan = (artifact / "model.plan").is_file()
    has_onnx = (artifact / "model.onnx").is_file()
    if requested is not None:
        if requested not in mc.RUNTIMES:
            raise RepositoryError(f"unknown runtime {requested!r}; use one of {', '.join(mc.RUNTIMES)}.")
        needed = "model.plan" if requested == "tensorrt" else "model.onnx"
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
    """Refuse a plan built for another device/TensorRT unless `force` (skipped, with a warning, when it cannot be checked)."""
    try:
        from .engine import plan_mismatch  # the TensorRT stage owns the fingerprint
    except ImportError as exc:
        reporter.warn(f"cannot check the plan fingerprint ({exc}); installing model.plan unchecked.")
        return
    try:
        differences = list(plan_mismatch(manifest.get("plan")))
    except EdgeDeployError as exc:
        differences = [f"this machine's fingerprint cannot be read ({exc})"]
    if differences and not force:
        raise RepositoryError(
            f"model.plan does not fit this machine ({'; '.join(differences)}): rebuild it here with "
            "`edge-deploy convert`, or install anyway with --force."
        )
    if differences:
        reporter.warn(f"installing a plan that does not fit this machine because of --force: {'; '.join(differences)}")


def _check_repository(repository: Path) -> None:
    if repository.exists() and not repository.is_dir():
        raise RepositoryError(f"repository {repository} is not a directory; pass --repository DIR.")
    probe = repository
    while not probe.exists():
        probe = probe.parent
    if not probe.is_dir() or not os.access(probe, os.W_OK | os.X_OK):
        raise RepositoryError(f"repository {repository} is not writable ({probe}); run as its owner or pick another --repository.")


# ---------------------------------------------------------------- locking and staging


@contextlib.contextmanager
def repository_lock(repository: Path) -> Iterator[None]:
    """Serialise writers of one repository (flock on <repo>/.edge-deploy.lock)."""
    try:
        repository.mkdir(parents=True, exist_ok=True)
        fd = os.open(repository / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:
        raise _oserror(f"write to repository {repository}", exc) from exc
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _staging_roots(repository: Path) -> list[Path]:
    """Where a new model may be staged, best first: beside the repository, then inside it."""
    repo = repository.resolve()
    return [repo.parent / f".{repo.name}.edge-deploy-staging", repo / STAGING_DIR]


def clean_leftovers(repository: Path) -> list[Path]:
    """Remove what a killed install left behind (call under the repository lock); returns what was removed."""
    removed: list[Path] = []
    candidates = list(_staging_roots(repository))
    for model_dir in (p for p in repository.iterdir() if p.is_dir()):
        candidates += [p for p in model_dir.iterdir() if p.name.startswith(TMP_PREFIX) and p.is_dir()]
        candidates += list(model_dir.glob(f".{CONFIG}.*.tmp"))
    for path in candidates:
        if path.is_dir():
            shutil.rmtree(path, ignore_errors=True)
        elif path.is_file():
            path.unlink(missing_ok=True)
        else:
            continue
        removed.append(path)
    return removed


@dataclass
class _Version:
    """One model's new version to write: files to copy or bytes to write, and its config."""

    model: str
    files: dict[str, Path | bytes]
    config: Any


def _fill(vdir: Path, files: dict[str, Path | bytes]) -> None:
    vdir.mkdir()
    for fname, content in files.items():
        if isinstance(content, bytes):
            _write_bytes(vdir / fname, content)
        else:
            _copy_file(content, vdir / fname)
    _fsync_dir(vdir)


def _publish(repository: Path, version: int, item: _Version) -> None:
    """Write one version, then its config, atomically as seen by a polling server."""
    model_dir = repository / item.model
    text = mc.config_text(item.config).encode()
    if model_dir.is_dir() and (model_dir / CONFIG).is_file():
        stage = Path(tempfile.mkdtemp(prefix=TMP_PREFIX, dir=model_dir))
        try:
            _fill(stage / "v", item.files)
            os.rename(stage / "v", model_dir / str(version))
        finally:
            shutil.rmtree(stage, ignore_errors=True)
        _fsync_dir(model_dir)
        _replace_file(model_dir / CONFIG, text)
        return
    for root in _staging_roots(repository):
        try:
            _publish_new_model(root, repository, version, item, text)
            return
        except OSError as exc:
            # EXDEV: the repository is its own mount (or bind mount); EACCES/EROFS: its parent is not ours.
            if exc.errno not in (errno.EXDEV, errno.EACCES, errno.EPERM, errno.EROFS) or root.parent == repository.resolve():
                raise


def _publish_new_model(root: Path, repository: Path, version: int, item: _Version, text: bytes) -> None:
    """Stage a whole new model directory (first version + config) under `root`, then rename it into place."""
    root.mkdir(exist_ok=True)
    stage = Path(tempfile.mkdtemp(prefix=f"{item.model}-", dir=root))
    try:
        new_model = stage / item.model
        new_model.mkdir()
        _fill(new_model / str(version), item.files)
        _write_bytes(new_model / CONFIG, text)
        _fsync_dir(new_model)
        os.rename(new_model, repository / item.model)  # fails rather than replace a directory that appeared
        _fsync_dir(repository)
    finally:
        shutil.rmtree(stage, ignore_errors=True)
        with contextlib.suppress(OSError):
            root.rmdir()


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
) -> list[_Version]:
    from .triton_models import source

    manifest_bytes = (artifact / MANIFEST_NAME).read_bytes()
    manifest_sha = hashlib.sha256(manifest_bytes).hexdigest()
    files: dict[str, Path | bytes] = {MANIFEST_NAME: manifest_bytes}
    if runtime == "tensorrt":
        files["model.plan"] = artifact / "model.plan"
    else:
        files["model.onnx"] = artifact / "model.onnx"
    if runtime == "python":
        files["model.py"] = source("onnx_runner.py")
    files[INSTALL_RECORD] = _install_record(runtime, "model", options, artifact)
    items = [_Version(name, files, mc.model_config(manifest, name=name, runtime=runtime, options=options,
                                                  manifest_sha256=manifest_sha))]
    if pipeline:
        plain = mc.ConfigOptions()
        pre, post, ens = (name + s for s in PIPELINE_SUFFIXES)
        items += [
            _Version(pre, {
                MANIFEST_NAME: manifest_bytes,
                "model.py": source("preprocess_model.py"),
                "preprocess.py": _copy_lanedet_module("preprocess.py"),
                INSTALL_RECORD: _install_record("python", "preprocess", plain, artifact),
            }, mc.preprocess_config(manifest, name=pre)),
            _Version(post, {
                MANIFEST_NAME: manifest_bytes,
                "model.py": source("postprocess_model.py"),
                "decode.py": _copy_lanedet_module("decode.py"),
                INSTALL_RECORD: _install_record("python", "postprocess", plain, artifact),
            }, mc.postprocess_config(manifest, name=post)),
            _Version(ens, {
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
) -> InstallResult:
    """Install an artifact as the next version of NAME (and its pipeline with `pipeline`).

    pipeline=None installs the pipeline models when NAME already has them (so the ensemble
    never pairs a new model with a stale pre/postprocess); True/False force it on/off.
    Everything is checked before the repository is touched. When a server launched
    by `edge-deploy serve` serves the repository, it is asked to load the new version;
    a refused load fails the command (the server keeps serving the old version, and the
    config is pinned back to it).
    """
    from . import control

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
        chosen, why = choose_runtime(artifact, runtime, tritonserver)
        if chosen == "tensorrt":
            check_plan_fingerprint(manifest, force, reporter)
        options = mc.ConfigOptions(max_queue_delay_us=max_queue_delay_us, instances=instances, warmup=warmup)
        if pipeline is None:
            pipeline = (repository / f"{name}_pipeline" / CONFIG).is_file()
        items = _plan_versions(artifact, manifest, name, chosen, options, pipeline)
        _check_repository(repository)
        for item in items:
            model_dir = repository / item.model
            if model_dir.exists() and not (model_dir / CONFIG).is_file():
                raise RepositoryError(
                    f"{model_dir} exists but has no {CONFIG}, so edge-deploy did not make it; "
                    "pick another --name or move it away."
                )
        record = _server_for(repository, reporter)
    reporter.info(f"runtime: {chosen} ({why})")
    result = InstallResult(name=name, version=0, runtime=chosen, repository=repository,
                           models=[i.model for i in items], notes=[f"runtime: {chosen} ({why})"])
    with repository_lock(repository):
        try:
            clean_leftovers(repository)
            family = {i.model for i in items} | {name + s for s in PIPELINE_SUFFIXES}
            version = max([0, *(v for m in family for v in versions(repository, m))]) + 1
            previous = {i.model: _policy_now(repository, i.model) for i in items}
            result.version = version
            with reporter.stage(f"write {name} version {version}"):
                for item in items:
                    _publish(repository, version, item)
            if keep is not None:
                for item in items:
                    pruned = _prune(repository, item.model, keep)
                    if pruned:
                        result.pruned[item.model] = pruned
        except OSError as exc:
            raise _oserror(f"install into {repository}", exc) from exc
        if record is not None:
            result.server_url = record.url
            with reporter.stage(f"load on {record.url}"):
                try:
                    control.load_models(record, _load_order(result.models))
                except RepositoryError:
                    _pin(repository, previous)
                    raise
            result.served = {m: control.served_versions(record.url, m) for m in result.models}
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
    from . import control

    record = control.find_record(repository)
    if record is None:
        return None
    if not control.server_live(record.url):
        reporter.warn(f"the server recorded for {repository} ({record.url}) does not answer; writing files only.")
        return None
    control.read_key(record)
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


def _prune(repository: Path, model: str, keep: int) -> list[int]:
    """Remove the oldest versions beyond `keep`, never one the config selects."""
    avail = versions(repository, model)
    selected = set(_policy_now(repository, model))
    doomed = [v for v in avail[:-keep] if v not in selected] if len(avail) > keep else []
    for v in doomed:
        _remove_tree(repository / model / str(v))
    return doomed


def prune(repository: Path, name: str, keep: int) -> dict[str, list[int]]:
    """Remove versions of NAME (and its pipeline models) beyond the newest `keep`."""
    check_name(name)
    if keep < 1:
        raise RepositoryError(f"--keep must be at least 1 (got {keep}).")
    repository = Path(repository)
    with repository_lock(repository):
        out = {}
        for model in (name, *(name + s for s in PIPELINE_SUFFIXES)):
            if (repository / model / CONFIG).is_file():
                removed = _prune(repository, model, keep)
                if removed:
                    out[model] = removed
        return out


def _write_config_for(repository: Path, model: str, version: int) -> None:
    """Rewrite MODEL's config for `version` (its own manifest and install options), pinned to it."""
    vdir = repository / model / str(version)
    manifest = _read_json(vdir / MANIFEST_NAME)
    record = _read_json(vdir / INSTALL_RECORD)
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
    _replace_file(repository / model / CONFIG, mc.config_text(config).encode())


def rollback(
    repository: Path, name: str, to: int | None = None, *, reporter: Reporter | None = None,
) -> RollbackResult:
    """Serve an older version of NAME again (default: the newest one below the served one).

    The config is rewritten for that version with version_policy specific [V]; the
    pipeline models follow when they have version V. A running server is asked to load.
    """
    from . import control

    reporter = reporter or Reporter()
    repository = Path(repository)
    check_name(name)
    if not (repository / name / CONFIG).is_file():
        raise RepositoryError(f"{repository} has no model {name!r}; see `edge-deploy models --repository {repository}`.")
    avail = versions(repository, name)
    record = _server_for(repository, reporter)
    current = (control.served_versions(record.url, name) if record else []) or _policy_now(repository, name)
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
    _check_repository(repository)
    with repository_lock(repository):
        saved = {m: (repository / m / CONFIG).read_bytes() for m in models}

        def restore() -> None:
            for model, text in saved.items():
                with contextlib.suppress(OSError):
                    _replace_file(repository / model / CONFIG, text)

        try:
            for model in models:
                _write_config_for(repository, model, to)
        except OSError as exc:
            restore()
            raise _oserror(f"write the config of {name}", exc) from exc
        except RepositoryError:
            restore()
            raise
        if record is not None:
            result.server_url = record.url
            with reporter.stage(f"load {name} version {to} on {record.url}"):
                try:
                    control.load_models(record, _load_order(models))
                except RepositoryError:
                    restore()  # the server keeps serving what it served: make the configs say so again
                    raise
            result.served = {m: control.served_versions(record.url, m) for m in models}
    return result
