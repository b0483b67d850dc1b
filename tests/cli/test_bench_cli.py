"""`edge-deploy bench` without a server: its options checked in one line, the progress bar on a terminal."""
from __future__ import annotations

import io
from pathlib import Path

import pytest
from triton_helpers import run_cli

from edge_deploy.bench.config import BenchConfig, parse_concurrency
from edge_deploy.errors import BenchError, FrameError


def test_concurrency_and_config_are_checked() -> None:
    assert parse_concurrency("1, 2,4,2") == (1, 2, 4)
    for bad in ("", "0", "1,x", "-1"):
        with pytest.raises(BenchError, match="--concurrency"):
            parse_concurrency(bad)
    with pytest.raises(BenchError, match="--seconds must be more than 0"):
        BenchConfig(seconds=0)
    with pytest.raises(BenchError, match="--max-frames"):
        BenchConfig(max_frames=0)


def test_repository_without_a_server_and_a_plot_that_is_not_png(tmp_path) -> None:
    run = run_cli(tmp_path, "bench", "--repository", str(tmp_path))
    assert run.returncode != 0 and run.stderr.strip() == (
        f"error: no running `edge-deploy serve` server for {tmp_path}; start one, or pass --url."), run.stderr
    run = run_cli(tmp_path, "bench", "--repository", str(tmp_path / "nope"))
    assert "is not a directory" in run.stderr and len(run.stderr.strip().splitlines()) == 1
    run = run_cli(tmp_path, "bench", "--plot", str(tmp_path / "out.svg"))
    assert "must name a .png file" in run.stderr and len(run.stderr.strip().splitlines()) == 1


def test_progress_bar_on_a_terminal(monkeypatch) -> None:
    from rich.console import Console

    import edge_deploy.bench.runner as runner
    from edge_deploy.cli.bench import _run_with_progress

    def fake_run(config, on_progress=None):  # noqa: ANN001, ANN202
        on_progress("lane x4", 1, 2, 0.5)
        return "report"

    monkeypatch.setattr(runner, "run_bench", fake_run)
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=100)
    assert _run_with_progress(BenchConfig(), console) == "report"
    assert "lane x4 (2/2)" in out.getvalue() and "75%" in out.getvalue()


def test_frames_from_a_directory_a_video_or_the_sample_set(tmp_path) -> None:
    import cv2
    import numpy as np

    from edge_deploy.bench.frames import load_frames

    images = tmp_path / "images"
    images.mkdir()
    frame = np.random.default_rng(0).integers(0, 256, (48, 64, 3), dtype=np.uint8)
    for name in ("b.png", "a.png"):
        cv2.imwrite(str(images / name), frame)
    (images / "notes.txt").write_text("not an image")
    source, got = load_frames(images, 8)
    assert [name for name, _ in got] == ["a.png", "b.png"] and np.array_equal(got[0][1], frame)
    video = tmp_path / "drive.avi"
    writer = cv2.VideoWriter(str(video), cv2.VideoWriter_fourcc(*"MJPG"), 10, (64, 48))
    for _ in range(5):
        writer.write(frame)
    writer.release()
    source, got = load_frames(video, 3)
    assert len(got) == 3 and got[0][1].shape == (48, 64, 3) and "first 3 frames" in source
    source, got = load_frames(None, 2)
    assert len(got) == 2 and got[0][1].shape == (590, 1640, 3) and source.startswith("synthetic sample set")
    (tmp_path / "empty").mkdir()
    with pytest.raises(BenchError, match="has no images"):
        load_frames(tmp_path / "empty", 8)
    with pytest.raises(BenchError, match="does not exist"):
        load_frames(tmp_path / "nope.mp4", 8)
    # the library's readers (edge_deploy.media): a damaged image and a file that is no video, each one line
    (images / "c.png").write_bytes(b"\x89PNG truncated")
    with pytest.raises(FrameError, match=r"cannot decode .*c\.png as an image"):
        load_frames(images, 8)
    # a GStreamer pipeline (or a camera) is a source too: frames where this OpenCV has GStreamer, else one line
    try:
        source, got = load_frames(Path("videotestsrc num-buffers=3 ! videoconvert ! appsink"), 2)
        assert len(got) == 2 and source.startswith("videotestsrc")
    except FrameError as refused:
        assert "GStreamer" in str(refused) and "\n" not in str(refused), refused
    (tmp_path / "notes.mp4").write_text("not a video")
    with pytest.raises(FrameError, match=r"cannot open video .*notes\.mp4: the file \(11 bytes\)"):
        load_frames(tmp_path / "notes.mp4", 8)


