"""The reason an async call cut off at its deadline gives (issue 55's second planted set, item 6 at another line): as
for LaneDetClient, what an earlier attempt saw says more than "slow": a call whose attempts met a server that was not
there ("unreachable") and then a timeout is "unreachable" when the deadline cuts it off.

The call cut off is a coroutine that outlives the deadline (asyncio.sleep): what is under test is the client's
decision once it is cut, not a server."""
from __future__ import annotations

import asyncio

import pytest

pytest.importorskip("tritonclient")

from edge_deploy.client.async_client import AsyncLaneDetClient  # noqa: E402
from edge_deploy.errors import LanesUnavailable  # noqa: E402


def _cut_off(reasons: set[str]) -> LanesUnavailable:
    async def run() -> LanesUnavailable:
        client = AsyncLaneDetClient("127.0.0.1:9", "lanedet", connect=False)
        try:
            budget = client._call_backoff(0.05)
            budget.reasons.update(reasons)  # what the call's failed attempts ran into (ClientBase._after_failure)
            with pytest.raises(LanesUnavailable) as caught:
                await client._within(budget, 0.05, asyncio.sleep(5))
            return caught.value
        finally:
            await client.close()

    return asyncio.run(run())


def test_an_earlier_unreachable_outlives_a_last_timeout() -> None:
    """Planted: ("slow", "not_ready", "unreachable") for the order in AsyncLaneDetClient._within."""
    assert _cut_off({"unreachable", "slow"}).reason == "unreachable"
    assert _cut_off({"not_ready", "slow"}).reason == "not_ready"
    assert _cut_off(set()).reason == "slow"
