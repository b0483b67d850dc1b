"""`edge-deploy install`, `models` and `rollback`: the Triton model repository."""
from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Optional

import typer
from typer.core import TyperCommand

from ..deploy.options import InstallOptions
from ..errors import RepositoryError
from ..repository.model_config import SERVED_ONNX
from ..repository.pipeline_kind import KINDS, PipelineKind
from ..core import strict_json
from . import option_groups as groups
from .typer_app import app
from .options import Only, options_of, takes_fields
from .numeric import number
from ..core.numbers import THREADS, whole
from ..core.progress import ConsoleReporter



def bare_pipeline(args: list[str]) -> list[str]:
    """`--pipeline` without a kind after it (as before kinds existed: `install ART --pipeline`, or `--pipeline ART`)
    means `--pipeline=ensemble`; click would otherwise take the next word for the kind."""
    out = list(args)
    for i, arg in enumerate(out):
        if arg == "--":
            break
        if arg == "--pipeline" and (i + 1 == len(out) or out[i + 1].lower() not in KINDS):
            out[i] = f"--pipeline={PipelineKind.ENSEMBLE.value}"
    return out


class _InstallCommand(TyperCommand):
    def parse_args(self, ctx, args):  # noqa: ANN001, ANN201 - click's signature
        return super().parse_args(ctx, groups.precision_aliases(bare_pipeline(args)))


MAX_QUEUE_DELAY_US = whole(0, 10**7, "microseconds")  # 10 s: a batch formed slower than that is no batching
INSTANCES = whole(1, 64, "instances")
KEEP = whole(1, 1000, "versions")
VERSION = whole(1, 2**63 - 1, noun="a version")  # Triton's version numbers are int64

_REPOSITORY = typer.Option("--repository", "-r", help="Triton model repository directory.")
RepositoryOpt = Annotated[Path, _REPOSITORY]
ServedPrecision = groups.precision_choice(SERVED_ONNX)  # install serves an ONNX file of these

# `install`'s parameters: the fields of InstallOptions (their types and defaults), each with its option here, in the
# order of --help; where the command line spells a field its own way, an Only with its type and default.
INSTALL_PARAMETERS = {
    "artifact": typer.Argument(help="Artifact directory written by `edge-deploy convert`."),
    "repository": _REPOSITORY,
    "name": typer.Option(help="Model name in the repository (letters, digits, _ and -)."),
    "runtime": typer.Option(help="tensorrt | onnxruntime | python (default: follows the artifact and the server)."),
    "pipeline": Only(Annotated[Optional[PipelineKind], typer.Option(
        "--pipeline", case_sensitive=False, show_default=False,
        help="Also install the server-side pipeline NAME_pipeline (frames in, lanes out): `--pipeline` or "
        "`--pipeline ensemble` (NAME_preprocess -> NAME -> NAME_postprocess), `--pipeline bls` (one Python model "
        "calling NAME itself). Default: the pipeline NAME already has, if any.")], None),
    "no_pipeline": Only(Annotated[bool, typer.Option("--no-pipeline", help="Install NAME without a pipeline.")], False),
    "max_queue_delay_us": number(MAX_QUEUE_DELAY_US, help="Dynamic batching: longest wait (microseconds) to form a "
                                                          "batch."),
    "instances": number(INSTANCES, help="Model instances (instance_group count)."),
    "priority": typer.Option(case_sensitive=False, help=(
        "The model's priority beside others on the server: optimization.priority PRIORITY_MAX|DEFAULT|MIN (a TensorRT "
        "plan's CUDA stream priority) and, with dynamic batching, default priority level 1|2|3 of 3.")),
    "threads": number(THREADS, show_default=False, help=(
        "ONNX Runtime intra- and inter-op threads (onnxruntime and python runtimes; default: "
        "one per core).")),
    "warmup": typer.Option(help="Warm the model up with a zero input when it loads."),
    "keep": number(KEEP, help="Keep only the newest K versions (removes older ones)."),
    "force": typer.Option(help="Install a plan built for another device / TensorRT."),
    "tritonserver": Only(Annotated[Optional[Path], typer.Option(
        help="tritonserver binary whose backends decide the runtime.")], None),
    "precision": Only(Annotated[Optional[ServedPrecision], typer.Option(
        help="fp16: serve model_fp16.onnx (ONNX Runtime); fp32: model.onnx or the plan (default: as converted: an FP16 "
             "artifact serves model_fp16.onnx where no plan is served). --fp16 and --no-fp16 still mean fp16 and "
             "fp32.", show_default=False)], None),
}


