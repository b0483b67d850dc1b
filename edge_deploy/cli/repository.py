"""`edge-deploy install`, `models` and `rollback`: the Triton model repository."""
from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer
from typer.core import TyperCommand

from ..errors import RepositoryError
from ..repository.pipeline_kind import KINDS, PipelineKind
from .. import strict_json
from .app import app
from ..precision import Precision
from ..progress import ConsoleReporter

RepositoryOpt = Annotated[Path, typer.Option("--repository", "-r", help="Triton model repository directory.")]


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
    def parse_args(self, ctx, args):  # type: ignore[no-untyped-def]
        return super().parse_args(ctx, bare_pipeline(args))


@app.command(cls=_InstallCommand)
def install(
    artifact: Annotated[Path, typer.Argument(help="Artifact directory written by `edge-deploy convert`.")],
    repository: RepositoryOpt = Path("model_repository"),
    name: Annotated[str, typer.Option(help="Model name in the repository (letters, digits, _ and -).")] = "lanedet",
    runtime: Annotated[
        Optional[str], typer.Option(help="tensorrt | onnxruntime | python (default: follows the artifact and the server).")
    ] = None,
    pipeline: Annotated[
        Optional[PipelineKind],
        typer.Option(
            "--pipeline", case_sensitive=False, show_default=False,
            help="Also install the server-side pipeline NAME_pipeline (frames in, lanes out): `--pipeline` or "
            "`--pipeline ensemble` (NAME_preprocess -> NAME -> NAME_postprocess), `--pipeline bls` (one Python model "
            "calling NAME itself). Default: the pipeline NAME already has, if any.",
        ),
    ] = None,
    no_pipeline: Annotated[bool, typer.Option("--no-pipeline", help="Install NAME without a pipeline.")] = False,
    max_queue_delay_us: Annotated[
        Optional[int], typer.Option(help="Dynamic batching: longest wait (microseconds) to form a batch.")
    ] = None,
    instances: Annotated[int, typer.Option(help="Model instances (instance_group count).")] = 1,
    warmup: Annotated[bool, typer.Option(help="Warm the model up with a zero input when it loads.")] = False,
    keep: Annotated[Optional[int], typer.Option(help="Keep only the newest K versions (removes older ones).")] = None,
    force: Annotated[bool, typer.Option(help="Install a plan built for another device / TensorRT.")] = False,
    tritonserver: Annotated[
        Optional[Path], typer.Option(help="tritonserver binary whose backends decide the runtime.")
    ] = None,
    fp16: Annotated[Optional[bool], typer.Option(
        "--fp16/--no-fp16", help="Serve model_fp16.onnx (ONNX Runtime) instead of model.onnx or the plan, or not "
                                 "(default: as converted: an FP16 artifact serves model_fp16.onnx where no plan is "
                                 "served).", show_default=False)] = None,
) -> None:
    """Install an artifact as the next version of a model; a running server loads it."""
    from ..deploy.install import install_with
    from ..deploy.options import InstallOptions

    if no_pipeline and pipeline is not None:
        raise RepositoryError(f"--pipeline {pipeline.value} and --no-pipeline contradict each other; pass one of them.")
    options = InstallOptions(
        artifact, repository, name, runtime=runtime, pipeline=False if no_pipeline else pipeline,
        max_queue_delay_us=max_queue_delay_us, instances=instances, warmup=warmup, keep=keep, force=force,
        tritonserver=tritonserver, precision=None if fp16 is None else Precision.FP16 if fp16 else Precision.FP32,
    )
    result = install_with(options, ConsoleReporter())
    typer.echo(result.summary())


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
    from rich.table import Table

    table = Table("model", "role", "version", "runtime", "manifest sha256", "plan", "served")
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
            table.add_row(info.name, info.role, str(v.version), v.runtime or "?",
                          (v.manifest_sha256 or "?")[:16], plan, served)
    console = Console()
    if not console.is_terminal:
        console = Console(width=200)  # piped: do not wrap hashes and fingerprints into narrow columns
    console.print(table)
    for info in infos:
        if info.warning:
            typer.echo(f"warning: {info.warning}")
    if all(i.served is None for i in infos):
        typer.echo(f"(no running edge-deploy server for {repository}: 'by config' = what a server would load)")


@app.command()
def rollback(
    name: Annotated[str, typer.Argument(help="Model to roll back.")],
    to: Annotated[Optional[int], typer.Option("--to", help="Version to serve (default: the one before the served one).")] = None,
    repository: RepositoryOpt = Path("model_repository"),
) -> None:
    """Serve an older version again (newer versions stay on disk)."""
    from ..deploy.rollback import rollback as do_rollback

    result = do_rollback(repository, name, to, reporter=ConsoleReporter())
    typer.echo(result.summary())
