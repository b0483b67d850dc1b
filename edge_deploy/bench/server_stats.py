"""The server's own time per request and model, from Triton's statistics API (get_inference_statistics):
queue (waiting for an instance) and compute (input copy + inference + output copy)."""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class ModelCounters:
    """Triton's cumulative counters of one model (all versions): successful requests and nanoseconds."""

    requests: int = 0
    queue_ns: int = 0
    compute_ns: int = 0


@dataclass(frozen=True)
class ServerTimes:
    """One model's share of a cell: requests it served and its mean queue and compute ms per request."""

    requests: int
    queue_ms: float
    compute_ms: float


def read_counters(client: Any, timeout: float) -> dict[str, ModelCounters]:
    """Every model's counters now ({} when the server does not answer the statistics call)."""
    try:
        stats = client.get_inference_statistics("", client_timeout=timeout)
    except Exception:  # noqa: BLE001 - statistics are extra; a server that refuses them still benches
        return {}
    out: dict[str, ModelCounters] = {}
    for entry in stats.model_stats:
        s = entry.inference_stats
        prev = out.get(entry.name, ModelCounters())
        out[entry.name] = ModelCounters(
            prev.requests + int(s.success.count), prev.queue_ns + int(s.queue.ns),
            prev.compute_ns + int(s.compute_input.ns) + int(s.compute_infer.ns) + int(s.compute_output.ns))
    return out


def settled_counters(client: Any, timeout: float, pause: float = 0.02, limit: float = 1.0) -> dict[str, ModelCounters]:
    """The counters once two readings `pause` apart agree (at most `limit` seconds of waiting): Triton counts a
    request after its response has left, so a reading taken the moment the client has its last answer can be one
    short."""
    deadline = time.monotonic() + limit
    now = read_counters(client, timeout)
    while time.monotonic() < deadline:
        time.sleep(pause)
        again = read_counters(client, timeout)
        if again == now:
            break
        now = again
    return now


def server_times(before: dict[str, ModelCounters], after: dict[str, ModelCounters]) -> dict[str, ServerTimes]:
    """Per model that served requests between the two readings: its queue and compute ms per request."""
    out = {}
    for name, now in sorted(after.items()):
        then = before.get(name, ModelCounters())
        requests = now.requests - then.requests
        if requests > 0:
            out[name] = ServerTimes(requests, (now.queue_ns - then.queue_ns) / requests / 1e6,
                                    (now.compute_ns - then.compute_ns) / requests / 1e6)
    return out
