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
