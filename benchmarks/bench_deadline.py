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
import json
import os
import signal
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from bench_stream import make_repo, ms, free_port, start  # noqa: E402  (the two served models, the server)

from edge_deploy.client.async_client import AsyncLaneDetClient  # noqa: E402
from edge_deploy.client.sync_client import LaneDetClient  # noqa: E402
from edge_deploy.errors import LanesUnavailable  # noqa: E402
from edge_deploy.synthetic.roads import road_scene  # noqa: E402

DEADLINE = 0.05


def timed_sync(client: LaneDetClient, frame, n: int) -> tuple[list[float], dict[str, int]]:
    took, outcomes = [], {}
    for _ in range(n):
        t = time.perf_counter()
        try:
            client.detect(frame, deadline=DEADLINE)
            outcome = "lanes"
        except LanesUnavailable as exc:
            outcome = exc.reason
        took.append(time.perf_counter() - t)
        outcomes[outcome] = outcomes.get(outcome, 0) + 1
    return took, outcomes


async def timed_async(client: AsyncLaneDetClient, frame, n: int) -> tuple[list[float], dict[str, int]]:
    took, outcomes = [], {}
    for _ in range(n):
        t = time.perf_counter()
        try:
            await client.detect(frame, deadline=DEADLINE)
            outcome = "lanes"
        except LanesUnavailable as exc:
            outcome = exc.reason
        took.append(time.perf_counter() - t)
        outcomes[outcome] = outcomes.get(outcome, 0) + 1
    return took, outcomes


def summary(took: list[float], outcomes: dict[str, int]) -> dict:
    return {"p50_ms": ms(took, 50), "p99_ms": ms(took, 99), "max_ms": ms(took, 100), "outcomes": outcomes}


def both(url: str, model: str, frame, n: int, fresh: bool) -> dict:
    """n calls with each client (a fresh client per call where `fresh`: its first call only)."""
    if fresh:
        sync_took, sync_out, async_took, async_out = [], {}, [], {}
        for _ in range(n):
            with LaneDetClient(url, model, connect=False) as client:
                took, out = timed_sync(client, frame, 1)
            sync_took += took
            sync_out = {k: sync_out.get(k, 0) + out.get(k, 0) for k in {*sync_out, *out}}

            async def first() -> tuple[list[float], dict[str, int]]:
                async with AsyncLaneDetClient(url, model, connect=False) as client:
                    return await timed_async(client, frame, 1)

            took, out = asyncio.run(first())
            async_took += took
            async_out = {k: async_out.get(k, 0) + out.get(k, 0) for k in {*async_out, *out}}
        return {"sync": summary(sync_took, sync_out), "async": summary(async_took, async_out)}
    with LaneDetClient(url, model) as client:
        client.detect(frame)  # connected and warm: what is measured is the calls
        sync = summary(*timed_sync(client, frame, n))

    async def run() -> dict:
        async with AsyncLaneDetClient(url, model) as client:
            await client.detect(frame)
            return summary(*await timed_async(client, frame, n))

    return {"sync": sync, "async": asyncio.run(run())}


def hung(proc, frame, n: int) -> dict:
    """Both clients connected and warm, then the server SIGSTOPped: every call must end at its deadline."""
    sync_client = LaneDetClient(proc.url, "tiny")
    sync_client.detect(frame)

    async def run() -> dict:
        async with AsyncLaneDetClient(proc.url, "tiny") as client:
            await client.detect(frame)
            os.killpg(proc.proc.pid, signal.SIGSTOP)
            try:
                out = {"sync": summary(*timed_sync(sync_client, frame, n)),
                       "async": summary(*await timed_async(client, frame, n))}
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
