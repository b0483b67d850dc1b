"""The read side of a model repository: model names, versions, configs, what is served.

Nothing here writes (`edge_deploy.repository.new_version` does) and nothing asks a server (`edge_deploy.deploy.models`
adds what one serves).
"""
from __future__ import annotations

import contextlib
import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ..artifact.manifest import MANIFEST_NAME, PLAN_NAME, Manifest, PlanRecord, sha256_file
from ..machine.plan_fit import plan_mismatch
from ..errors import EdgeDeployError, RepositoryError
from ..lanedet import contract
from .install_record import InstallRecord
from ..core.triton_layout import CONFIG, read_config

DEFAULT_REPOSITORY = Path("model_repository")




NAME_RE = re.compile(r"[A-Za-z0-9_-]+")


PIPELINE_SUFFIXES = ("_preprocess", "_postprocess", "_pipeline")


@dataclass
class VersionInfo:
    """One version directory of a model."""

    version: int
    runtime: str | None
    manifest_sha256: str | None
    plan: PlanRecord | None
    installed: str | None
    plan_mismatch: list[str] | None = None  # why the plan would not run here ([] = fits; None = not checked)

    def to_dict(self) -> dict[str, Any]:
        """The JSON form, with the plan section as its manifest has it."""
        return {**asdict(self), "plan": self.plan.to_dict() if self.plan is not None else None}


@dataclass
class ModelInfo:
    """One model of a repository, its versions, and which are (or would be) served."""

    name: str
    role: str
    versions: list[VersionInfo]
    policy: list[int]  # versions the config's version_policy selects
    served: list[int] | None  # from the running server; None without one
    warning: str | None = None  # the config selects other versions than the server serves (triton_layout)
    # From its config (model_config.scheduling): high|normal|low, instance count, GPU|CPU|auto|"DLA core N"; None
    # for an ensemble or an unreadable config.
    priority: str | None = None
    instances: int | None = None
    placement: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """The JSON form (`repository list --json`)."""
        return {**asdict(self), "versions": [v.to_dict() for v in self.versions]}


def check_name(name: str) -> str:
    """Validate a model name (letters, digits, _ and - only, at most 200 characters)."""
    if isinstance(name, str) and len(name) > 200:
        raise RepositoryError(
            f"model name {name[:20]!r}... is {len(name)} characters long; use at most 200 (for example --name lanedet)."
        )
    if not isinstance(name, str) or not NAME_RE.fullmatch(name):
        raise RepositoryError(
            f"illegal model name {name!r}: use letters, digits, _ and - only (for example --name lanedet)."
        )
    return name


def check_new_name(name: str) -> str:
    """`check_name`, and a name every command can address as written: not starting with '-' (a command line would
    take `-rf` for an option, and `rollback -rf` or `models -rf` could not name it). Only a new model's name is
    held to this; a model already in a repository is still found by `check_name`'s rule."""
    check_name(name)
    if not name[0].isalnum() and name[0] != "_":
        raise RepositoryError(
            f"illegal model name {name!r}: it starts with {name[0]!r}, which a command line takes for an option, so "
            "`edge-deploy rollback` and `models` could not name it; start it with a letter, digit or _ (for "
            "example --name lanedet).")
    return name


def config_role(config: Any) -> str:
    """What a model is to edge-deploy: "model", "preprocess", "postprocess" or "pipeline" (its config's role)."""
    role = config.parameters[contract.PARAM_ROLE].string_value if contract.PARAM_ROLE in config.parameters else ""
    return role or ("pipeline" if config.platform == "ensemble" else "model")


def check_role_free(repository: Path, model: str, role: str) -> None:
    """RepositoryError when MODEL exists in the repository with another role than the `role` an install would give
    it: a lane model installed over NAME_pipeline (or a pipeline over a lane model) would change what its clients
    get."""
    if not (Path(repository) / model / CONFIG).is_file():
        return
    try:
        have = config_role(read_config(repository, model))
    except RepositoryError:
        return  # install rewrites an unreadable config; nothing serves from it
    if have == role:
        return
    owner = next((model[: -len(s)] for s in PIPELINE_SUFFIXES if model.endswith(s) and have == s[1:]), None)
    what = f"{owner}'s {have}" if owner else f"a {have} of its own"
    raise RepositoryError(
        f"{model} is {what} in {repository}: installing a {role} under that name would change what its clients "
        "get; pick another --name."
    )


def version_info(repository: Path, name: str, version: int) -> VersionInfo:
    """Runtime, manifest sha256 and plan fingerprint of one version directory."""
    vdir = Path(repository) / name / str(version)
    record = InstallRecord.read(vdir)
    manifest_path = vdir / MANIFEST_NAME
    plan = None
    if (vdir / PLAN_NAME).is_file():
        with contextlib.suppress(EdgeDeployError):
            plan = Manifest.read(vdir).plan
    info = VersionInfo(
        version=version,
        runtime=record.runtime if record else None,
        manifest_sha256=sha256_file(manifest_path) if manifest_path.is_file() else None,
        plan=plan,
        installed=record.installed if record else None,
    )
    if (vdir / PLAN_NAME).is_file():
        with contextlib.suppress(EdgeDeployError):
            info.plan_mismatch = list(plan_mismatch(info.plan))
    return info
