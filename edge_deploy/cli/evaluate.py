"""`edge-deploy evaluate`: lane quality (CULane F1, TuSimple accuracy) and speed of a model on labelled frames."""
from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from .app import app
from ..errors import EvaluationError
from ..fsutil import write_json_atomic
from ..progress import ConsoleReporter

_MODEL_HELP = ("An artifact directory (its model.onnx; DIR:fp16 for model_fp16.onnx), or grpc://HOST:PORT/MODEL "
               "for a served model (or give --url and --model instead).")


@app.command()
def evaluate(
    model: Annotated[Optional[str], typer.Argument(help=_MODEL_HELP, show_default=False)] = None,
    url: Annotated[Optional[str], typer.Option(
        help="A served model's Triton gRPC address (HOST:PORT), instead of MODEL; same as grpc://URL/NAME.")] = None,
    served_model: Annotated[Optional[str], typer.Option(
        "--model", help="With --url: the served model's name (default lanedet).", show_default=False)] = None,
    data: Annotated[Optional[Path], typer.Option(
        help="CULane layout: the list file (image paths relative to --root; .lines.txt beside each image).")] = None,
    tusimple: Annotated[Optional[list[Path]], typer.Option(
        help="TuSimple label_data_*.json file(s) (images relative to --root); repeat for several.")] = None,
    root: Annotated[Optional[Path], typer.Option(help="Data set root for --data / --tusimple (default: the list file's folder).")] = None,
    synthetic: Annotated[Optional[int], typer.Option(
        help="Evaluate on N synthetic road frames (seeds reserved for evaluation, never used in training).")] = None,
    seed: Annotated[int, typer.Option(help="First synthetic evaluation seed (offset into the evaluation range).")] = 0,
    limit: Annotated[Optional[int], typer.Option(help="Evaluate at most this many frames of --data / --tusimple.")] = None,
    against: Annotated[Optional[str], typer.Option(
        help="The reference model (same forms as MODEL) run on the same frames: prints the retention table, how much "
             "of its quality MODEL keeps.")] = None,
    json_out: Annotated[Optional[Path], typer.Option("--json", help="Write the full report as JSON here.")] = None,
    show: Annotated[int, typer.Option(help="Write a PNG grid of the K worst frames (truth green, lanes red).")] = 0,
    out: Annotated[Path, typer.Option(help="Folder for --show pictures.")] = Path("out/evaluate"),
    tls_ca: Annotated[Optional[Path], typer.Option(help="grpc:// models over TLS: the CA that signed the server's certificate.")] = None,
    tls_cert: Annotated[Optional[Path], typer.Option(help="grpc:// models: this client's certificate (mutual TLS).")] = None,
    tls_key: Annotated[Optional[Path], typer.Option(help="grpc:// models: its private key.")] = None,
    camera: Annotated[Optional[str], typer.Option(
        help="Also score lane markers (ego lane found, c0 and heading errors) against the synthetic roads' truth: "
             "'scene' (each frame's own camera) or a calibration file for all frames. With --synthetic N.")] = None,
) -> None:
    """Score a model's lanes on labelled frames: CULane F1/precision/recall at IoU 0.5 and 0.7, mean |dx| of
    matched lanes, TuSimple accuracy/FP/FN on TuSimple labels, latency per frame; with --against REFERENCE, how much
    of the reference's quality the model keeps."""
    from rich.console import Console

    from ..evaluate import datasets
    from ..evaluate.run import evaluate as run_evaluate
    from ..evaluate.run import worst_frames_grid
    from ..evaluate.runners import open_runner

    if (model is None) == (url is None):
        raise EvaluationError("give the model to evaluate: an artifact directory or grpc://HOST:PORT/MODEL, "
                              "or --url HOST:PORT [--model NAME] for a served model (not both).")
    if served_model is not None and url is None:
        raise EvaluationError("--model names a served model: give its server with --url HOST:PORT too.")
    model = model or f"grpc://{url}/{served_model or 'lanedet'}"
    # the library checks the sources (exactly one; --synthetic N >= 1, --seed >= 0), naming these options
    frames = datasets.evaluation_frames(data=data, tusimple=tusimple, synthetic=synthetic, seed=seed, root=root,
                                        limit=limit, marker_truth=camera is not None)
    if camera is not None and camera != "scene":
        from ..geometry import Camera

        camera = Camera.from_yaml(camera)
    console = Console(stderr=True, soft_wrap=True)
    from .serve import _cli_tls

    tls = _cli_tls(tls_ca, tls_cert, tls_key) if tls_ca or tls_cert or tls_key else None
    runner = open_runner(model, tls)
    other = open_runner(against, tls) if against else None
    try:
        report, worst = run_evaluate(runner, frames, against=other, reporter=ConsoleReporter(console),
                                     keep_frames=max(0, show), camera=camera, total=synthetic or limit)
    finally:
        runner.close()
        if other is not None:
            other.close()
    _print(report)
    if json_out is not None:
        json_out.parent.mkdir(parents=True, exist_ok=True)
        write_json_atomic(json_out, report.to_dict())
        typer.echo(f"report: {json_out}")
    if show > 0:
        out.mkdir(parents=True, exist_ok=True)
        typer.echo(f"worst frames: {worst_frames_grid(worst, out / 'worst_frames.png', model=report.model)}")


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
