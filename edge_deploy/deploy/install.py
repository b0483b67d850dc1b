"""Install: write an artifact as the next version of a model (edge_deploy.repository), have the running server load
it (edge_deploy.serve), record what serves, prune. Each step in this order, once per install."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ..artifact.manifest import Manifest
from ..errors import EdgeDeployError, RepositoryError
from ..core.progress import Reporter
from ..repository import model_config as mc
from ..repository.files import NewVersion, check_writable, clean_leftovers, publish, repository_error, repository_lock
from ..repository.history import check_state, read_history, record_failed, record_served
from ..repository.new_version import check_new_models, next_version, plan_versions
from ..repository.pinning import pin_previous
from ..repository.pipeline_kind import PipelineKind
from ..repository.pipelines import bls_unchanged, installed_kind
from ..repository.prune import prune_versions
from ..repository.runtime import RuntimeChoice, check_model_signature, choose_runtime
from ..serve import admin
from ..serve.server_record import ServerRecord
from ..core.triton_layout import policy_now, policy_versions, versions
from .options import InstallOptions
from .rollback import served_line
from .server import check_plan_for_server, load_order, served, server_backends, server_for
from ..evaluate.convert_eval import evaluation_summary


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


@dataclass(frozen=True)
class _Plan:
    """What an install will write, checked before anything is."""

    manifest: Manifest
    kind: PipelineKind | None
    choice: RuntimeChoice
    items: list[NewVersion]


def install(options: InstallOptions, reporter: Reporter | None = None) -> InstallResult:
    """Install `options.artifact` as the next version of `options.name` (and its pipeline, as `options.pipeline`
    says: InstallOptions). Everything is checked before the repository is touched. When a server launched by
    `edge-deploy serve` serves the repository, it is asked to load the new version; a refused load fails the
    install (the server keeps serving the old version, and the config is pinned back to it)."""
    reporter = reporter or Reporter()
    repository = options.repository
    with reporter.stage("check artifact"):
        plan = _plan(options, reporter)
        record = server_for(repository, reporter)
    reporter.info(f"runtime: {plan.choice.runtime} ({plan.choice.why})")
    result = InstallResult(name=options.name, version=0, runtime=plan.choice.runtime, repository=repository,
                           models=[i.model for i in plan.items],
                           evaluation=evaluation_summary(plan.manifest.evaluation))
    with repository_lock(repository):
        before = _before(repository, record, [i.model for i in plan.items])
        keep_serving = _write(options, plan, result, before, reporter)
        if record is not None:
            _load(record, repository, result, before.previous, keep_serving, reporter)
        if options.keep is not None:
            # Only now: the new version is complete on disk and, with a server, confirmed served.
            # A failed load above has raised, so the versions that still serve are never pruned; nor is
            # what served when this install started, nor what the config selected then: prune_versions.
            _prune(repository, options.keep, plan.items, result, before.spared)
    return result


@dataclass(frozen=True)
class _Before:
    """What each model served when the install started (the lock held), before anything is written.

    previous: what a refused load pins back to: what the server serves, else (no server) what the config selects.
    spared: every version --keep must leave: those two, and the newest version a server confirmed serving. A config
    and a server can disagree after an install or rollback was cut off between its config write and the load
    (docs/failures.md, "what is kept for rollback"): the config is then no witness of what serves.
    """

    previous: dict[str, list[int]]
    spared: dict[str, list[int]]


def _before(repository: Path, record: ServerRecord | None, models: list[str]) -> _Before:
    previous, spared = {}, {}
    for model in models:
        selected = policy_now(repository, model)
        serving = admin.served_versions(record.url, model, record.client_tls()) if record is not None else []
        if serving:
            record_served(repository, model, serving)  # remembered: a rollback returns to a version that served
        good = read_history(repository, model).last_good(versions(repository, model))
        previous[model] = serving or selected
        spared[model] = sorted(set(selected) | set(serving) | ({good} if good is not None else set()))
    return _Before(previous, spared)


def _plan(options: InstallOptions, reporter: Reporter) -> _Plan:
    """The checked artifact, runtime and new versions; RepositoryError for anything that would not install."""
    artifact, repository = options.artifact, options.repository
    try:
        manifest = Manifest.read(artifact)
        manifest.verify_files(artifact)
    except RepositoryError:
        raise
    except EdgeDeployError as exc:
        raise RepositoryError(str(exc)) from exc
    kind = installed_kind(repository, options.name) if options.follows_installed else options.kind
    # The server decides the runtime only when none is asked for.
    backends = server_backends(options.tritonserver) if options.runtime is None else None
    choice = choose_runtime(artifact, manifest, options.runtime, backends, precision=options.precision,
                            pipeline=kind is not None)
    config = mc.ConfigOptions(max_queue_delay_us=options.max_queue_delay_us, instances=options.instances,
                              warmup=options.warmup, precision=choice.precision, priority=options.priority,
                              threads=options.threads)
    if choice.runtime == "tensorrt":
        check_plan_for_server(manifest, options.tritonserver, options.force, reporter)
    check_model_signature(artifact, manifest, choice.runtime, config, options.force, reporter)
    items = plan_versions(artifact, manifest, options.name, choice.runtime, config, kind)
    check_writable(repository)
    check_state(repository)
    check_new_models(repository, items)
    return _Plan(manifest, kind, choice, items)


def _write(options: InstallOptions, plan: _Plan, result: InstallResult, before: _Before,
           reporter: Reporter) -> list[str]:
    """Publish the new versions (the lock held); the models the server need not load."""
    repository = options.repository
    previous = before.previous
    try:
        clean_leftovers(repository)
        version = next_version(repository, options.name, plan.items)
        # A BLS pipeline that would do what the served one does keeps serving: it calls the new NAME itself.
        keep_serving = [i.model for i in plan.items
                        if plan.kind is PipelineKind.BLS and bls_unchanged(repository, i, previous[i.model])]
        result.version = version
        with reporter.stage(f"write {options.name} version {version}"):
            for item in plan.items:
                publish(repository, version, item)
    except OSError as exc:
        raise repository_error(f"install into {repository}", exc) from exc
    return keep_serving


def _load(record: ServerRecord, repository: Path, result: InstallResult, previous: dict[str, list[int]],
          keep_serving: list[str], reporter: Reporter) -> None:
    """Have the server load the new version and record what it serves; after a refused load the configs are pinned
    back to what served before."""
    result.server_url = record.url
    with reporter.stage(f"load on {record.url}"):
        try:
            admin.load_models(record, load_order([m for m in result.models if m not in keep_serving]))
        except RepositoryError:
            pin_previous(repository, previous)
            for model in result.models:  # counts for nothing when --keep prunes
                record_failed(repository, model, [result.version], "the server refused to load it")
            raise
    result.served = served(record, result.models)
    for model, now in result.served.items():
        record_served(repository, model, now)


def _prune(repository: Path, keep: int, items: list[NewVersion], result: InstallResult,
           spared: dict[str, list[int]]) -> None:
    try:
        for item in items:
            model = item.model
            now = (result.served or {}).get(model, [])
            # The config is the one just written (a refused load has raised): what it selects needs no reading.
            selected = policy_versions(item.config, versions(repository, model))
            pruned = prune_versions(repository, model, keep, now, replaced=spared[model], selected=selected)
            if pruned:
                result.pruned[model] = pruned
                result.kept[model] = versions(repository, model)
    except OSError as exc:
        raise repository_error(f"prune old versions in {repository}", exc) from exc