def a_report():  # noqa: ANN201 - a BenchReport with figures as wide as real ones (issue 45 #6)
    from edge_deploy.bench.results import BenchReport, CellResult, ClientSplit, Latency
    from edge_deploy.bench.server_stats import ServerTimes

    cells = [CellResult(model=name, lane_model="lanedet", pipeline=kind, family="laneatt", concurrency=width,
                        client="LaneDetClient", frames=1111, seconds=10.0, frames_per_s=111.123,
                        latency=Latency(19.87654, 23.4567, 5222.125, 30.0),
                        client_split=ClientSplit(12.345, 6.789, 1.234),
                        server={name: ServerTimes(1111, 0.123, 4.567)}, client_cpu_ms_per_frame=15.678,
                        server_cpu_ms_per_frame=22.351)
             for name, kind in (("lanedet", "client-side"), ("lanedet_pipeline", "bls")) for width in (1, 4)]
    return BenchReport(url="127.0.0.1:8001", frames="synthetic sample set (32 frames, 1640x590)", seconds=10.0,
                       warmup_seconds=1.0, concurrency=[1, 4], lanes_check="lanes-equal check passed",
                       server_cpu="tritonserver PID 1", jetson="not a Jetson", machine={"cpus": 2}, cells=cells)


def test_the_report_is_readable_at_80_columns_and_a_table_when_wide() -> None:
    from rich.console import Console

    from edge_deploy.bench.report import print_report

    out = io.StringIO()
    print_report(a_report(), Console(file=out, width=80))
    text = out.getvalue()
    assert max(len(line) for line in text.splitlines()) <= 80 and "…" not in text, text
    assert "lanedet_pipeline (bls), concurrency 4: 111.1 frames/s" in text
    assert "  latency ms p50 / p90 / p99: 19.88 / 23.46 / 5222.12" in text
    assert "  CPU ms/frame client/server: 15.68 / 22.35" in text and "GPU" not in text  # no Jetson, no line
    wide = io.StringIO()
    print_report(a_report(), Console(file=wide, width=200))
    assert "┃ model" in wide.getvalue() and "5222.12" in wide.getvalue() and "…" not in wide.getvalue()


def test_the_plot_axis_has_round_ticks_written_out() -> None:
    from edge_deploy.bench.report import axis_ticks, tick_label

    assert [tick_label(v) for v in axis_ticks(5744.3)] == ["0", "1000", "2000", "3000", "4000", "5000"]
    assert [tick_label(v) for v in axis_ticks(0.33)] == ["0", "0.1", "0.2", "0.3"]
    assert [tick_label(v) for v in axis_ticks(0.3)] == ["0", "0.05", "0.1", "0.15", "0.2", "0.25", "0.3"]
    for peak in (1e-9, 0.07, 3.3, 88.0, 123456.0):
        ticks = axis_ticks(peak)
        assert 3 <= len(ticks) <= 7 and ticks[-1] <= peak and "e" not in "".join(map(tick_label, ticks)), peak


def test_the_families_table_is_readable_at_80_columns(tmp_path) -> None:
    import os

    import cli_process

    run = cli_process.run_cli(["families"], env={**os.environ, "COLUMNS": "80"}, timeout=60)
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    assert max(map(len, lines)) <= 80 and "…" not in run.stdout, run.stdout
    assert "  own options: --anchors-freq, --topk-anchors, --anchor-order" in lines, run.stdout
