"""What a bench measured: one CellResult per served model and concurrency, in a BenchReport (JSON via to_dict)."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Sequence, TypedDict

import numpy as np

from .jetson import JetsonLoad
from .server_stats import ServerTimes


class MachineInfo(TypedDict, total=False):
    """The client machine a bench ran on (a dict: `bench --json` prints it as it is)."""

    python: str
    machine: str
    cpus: int | None
    load_average_start: float
    load_average_end: float  # set when the bench ends


@dataclass(frozen=True)
class Latency:
    """Per-frame latency (frame handed to detect() to lanes back), ms."""

    p50_ms: float
    p90_ms: float
    p99_ms: float
    mean_ms: float

    @classmethod
    def of(cls, seconds: Sequence[float]) -> "Latency":
        ms = np.asarray(seconds, dtype=np.float64) * 1e3
        if ms.size == 0:
            return cls(float("nan"), float("nan"), float("nan"), float("nan"))
        p50, p90, p99 = np.percentile(ms, [50, 90, 99])
        return cls(float(p50), float(p90), float(p99), float(ms.mean()))


@dataclass(frozen=True)
class ClientSplit:
    """Where the client's time per request went, mean ms: writing the frame into the request (the preprocessing
    for a raw model, a copy for a pipeline or fused model), the call to the server, reading the lanes (decoding)."""

    preprocess_ms: float
    request_ms: float
    decode_ms: float

    @classmethod
    def of(cls, stages: Sequence[Any]) -> "ClientSplit | None":
        if not stages:
            return None
        n = len(stages)
        return cls(sum(s.preprocess for s in stages) / n * 1e3, sum(s.request for s in stages) / n * 1e3,
                   sum(s.decode for s in stages) / n * 1e3)


@dataclass(frozen=True)
class CellResult:
    """One served model at one concurrency: `seconds` of frames after the warm-up."""

    model: str
    lane_model: str
    pipeline: str
    family: str
    concurrency: int
    client: str  # "LaneDetClient" (concurrency 1) | "AsyncLaneDetClient" (more frames in flight)
    frames: int
    seconds: float
    frames_per_s: float
    latency: Latency
    client_split: ClientSplit | None
    server: dict[str, ServerTimes]  # per served model that took requests (the pipeline's steps too)
    client_cpu_ms_per_frame: float
    server_cpu_ms_per_frame: float | None  # tritonserver and its stubs; None: not on this host
    jetson: JetsonLoad | None = None


@dataclass
class BenchReport:
    """A whole bench run."""

    url: str
    frames: str
    seconds: float
    warmup_seconds: float
    concurrency: list[int]
    lanes_check: str
    server_cpu: str
    jetson: str
    machine: MachineInfo
    cells: list[CellResult] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """The report as `bench --json` prints it."""
        data = asdict(self)
        for cell, out in zip(self.cells, data["cells"]):
            if cell.jetson is not None:
                out["jetson"]["total_mw"] = cell.jetson.total_mw
        return data
