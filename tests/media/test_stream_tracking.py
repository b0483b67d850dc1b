"""LaneStream with track=True: a dropped frame advances the tracker without a miss, a failed frame makes the markers
coast (flagged `missed`, growing uncertainty) for up to the tracker's max_missed frames, then they drop; the states
and counts agree. The server is replaced by a detector that answers the ego lane's two markings at once and fails
on the frames it is told to (what a killed server does is tested against the real tritonserver in
tests/client/test_lane_stream.py; this test is about the tracker's side of the stream)."""
from __future__ import annotations

import threading
import time

import numpy as np

from edge_deploy.errors import LanesUnavailable
from edge_deploy.geometry import Camera, LaneGeometry, Mounting
from edge_deploy.lanedet.lane import Lane
from edge_deploy.media.stream import LaneStream

CAMERA = Camera(640, 360, np.array([[500.0, 0, 320], [0, 500.0, 180], [0, 0, 1]]), np.zeros(5), Mounting(1.5, 2.0))


def ego_lanes() -> list[Lane]:
    xs = np.linspace(6, 40, 12)
    return [Lane(CAMERA.ground_to_image(np.stack([xs, np.full_like(xs, y)], 1)), 0.9) for y in (1.8, -1.8)]


class Detector:
    """Frame i is a 360x640 frame whose first pixel is i; `failing` frames raise LanesUnavailable; frame `hold` waits
    in detect until `go` is set (so frames read meanwhile are dropped unseen)."""

    def __init__(self, failing: set[int], hold: int | None = None) -> None:
        self.failing, self.hold = failing, hold
        self.holding, self.go = threading.Event(), threading.Event()

    def detect(self, frame: np.ndarray, *, deadline: float | None = None) -> list[Lane]:
        index = int(frame[0, 0, 0])
        if index == self.hold:
            self.holding.set()
            self.go.wait(10)
        if index in self.failing:
            raise LanesUnavailable("no lanes within the deadline of 100 ms: Triton at x is unreachable", "unreachable")
        return ego_lanes()


def frame(index: int) -> np.ndarray:
    return np.full((360, 640, 3), index, np.uint8)


def stream_results(detector: Detector, source) -> list:
    results = []
    with LaneStream(detector, source, camera=CAMERA, track=True, max_age=5.0, on_result=results.append) as stream:
        list(stream)
    return results


def in_step(count: int, results: list):
    """Frames 0..count-1, each read only once the previous one's result is out: nothing is dropped, whatever the
    machine's load."""
    for index in range(count):
        yield frame(index)
        deadline = time.monotonic() + 10
        while len(results) <= index and time.monotonic() < deadline:
            time.sleep(0.001)


def test_failed_frames_make_the_markers_coast_then_drop():
    results: list = []
    detector = Detector(failing={3, 4, 5, 6})
    with LaneStream(detector, in_step(8, results), camera=CAMERA, track=True, max_age=5.0,
                    on_result=results.append) as stream:
        list(stream)
    by_frame = {r.seq - 1: r for r in results}  # seq counts frames from 1: frame i is seq i + 1
    assert sorted(by_frame) == list(range(8)) and all(r.dropped == 0 for r in results)
    assert [by_frame[i].state for i in (3, 4, 5, 6)] == ["unavailable"] * 4
    assert all(not by_frame[i].lanes and by_frame[i].error for i in (3, 4, 5, 6))
    missed = [[m.missed for m in by_frame[i].markers.markers] for i in (3, 4, 5, 6)]
    assert missed == [[1, 1], [2, 2], [], []]  # coast for max_missed (2) frames, then dropped
    variance = [by_frame[i].markers.markers.ego_left.covariance[0, 0] for i in (2, 3, 4)]
    assert variance[0] < variance[1] < variance[2]  # uncertainty grows while coasting
    assert by_frame[7].state == "ok" and all(m.missed == 0 for m in by_frame[7].markers.markers)


def test_dropped_frames_advance_the_tracker_without_a_miss():
    detector = Detector(failing=set(), hold=2)

    def source():
        yield from (frame(i) for i in range(3))
        assert detector.holding.wait(10)
        yield from (frame(i) for i in range(3, 40))  # read while frame 2 is detected: all but the last dropped
        time.sleep(0.05)
        detector.go.set()

    results = stream_results(detector, source())
    assert [r.seq for r in results][-2:] == [3, 40]  # frames 0 and 1 may be dropped too: read at once
    after = results[-1]
    assert after.dropped == 36 and after.state == "ok" and all(m.missed == 0 for m in after.markers.markers)
    # the same tracks (ids) as before the drop: 36 frames dropped unseen are no misses (max_missed is 2)
    assert [m.id for m in after.markers.markers] == [m.id for m in results[-2].markers.markers]
    geometry = LaneGeometry(CAMERA, track=True, fps=30.0)
    geometry.frame_markers(ego_lanes(), frame(0))
    (track, _) = geometry.tracker._tracks
    before = track.covariance[0, 0]
    geometry.skipped_frame()
    assert track.covariance[0, 0] > before and track.missed == 0
