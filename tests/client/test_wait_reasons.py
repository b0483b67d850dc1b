"""What wait_until_ready says of a server it waited for (issue 55's second planted set, items 6 and 8 at another
line): a server an earlier attempt saw take the connection without answering (a timeout) stays "took the connection
but did not answer" when a later attempt is cut short as gRPC 1.67 reports it ("Timeout occurred: FD Shutdown"),
and a refusal after that is a server that is gone.

The gRPC errors are tritonclient's own exception type, built as a failed call raises it: no server is needed to tell
what its message means."""
from __future__ import annotations

import pytest

from edge_deploy.client.base import Backoff, ClientBase, ClientSettings
from edge_deploy.errors import ServerTimeoutError, ServerUnavailableError

pytest.importorskip("tritonclient")


def grpc_error(status: str, message: str):
    from tritonclient.utils import InferenceServerException

    return InferenceServerException(msg=message, status=f"StatusCode.{status}")


TIMED_OUT = ("UNAVAILABLE", "connection attempt timed out before receiving SETTINGS frame")
FD_SHUTDOWN = ("UNAVAILABLE", "failed to connect to all addresses; last error: UNKNOWN: ipv4:127.0.0.1:9: Timeout "
                              "occurred: FD Shutdown")
REFUSED = ("UNAVAILABLE", "failed to connect to all addresses; last error: connection refused")


def _last_error(*attempts: tuple[str, str]) -> Exception:
    """What wait_until_ready raises once its time is over after `attempts` (as its loop keeps the failures)."""
    client = ClientBase(ClientSettings.of("127.0.0.1:9", "lanedet"))
    failure = None
    for status, message in attempts:
        failure = client._attempt_failure(grpc_error(status, message), failure)
    backoff = Backoff(0.0, cap=0.01)
    backoff.deadline = 0.0  # the wait is over
    with pytest.raises((ServerTimeoutError, ServerUnavailableError)) as caught:
        client._wait_delay(backoff, failure, 5.0)
    return caught.value


def test_a_server_that_took_the_connection_stays_so_after_an_fd_shutdown() -> None:
    """Planted: `return error` for `return earlier` in ClientBase._attempt_failure: the hung server reads as one
    that is not there ("not reachable ... start it with edge-deploy serve")."""
    error = _last_error(TIMED_OUT, FD_SHUTDOWN)
    assert isinstance(error, ServerTimeoutError) and "took the connection but did not answer" in str(error), error


def test_a_refusal_after_a_timeout_is_a_server_that_is_gone() -> None:
    error = _last_error(TIMED_OUT, REFUSED)
    assert isinstance(error, ServerUnavailableError) and "was not reachable" in str(error), error
