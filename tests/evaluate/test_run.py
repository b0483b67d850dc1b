"""`evaluate` end to end: the scoring loop with real metrics, the ONNX Runtime runner on a real artifact, the CLI."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from cli_process import run_cli
from small_artifact import make_artifact

from edge_deploy.evaluate.datasets import synthetic_frames
from edge_deploy.evaluate.run import evaluate
from edge_deploy.evaluate.runners import OnnxRunner


class TruthRunner:
    """A 'model' that returns the truth (shifted by dx pixels, minus `drop` lanes): known scores by construction."""

    def __init__(self, truths: dict[int, list[np.ndarray]], dx: float = 0.0, drop: int = 0) -> None:
        self.truths, self.dx, self.drop, self.name = truths, dx, drop, "truth"

    def detect(self, frame: np.ndarray) -> list[np.ndarray]:
        lanes = self.truths[id(frame)]
        return [lane + np.float32([self.dx, 0]) for lane in lanes[: len(lanes) - self.drop]]


def _frames(n: int) -> tuple[list, dict[int, list[np.ndarray]]]:
    frames = list(synthetic_frames(n, seed=3))
    return frames, {id(f[1]): f[2] for f in frames}


def test_perfect_lanes_score_one_and_dropped_lanes_cost_recall() -> None:
    frames, truths = _frames(4)
    report, worst = evaluate(TruthRunner(truths), frames, keep_frames=2)
    assert report.frames == 4 and [r.f1 for r in report.culane] == [1.0, 1.0]
    assert report.by_condition and all(r.f1 == 1.0 for results in report.by_condition.values() for r in results)
    assert report.culane[0].mean_abs_dx == 0.0 and len(worst) == 2
    dropped, _ = evaluate(TruthRunner(truths, drop=1), frames)
    total = sum(len(f[2]) for f in frames)
    assert dropped.culane[0].recall == pytest.approx((total - 4) / total) and dropped.culane[0].precision == 1.0


def test_the_frames_are_counted_as_they_are_scored() -> None:
    """evaluate's long loop shows its count (issue 45 #5): the reporter's bar gets every frame, against its total."""
    import io

    from rich.console import Console

    from edge_deploy.core.progress import ConsoleReporter

    frames, truths = _frames(3)
    out = io.StringIO()
    evaluate(TruthRunner(truths), frames, reporter=ConsoleReporter(Console(file=out, force_terminal=True)), total=3)
    assert "3/3" in out.getvalue(), out.getvalue()


def test_against_gives_the_retention_of_a_shifted_model() -> None:
    frames, truths = _frames(3)
    report, _ = evaluate(TruthRunner(truths), frames, against=TruthRunner(truths, dx=4.0))
    (at05, _) = report.retention
    assert at05.candidate.f1 == 1.0 and at05.lane_count_agreement == 1.0
    assert at05.mean_abs_dx == pytest.approx(4.0, abs=0.01)
    assert report.against_latency_ms is not None and report.against_latency_ms["mean"] > 0
    alone, _ = evaluate(TruthRunner(truths), frames)
    assert alone.against_latency_ms is None and alone.to_dict()["against_latency_ms"] is None


def test_against_names_the_reference(tmp_path, laneatt_data) -> None:
    """Issue 34 item 20: `evaluate A --against B` scores A (the candidate) against B (the reference), as
    docs/evaluate.md's `evaluate artifacts/lanedet:fp16 --against artifacts/lanedet` means."""
    frames, truths = _frames(3)
    report, _ = evaluate(TruthRunner(truths), frames, against=TruthRunner(truths, drop=1))
    (at05, _) = report.retention
    assert at05.candidate.f1 == 1.0 and at05.reference.f1 < 1.0 and at05.f1_retention > 1.0
    model, against = (make_artifact(tmp_path / name, laneatt_data / "anchors_2784x77.npy", n=100, seed=s) for name, s in (("A", 1), ("B", 2)))
    shown = run_cli(["evaluate", str(model), "--synthetic", "1", "--against", str(against)], timeout=120)
    assert f"retention: {model}:fp32 against {against}:fp32 (the reference)" in shown.stdout, shown.stdout


