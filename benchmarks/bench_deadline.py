#!/usr/bin/env python3
"""Per-call deadlines, sync against async (issue 54 class 1): does `AsyncLaneDetClient.detect(deadline=)` keep its
deadline as `LaneDetClient.detect(deadline=)` does, on the first call and over many?

    nice -n 5 python3 benchmarks/bench_deadline.py [--calls 300] [--json deadline.json]

Serves bench_stream.py's `tiny` (negligible compute) and `slow` (50 ms a call) models on the real bundled
tritonserver and measures, for both clients side by side in one run, every call with `deadline=0.05`:

1. the first call of a fresh client (connecting included), `--fresh` clients each: how long until lanes or
   LanesUnavailable;
2. `--calls` calls on `tiny`: p50/p99/max (they answer well inside the deadline);
3. `--calls` calls on `slow`: p50/p99/max until LanesUnavailable ("slow"), which must come at the deadline;
4. the server SIGSTOPped (hung, not dead): `--calls` calls, p50/p99/max until LanesUnavailable.

The figure that matters is the async column over the sync one (and each p99 against the 50 ms deadline); the
machine's load moves both.
"""
from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Iterator

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from bench_stream import make_repo, ms, free_port, start  # noqa: E402  (the two served models, the server)

from edge_deploy.client.async_client import AsyncLaneDetClient  # noqa: E402
from edge_deploy.client.sync_client import LaneDetClient  # noqa: E402
from edge_deploy.errors import LanesUnavailable  # noqa: E402
from edge_deploy.synthetic.roads import road_scene  # noqa: E402

DEADLINE = 0.05


class Timings:
    """Each call's duration and how it ended ("lanes" or LanesUnavailable's reason)."""

    def __init__(self) -> None:
        self.took: list[float] = []
        self.outcomes: dict[str, int] = {}

    @contextlib.contextmanager
    def call(self) -> Iterator[None]:
        start, outcome = time.perf_counter(), "lanes"
        try:
            yield
        except LanesUnavailable as exc:
            outcome = exc.reason
        self.took.append(time.perf_counter() - start)
        self.outcomes[outcome] = self.outcomes.get(outcome, 0) + 1

    def summary(self) -> dict:
        return {"p50_ms": ms(self.took, 50), "p99_ms": ms(self.took, 99), "max_ms": ms(self.took, 100),
                "outcomes": self.outcomes}


def timed_sync(client: LaneDetClient, frame, n: int, timings: Timings) -> Timings:
    for _ in range(n):
        with timings.call():
            client.detect(frame, deadline=DEADLINE)
    return timings


async def timed_async(client: AsyncLaneDetClient, frame, n: int, timings: Timings) -> Timings:
    for _ in range(n):
        with timings.call():
            await client.detect(frame, deadline=DEADLINE)
    return timings


def both(url: str, model: str, frame, n: int, fresh: bool) -> dict:
    """n calls with each client (a fresh client per call where `fresh`: its first call only)."""
    sync, asynchronous = Timings(), Timings()
    if fresh:
        async def first() -> None:
            async with AsyncLaneDetClient(url, model, connect=False) as client:
                await timed_async(client, frame, 1, asynchronous)

        for _ in range(n):
            with LaneDetClient(url, model, connect=False) as client:
                timed_sync(client, frame, 1, sync)
            asyncio.run(first())
        return {"sync": sync.summary(), "async": asynchronous.summary()}
    with LaneDetClient(url, model) as client:
        client.detect(frame)  # connected and warm: what is measured is the calls
        timed_sync(client, frame, n, sync)

    async def run() -> None:
        async with AsyncLaneDetClient(url, model) as client:
            await client.detect(frame)
            await timed_async(client, frame, n, asynchronous)

    asyncio.run(run())
    return {"sync": sync.summary(), "async": asynchronous.summary()}


def hung(proc, frame, n: int) -> dict:
    """Both clients connected and warm, then the server SIGSTOPped: every call must end at its deadline."""
    sync_client = LaneDetClient(proc.url, "tiny")
    sync_client.detect(frame)

    async def run() -> dict:
        async with AsyncLaneDetClient(proc.url, "tiny") as client:
            await client.detect(frame)
            os.killpg(proc.proc.pid, signal.SIGSTOP)
            try:
                out = {"sync": timed_sync(sync_client, frame, n, Timings()).summary(),
                       "async": (await timed_async(client, frame, n, Timings())).summary()}
            finally:
                os.killpg(proc.proc.pid, signal.SIGCONT)
            return out

    try:
        return asyncio.run(run())
    finally:
        sync_client.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--fresh", type=int, default=20)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    frame = road_scene(1640, 590, seed=1)[0]
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        proc = start(make_repo(work), work, free_port())
        try:
            report = {"deadline_s": DEADLINE, "calls": args.calls, "load_before": os.getloadavg()[0],
                      "first_call": both(proc.url, "tiny", frame, args.fresh, fresh=True),
                      "tiny": both(proc.url, "tiny", frame, args.calls, fresh=False),
                      "slow": both(proc.url, "slow", frame, args.calls, fresh=False),
                      "hung": hung(proc, frame, args.calls), "load_after": os.getloadavg()[0]}
        finally:
            proc.stop()
    for name in ("first_call", "tiny", "slow", "hung"):
        row = report[name]
        print(f"{name:>10}: sync p50 {row['sync']['p50_ms']:6.1f} p99 {row['sync']['p99_ms']:6.1f} "
              f"max {row['sync']['max_ms']:6.1f} ms {row['sync']['outcomes']} | async p50 {row['async']['p50_ms']:6.1f} "
              f"p99 {row['async']['p99_ms']:6.1f} max {row['async']['max_ms']:6.1f} ms {row['async']['outcomes']} | "
              f"async/sync p99 {row['async']['p99_ms'] / row['sync']['p99_ms']:.2f}")
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
