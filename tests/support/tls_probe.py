"""Run inside a client network namespace: LaneDetClient cases given as JSON; prints one JSON list of results.

A case: {"url", "model", "tls": {"ca", "cert", "key", "server_name"} or null, "action": "wait" | "detect",
"repeat": N (detect: timed calls after one warm-up), "timeout": seconds (wait)}.
"""
from __future__ import annotations

import json
import sys
import time

import numpy as np

from edge_deploy.client.sync_client import LaneDetClient
from edge_deploy.tls.config import TLSConfig
from edge_deploy.errors import EdgeDeployError


def run(case: dict, frame: np.ndarray) -> dict:
    started = time.monotonic()
    try:
        tls = TLSConfig(**case["tls"]) if case.get("tls") else None
        with LaneDetClient(case["url"], case["model"], tls=tls, transport="grpc", connect=False,
                           retry_deadline=case.get("retry", 0.0), client_timeout=case.get("client_timeout", 10.0)) as client:
            if case["action"] == "async_detect":
                return _async_detect(case, tls, frame)
            if case["action"] == "wait":
                client.wait_until_ready(timeout=case.get("timeout", 60.0))
                return {"ok": True}
            lanes = client.detect(frame)
            times = []
            for _ in range(case.get("repeat", 0)):
                t0 = time.perf_counter()
                client.detect(frame)
                times.append(time.perf_counter() - t0)
            result = {"ok": True, "lanes": len(lanes)}
            if times and case.get("raw"):
                result["times_ms"] = [t * 1e3 for t in times]
            if times:
                result.update(p50_ms=float(np.percentile(times, 50) * 1e3), p90_ms=float(np.percentile(times, 90) * 1e3),
                              n=len(times))
            return result
    except EdgeDeployError as exc:
        return {"ok": False, "type": type(exc).__name__, "error": str(exc), "seconds": time.monotonic() - started}


def _async_detect(case: dict, tls: TLSConfig | None, frame: np.ndarray) -> dict:
    import asyncio

    from edge_deploy.client.async_client import AsyncLaneDetClient

    async def go() -> list[int]:
        async with AsyncLaneDetClient(case["url"], case["model"], tls=tls, transport="grpc", retry_deadline=0) as client:
            found = await client.detect_batch([frame, frame, frame])
            return [len(lanes) for lanes in found]

    return {"ok": True, "lanes_per_frame": asyncio.run(go())}


def main() -> None:
    cases = json.loads(sys.argv[1])
    frame = np.random.default_rng(0).integers(0, 256, (590, 1640, 3), dtype=np.uint8)
    print(json.dumps([run(case, frame) for case in cases]))


if __name__ == "__main__":
    main()
