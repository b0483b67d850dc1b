"""Reading Triton's statistics around a bench cell. Triton counts a request after its response has left, so the
race the settled reading closes cannot be produced on demand with a real server (CI hit it once: 265 requests
counted for 266 frames); a scripted statistics client stands in for that moment, answering like tritonclient's
gRPC `get_inference_statistics`."""
from __future__ import annotations

from types import SimpleNamespace

from edge_deploy.bench.server_stats import ModelCounters, read_counters, server_times, settled_counters


class _LaggingStats:
    """Answers `counts` one reading at a time, then keeps answering the last one."""

    def __init__(self, counts: list[int]) -> None:
        self.counts, self.reads = counts, 0

    def get_inference_statistics(self, name: str, client_timeout: float) -> SimpleNamespace:
        count = self.counts[min(self.reads, len(self.counts) - 1)]
        self.reads += 1
        timing = SimpleNamespace(ns=count * 1000)
        stats = SimpleNamespace(success=SimpleNamespace(count=count), queue=timing, compute_input=timing,
                                compute_infer=timing, compute_output=timing)
        return SimpleNamespace(model_stats=[SimpleNamespace(name="lane", inference_stats=stats)])


def test_the_settled_reading_waits_for_the_last_request_to_be_counted() -> None:
    client = _LaggingStats([265, 266])
    assert read_counters(_LaggingStats([265, 266]), 1.0)["lane"].requests == 265
    assert settled_counters(client, 1.0, pause=0.001)["lane"] == ModelCounters(266, 266_000, 3 * 266_000)
    assert client.reads == 3  # 265, 266, 266: two readings agree


def test_a_server_that_keeps_counting_is_read_within_the_limit() -> None:
    client = _LaggingStats(list(range(1000)))
    assert settled_counters(client, 1.0, pause=0.001, limit=0.02)["lane"].requests < 1000


def test_a_server_without_statistics_reads_as_nothing() -> None:
    assert settled_counters(object(), 1.0, pause=0.001, limit=0.01) == {}
    assert server_times({}, {"lane": ModelCounters(10, 10_000_000, 20_000_000)})["lane"].compute_ms == 2.0
