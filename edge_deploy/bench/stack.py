"""`edge-deploy bench --stack`: what the other models of a perception stack cost the lane model.

For the settings install wrote, and (where the server lets bench load configs: the repository protocol's key, or
an open server) again with those settings taken out (every model reloaded with install's defaults: normal priority,
one instance, no thread budget; then with the config it had):

- the lane model's latency p50/p99 and frames/s alone (one LaneDetClient, one frame in flight);
- the same while every other model is driven at its own maximum rate by a client of its own (a thread each);
- the frames/s each other model reached meanwhile.

And the client CPU per frame of one frame sent to every other model that shares one input (converted and uploaded
once: `FrameInput`, `ModelClient.share`) against one model alone.
"""
from __future__ import annotations

import contextlib
import json
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

import numpy as np

from ..client.detector_client import DetectorClient
from ..client.model_client import ModelClient
from ..client.sync_client import LaneDetClient
from ..errors import BenchError, ClientError, one_line
from ..lanedet.contract import PARAM_ROLE
from .config import BenchConfig
from .frames import load_frames
from .process_cpu import client_seconds

__all__ = ["StackCpu", "StackLatency", "StackReport", "StackRun", "cpu_per_frame", "run_stack", "stack_lines"]

# What install writes to keep a model first in line (or out of the way), and what bench takes out for "defaults".
_SETTING_PARAMETERS = ("intra_op_thread_count", "inter_op_thread_count", "edge_deploy.ort_threads")


@dataclass(frozen=True)
class StackLatency:
    """The lane model's latency over one timed stretch."""

    p50_ms: float | None
    p99_ms: float | None
    frames_per_s: float
    frames: int

    @classmethod
    def of(cls, latencies: list[float], seconds: float) -> StackLatency:
        if not latencies:
            return cls(None, None, 0.0, 0)
        array = np.asarray(latencies) * 1000.0
        return cls(float(np.percentile(array, 50)), float(np.percentile(array, 99)), len(latencies) / seconds,
                   len(latencies))

    def to_dict(self) -> dict[str, Any]:
        return {"p50_ms": self.p50_ms, "p99_ms": self.p99_ms, "frames_per_s": self.frames_per_s,
                "frames": self.frames}


@dataclass(frozen=True)
class StackRun:
    """One pass: `settings` "installed" (the configs as install wrote them) or "defaults" (those settings out)."""

    settings: str
    lane_alone: StackLatency
    lane_beside: StackLatency
    others_frames_per_s: dict[str, float]

    @property
    def p99_ratio(self) -> float | None:
        """The lane model's p99 beside the others over its p99 alone."""
        alone, beside = self.lane_alone.p99_ms, self.lane_beside.p99_ms
        return beside / alone if alone and beside is not None else None

    def to_dict(self) -> dict[str, Any]:
        return {"settings": self.settings, "lane_alone": self.lane_alone.to_dict(),
                "lane_beside": self.lane_beside.to_dict(), "p99_ratio": self.p99_ratio,
                "others_frames_per_s": dict(self.others_frames_per_s)}


@dataclass(frozen=True)
class StackCpu:
    """Client CPU per frame (ms): `one` model alone, and every model of `shared` given one frame (one input)."""

    one: str
    shared: tuple[str, ...]
    one_ms: float
    shared_ms: float

    @property
    def ratio(self) -> float:
        return self.shared_ms / self.one_ms if self.one_ms else float("nan")

    def to_dict(self) -> dict[str, Any]:
        return {"one": self.one, "shared": list(self.shared), "one_ms_per_frame": self.one_ms,
                "shared_ms_per_frame": self.shared_ms, "ratio": self.ratio}


@dataclass(frozen=True)
class StackReport:
    url: str
    lane_model: str
    others: tuple[str, ...]
    runs: tuple[StackRun, ...]
    cpu: StackCpu | None
    notes: tuple[str, ...] = field(default_factory=tuple)

    def to_dict(self) -> dict[str, Any]:
        return {"url": self.url, "lane_model": self.lane_model, "others": list(self.others),
                "runs": [run.to_dict() for run in self.runs], "client_cpu": self.cpu.to_dict() if self.cpu else None,
                "notes": list(self.notes)}


def _client(config: BenchConfig, name: str) -> ModelClient:
    """A DetectorClient for a detector edge-deploy installed, else a ModelClient."""
    def connect(kind: type[ModelClient]) -> ModelClient:
        return kind(config.url, name, transport=config.transport, client_timeout=config.timeout, tls=config.tls)

    client = connect(ModelClient)
    if client.model is not None and client.model.detection is not None:
        client.close()
        return connect(DetectorClient)
    return client


