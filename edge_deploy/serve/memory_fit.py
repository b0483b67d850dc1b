"""Whether the TensorRT plans a repository serves fit the board's memory together (`serve` refuses a stack that
does not, on a Jetson; elsewhere it only warns).

A Jetson's GPU shares the board's RAM, so every plan Triton loads takes its engine (about the plan file's size) and,
per instance, an execution context's device memory (the plan's verify record, `device_memory_bytes`, read from
TensorRT when convert built it; a plan without one counts its file size only). They must fit in MemAvailable less
RESERVE_BYTES for the system and the apps beside the server. Models are counted in the repository's order; the one
that does not fit is named.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..artifact.manifest import MANIFEST_NAME, PLAN_NAME, Manifest
from ..errors import EdgeDeployError, ServerError
from ..core.sizes import GiB, MiB
from ..core.triton_layout import policy_versions, read_config, repository_models, versions

__all__ = ["RESERVE_BYTES", "PlanMemory", "check_stack_fits", "served_plans"]

RESERVE_BYTES = 1 * GiB  # left to the system, the vehicle app and tritonserver itself


@dataclass(frozen=True)
class PlanMemory:
    """What one served plan needs: its engine (the plan file) and each instance's execution context."""

    model: str
    version: int
    plan_bytes: int
    device_memory_bytes: int | None  # per instance; None: not recorded
    instances: int

    @property
    def need_bytes(self) -> int:
        return self.plan_bytes + self.instances * (self.device_memory_bytes or 0)

    def describe(self) -> str:
        context = (f" + {self.instances} x {self.device_memory_bytes / MiB:.0f} MiB device memory"
                   if self.device_memory_bytes else " (device memory not recorded)")
        return f"{self.model} version {self.version}: plan {self.plan_bytes / MiB:.0f} MiB{context}"


def served_plans(repository: Path) -> list[PlanMemory]:
    """The plans the repository's configs select (platform tensorrt_plan), in the repository's order."""
    found = []
    for name in repository_models(repository):
        try:
            config = read_config(repository, name)
        except EdgeDeployError:
            continue  # an unreadable config is the server's to refuse, with its own reason
        if config.platform != "tensorrt_plan" and config.backend != "tensorrt":
            continue
        instances = sum(max(1, int(group.count)) for group in config.instance_group) or 1
        for version in policy_versions(config, versions(repository, name)):
            directory = repository / name / str(version)
            plan = directory / (config.default_model_filename or PLAN_NAME)
            if not plan.is_file():
                continue
            device = None
            if (directory / MANIFEST_NAME).is_file():
                try:
                    record = Manifest.read(directory).plan
                    device = record.verify.device_memory_bytes if record and record.verify else None
                except EdgeDeployError:
                    device = None
            found.append(PlanMemory(name, version, plan.stat().st_size, device, instances))
    return found


def check_stack_fits(repository: Path, facts: object, warn: object = None) -> list[PlanMemory]:
    """ServerError when the plans together need more than the board has (MemAvailable less RESERVE_BYTES) on a
    Jetson, naming the model that does not fit; elsewhere `warn(message)` instead. Returns the plans counted."""
    plans = served_plans(repository)
    available = getattr(facts, "mem_available", None)
    if not plans or not available:
        return plans
    budget = max(0, int(available) - RESERVE_BYTES)
    total = 0
    for index, plan in enumerate(plans):
        total += plan.need_bytes
        if total <= budget:
            continue
        before = ", ".join(p.model for p in plans[:index]) or "nothing else"
        message = (f"{plan.describe()} does not fit beside {before}: the plans need {total / GiB:.2f} GiB together, "
                   f"this board has {budget / GiB:.2f} GiB for them (MemAvailable {available / GiB:.2f} GiB less "
                   f"{RESERVE_BYTES / GiB:.0f} GiB for the system); serve fewer models, lower their --instances, or "
                   "build smaller plans (--precision, --max-batch)")
        if getattr(facts, "is_jetson", False):
            raise ServerError(message + ".")
        if callable(warn):
            warn(message + " (not a Jetson: only a warning here).")
        return plans
    return plans
