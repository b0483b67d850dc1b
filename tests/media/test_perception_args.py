"""PerceptionStream's numeric arguments at their edges: each refused in one line before anything starts, through the
same ranges (numbers.STREAM_SECONDS, STREAM_FPS) and words as LaneStream's (plant: drop the upper bound of
numbers.STREAM_SECONDS and 1e308 gets through; give perception.py bounds of its own and the two disagree)."""
from __future__ import annotations

import math

import pytest

from edge_deploy.errors import ClientError
from edge_deploy.media.perception import PerceptionStream
from edge_deploy.media.stream import LaneStream
from edge_deploy.core.numbers import STREAM_FPS, STREAM_SECONDS


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


@pytest.mark.parametrize("name, rng", [("max_age", STREAM_SECONDS), ("deadline", STREAM_SECONDS), ("fps", STREAM_FPS)])
def test_both_streams_take_and_refuse_the_same_values_in_the_same_words(name, rng):
    past = math.nextafter(float(rng.high), math.inf)
    for value in (0, -1, math.nan, math.inf, 1e308, past, rng.high, 0.5):
        said = []
        for make in (lambda: PerceptionStream([], {"lanes": _Client()}, **{name: value}),
                     lambda: LaneStream(_Client(), [], **{name: value})):
            try:
                make().stop()
                said.append(None)
            except ClientError as exc:
                said.append(str(exc))
        assert said[0] == said[1], (name, value, said)
        taken = rng.contains(value)
        assert (said[0] is None) == taken, (name, value, said)
        if not taken:
            assert said[0].startswith(f"{name} must be {rng.describe()}, not "), said[0]


def test_a_stopped_stream_does_not_start():
    """As LaneStream: start() after stop() is refused, not threads that read a frame and end (plant: drop the
    stopping check in stream_loop._check_startable)."""
    stream = PerceptionStream([], {"lanes": _Client()})
    stream.stop()
    with pytest.raises(ClientError, match="started already"):
        stream.start()


def test_a_source_that_is_no_source_is_named_for_the_stream_given_it():
    """Both streams share the source reader (stream_loop.Frames): its refusal names the stream the app made (plant: the
    old literal "LaneStream source must be ..." and PerceptionStream's refusal names the wrong class)."""
    with pytest.raises(ClientError, match=r"^PerceptionStream source must be a video file"):
        PerceptionStream(3, {"lanes": _Client()})
    with pytest.raises(ClientError, match=r"^LaneStream source must be a video file"):
        LaneStream(_Client(), 3)