def _inputs(client: ModelClient, frame: np.ndarray) -> Any:
    """What one call sends: the frame's input for an image model, else zeros of the model's input shapes."""
    model = client.model
    if model.preprocess is not None:
        return client.frame_input(frame)
    from ..client.tensor_model import NUMPY_OF

    batch = [1] if model.max_batch_size > 0 else []
    return {t.name: np.zeros([*batch, *(d if d > 0 else 1 for d in t.shape)], NUMPY_OF[t.datatype])
            for t in model.inputs}


def _lane_latencies(lane: LaneDetClient, frames: list[np.ndarray], seconds: float,
                    warmup: float) -> tuple[list[float], float]:
    end = time.perf_counter() + warmup
    i = 0
    while time.perf_counter() < end:
        lane.detect(frames[i % len(frames)])
        i += 1
    latencies: list[float] = []
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        began = time.perf_counter()
        lane.detect(frames[i % len(frames)])
        latencies.append(time.perf_counter() - began)
        i += 1
    return latencies, time.perf_counter() - start


class _Driver:
    """One other model driven at its maximum rate by a client of its own, in a thread."""

    def __init__(self, client: ModelClient, inputs: Any) -> None:
        self.client, self.inputs = client, inputs
        self.stop = threading.Event()
        self.count = 0
        self.error: str | None = None
        self.thread = threading.Thread(target=self._run, daemon=True, name=f"stack-{client.model_name}")

    def _run(self) -> None:
        while not self.stop.is_set():
            try:
                self.client.infer(self.inputs)
            except ClientError as exc:
                self.error = one_line(exc)
                return
            self.count += 1


def _one_run(config: BenchConfig, settings: str, lane: LaneDetClient, others: dict[str, ModelClient],
             frames: list[np.ndarray], warmup: float) -> StackRun:
    alone, took = _lane_latencies(lane, frames, config.seconds, warmup)
    drivers = {name: _Driver(client, _inputs(client, frames[0])) for name, client in others.items()}
    for driver in drivers.values():
        driver.thread.start()
    try:
        time.sleep(warmup)
        counted = {name: driver.count for name, driver in drivers.items()}
        beside, took_beside = _lane_latencies(lane, frames, config.seconds, 0.0)
        rates = {name: (driver.count - counted[name]) / took_beside for name, driver in drivers.items()}
    finally:
        for driver in drivers.values():
            driver.stop.set()
        for driver in drivers.values():
            driver.thread.join(timeout=config.timeout)
    failed = [f"{name}: {driver.error}" for name, driver in drivers.items() if driver.error]
    if failed:
        raise BenchError(f"a model driven beside the lane model failed: {failed[0]}")
    return StackRun(settings, StackLatency.of(alone, took), StackLatency.of(beside, took_beside), rates)


def _defaults_of(config_json: dict[str, object]) -> dict[str, object]:
    """A model's config (JSON, proto field names) with what install's --priority, --instances and --threads wrote
    taken out."""
    cfg = json.loads(json.dumps(config_json))
    cfg.pop("optimization", None)
    batching = cfg.get("dynamic_batching")
    if isinstance(batching, dict):
        for key in ("priority_levels", "default_priority_level"):
            batching.pop(key, None)
    for group in cfg.get("instance_group", []) or []:
        group["count"] = 1
    parameters = cfg.get("parameters") or {}
    for key in _SETTING_PARAMETERS:
        parameters.pop(key, None)
    return cfg


class _Loader:
    """Loads configs on the server (Triton's model-repository protocol), with the key where edge-deploy serves."""

    def __init__(self, config: BenchConfig) -> None:
        from ..serve.admin import repository_headers
        from .targets import grpc_client

        self.client = grpc_client(config.url, config.tls)
        self.headers = repository_headers(config.repository)
        self.timeout = max(config.timeout, 120.0)

    @contextlib.contextmanager
    def defaults(self, names: list[str]) -> Iterator[None]:
        """Every model of `names` loaded with install's defaults meanwhile, then with the config it had again.
        (The config it had, not a plain load: Triton 2.51 keeps serving an overriding config when asked to load a
        model whose files did not change.)"""
        served: dict[str, dict[str, object]] = {}
        try:
            for name in names:
                served[name] = self.client.get_model_config(name, as_json=True, client_timeout=self.timeout)["config"]
                self.client.load_model(name, config=json.dumps(_defaults_of(served[name])), headers=self.headers,
                                       client_timeout=self.timeout)
            yield
        finally:
            for name, config in served.items():
                self.client.load_model(name, config=json.dumps(config), headers=self.headers,
                                       client_timeout=self.timeout)


