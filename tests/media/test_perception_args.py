"""PerceptionStream's numeric arguments at their edges: each refused in one line before anything starts (plant:
drop the upper bound in media/perception.py and 1e308 gets through)."""
from __future__ import annotations

import math

import pytest

from edge_deploy.errors import ClientError
from edge_deploy.media.perception import PerceptionStream


class _Client:
    def detect(self, frame, *, deadline=None):  # noqa: ANN001 - a client needs only this here
        return []


@pytest.mark.parametrize("name", ["max_age", "deadline", "fps"])
@pytest.mark.parametrize("value", [0, -1, math.nan, math.inf, -math.inf, 1e308, True, "0.1"])
def test_a_bad_number_is_refused_in_one_line(name, value):
    with pytest.raises(ClientError) as caught:
        PerceptionStream([], {"lanes": _Client()}, **{name: value})
    assert "\n" not in str(caught.value) and name in str(caught.value)


def test_models_must_be_clients():
    for models in ({}, {"lanes": object()}, [("lanes", _Client())]):
        with pytest.raises(ClientError):
            PerceptionStream([], models)
    stream = PerceptionStream([], {"lanes": _Client()}, max_age=1e-3, fps=1000)  # the edges that are allowed
    assert stream.max_age == 1e-3


@pytest.mark.parametrize("kwargs", [{"fps": 1001}, {"max_age": 61}, {"deadline": 61}])
def test_the_bounds_are_lane_streams(kwargs):
    """One check for both streams (stream_loop.check_timing, numbers.FPS and MAX_AGE_S): PerceptionStream took up
    to 3600 of each, LaneStream refuses past 1000 frames/s and 60 s (plant: pass fps=None to check_timing in
    perception.py and fps=1001 gets through)."""
    from edge_deploy.media.stream import LaneStream

    with pytest.raises(ClientError) as perception:
        PerceptionStream([], {"lanes": _Client()}, **kwargs)
    with pytest.raises(ClientError) as lanes:
        LaneStream(_Client(), [], **kwargs)
    assert str(perception.value) == str(lanes.value)


def test_a_stopped_stream_does_not_start():
    """As LaneStream: start() after stop() is refused, not threads that read a frame and end (plant: drop the
    stopping check in stream_loop._check_startable)."""
    stream = PerceptionStream([], {"lanes": _Client()})
    stream.stop()
    with pytest.raises(ClientError, match="started already"):
        stream.start()
