"""Benchmark: LaneDetClient.detect p50 over mutual TLS vs plaintext gRPC, across a veth link between two network namespaces.

The server (the real bundled tritonserver) runs in one namespace, the client in another (tests/support/netns.py);
two servers serve the same repository at once, one with mutual TLS (`edge-deploy certs` files) and one in
plaintext, and the client alternates between them in rounds, so both see the same machine load. The model is
the negligible-compute lane model (tests/support/small_artifact.py) installed by the real `install` (client-side
pre/post), so what is measured is the transport: each request carries the 1x3x360x640 FP32 tensor (2.8 MB) in
the gRPC message (no shared memory across machines) and returns 1000x77 FP32 (308 kB). Needs root (ip netns).

    sudo python3 benchmarks/bench_tls.py [--requests 300] [--rounds 6]
"""
from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "support")]

from netns import SERVER_IP, NetnsTriton, netns_unavailable, probe, veth_link  # noqa: E402

from edge_deploy.tls.certs import CertificateAuthority  # noqa: E402
from edge_deploy.deploy.install import install  # noqa: E402
from edge_deploy.deploy.options import InstallOptions
from edge_deploy.serve.argv import ServerOptions, ServerTLS  # noqa: E402
from edge_deploy.serve.discovery import find_tritonserver  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=300, help="timed detect calls per variant (all rounds)")
    parser.add_argument("--rounds", type=int, default=6, help="alternations between the two servers")
    args = parser.parse_args()
    why = netns_unavailable()
    if why:
        sys.exit(f"bench_tls: {why}")
    from small_artifact import make_artifact

    with tempfile.TemporaryDirectory(prefix="bench-tls-") as tmp, veth_link("edb") as link:
        work = Path(tmp)
        artifact = make_artifact(work / "artifact", ROOT / "tests" / "data" / "laneatt" / "anchors_2784x77.npy")
        repo = work / "repo"
        install(InstallOptions(artifact, repo, "tiny", runtime="python"))
        ca = CertificateAuthority(work / "tls")
        ca.init(dns=["orin"], ips=[SERVER_IP])
        ca.issue("bench")
        tls = ServerTLS(cert=ca.cert_path("server"), key=ca.key_path("server"), ca=ca.ca_cert)
        triton = find_tritonserver(cache_dir=work / "cache")
        servers = [
            NetnsTriton(link.server_ns, triton, ServerOptions(model_repository=repo, grpc_address=SERVER_IP,
                                                              grpc_port=8001, tls=tls), work / "tls.log"),
            NetnsTriton(link.server_ns, triton, ServerOptions(model_repository=repo, grpc_address=SERVER_IP,
                                                              grpc_port=8002), work / "plain.log"),
        ]
        client_tls = {"ca": str(ca.ca_cert), "cert": str(ca.cert_path("bench")), "key": str(ca.key_path("bench"))}
        variants = {"mutual TLS": (f"{SERVER_IP}:8001", client_tls), "plaintext gRPC": (f"{SERVER_IP}:8002", None)}
        try:
            for server in servers:
                server.start()
            probe(link, [{"url": url, "model": "tiny", "tls": t, "action": "wait", "timeout": 120}
                         for url, t in variants.values()])
            per_round = max(1, args.requests // args.rounds)
            times: dict[str, list[float]] = {name: [] for name in variants}
            for _ in range(args.rounds):
                results = probe(link, [{"url": url, "model": "tiny", "tls": t, "action": "detect", "repeat": per_round,
                                        "raw": True} for url, t in variants.values()], timeout=600)
                for name, result in zip(variants, results):
                    if not result["ok"]:
                        sys.exit(f"bench_tls: {name}: {result['error']}")
                    times[name] += result["times_ms"]
        finally:
            for server in servers:
                server.stop(timeout=30)
    print(f"# {platform.machine()} {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}, "
          f"{time.strftime('%Y-%m-%d')}; {args.rounds} rounds x {per_round} detect calls per variant")
    print("| variant | p50 ms | p90 ms | n |\n|---|---:|---:|---:|")
    p50 = {}
    for name, values in times.items():
        p50[name] = float(np.percentile(values, 50))
        print(f"| {name} | {p50[name]:.2f} | {np.percentile(values, 90):.2f} | {len(values)} |")
    print(f"TLS p50 / plaintext p50 = {p50['mutual TLS'] / p50['plaintext gRPC']:.2f}")


if __name__ == "__main__":
    main()