# given: the command's **kwargs as typer passes them, each value typed by its own parameter (INSTALL_PARAMETERS)
def install_options(given: dict[str, Any]) -> InstallOptions:
    """The InstallOptions the command's keyword arguments ask for (--no-pipeline is pipeline=False)."""
    pipeline, no_pipeline = given["pipeline"], given["no_pipeline"]
    if no_pipeline and pipeline is not None:
        raise RepositoryError(f"--pipeline {pipeline.value} and --no-pipeline contradict each other; pass one of them.")
    return InstallOptions(**{**options_of(InstallOptions, given), "pipeline": False if no_pipeline else pipeline,
                             "precision": groups.precision_of(given["precision"])})


@app.command(cls=_InstallCommand)
@takes_fields(InstallOptions, INSTALL_PARAMETERS)
def install(**given: Any) -> None:
    """Install an artifact as the next version of a model; a running server loads it."""
    from ..deploy.install import install as install_artifact
    from ..core.progress import ConsoleReporter

    typer.echo(install_artifact(install_options(given), ConsoleReporter()).summary())


@app.command()
def models(
    name: Annotated[Optional[str], typer.Argument(help="Only this model (and its pipeline models).")] = None,
    repository: RepositoryOpt = Path("model_repository"),
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")] = False,
) -> None:
    """List models, their versions and fingerprints, and which version is served."""

    from ..deploy.models import list_models

    if not repository.is_dir():
        raise RepositoryError(f"model repository {repository} does not exist; pass --repository or install a model first.")
    infos = list_models(repository, name)
    if as_json:
        typer.echo(strict_json.dumps([i.to_dict() for i in infos], indent=2))
        return
    if not infos:
        typer.echo(f"{repository} has no models; add one with `edge-deploy install ARTIFACT`.")
        return
    from rich.console import Console

    from ..core.tables import narrow_table

    table = narrow_table("model", "version", "runtime", "manifest sha256", "plan", "served")
    for info in infos:
        for v in info.versions:
            plan = ""
            if v.plan is not None:
                plan = " ".join(str(value) for value in (v.plan.gpu, v.plan.compute_capability, v.plan.tensorrt)
                                if value)
                if v.plan_mismatch:
                    plan += " (does not fit this machine)"
                elif v.plan_mismatch == []:
                    plan += " (fits)"
            if info.served is not None:
                served = "yes" if v.version in info.served else ""
            else:
                served = "by config" if v.version in info.policy else ""
            table.add_row(info.name, str(v.version), v.runtime or "?", (v.manifest_sha256 or "?")[:16], plan, served)
    console = Console()
    if not console.is_terminal:
        console = Console(width=200)  # piped: do not wrap hashes and fingerprints into narrow columns
    console.print(table)
    # Each model's role and how the server runs it, from its config.pbtxt (an ensemble has no instances of its own).
    serving = narrow_table("model", "role", "priority", "instances", "placement")
    for info in infos:
        serving.add_row(info.name, info.role, info.priority or "-",
                        str(info.instances) if info.instances is not None else "-", info.placement or "-")
    console.print(serving)
    for info in infos:
        if info.warning:
            typer.echo(f"warning: {info.warning}")
    if all(i.served is None for i in infos):
        typer.echo(f"(no running edge-deploy server for {repository}: 'by config' = what a server would load)")


@app.command()
def rollback(
    name: Annotated[str, typer.Argument(help="Model to roll back.")],
    to: Annotated[Optional[int], number(VERSION, "--to", help="Version to serve (default: the one before the served "
                                                              "one).")] = None,
    repository: RepositoryOpt = Path("model_repository"),
) -> None:
    """Serve an older version again (newer versions stay on disk)."""
    from ..deploy.rollback import rollback as do_rollback

    result = do_rollback(repository, name, to, reporter=ConsoleReporter())
    typer.echo(result.summary())
