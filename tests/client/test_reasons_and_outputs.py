"""Small behaviours issue 55 found untested, each with the one-line bug it catches:

- gRPC's "Timeout occurred: FD Shutdown" (a refused connect cut short by the deadline) reads as unreachable, not
  slow (plant: "timeout" among the words of a timed-out call in client/base.py);
- a call whose earlier attempt found nothing listening and whose last attempt timed out stays "unreachable"
  (plant: the last reason wins in ClientBase._after_failure);
- strict JSON writes no NaN anywhere, tuples included (plant: tuples passed through as they are);
- without a camera, the published CameraInfo has the frame's height and width the right way round (plant: the
  two swapped in ros/messages.py).

The gRPC errors are tritonclient's own exception type, built as a failed call raises it: no server is needed to
tell what its message means.
"""
from __future__ import annotations

import json

import numpy as np
import pytest

from edge_deploy.client.base import Backoff, ClientBase, ClientSettings, unavailability
from edge_deploy.errors import LanesUnavailable
from edge_deploy.core.strict_json import dumps


def grpc_error(status: str, message: str):
    from tritonclient.utils import InferenceServerException

    return InferenceServerException(msg=message, status=f"StatusCode.{status}")


def test_fd_shutdown_is_a_server_that_is_not_there():
    assert unavailability(grpc_error("UNAVAILABLE", "failed to connect to all addresses; last error: UNKNOWN: "
                                                    "ipv4:127.0.0.1:9: Timeout occurred: FD Shutdown")) == "unreachable"
    assert unavailability(grpc_error("UNAVAILABLE", "connection attempt timed out before receiving SETTINGS "
                                                    "frame")) == "slow"
    assert unavailability(grpc_error("DEADLINE_EXCEEDED", "Deadline Exceeded")) == "slow"


def test_a_call_that_found_nothing_listening_stays_unreachable_when_its_last_attempt_timed_out():
    client = ClientBase(ClientSettings.of("127.0.0.1:9", "lanedet"))
    backoff = Backoff(0.02, cap=0.01, floor=0.001, first=0.01)
    refused = grpc_error("UNAVAILABLE", "failed to connect to all addresses; last error: connection refused")
    timed_out = grpc_error("DEADLINE_EXCEEDED", "Deadline Exceeded")
    client._after_failure(backoff, refused, deadline=0.02)  # a sleep is granted: the deadline is not over yet
    backoff.deadline = 0.0  # and now it is
    with pytest.raises(LanesUnavailable) as caught:
        client._after_failure(backoff, timed_out, deadline=0.02)
    assert caught.value.reason == "unreachable"


def test_strict_json_has_no_nan_in_tuples_or_anywhere_else():
    text = dumps({"a": (1.0, float("nan")), "b": [float("inf"), (np.float32("nan"),)], "c": {"d": -float("inf")}})
    assert "NaN" not in text and "Infinity" not in text
    assert json.loads(text) == {"a": [1.0, None], "b": [None, [None]], "c": {"d": None}}


def test_camera_info_without_a_camera_is_height_by_width():
    pytest.importorskip("rosbags")
    from edge_deploy.media.stamped import FrameResult, StampedFrame
    from edge_deploy.ros.messages import CAMERA_INFO, frame_messages
    from edge_deploy.ros.types import typestore

    frame = np.zeros((120, 328, 3), np.uint8)  # not square: a swap shows
    message = next(m for m in frame_messages(FrameResult(StampedFrame(frame, 1, "camera", 0), [])) if
                   m.topic == CAMERA_INFO)
    info = typestore().deserialize_cdr(message.data, message.msgtype)
    assert (info.height, info.width) == (120, 328)
