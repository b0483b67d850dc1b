"""Whether a recorded plan fits this machine.

A plan only runs where it was built: the manifest's "plan" section records the
machine (TensorRT, CUDA, GPU, compute capability, L4T) and the build inputs
(ONNX sha256 and build options). `fingerprint_diff` says what differs in one
readable line per key; `plan_mismatch` is what the repository, serve and doctor
ask ("does this plan run here?"); the rebuild decision built on it is
`edge_deploy.engine.fingerprint.plan_is_current`.
"""
from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from ..artifact.manifest import MachineFingerprint, PlanFingerprint, PlanRecord
from ..core.json_record import Record, read_str
from . import facts as machine_facts
from . import tensorrt_api

# Keys describing the machine: None here while the plan recorded one means this machine lacks it.
MACHINE_KEYS = tuple(f.name for f in fields(MachineFingerprint))
_LABELS = {
    "tensorrt": "TensorRT",
    "cuda": "CUDA",
    "gpu": "GPU",
    "compute_capability": "compute capability",
    "l4t": "L4T release",
    "onnx_sha256": "ONNX model (sha256)",
    "precision": "precision",
    "dla_core": "DLA core",
    "profile": "optimisation profile",
    "optimization_level": "builder optimisation level",
    "fp32_layers": "FP32-pinned nodes",
    "calibration": "INT8 calibration images",
    "onnx": "ONNX file built",
    "typing": "network typing",
}


def machine_fingerprint(
    facts: machine_facts.DeviceFacts | None = None, tensorrt_version: str | None = None
) -> MachineFingerprint:
    """The machine part of a plan fingerprint: TensorRT, CUDA, GPU, compute capability, L4T."""
    facts = facts or machine_facts.device_facts()
    return MachineFingerprint(tensorrt=tensorrt_version or facts.tensorrt, cuda=facts.cuda, gpu=facts.gpu,
                              compute_capability=facts.compute_capability, l4t=facts.l4t)


@dataclass(frozen=True, eq=False)
class HostFingerprint(Record):
    """A machine's plan fingerprint (`MachineFingerprint`'s keys) and its JetPack, as `doctor --json` and `fleet
    report` show it: what fleet rollouts compare to decide where a plan may be reused. Every key is written."""

    tensorrt: str | None = None
    cuda: str | None = None
    gpu: str | None = None
    compute_capability: str | None = None
    l4t: str | None = None
    jetpack: str | None = None

    _SECTION = "fingerprint"
    _READERS = {name: read_str for name in ("tensorrt", "cuda", "gpu", "compute_capability", "l4t", "jetpack")}
    _ALWAYS = frozenset(_READERS)


def host_fingerprint(facts: machine_facts.DeviceFacts) -> HostFingerprint:
    """This machine's `HostFingerprint`, from its facts."""
    return HostFingerprint(**vars(machine_fingerprint(facts)), jetpack=facts.jetpack)




def _major_minor(version: str | None) -> tuple[int, ...] | None:
    return tensorrt_api.version_tuple(version)[:2] if version else None


def _same(key: str, old: Any, new: Any) -> bool:
    if key == "cuda":
        return _major_minor(old) == _major_minor(new)
    if key == "tensorrt":
        # The plan format changes with every TensorRT release but not with the build number.
        return tensorrt_api.version_tuple(str(old))[:3] == tensorrt_api.version_tuple(str(new))[:3]
    if key == "gpu":
        return str(old).strip().lower() == str(new).strip().lower()
    if key == "fp32_layers":
        return list(old) == list(new)
    return old == new


def _dims(shape: Any) -> str:
    return "x".join(str(int(d)) for d in shape)


def _show(key: str, value: Any) -> str:
    if value is None:
        return "none"
    if key in ("onnx_sha256", "calibration"):
        return f"{str(value)[:12]}…"
    if key == "profile":
        ranges = [f"{n}: {_dims(r.min)}..{_dims(r.max)} opt {_dims(r.opt)}" for n, r in value.items()]
        return "; ".join(ranges) or "fixed"
    if key == "fp32_layers":
        return f"{len(value)} node(s)"
    return str(value)


def fingerprint_diff(recorded: PlanFingerprint | None, current: MachineFingerprint) -> list[str]:
    """What differs between a recorded plan fingerprint and `current`, one readable line per key.

    Only the fields of `current` are compared, so a machine-only
    fingerprint (`machine_fingerprint`) asks "does this plan run here?" and a
    full one (`plan_fingerprint`) asks "is this plan still what would be built?".
    A key unknown on this machine (None) while the plan recorded it counts as a difference.
    """
    changes = []
    for key in (f.name for f in fields(current)):
        new = getattr(current, key)
        old = getattr(recorded, key) if recorded is not None else None
        if old is None and new is None:
            continue
        if old is None or new is None or not _same(key, old, new):
            label = _LABELS.get(key, key)
            if new is None and key in MACHINE_KEYS:
                changes.append(f"{label}: the plan was built with {_show(key, old)}, this machine has none")
            else:
                changes.append(f"{label}: {_show(key, old)} -> {_show(key, new)}")
    return changes


def tensorrt_mismatch(built: str, loading: str) -> bool:
    """Whether a plan built with TensorRT `built` cannot be deserialized by TensorRT `loading`.

    Compared on major.minor.patch as the rebuild decision does (`_same`); when `loading` is only a major
    version (a libnvinfer.so.N whose full version file was not found), on the major version.
    """
    depth = min(3, len(tensorrt_api.version_tuple(loading)))
    return tensorrt_api.version_tuple(built)[:depth] != tensorrt_api.version_tuple(loading)[:depth]


def plan_mismatch(plan: PlanRecord | None, facts: machine_facts.DeviceFacts | None = None) -> list[str]:
    """Why a recorded plan would not run on this machine (empty: it matches). For repository and doctor."""
    if not plan:
        return ["no plan fingerprint recorded (built by something other than edge-deploy)"]
    facts = facts or machine_facts.device_facts()
    found = fingerprint_diff(plan, machine_fingerprint(facts))
    if plan.dla_core is not None:
        cores = facts.dla_cores or 0
        if plan.dla_core >= cores:
            found.append(f"DLA core: the plan runs on DLA core {plan.dla_core}, this board has "
                         f"{cores} DLA core{'s' if cores != 1 else ''}")
    return found
