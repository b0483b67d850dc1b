"""Long work says how far it is (issue 56, item 7): a video's `infer` and `sample --video` print a line for the first
frame and then every PROGRESS_EVERY_S seconds (not once per 30 frames, a minute at 2 s a frame), and `sample --video`
ends with how long the drive took. The lines are driven by the seconds the work reports (no clock is waited on).
"""
from __future__ import annotations

from itertools import count

from cli_process import run_cli

from edge_deploy.core.progress import PROGRESS_EVERY_S, counted, every_few_seconds


def test_video_infer_reports_the_first_frame_then_every_few_seconds(capsys) -> None:
    from edge_deploy.cli.infer import _progress

    progress = _progress("drive.mp4")
    for frame in range(1, 11):  # a slow server: 2 s a frame
        progress(frame, 2.0 * frame)
    slow = capsys.readouterr().err.splitlines()
    assert slow[0] == "drive.mp4: 1 frames, 0.5 frames/s" and len(slow) == 10, slow  # a line a frame: each 2 s
    progress = _progress("drive.mp4")
    for frame in range(1, 301):  # a fast one: 100 frames/s for 3 s
        progress(frame, frame / 100)
    fast = capsys.readouterr().err.splitlines()
    assert fast == ["drive.mp4: 1 frames, 100.0 frames/s", "drive.mp4: 201 frames, 100.0 frames/s"], fast


def test_every_few_seconds_and_counted() -> None:
    said: list[str] = []
    progress = every_few_seconds(said.append, lambda done, s: f"{done} at {s:g}", every=PROGRESS_EVERY_S)
    clock = count(0.0, 0.5).__next__  # each item takes half a second
    assert list(counted(iter("abcdefgh"), progress, clock)) == list("abcdefgh")
    assert said == ["1 at 0.5", "5 at 2.5"], said


def test_sample_video_reports_its_frames(tmp_path) -> None:
    done = run_cli(["sample", "--video", "-n", "3", "--width", "64", "--height", "64", "-o", str(tmp_path)], timeout=120)
    assert done.returncode == 0, done.stderr
    lines = done.stderr.splitlines()
    assert lines[0].startswith("drive.mp4: 1/3 frames drawn (") and lines[-1].startswith("drive.mp4: 3 frames in "), lines
    assert (tmp_path / "drive.mp4").is_file()
