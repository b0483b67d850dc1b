"""`edge-deploy evaluate`: lane quality (CULane F1, TuSimple accuracy) and speed of a model on labelled frames."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from ..tls.config import TLSConfig
from ..errors import EvaluationError
from . import option_groups as groups
from .typer_app import app
from .options import takes_options
from .numeric import number
from ..core.numbers import whole
from ..core.fsutil import check_target, write_json_atomic
from ..core.progress import ConsoleReporter

EVAL_FRAMES = whole(1, 100000, "frames")
EVAL_SEED = whole(0, 10**8, noun="a seed offset")
EVAL_LIMIT = whole(1, 10**9, "frames")
SHOW_FRAMES = whole(0, 1000, "frames")

WORST_FRAMES = "worst_frames.png"  # what --show writes into --out
_MODEL_HELP = ("An artifact directory (its model.onnx; DIR:fp16 for model_fp16.onnx), or grpc://HOST:PORT/MODEL "
               "for a served model (or give --url and --model instead).")


@dataclass(frozen=True)
class EvaluateOptions:
    """What `edge-deploy evaluate` is asked: one typed field per option, in the order of --help (the command's
    parameters are made from these fields); `model_ref()` and `frames()` refuse what cannot work, in one line."""

    model: Annotated[Optional[str], typer.Argument(help=_MODEL_HELP, show_default=False)] = None
    url: Annotated[Optional[str], groups.url(
        "A served model's Triton gRPC address (HOST:PORT), instead of MODEL; same as grpc://URL/NAME.")] = None
    served_model: Annotated[Optional[str], typer.Option(
        "--model", help="With --url: the served model's name (default lanedet).", show_default=False)] = None
    data: Annotated[Optional[Path], typer.Option(
        help="CULane layout: the list file (image paths relative to --root; .lines.txt beside each image).")] = None
    tusimple: Annotated[Optional[list[Path]], typer.Option(
        help="TuSimple label_data_*.json file(s) (images relative to --root); repeat for several.")] = None
    root: Annotated[Optional[Path], typer.Option(
        help="Data set root for --data / --tusimple (default: the list file's folder).")] = None
    synthetic: Annotated[Optional[int], number(
        EVAL_FRAMES, help="Evaluate on N synthetic road frames (seeds reserved for evaluation, never used in "
                          "training).")] = None
    seed: Annotated[int, number(EVAL_SEED, help="First synthetic evaluation seed (offset into the evaluation "
                                                "range).")] = 0
    limit: Annotated[Optional[int], number(EVAL_LIMIT, help="Evaluate at most this many frames of --data / "
                                                            "--tusimple.")] = None
    against: Annotated[Optional[str], typer.Option(
        help="The reference model (same forms as MODEL) run on the same frames: prints the retention table, how much "
             "of its quality MODEL keeps.")] = None
    json_out: Annotated[Optional[Path], typer.Option("--json", help="Write the full report as JSON here.")] = None
    show: Annotated[int, number(SHOW_FRAMES, help="Write a PNG grid of the K worst frames (truth green, lanes "
                                                  "red).")] = 0
    out: Annotated[Path, typer.Option(help="Folder for --show pictures.")] = Path("out/evaluate")
    tls_ca: Annotated[Optional[Path], groups.tls_ca()] = None
    tls_cert: Annotated[Optional[Path], groups.tls_cert()] = None
    tls_key: Annotated[Optional[Path], groups.tls_key()] = None
    camera: Annotated[Optional[str], typer.Option(
        help="Also score lane markers (ego lane found, c0 and heading errors) against the synthetic roads' truth: "
             "'scene' (each frame's own camera) or a calibration file for all frames. With --synthetic N.")] = None

    def model_ref(self) -> str:
        """MODEL, or grpc://URL/NAME from --url and --model; EvaluationError when neither or both are given."""
        if (self.model is None) == (self.url is None):
            raise EvaluationError("give the model to evaluate: an artifact directory or grpc://HOST:PORT/MODEL, "
                                  "or --url HOST:PORT [--model NAME] for a served model (not both).")
        if self.served_model is not None and self.url is None:
            raise EvaluationError("--model names a served model: give its server with --url HOST:PORT too.")
        return self.model or f"grpc://{self.url}/{self.served_model or 'lanedet'}"

    def frames(self) -> Any:
        """The labelled frames (evaluate.datasets); the library checks the sources (exactly one; --synthetic N >= 1,
        --seed >= 0), naming these options."""
        from ..evaluate import datasets

        return datasets.evaluation_frames(data=self.data, tusimple=self.tusimple, synthetic=self.synthetic,
                                          seed=self.seed, root=self.root, limit=self.limit,
                                          marker_truth=self.camera is not None)

    def marker_camera(self) -> Any:
        """--camera: None, "scene", or the calibration file's Camera."""
        if self.camera is None or self.camera == "scene":
            return self.camera
        from ..geometry import Camera

        return Camera.from_yaml(self.camera)

    def checked(self) -> "EvaluateOptions":
        """These options, or a one-line EvaluationError for an output that cannot be written: --json or
        --show's picture a directory, a device, a FIFO or a socket, or one of the files read."""
        inputs = [p for p in (self.data, *(self.tusimple or ()), self.camera) if p is not None]
        if self.json_out is not None:
            check_target(self.json_out, what="--json", inputs=inputs, error=EvaluationError)
        if self.show > 0:
            check_target(self.out / WORST_FRAMES, what="--show", inputs=inputs, error=EvaluationError)
        return self

    def tls(self) -> TLSConfig | None:
        return groups.client_tls(self.tls_ca, self.tls_cert, self.tls_key)


