"""Benchmark: the two server-side pipelines (`install --pipeline ensemble` and `--pipeline bls`) vs client-side
pre/post, in one run against one tritonserver on loopback.

The served lane model is the negligible-compute stand-in of tests/support/small_artifact.py (LaneATT's I/O:
input [B, 3, 360, 640] FP32 -> predict_lanes [B, 1000, 77]; `--family ufldv2`: UFLDv2's CULane I/O), installed
twice by the real `install` (Python-backend ONNX Runtime runner, what the bundled server can serve): as `ens` with
the ensemble `ens_pipeline` (preprocess -> model -> postprocess) and as `bls` with the BLS `bls_pipeline` (one
Python model calling `bls` itself; `bl1_pipeline`: the same with one instance instead of
install's two). Client-side pre/post is LaneDetClient on `ens`. Every variant takes the same
1640x590 BGR frames; at concurrency 1 they run interleaved, request by request; at concurrency 4
(AsyncLaneDetClient, 4 frames in flight) in alternating halves. Ratios are to client-side pre/post's p50.
`--family both` (the default) runs LaneATT then UFLDv2 in one invocation, one server each.

Server CPU per frame: utime + stime of the tritonserver process and of its children (the Python-backend
stubs), from /proc/<pid>/stat, read before and after each request (concurrency 1) or each half
(concurrency 4) and divided by the frames; clock ticks (10 ms) summed over hundreds of requests.
Request / answer kB: the tensor bytes of one frame's request and answer (what crosses a network to a
remote server): the model input and raw outputs for client-side pre/post, the frame and the lanes for
the pipelines.

    python3 benchmarks/bench_bls.py [--requests 300] [--family both|laneatt|ufldv2] [--json out.json]
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "support"))  # small_artifact.py: the negligible-compute lane model
sys.path.insert(0, str(ROOT / "benchmarks"))

from bench_client import concurrent_detects  # noqa: E402

from edge_deploy.client.sync_client import LaneDetClient  # noqa: E402
from edge_deploy.training.synthetic import road_scene  # noqa: E402

ANCHORS = ROOT / "tests" / "data" / "laneatt" / "anchors_2784x77.npy"
VARIANTS = {"client-side pre/post": "ens", "ensemble pipeline": "ens_pipeline", "BLS pipeline": "bls_pipeline",
            "BLS pipeline, 1 instance": "bl1_pipeline"}


def start_server(work: Path, family: str):
    from small_artifact import make_artifact, make_ufldv2_artifact

    from edge_deploy.repository.install import install
    from edge_deploy.serve.argv import ServerOptions
    from edge_deploy.serve.discovery import find_tritonserver
    from edge_deploy.serve.process import TritonProcess

    artifact = (make_ufldv2_artifact(work / "artifact") if family == "ufldv2" else
                make_artifact(work / "artifact", ANCHORS))
    install(artifact, work / "repo", "ens", runtime="python", pipeline="ensemble")
    install(artifact, work / "repo", "bls", runtime="python", pipeline="bls")
    install(artifact, work / "repo", "bl1", runtime="python", pipeline="bls")
    from edge_deploy.repository import model_config as mc
    from edge_deploy.repository.versions import read_config

    config = read_config(work / "repo", "bl1_pipeline")  # what install writes, with one instance instead
    config.instance_group[0].count = 1
    (work / "repo" / "bl1_pipeline" / "config.pbtxt").write_text(mc.config_text(config))
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    proc = TritonProcess(find_tritonserver(cache_dir=work / "cache"),
                         ServerOptions(model_repository=work / "repo", grpc_port=port), work / "triton.log")
    proc.start()
    proc.wait_ready(120)
    return proc


class ServerCPU:
    """CPU seconds used so far by the tritonserver process `pid` and its children (Python-backend stubs)."""

    TICK = os.sysconf("SC_CLK_TCK")

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.children = self._children()

    @staticmethod
    def _stat(pid: int) -> list[str]:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()  # fields from 3 (state) on: ppid at 1, utime at 11

    def _children(self) -> list[int]:
        found = []
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                if int(self._stat(int(pid))[1]) == self.pid:
                    found.append(int(pid))
            except (OSError, IndexError, ValueError):
                continue
        return found

    def seconds(self) -> float:
        """utime + stime of the server and its live children, plus cutime + cstime (children that ended)."""
        for _ in range(2):
            try:
                server = self._stat(self.pid)
                ticks = sum(int(v) for v in server[11:15])
                for child in self.children:
                    ticks += sum(int(v) for v in self._stat(child)[11:13])
                return ticks / self.TICK
            except OSError:  # a child ended (its time is now in the server's cutime): look again
                self.children = self._children()
        raise RuntimeError(f"cannot read the CPU time of tritonserver {self.pid}")


def p50(samples: list[float]) -> float:
    return float(np.percentile(np.asarray(samples) * 1e3, 50))


def p90(samples: list[float]) -> float:
    return float(np.percentile(np.asarray(samples) * 1e3, 90))


# variant -> (latencies s, wall s, server CPU s)
Results = dict[str, tuple[list[float], float, float]]


def concurrency_1(url: str, frames: list[np.ndarray], n: int, server: ServerCPU) -> Results:
    clients = {name: LaneDetClient(url, model) for name, model in VARIANTS.items()}
    lat: dict[str, list[float]] = {k: [] for k in clients}
    cpu = {k: 0.0 for k in clients}
    try:
        for c in clients.values():  # warm-up
            for f in frames[:5]:
                c.detect(f)
        for i in range(n):
            for name, c in clients.items():
                before = server.seconds()
                t = time.perf_counter()
                c.detect(frames[i % len(frames)])
                lat[name].append(time.perf_counter() - t)
                cpu[name] += server.seconds() - before
    finally:
        for c in clients.values():
            c.close()
    return {k: (v, sum(v), cpu[k]) for k, v in lat.items()}


def concurrency_4(url: str, frames: list[np.ndarray], n: int, server: ServerCPU) -> Results:
    results: Results = {}
    for _ in range(2):  # alternating halves, to share any drift of the machine's load
        for name, model in VARIANTS.items():
            before = server.seconds()  # (includes the 4 warm-up frames: n // 2 + 4 frames)
            got, secs = asyncio.run(concurrent_detects(url, model, frames, n // 2, 4))
            used = (server.seconds() - before) * len(got) / (len(got) + 4)
            prev = results.get(name, ([], 0.0, 0.0))
            results[name] = (prev[0] + got, prev[1] + secs, prev[2] + used)
    return results


def tensor_kb(url: str, frame: np.ndarray) -> dict[str, tuple[float, float]]:
    """Per variant: (request kB, answer kB) of one frame, from the served models' metadata."""
    import tritonclient.grpc as grpcclient

    size = {"UINT8": 1, "INT32": 4, "FP16": 2, "FP32": 4}
    client = grpcclient.InferenceServerClient(url)
    try:
        out = {}
        for name, model in VARIANTS.items():
            meta = client.get_model_metadata(model, as_json=True)

            def nbytes(t: dict) -> int:
                if t["name"] == "FRAME":
                    return frame.nbytes
                return int(np.prod([max(1, int(d)) for d in t["shape"]])) * size[t["datatype"]]

            out[name] = (sum(map(nbytes, meta["inputs"])) / 1e3, sum(map(nbytes, meta["outputs"])) / 1e3)
        return out
    finally:
        client.close()


