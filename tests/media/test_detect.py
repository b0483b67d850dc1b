"""edge_deploy.media.detect: the run loop over images and videos with any detector, and what it writes."""
from __future__ import annotations

import json

import cv2
import numpy as np
import pytest

from edge_deploy.errors import FrameError
from edge_deploy.lanedet.lane import Lane
from edge_deploy.media import detect_images, detect_video, frames_of, open_video, write_video


def two_lanes(frame: np.ndarray) -> list[Lane]:
    """A detector: two straight lanes from the bottom corners towards the middle of the frame."""
    h, w = frame.shape[:2]
    ys = np.linspace(h - 1, h / 2, 8, dtype=np.float32)
    return [Lane(np.stack([np.linspace(x, w / 2, 8, dtype=np.float32), ys], 1), score)
            for x, score in ((0.0, 0.9), (w - 1.0, 0.8))]


def test_images_give_pictures_and_json_with_repeated_names_kept_apart(tmp_path) -> None:
    frame = np.zeros((60, 100, 3), np.uint8)
    frames = [("a/road.png", frame), ("b/road.png", frame)]
    records = detect_images(two_lanes, frames, tmp_path, model="m", write_json=True)
    assert [r["png"] for r in records] == [str(tmp_path / "road.lanes.png"), str(tmp_path / "road-1.lanes.png")]
    written = (tmp_path / "road-1.lanes.json").read_bytes()
    assert written.endswith(b"}\n") and b'\n "image": "b/road.png",' in written  # indent 1, a final newline
    record = json.loads(written)
    assert record["model"] == "m" and (record["width"], record["height"]) == (100, 60)
    assert [lane["score"] for lane in record["lanes"]] == pytest.approx([0.9, 0.8])
    assert (tmp_path / "road-1.lanes.json").stat().st_mode & 0o777 == 0o644
    picture = cv2.imread(records[0]["png"])
    assert picture.shape[:2] == (60, 100) and picture.any()  # the lanes are drawn on the black frame


def test_a_video_gives_an_annotated_video_and_a_json_line_per_frame(tmp_path) -> None:
    source = write_video(tmp_path / "drive.mp4", [np.zeros((64, 96, 3), np.uint8)] * 4, 96, 64)
    seen = []
    result = detect_video(two_lanes, str(source), tmp_path / "out", model="m",
                          progress=lambda n, s: seen.append(n))
    assert (result.frames, result.lanes_per_frame, seen) == (4, 2.0, [1, 2, 3, 4])
    lines = [json.loads(line) for line in result.jsonl.read_text().splitlines()]
    assert [line["frame"] for line in lines] == [0, 1, 2, 3] and all(len(line["lanes"]) == 2 for line in lines)
    capture = open_video(str(result.video))
    assert len(list(frames_of(capture))) == 4
    capture.release()
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["drive.lanes.jsonl", "drive.lanes.mp4"]


def test_ctrl_c_keeps_the_frames_done_under_the_final_names(tmp_path) -> None:
    source = write_video(tmp_path / "drive.mp4", [np.zeros((64, 96, 3), np.uint8)] * 5, 96, 64)
    calls = []

    def interrupted(frame: np.ndarray) -> list[Lane]:
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return two_lanes(frame)

    result = detect_video(interrupted, str(source), tmp_path / "out", model="m")
    assert result.frames == 2 and len(result.jsonl.read_text().splitlines()) == 2
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["drive.lanes.jsonl", "drive.lanes.mp4"]


def test_a_video_interrupted_before_its_first_frame_leaves_nothing(tmp_path) -> None:
    source = write_video(tmp_path / "drive.mp4", [np.zeros((64, 96, 3), np.uint8)] * 2, 96, 64)

    def interrupted(frame: np.ndarray) -> list[Lane]:
        raise KeyboardInterrupt

    with pytest.raises(FrameError, match="gave no frames"):
        detect_video(interrupted, str(source), tmp_path / "out", model="m")
    assert list((tmp_path / "out").iterdir()) == []


def test_each_video_is_its_own_stream_for_the_plausibility_of_its_markers(tmp_path) -> None:
    from edge_deploy.geometry import Camera, LaneGeometry, Mounting

    camera = Camera(96, 64, np.array([[80.0, 0, 48], [0, 80.0, 32], [0, 0, 1]]), np.zeros(5), Mounting(1.5, 2.0))
    xs = np.linspace(6, 40, 8)

    def ego_lane_at(offset: float):  # a detector: the ego lane's two lines, the vehicle `offset` m left of centre
        return lambda frame: [Lane(camera.ground_to_image(np.stack([xs, np.full_like(xs, y - offset)], 1)), 0.9)
                              for y in (1.75, -1.75)]

    source = write_video(tmp_path / "drive.mp4", [np.zeros((64, 96, 3), np.uint8)] * 3, 96, 64)
    geometry = LaneGeometry(camera)
    verdicts = []
    for offset, out in ((0.0, "first"), (1.2, "second")):  # 1.2 m apart: a jump no vehicle makes in 1/30 s
        result = detect_video(ego_lane_at(offset), str(source), tmp_path / out, model="m", geometry=geometry)
        verdicts += [json.loads(line)["plausibility"] for line in result.jsonl.read_text().splitlines()]
    assert geometry.fps == pytest.approx(30.0)  # the video's own rate: its frames are 1/30 s apart
    assert all(v["ok"] and not v["reasons"] for v in verdicts)
    assert ["offset_jump" in v["checked"] for v in verdicts] == [False, True, True] * 2
