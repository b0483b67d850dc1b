"""Served pipelines, measured by `edge-deploy bench` (edge_deploy.bench): client-side pre/post, the ensemble
(`install --pipeline`) and the BLS pipeline (`install --pipeline bls`, also edited to one instance), against one
bundled tritonserver on loopback per family.

This script only sets the server up, since the product's bench measures a running server: the negligible-compute
stand-ins of tests/support/small_artifact.py (LaneATT's I/O; `--family ufldv2`: UFLDv2's CULane I/O), installed by
the real `install` as `ens` + `ens_pipeline` (ensemble), `bls` + `bls_pipeline` (BLS) and `bl1` + `bl1_pipeline`
(BLS with one instance). Then it runs `run_bench` on everything served (the lanes-equal check first) and prints the
bench's Markdown table; `--json` / `--plot` as the command's.

    python3 benchmarks/bench_served.py [--seconds 5] [--concurrency 1,4] [--family both|laneatt|ufldv2] \
        [--json out.json] [--plot out.png]

Against a server you already run, use the command itself: `edge-deploy bench --url HOST:PORT`.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "support"))  # small_artifact.py: the negligible-compute lane models

ANCHORS = ROOT / "tests" / "data" / "laneatt" / "anchors_2784x77.npy"


@contextmanager
def stand_in_server(work: Path, family: str) -> Iterator[str]:
    """The bundled tritonserver serving the stand-in model three ways; yields its URL."""
    import socket

    from small_artifact import make_artifact, make_ufldv2_artifact

    from edge_deploy.repository import model_config as mc
    from edge_deploy.deploy.install import install
    from edge_deploy.deploy.options import InstallOptions
    from edge_deploy.repository.versions import read_config
    from edge_deploy.serve.argv import ServerOptions
    from edge_deploy.serve.discovery import find_tritonserver
    from edge_deploy.serve.process import TritonProcess

    artifact = (make_ufldv2_artifact(work / "artifact") if family == "ufldv2" else
                make_artifact(work / "artifact", ANCHORS))
    repo = work / "repo"
    install(InstallOptions(artifact, repo, "ens", runtime="python", pipeline="ensemble"))
    install(InstallOptions(artifact, repo, "bls", runtime="python", pipeline="bls"))
    install(InstallOptions(artifact, repo, "bl1", runtime="python", pipeline="bls"))
    config = read_config(repo, "bl1_pipeline")  # what install writes, with one instance instead
    config.instance_group[0].count = 1
    (repo / "bl1_pipeline" / "config.pbtxt").write_text(mc.config_text(config))
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    proc = TritonProcess(find_tritonserver(cache_dir=work / "cache"),
                         ServerOptions(model_repository=repo, grpc_port=port), work / "triton.log")
    proc.start()
    try:
        proc.wait_ready(120)
        yield proc.url
    finally:
        proc.stop(timeout=15)


def main() -> None:
    from edge_deploy.bench.config import BenchConfig, parse_concurrency
    from edge_deploy.bench.report import markdown, write_plot
    from edge_deploy.bench.runner import run_bench

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=5.0, help="seconds timed per model and concurrency")
    parser.add_argument("--concurrency", default="1,4")
    parser.add_argument("--family", choices=("both", "laneatt", "ufldv2"), default="both")
    parser.add_argument("--json", type=Path, help="also write the reports to this JSON file")
    parser.add_argument("--plot", type=Path, help="also draw each family's report (FAMILY inserted before .png)")
    args = parser.parse_args()
    families = ("laneatt", "ufldv2") if args.family == "both" else (args.family,)
    reports = {}
    for family in families:
        with tempfile.TemporaryDirectory(prefix="bench_served_") as tmp, stand_in_server(Path(tmp), family) as url:
            report = run_bench(BenchConfig(url=url, seconds=args.seconds,
                                           concurrency=parse_concurrency(args.concurrency)))
        reports[family] = report
        machine = report.machine
        print(f"\n{family}: {report.frames}; {report.lanes_check}; {machine['cpus']} CPUs, load average "
              f"{machine['load_average_start']} -> {machine['load_average_end']}\n")
        print(markdown(report))
        if args.plot:
            print(f"plot: {write_plot(report, args.plot.with_name(f'{args.plot.stem}-{family}.png'))}")
    if args.json:
        args.json.write_text(json.dumps({f: r.to_dict() for f, r in reports.items()}, indent=1) + "\n")
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