def run_family(family: str, frames: list[np.ndarray], n: int) -> list[dict]:
    """One server, every variant at concurrency 1 and 4: one row per variant and concurrency."""
    with tempfile.TemporaryDirectory(prefix="bench_bls_") as tmp:
        proc = start_server(Path(tmp), family)
        try:
            assert proc.proc is not None
            server = ServerCPU(proc.proc.pid)
            sizes = tensor_kb(proc.url, frames[0])
            runs = {1: concurrency_1(proc.url, frames, n, server), 4: concurrency_4(proc.url, frames, n, server)}
        finally:
            proc.stop(timeout=15)
    rows = []
    for width, results in runs.items():
        base = p50(results["client-side pre/post"][0])
        for name, (lat, wall, cpu) in results.items():
            rows.append({"family": family, "variant": name, "concurrency": width, "p50_ms": p50(lat),
                         "p90_ms": p90(lat), "frames_per_s": len(lat) / wall, "server_cpu_ms_per_frame":
                         cpu / len(lat) * 1e3, "p50_vs_client_side": p50(lat) / base,
                         "request_kB": sizes[name][0], "answer_kB": sizes[name][1]})
    return rows


def markdown(rows: list[dict]) -> str:
    lines = ["| family | variant | conc. | p50 ms | p90 ms | frames/s | server CPU ms/frame | p50 / client-side "
             "| request kB | answer kB |", "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['family']} | {r['variant']} | {r['concurrency']} | {r['p50_ms']:.2f} | {r['p90_ms']:.2f} "
                     f"| {r['frames_per_s']:.1f} | {r['server_cpu_ms_per_frame']:.2f} | {r['p50_vs_client_side']:.2f} "
                     f"| {r['request_kB']:.0f} | {r['answer_kB']:.1f} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=300, help="requests per variant and concurrency")
    parser.add_argument("--family", choices=("both", "laneatt", "ufldv2"), default="both")
    parser.add_argument("--json", type=Path, help="also write the rows and the machine to this JSON file")
    args = parser.parse_args()
    frames = [road_scene(1640, 590, seed=s)[0] for s in range(8)]
    families = ("laneatt", "ufldv2") if args.family == "both" else (args.family,)
    machine = {"python": platform.python_version(), "machine": platform.machine(), "cpus": os.cpu_count(),
               "load_average_start": round(os.getloadavg()[0], 2), "requests": args.requests}
    print(f"python {machine['python']}, {machine['machine']}, {machine['cpus']} CPUs, load average "
          f"{machine['load_average_start']:.1f}; {', '.join(families)}; {args.requests} requests per variant")
    rows = [row for family in families for row in run_family(family, frames, args.requests)]
    machine["load_average_end"] = round(os.getloadavg()[0], 2)
    print()
    print(markdown(rows))
    print()
    for family in families:
        for width in (1, 4):
            p = {r["variant"]: r["p50_ms"] for r in rows if r["family"] == family and r["concurrency"] == width}
            print(f"{family}, concurrency {width}: BLS p50 / ensemble p50 = "
                  f"{p['BLS pipeline'] / p['ensemble pipeline']:.2f}, BLS p50 / client-side p50 = "
                  f"{p['BLS pipeline'] / p['client-side pre/post']:.2f}")
    print(f"load average at the end {machine['load_average_end']:.1f}")
    if args.json:
        args.json.write_text(json.dumps({"machine": machine, "rows": rows}, indent=2) + "\n")
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
