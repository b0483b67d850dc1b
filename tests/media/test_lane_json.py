"""What infer writes for machines (edge_deploy.media.lane_json): the keys, their order and their nulls are a contract
other tools read, so they are checked here as written."""
from __future__ import annotations

import json

import numpy as np

from edge_deploy.geometry import Camera, LaneGeometry, Mounting
from edge_deploy.lanedet.lane import Lane
from edge_deploy.media import FrameLanes, ImageLanes, LiveFrameLanes, detect_images, lanes_record, write_video
from edge_deploy.media.live import DecodeOverrides, detect_live

CAMERA = Camera(96, 64, np.array([[80.0, 0, 48], [0, 80.0, 32], [0, 0, 1]]), np.zeros(5), Mounting(1.5, 2.0))
XS = np.linspace(6, 40, 8)


def ego_lane(frame: np.ndarray) -> list[Lane]:
    """A detector: the ego lane's two lines, 3.5 m apart, seen by CAMERA."""
    return [Lane(CAMERA.ground_to_image(np.stack([XS, np.full_like(XS, y)], 1)), 0.9) for y in (1.75, -1.75)]


FRAME = np.zeros((64, 96, 3), np.uint8)
GEOMETRY_KEYS = ["markers", "figures", "plausibility"]


def test_an_images_json_and_its_record(tmp_path) -> None:
    plain, = detect_images(ego_lane, [("a/road.png", FRAME)], tmp_path, model="m", write_json=True)
    written = json.loads((tmp_path / "road.lanes.json").read_text())
    assert list(written) == ["image", "height", "width", "model", "lanes", "png"]  # the file holds png, not itself
    assert written["lanes"][0] == {"score": 0.9, "points": ego_lane(FRAME)[0].points.tolist()}
    assert plain.to_dict() == {**written, "json": str(tmp_path / "road.lanes.json")}
    assert (plain.image, plain.width, plain.height, len(plain.lanes)) == ("a/road.png", 96, 64, 2)
    seen, = detect_images(ego_lane, [("b.png", FRAME)], tmp_path, model="m", write_png=False, write_json=True,
                          geometry=LaneGeometry(CAMERA))
    assert list(json.loads((tmp_path / "b.lanes.json").read_text())) == ["image", "height", "width", "model",
                                                                          "lanes", *GEOMETRY_KEYS]
    assert isinstance(seen, ImageLanes) and seen.markers is not None
    assert lanes_record("c.png", FRAME, [], "m").to_dict() == {"image": "c.png", "height": 64, "width": 96,
                                                                "model": "m", "lanes": []}


def test_a_frames_line_video_recording_and_live() -> None:
    found = LaneGeometry(CAMERA).frame_markers(ego_lane(FRAME), FRAME)
    assert list(FrameLanes.of(0, []).to_dict()) == ["frame", "lanes"]
    assert list(FrameLanes.of(3, ego_lane(FRAME), found, stamp_ns=7).to_dict()) == ["frame", "stamp_ns", "lanes",
                                                                                 *GEOMETRY_KEYS]
    live = LiveFrameLanes.live(5, "unavailable", None, 2, "server restarting", []).to_dict()
    assert live == {"frame": 5, "state": "unavailable", "latency_s": None, "dropped": 2, "error": "server restarting",
                    "lanes": []}  # latency and error are written as null when there are none
    assert list(LiveFrameLanes.live(6, "ok", 0.02, 0, None, [], found).to_dict()) == [
        "frame", "state", "latency_s", "dropped", "error", "lanes", *GEOMETRY_KEYS]


class Detector:
    """A detector (LaneStream takes any object with detect(frame, deadline=)) that notes the decode keywords."""

    def __init__(self) -> None:
        self.calls: list[dict] = []

    def detect(self, frame: np.ndarray, *, deadline: float | None = None, **decode) -> list[Lane]:
        self.calls.append(decode)
        return ego_lane(frame)

    def release(self) -> None:
        pass


def test_the_live_loop_asks_every_call_for_the_decode_parameters(tmp_path) -> None:
    source = write_video(tmp_path / "drive.mp4", [FRAME] * 3, 96, 64)
    detector = Detector()
    result = detect_live(detector, str(source), tmp_path / "out", model="m", max_age=5.0,
                         detect_options=DecodeOverrides(conf_threshold=0.3, nms_threshold=20.0, top_k=2))
    assert detector.calls and all(c == {"conf_threshold": 0.3, "nms_threshold": 20.0, "top_k": 2}
                                  for c in detector.calls)
    lines = [json.loads(line) for line in result.video.jsonl.read_text().splitlines()]
    assert lines and all(list(line) == ["frame", "state", "latency_s", "dropped", "error", "lanes"] for line in lines)
    default = Detector()
    detect_live(default, str(source), tmp_path / "again", model="m", max_age=5.0)
    assert default.calls[0] == {"conf_threshold": None, "nms_threshold": None, "top_k": None}  # the model's own
