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
    stream = PerceptionStream([], {"lanes": _Client()}, max_age=1e-3, fps=3600)  # the edges that are allowed
    assert stream.max_age == 1e-3