def cpu_per_frame(clients: dict[str, ModelClient], frames: list[np.ndarray], count: int) -> StackCpu | None:
    """Client CPU per frame: the first image model alone, then every image model sharing its input with it (one
    conversion and one upload for all). The two are measured in alternating blocks of 10 frames, so that the
    machine's drift over the run falls on both alike."""
    image = {name: c for name, c in clients.items() if c.model.preprocess is not None}
    if not image:
        return None
    first, client = next(iter(image.items()))
    key = client.frame_input_key()
    shared = {name: c for name, c in image.items() if c.frame_input_key() == key}

    def block(models: dict[str, ModelClient], start: int, size: int) -> float:
        began = client_seconds()
        for i in range(start, start + size):
            prepared = client.frame_input(frames[i % len(frames)])
            if len(models) > 1:
                prepared = client.share(prepared)  # uploaded once for all of them, as a PerceptionStream does
            for c in models.values():
                c.infer(prepared)
            if prepared.upload is not None:
                prepared.upload.give_back()
        return client_seconds() - began

    block(shared, 0, 10)  # warm: buffers made, regions registered
    one = together = 0.0
    blocks = max(1, count // 10)
    for b in range(blocks):
        one += block({first: client}, b * 10, 10)
        together += block(shared, b * 10, 10)
    frames_each = blocks * 10
    return StackCpu(first, tuple(shared), one / frames_each * 1000.0, together / frames_each * 1000.0)


def run_stack(config: BenchConfig, lane_model: str, others: list[str], *, compare_settings: bool = True,
              cpu_frames: int = 50) -> StackReport:
    """The lane model beside `others` (module docstring); BenchError for what cannot be measured."""
    if not others:
        raise BenchError("--stack needs at least one other served model beside the lane model; name them with "
                         "--model NAME (repeat for several).")
    if lane_model in others:
        raise BenchError(f"{lane_model} is the lane model; --model names the models beside it.")
    _, named = load_frames(config.frames, config.max_frames)
    frames = [frame for _, frame in named]
    notes: list[str] = []
    lane = LaneDetClient(config.url, lane_model, transport=config.transport, client_timeout=config.timeout,
                         tls=config.tls)
    clients = {name: _client(config, name) for name in others}
    try:
        runs = [_one_run(config, "installed", lane, clients, frames, config.warmup_seconds)]
        cpu = cpu_per_frame(clients, frames, cpu_frames)
        if compare_settings:
            loader = _Loader(config)
            try:
                with loader.defaults([lane_model, *others]):
                    runs.append(_one_run(config, "defaults", lane, clients, frames, config.warmup_seconds))
            except Exception as exc:  # noqa: BLE001 - a key-restricted server refuses loads without the key
                notes.append(f"no run with install's defaults: the server did not load the models' configs "
                             f"({one_line(exc, 120)}); pass --repository of an `edge-deploy serve` server")
            finally:
                loader.client.close()
    finally:
        lane.close()
        for client in clients.values():
            client.close()
    return StackReport(config.url, lane_model, tuple(others), tuple(runs), cpu, tuple(notes))


def other_models(names: list[str], lane_model: str, role_of: Callable[[str], str]) -> list[str]:
    """The served models beside the lane model: every model but it and its pipeline steps."""
    return [n for n in names if n != lane_model and not n.startswith(f"{lane_model}_") and role_of(n) == "model"]


def stack_lines(report: StackReport) -> list[str]:
    """The report as lines of at most 80 columns."""
    def ms(value: float | None) -> str:
        return "-" if value is None else f"{value:.1f}"

    lines = [f"stack at {report.url}: lanes {report.lane_model}, beside {', '.join(report.others)}"[:80]]
    for run in report.runs:
        lines.append(f"settings {'as installed' if run.settings == 'installed' else 'taken out (defaults)'}:")
        for label, cell in (("alone", run.lane_alone), ("beside", run.lane_beside)):
            lines.append(f"  lanes {label:<7} p50 {ms(cell.p50_ms):>7} ms  p99 {ms(cell.p99_ms):>7} ms  "
                         f"{cell.frames_per_s:6.1f} frames/s")
        ratio = run.p99_ratio
        lines.append(f"  lanes p99 beside / alone: {'-' if ratio is None else f'{ratio:.2f}x'}")
        for name, rate in run.others_frames_per_s.items():
            lines.append(f"  {name[:40]:<40} {rate:6.1f} frames/s (its maximum)")
    if report.cpu is not None:
        cpu = report.cpu
        lines.append(f"client CPU per frame: {cpu.one[:30]} alone {cpu.one_ms:.2f} ms;")
        lines.append(f"  {len(cpu.shared)} models on one input {cpu.shared_ms:.2f} ms ({cpu.ratio:.2f}x)")
    lines.extend(f"note: {note}"[:80] for note in report.notes)
    return [line[:80] for line in lines]


def role(client: Any, name: str, timeout: float) -> str:
    """A served model's edge_deploy.role parameter ("model" when it has none)."""
    config = client.get_model_config(name, client_timeout=timeout).config
    return config.parameters[PARAM_ROLE].string_value if PARAM_ROLE in config.parameters else "model"
