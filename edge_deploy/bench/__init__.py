"""`edge-deploy bench`: a served lane model measured as a vehicle app sees it (frames in, lanes out).

`config` (what to measure), `frames` (the frames), `targets` (the served lane models and their
pipelines), `lanes_check` (every pipeline of a model gives the same lanes), `server_stats` (Triton's
per-model queue and compute times), `process_cpu` (CPU of the client and of tritonserver), `jetson`
(tegrastats / jtop), `runner` (the cells), `results` (typed results), `report` (table and plot).
"""
from __future__ import annotations

__all__ = ["BenchConfig", "BenchReport", "run_bench"]


def __getattr__(name: str):  # noqa: ANN202 - lazy, so `import edge_deploy.bench` pays for nothing
    if name == "BenchConfig":
        from .config import BenchConfig

        return BenchConfig
    if name == "BenchReport":
        from .results import BenchReport

        return BenchReport
    if name == "run_bench":
        from .runner import run_bench

        return run_bench
    raise AttributeError(f"module 'edge_deploy.bench' has no attribute {name!r}")