def test_tusimple_labels_add_tusimple_accuracy() -> None:
    from edge_deploy.evaluate.datasets import TuSimpleLabel

    h = np.arange(160.0, 590.0, 10.0)
    frames, truths = [], {}
    for i, (name, frame, truth) in enumerate(f[:3] for f in synthetic_frames(3, seed=6)):
        label = TuSimpleLabel(f"f{i}.jpg", h, tuple(
            np.where((h >= lane[:, 1].min()) & (h <= lane[:, 1].max()),
                     np.interp(h, lane[::-1, 1], lane[::-1, 0]), -2.0) for lane in truth))
        frames.append((name, frame, label))
        truths[id(frame)] = label.polylines()
    report, _ = evaluate(TruthRunner(truths), frames)
    assert report.tusimple is not None and report.tusimple.frames == 3
    assert (report.tusimple.accuracy, report.tusimple.fp, report.tusimple.fn) == (1.0, 0.0, 0.0)
    assert report.culane[0].f1 == 1.0 and report.to_dict()["tusimple"]["accuracy"] == 1.0
    far, _ = evaluate(TruthRunner(truths, dx=60.0), frames)  # every point 60 px off (20 px is TuSimple's limit)
    # h_samples where both lane and truth have no point still count as right, so accuracy stays above 0
    assert far.tusimple.accuracy < 0.85 and far.tusimple.fn > 0.9 and far.tusimple.fp > 0.9
    plain, _ = evaluate(TruthRunner(truths), [(n, f, lab.polylines()) for n, f, lab in frames])
    assert plain.tusimple is None


def test_frames_of_two_sizes_are_refused() -> None:
    from edge_deploy.errors import EvaluationError

    frames, truths = _frames(1)
    small = np.zeros((295, 820, 3), np.uint8)
    truths[id(small)] = []
    with pytest.raises(EvaluationError, match="one image size at a time"):
        evaluate(TruthRunner(truths), [*frames, ("small", small, [])])


@pytest.fixture(scope="module")
def tiny_artifact(tmp_path_factory, laneatt_data: Path) -> Path:
    return make_artifact(tmp_path_factory.mktemp("eval") / "artifact", laneatt_data / "anchors_2784x77.npy")


@pytest.mark.parametrize("kwargs, message", [
    ({"synthetic": 0}, "--synthetic 0: give the number of synthetic frames to score, 1 or more."),
    ({"synthetic": -1}, "--synthetic -1: give the number of synthetic frames to score, 1 or more."),
    ({"synthetic": 2, "seed": -4}, "--seed -4: the first synthetic evaluation seed is 0 or more."),
    ({}, "give exactly one of --data LIST, --tusimple LABELS or --synthetic N."),
    ({"synthetic": 2, "data": "list.txt"}, "give exactly one of --data LIST, --tusimple LABELS or --synthetic N."),
])
def test_the_library_refuses_what_evaluate_refuses_naming_its_options(kwargs: dict, message: str) -> None:
    # the CLI's rules (--synthetic N >= 1, one source) are the library's: a library caller gets the same line
    from edge_deploy.errors import EvaluationError
    from edge_deploy.evaluate.datasets import evaluation_frames

    with pytest.raises(EvaluationError) as refused:
        evaluation_frames(**kwargs)
    assert str(refused.value) == message
    names = [f[0] for f in evaluation_frames(synthetic=2, seed=3)]
    assert names == [f[0] for f in synthetic_frames(2, seed=3)]