@app.command()
@takes_options(EvaluateOptions)
def evaluate(**given: Any) -> None:
    """Score a model's lanes on labelled frames: CULane F1/precision/recall at IoU 0.5 and 0.7, mean |dx| of
    matched lanes, TuSimple accuracy/FP/FN on TuSimple labels, latency per frame; with --against REFERENCE, how much
    of the reference's quality the model keeps."""
    from rich.console import Console

    from ..evaluate.run import evaluate_models, worst_frames_grid

    from ..export.parity import ort_threads

    ort_threads()  # $EDGE_DEPLOY_ORT_THREADS read through its range before any work
    options = EvaluateOptions(**given).checked()
    model, frames, camera = options.model_ref(), options.frames(), options.marker_camera()
    report, worst = evaluate_models(model, frames, against=options.against, tls=options.tls(),
                                    reporter=ConsoleReporter(Console(stderr=True, soft_wrap=True)),
                                    keep_frames=max(0, options.show), camera=camera,
                                    total=options.synthetic or options.limit)
    _print(report)
    if options.json_out is not None:
        options.json_out.parent.mkdir(parents=True, exist_ok=True)
        write_json_atomic(options.json_out, report.to_dict())
        typer.echo(f"report: {options.json_out}")
    if options.show > 0:
        options.out.mkdir(parents=True, exist_ok=True)
        typer.echo(f"worst frames: {worst_frames_grid(worst, options.out / WORST_FRAMES, model=report.model)}")

def _print(report) -> None:  # noqa: ANN001
    from rich.console import Console
    from rich.table import Table

    console = Console(soft_wrap=True)
    table = Table(title=f"{report.model}: {report.frames} frames, {report.latency_ms['mean']:.1f} ms/frame "
                        f"(p50 {report.latency_ms['p50']:.1f})")
    for column in ("subset", "IoU", "F1", "precision", "recall", "TP", "FP", "FN", "mean |dx| px"):
        table.add_column(column, justify="right" if column != "subset" else "left")
    for subset, results in [("all", report.culane), *report.by_condition.items()]:
        for r in results:
            dx = "-" if r.mean_abs_dx is None else f"{r.mean_abs_dx:.2f}"
            table.add_row(subset, f"{r.iou_threshold:g}", f"{r.f1:.4f}", f"{r.precision:.4f}", f"{r.recall:.4f}",
                          str(r.tp), str(r.fp), str(r.fn), dx)
    console.print(table)
    if report.tusimple is not None:
        t = report.tusimple
        console.print(f"TuSimple ({t.frames} frames): accuracy {t.accuracy:.4f}  FP {t.fp:.4f}  FN {t.fn:.4f}")
    if report.markers is not None:
        _print_markers(report.markers, console)
    if report.retention is not None:
        ret = Table(title=f"retention: {report.model} against {report.against} (the reference)")
        for column in ("IoU", "F1 reference", "F1 candidate", "lane count agreement", "mean |dx| px"):
            ret.add_column(column, justify="right")
        for r in report.retention:
            f1_ref = "-" if r.reference is None else f"{r.reference.f1:.4f}"
            f1_cand = "-" if r.candidate is None else f"{r.candidate.f1:.4f}"
            agree = "-" if r.lane_count_agreement is None else f"{r.lane_count_agreement:.3f}"
            dx = "-" if r.mean_abs_dx is None else f"{r.mean_abs_dx:.2f}"
            ret.add_row(f"{r.iou_threshold:g}", f1_ref, f1_cand, agree, dx)
        console.print(ret)


def _print_markers(score, console) -> None:  # noqa: ANN001
    from rich.table import Table

    def cell(value: float | None, spec: str) -> str:
        return "-" if value is None else format(value, spec)

    table = Table(title=f"lane markers: ego lane found on {score.ego_found}/{score.both_visible} frames with both "
                        "ego markings in view")
    for column in ("subset", "frames", "ego found", "c0 err p50 m", "c0 err p95 m", "heading err p50 deg"):
        table.add_column(column, justify="right" if column != "subset" else "left")
    rows = [("all", score.to_dict()), *score.by_condition.items()]
    for subset, s in rows:
        rate = s["ego_found_rate"]
        table.add_row(subset, str(s["frames"]), cell(rate, ".3f"), cell(s["c0_error_m"]["p50"], ".3f"),
                      cell(s["c0_error_m"]["p95"], ".3f"), cell(s["heading_error_deg"]["p50"], ".2f"))
    console.print(table)
