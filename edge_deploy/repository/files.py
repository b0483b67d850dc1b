"""Writing a Triton model repository so a polling server never sees a partial version or config.

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
- config.pbtxt is replaced last, atomically (a temporary *file* in the model directory
  is ignored by Triton). Before the new version is renamed in, a ``latest`` config is
  pinned (``specific``) to the versions it selects, so a crash between the rename and the
  new config leaves a config that selects the version it describes, never the new
  version with the old version's dims.
- Writers of one repository are serialised by an flock on ``<repo>/.edge-deploy.lock``;
  leftovers of a killed install are removed under that lock.
"""
from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from ..artifact.manifest import open_inside
from ..errors import RepositoryError, os_error_message
from ..core.fsutil import fsync_dir, write_bytes_atomic
from ..core.triton_layout import CONFIG, parse_config, policy_versions
from . import model_config as mc

LOCK_NAME = ".edge-deploy.lock"
TMP_PREFIX = ".edge-deploy-tmp-"
STAGING_DIR = ".edge-deploy-staging"


def repository_error(action: str, exc: OSError) -> RepositoryError:
    """A one-line RepositoryError for an OSError while doing `action` (the advice follows the error's kind)."""
    return RepositoryError(f"cannot {action}: {os_error_message(exc)}")


def check_writable(repository: Path) -> None:
    """RepositoryError unless `repository` is (or can be created as) a writable directory."""
    if repository.exists() and not repository.is_dir():
        raise RepositoryError(f"repository {repository} is not a directory; pass --repository DIR.")
    probe = repository
    while not probe.exists():
        probe = probe.parent
    if probe.is_dir() and _read_only_mount(probe):
        raise RepositoryError(f"repository {repository} is on a file system mounted read-only ({probe}); remount it "
                              "read-write or pick another --repository.")
    if not probe.is_dir() or not os.access(probe, os.W_OK | os.X_OK):
        raise RepositoryError(f"repository {repository} is not writable ({probe}); run as its owner or pick another --repository.")


def _read_only_mount(path: Path) -> bool:
    """Whether `path` is on a file system mounted read-only (no user, root included, can write there)."""
    try:
        return bool(os.statvfs(path).f_flag & os.ST_RDONLY)
    except OSError:
        return False


@contextlib.contextmanager
def repository_lock(repository: Path) -> Iterator[None]:
    """Serialise writers of one repository (flock on <repo>/.edge-deploy.lock)."""
    try:
        repository.mkdir(parents=True, exist_ok=True)
        fd = os.open(repository / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:
        raise repository_error(f"write to repository {repository}", exc) from exc
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
    candidates += list(repository.glob(".edge-deploy-state.json.*.tmp"))  # history's temporary files
    for model_dir in (p for p in repository.iterdir() if p.is_dir()):
        candidates += [p for p in model_dir.iterdir() if p.name.startswith(TMP_PREFIX) and p.is_dir()]
        candidates += list(model_dir.glob(f".{CONFIG}.*.tmp"))  # write_bytes_atomic's temporary files
    for path in candidates:
        if path.is_dir():
            shutil.rmtree(path, ignore_errors=True)
        elif path.is_file():
            path.unlink(missing_ok=True)
        else:
            continue
        removed.append(path)
    return removed


def remove_tree(path: Path) -> None:
    """Remove a directory so no reader sees it half-deleted: rename to a hidden name first."""
    if not path.exists():
        return
    hidden = path.parent / f"{TMP_PREFIX}rm-{path.name}-{os.getpid()}-{time.monotonic_ns()}"
    os.rename(path, hidden)
    shutil.rmtree(hidden, ignore_errors=True)


@dataclass
class NewVersion:
    """One model's new version to write: files to copy or bytes to write, and its config."""

    model: str
    files: dict[str, Path | bytes]
    config: Any  # a ModelConfig (edge_deploy.repository.model_config)

    def config_text(self) -> bytes:
        """The config.pbtxt bytes for this version's config."""
        return mc.config_text(self.config).encode()


def _write_synced(path: Path, content: Path | bytes) -> None:
    """Write bytes, or copy a file, to `path` and fsync it (a staged, not yet visible, file)."""
    with open(path, "wb") as out:
        if isinstance(content, bytes):
            out.write(content)
        else:
            with open_inside(content) as src:  # never a link followed out of the artifact
                shutil.copyfileobj(src, out, 1 << 20)
        out.flush()
        os.fsync(out.fileno())


def _fill(vdir: Path, files: dict[str, Path | bytes]) -> None:
    vdir.mkdir()
    for fname, content in files.items():
        _write_synced(vdir / fname, content)
    fsync_dir(vdir)


def _pin_selected(model_dir: Path) -> None:
    """Rewrite a ``latest`` config as ``specific`` for the versions it selects now (same model, same dims)."""
    try:
        config = parse_config((model_dir / CONFIG).read_text())
    except Exception:  # noqa: BLE001 - not a config we can read: nothing to pin, install replaces it
        return
    if config.version_policy.WhichOneof("policy_choice") == "specific":
        return
    present = [int(p.name) for p in model_dir.iterdir() if p.is_dir() and p.name.isdigit() and p.name[0] != "0"]
    selected = policy_versions(config, present)
    if selected:
        config.version_policy.specific.versions.extend(selected)
        write_bytes_atomic(model_dir / CONFIG, mc.config_text(config).encode())


def publish(repository: Path, version: int, item: NewVersion) -> None:
    """Write one version, then its config, atomically as seen by a polling server."""
    model_dir = repository / item.model
    if model_dir.is_dir() and (model_dir / CONFIG).is_file():
        stage = Path(tempfile.mkdtemp(prefix=TMP_PREFIX, dir=model_dir))
        try:
            _fill(stage / "v", item.files)  # (not `stage` itself: mkdtemp's mode is 0700)
            _pin_selected(model_dir)  # a crash from here to the new config leaves a loadable model
            os.rename(stage / "v", model_dir / str(version))
        finally:
            shutil.rmtree(stage, ignore_errors=True)
        fsync_dir(model_dir)
        write_bytes_atomic(model_dir / CONFIG, item.config_text())
        return
    for root in _staging_roots(repository):
        try:
            _publish_new_model(root, repository, version, item)
            return
        except OSError as exc:
            # EXDEV: the repository is its own mount (or bind mount); EACCES/EROFS: its parent is not ours.
            if exc.errno not in (errno.EXDEV, errno.EACCES, errno.EPERM, errno.EROFS) or root.parent == repository.resolve():
                raise


def _publish_new_model(root: Path, repository: Path, version: int, item: NewVersion) -> None:
    """Stage a whole new model directory (first version + config) under `root`, then rename it into place."""
    root.mkdir(exist_ok=True)
    stage = Path(tempfile.mkdtemp(prefix=f"{item.model}-", dir=root))
    try:
        new_model = stage / item.model
        new_model.mkdir()
        _fill(new_model / str(version), item.files)
        _write_synced(new_model / CONFIG, item.config_text())
        fsync_dir(new_model)
        os.rename(new_model, repository / item.model)  # fails rather than replace a directory that appeared
        fsync_dir(repository)
    finally:
        shutil.rmtree(stage, ignore_errors=True)
        with contextlib.suppress(OSError):
            root.rmdir()

