"""edge_deploy.media.video: MPEG-4 files written atomically and read back; sources told apart; one-line errors."""
from __future__ import annotations

import numpy as np
import pytest

from edge_deploy.errors import FrameError
from edge_deploy.media import VideoWriter, frames_of, is_video_source, open_video, source_fps, write_video


def _frames(n: int, height: int = 64, width: int = 96) -> list[np.ndarray]:
    return [np.full((height, width, 3), 40 * i, np.uint8) for i in range(n)]


def test_a_written_video_reads_back_frame_by_frame(tmp_path) -> None:
    path = write_video(tmp_path / "clip.mp4", _frames(5), 96, 64, fps=25.0)
    assert path == tmp_path / "clip.mp4" and [p.name for p in tmp_path.iterdir()] == ["clip.mp4"]
    capture = open_video(str(path))
    try:
        assert source_fps(capture) == pytest.approx(25.0)
        frames = list(frames_of(capture))
    finally:
        capture.release()
    assert len(frames) == 5 and frames[0].shape == (64, 96, 3)
    assert [f.mean() for f in frames] == pytest.approx([40 * i for i in range(5)], abs=4)  # lossy, in order
    capture = open_video(str(path))
    assert len(list(frames_of(capture, max_frames=2))) == 2
    capture.release()


def test_odd_frames_come_out_even_and_nothing_is_under_the_final_name_before_finish(tmp_path) -> None:
    writer = VideoWriter(tmp_path / "odd.mp4", 30.0)
    for frame in _frames(3, height=33, width=51):
        writer.write(frame)
    assert not (tmp_path / "odd.mp4").exists()
    writer.finish()
    capture = open_video(str(tmp_path / "odd.mp4"))
    assert next(frames_of(capture)).shape == (32, 50, 3)
    capture.release()
    assert [p.name for p in tmp_path.iterdir()] == ["odd.mp4"]


def test_odd_sizes_and_a_failed_write_leave_no_file(tmp_path) -> None:
    with pytest.raises(FrameError, match="a video needs an even width and height"):
        write_video(tmp_path / "odd.mp4", _frames(1), 95, 64)

    def broken():
        yield from _frames(2)
        raise RuntimeError("camera gone")

    with pytest.raises(RuntimeError):
        write_video(tmp_path / "broken.mp4", broken(), 96, 64)
    assert list(tmp_path.iterdir()) == []


def test_sources_are_told_apart() -> None:
    assert all(map(is_video_source, ["drive.MP4", "a.mkv", "/dev/video0", "0", "v4l2src ! appsink"]))
    assert not any(map(is_video_source, ["road.png", "frames", "a.jpg"]))


def test_a_missing_video_is_one_line(tmp_path) -> None:
    with pytest.raises(FrameError, match=f"video {tmp_path / 'gone.mp4'} does not exist") as info:
        open_video(str(tmp_path / "gone.mp4"))
    assert "\n" not in str(info.value)
