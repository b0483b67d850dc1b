"""What a TensorRT plan depends on, and the rebuild decision.

`plan_fingerprint` is what a plan is built from (this machine, the ONNX model and the build options);
`plan_is_current` is the rebuild decision of `edge_deploy.engine.plan.build_plan`. Whether a recorded plan fits a
machine is `edge_deploy.machine.plan_fit`.
"""
from __future__ import annotations

from pathlib import Path

from ..artifact.manifest import ONNX_NAME, Manifest, PlanFingerprint, ShapeRange, sha256_file
from ..machine import facts as machine_facts
from ..machine import tensorrt_api
from ..machine.plan_fit import fingerprint_diff, machine_fingerprint


def plan_fingerprint(
    facts: machine_facts.DeviceFacts,
    tensorrt_version: str | None,
    onnx_sha256: str,
    settings: tensorrt_api.BuildSettings,
    calibration: str | None = None,
    onnx_name: str = ONNX_NAME,
) -> PlanFingerprint:
    """What a plan depends on: this machine plus the ONNX model (the file built and its sha256) and the options."""
    return PlanFingerprint(
        **machine_fingerprint(facts, tensorrt_version).to_dict(),
        onnx=onnx_name,
        onnx_sha256=onnx_sha256,
        typing="strong" if settings.strongly_typed else "weak",
        precision=settings.precision,
        dla_core=settings.dla_core,
        profile={name: ShapeRange.of(*ranges) for name, ranges in settings.profile.items()},
        optimization_level=settings.optimization_level,
        fp32_layers=sorted({node for node, _ in settings.fp32_pins}),
        calibration=calibration,
    )


def plan_file_matches(plan: Path, manifest: Manifest) -> bool | None:
    """Whether `plan` still has the sha256 of its manifest entry; None when the manifest lists no such file."""
    entry = manifest.files.get(Path(plan).name)
    if not entry:
        return None
    return entry.sha256 == sha256_file(plan)


def plan_is_current(plan: Path, manifest: Manifest, fingerprint: PlanFingerprint) -> tuple[bool, list[str]]:
    """The rebuild decision: (True, []) when `plan` is intact and was built with `fingerprint`; else what differs."""
    recorded = manifest.plan
    if not Path(plan).is_file() or not recorded:
        return False, []
    if not plan_file_matches(plan, manifest):
        return False, [f"the existing {Path(plan).name} does not match its manifest entry (changed or corrupt)"]
    changes = fingerprint_diff(recorded, fingerprint)
    return not changes, changes
