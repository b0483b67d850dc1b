"""AsyncLaneDetClient.detect_markers with several frames in flight: the markers are made (and tracked) in the order
of the calls, whatever order the answers come back in, and a failed call does not block the ones after it. The
server is replaced by a detect that answers later frames first (no tritonserver)."""
from __future__ import annotations

import asyncio

import numpy as np
import pytest

from edge_deploy.client.async_client import AsyncLaneDetClient
from edge_deploy.errors import ClientError
from edge_deploy.geometry import Camera, Mounting
from edge_deploy.lanedet.lane import Lane

CAMERA = Camera(640, 360, np.array([[500.0, 0, 320], [0, 500.0, 180], [0, 0, 1]]), np.zeros(5), Mounting(1.5, 2.0))


def lanes_at(offset: float) -> list[Lane]:
    """The ego lane's two markings with the vehicle `offset` m left of its centre."""
    xs = np.linspace(6, 40, 12)
    return [Lane(CAMERA.ground_to_image(np.stack([xs, np.full_like(xs, y - offset)], 1)), 0.9) for y in (1.8, -1.8)]


class LateFirstClient(AsyncLaneDetClient):
    """Frame i (its first pixel) answers after (n - i) * 10 ms: the last frame first; frame 99 fails."""

    async def detect(self, frame: np.ndarray, **options) -> list[Lane]:
        index = int(frame[0, 0, 0])
        await asyncio.sleep((10 - index) * 0.01 if index < 10 else 0.0)
        if index == 99:
            raise ClientError("the server went away")
        return lanes_at(0.05 * index)


def frame(index: int) -> np.ndarray:
    return np.full((360, 640, 3), index, np.uint8)


def test_markers_are_tracked_in_the_order_of_the_calls():
    async def run():
        client = LateFirstClient("127.0.0.1:1", "lanedet", camera=CAMERA, track=True)
        return await asyncio.wait_for(asyncio.gather(*(client.detect_markers(frame(i)) for i in range(6))), 5)

    results = asyncio.run(run())
    # the vehicle drifts left frame after frame: each ego-left c0 a bit smaller than the one before,
    # and the tracker's first frame is frame 0 (its measurement taken as it is)
    c0 = [found.markers.ego_left.c0 for _, found in results]
    assert c0[0] == pytest.approx(1.8, abs=1e-3)
    assert all(b < a for a, b in zip(c0, c0[1:])), c0
    assert len({found.markers.ego_left.id for _, found in results}) == 1


def test_a_failed_call_gives_up_its_turn():
    async def run():
        client = LateFirstClient("127.0.0.1:1", "lanedet", camera=CAMERA, track=True)
        return await asyncio.wait_for(asyncio.gather(client.detect_markers(frame(0)), client.detect_markers(frame(99)),
                                                     client.detect_markers(frame(2)), return_exceptions=True), 5)

    first, failed, third = asyncio.run(run())
    assert isinstance(failed, ClientError)
    assert third[1].markers.ego_left.id == first[1].markers.ego_left.id