def test_onnx_runner_decodes_what_onnxruntime_computes(tiny_artifact: Path) -> None:
    from edge_deploy.lanedet.laneatt.decode import decode_lanes
    from edge_deploy.lanedet.preprocess import preprocess
    from edge_deploy.export.parity import ort_session

    frame = next(synthetic_frames(1, seed=9))[1]
    runner = OnnxRunner(tiny_artifact)
    lanes = runner.detect(frame)
    raw = ort_session(tiny_artifact / "model.onnx").run(None, {"input": preprocess(frame)})[0][0]
    expected = decode_lanes(raw, image_size=frame.shape[:2])
    assert lanes == expected and len(lanes) > 0


def test_cli_writes_the_report_and_the_worst_frames(tiny_artifact: Path, tmp_path: Path) -> None:
    out = tmp_path / "eval"
    result = run_cli(["evaluate", str(tiny_artifact), "--synthetic", "3", "--json", str(out / "report.json"),
                      "--show", "2", "--out", str(out)], timeout=300)
    assert result.returncode == 0, result.stderr
    report = json.loads((out / "report.json").read_text())
    assert report["frames"] == 3 and [r["iou_threshold"] for r in report["culane"]] == [0.5, 0.7]
    assert (out / "worst_frames.png").stat().st_size > 1000


@pytest.mark.parametrize("count, shape", [(1, (295, 820, 3)), (3, (590, 1640, 3))])
def test_worst_frames_grid_has_one_tile_per_frame(tmp_path: Path, count: int, shape: tuple[int, int, int]) -> None:
    import cv2

    from edge_deploy.evaluate.run import FrameRecord, worst_frames_grid

    worst = [(FrameRecord(name, len(truth), len(truth), 1.0, 0.01), frame, truth, truth)
             for name, frame, truth, _ in synthetic_frames(count, seed=4)]
    picture = cv2.imread(str(worst_frames_grid(worst, tmp_path / "grid.png")))
    # 1640x590 frames drawn 820 wide, two columns at most: one frame is one tile, no blank half beside it
    assert picture.shape == shape
    assert picture[:, -10:].any()


@pytest.mark.parametrize("args, message", [
    (["--synthetic", "2", "--data", "x.txt"], "exactly one of"),
    (["--synthetic", "2", "--against", "grpc://127.0.0.1"], "grpc://HOST:PORT/MODEL"),
    (["--synthetic", "2", "--url", "127.0.0.1:8001"], "not both"),
    (["--synthetic", "2", "--model", "lanedet"], "give its server with --url"),
])
def test_cli_errors_are_one_line(tiny_artifact: Path, args: list[str], message: str) -> None:
    result = run_cli(["evaluate", str(tiny_artifact), *args], timeout=120)
    assert result.returncode == 2 and message in result.stderr and "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_missing_artifact_is_one_line(tmp_path: Path) -> None:
    result = run_cli(["evaluate", str(tmp_path / "nope"), "--synthetic", "1"], timeout=120)
    assert result.returncode == 2 and "not an artifact directory" in result.stderr


def test_the_worst_frames_caption_names_the_model(tmp_path: Path, monkeypatch) -> None:
    """The picture says which model drew the lanes: the demo's FAMILY=ufldv2 model is served as
    ufldv2_random_weights (scripts/demo.sh), and its caption must say so."""
    import edge_deploy.lanedet.draw as draw
    from edge_deploy.evaluate.run import worst_frames_grid

    captions: list[str] = []
    real = draw.draw_lanes

    def spy(*args, **kwargs):
        if kwargs.get("caption"):
            captions.append(kwargs["caption"])
        return real(*args, **kwargs)

    monkeypatch.setattr(draw, "draw_lanes", spy)
    frames, truths = _frames(1)
    runner = TruthRunner(truths)
    runner.name = "grpc://127.0.0.1:8001/ufldv2_random_weights"  # what the CLI names a served model
    report, worst = evaluate(runner, frames, keep_frames=1)
    worst_frames_grid(worst, tmp_path / "grid.png", model=report.model)
    assert len(captions) == 1 and captions[0].startswith("ufldv2_random_weights  "), captions
    worst_frames_grid(worst, tmp_path / "grid.png", model="/tmp/art:fp16")
    assert captions[1].startswith("art:fp16  "), captions
