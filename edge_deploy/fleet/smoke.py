"""The smoke check: the served model's lanes on the artifact's reference frames must match the recorded lanes.

The manifest records parity numbers, not lanes, so the reference lives beside it in the
artifact's ``smoke/`` directory: a few synthetic road frames (PNG) and ``reference.json`` with
the lanes the artifact's FP32 ``model.onnx`` gives on them in ONNX Runtime, decoded with the
artifact's own preprocessing and decode settings (what `LaneDetClient` does). `edge-deploy fleet
reference ARTIFACT` records it; `rollout` records one into its payload when the artifact has none.
On the vehicle, `edge-deploy fleet smoke` runs the frames through the served model with
LaneDetClient: each frame must give the same number of lanes, and matched lanes must lie within
`tolerance_px` (mean |dx| over shared rows, at the frame's width scaled to 640 px, the plan
verification's rule, so a TensorRT FP16 plan passes where ONNX Runtime on the CPU was recorded).
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .policy import FleetError
from ..core.bounded_read import read_regular
from ..artifact.manifest import ONNX_NAME, read_manifest, sha256_file
from ..client.sync_client import LaneDetClient
from ..evaluate.runners import OnnxRunner
from ..core.fsutil import atomic_path, write_json_atomic
from ..lanedet.lane import Lane
from ..export.parity import lane_dx
from ..synthetic.roads import road_scene

REFERENCE_LIMIT = 64 << 20  # reference.json: the lanes of a few frames (KiB); the cap where it cannot be one

SMOKE_DIR = "smoke"
REFERENCE_NAME = "reference.json"
FRAMES = 4
TOLERANCE_PX = 2.0  # at 640 px wide
FRAME_SIZE = (590, 1640)  # CULane frames (H, W)


def record_reference(artifact_dir: Path, out_dir: Path | None = None, frames: int = FRAMES) -> Path:
    """Write smoke/ (frames and reference.json) for `artifact_dir` into `out_dir` (default: the artifact)."""
    import cv2


    artifact_dir = Path(artifact_dir)
    read_manifest(artifact_dir)
    target = Path(out_dir if out_dir is not None else artifact_dir) / SMOKE_DIR
    runner = OnnxRunner(artifact_dir)  # refuses an artifact it cannot run before anything is written
    target.mkdir(parents=True, exist_ok=True)
    names, lanes = [], []
    for i in range(frames):
        frame, _ = road_scene(FRAME_SIZE[1], FRAME_SIZE[0], seed=9000 + i, lanes=2 + i % 3)
        name = f"frame_{i}.png"
        with atomic_path(target / name, mode=0o644, suffix=".png") as tmp:
            if not cv2.imwrite(str(tmp), frame):
                raise FleetError(f"cannot write {target / name}; check the disk.")
        names.append(name)
        lanes.append([{"score": lane.score, "points": lane.points.tolist()} for lane in runner.detect(frame)])
    runner.close()
    return write_json_atomic(target / REFERENCE_NAME, {
        "format": 1,
        "source": f"{ONNX_NAME} in ONNX Runtime (CPU, FP32), the artifact's preprocess and decode settings",
        "onnx_sha256": sha256_file(artifact_dir / ONNX_NAME),
        "tolerance_px": TOLERANCE_PX,
        "frames": names,
        "lanes": lanes,
    })


@dataclass(frozen=True)
class FrameCheck:
    """One reference frame: lanes recorded and served, their mean |dx| (rounded; "inf" when a lane had no partner)."""

    frame: str
    expected: int
    got: int
    mean_dx: float | str
    ok: bool


@dataclass
class SmokeResult:
    """What the smoke check found, frame by frame."""

    passed: bool
    frames: list[FrameCheck] = field(default_factory=list)
    lanes: int = 0  # recorded lanes in all frames (0: the check could only compare empty results)

    def summary(self) -> str:
        bad = [f for f in self.frames if not f.ok]
        if self.passed:
            return f"smoke: {len(self.frames)} reference frame(s), {self.lanes} lane(s), all match"
        first = bad[0]
        return (f"smoke: {len(bad)} of {len(self.frames)} reference frame(s) differ; {first.frame}: "
                f"{first.got} lane(s) served, {first.expected} recorded, mean |dx| {first.mean_dx}")


def check_served(
    smoke_dir: Path, url: str, model: str, timeout: float = 30.0, *, tls: Any = None
) -> SmokeResult:
    """Run the reference frames through the model served at `url` and compare with the recorded lanes.

    tls: the TLSConfig of a server that serves with (mutual) TLS, as its server record names it.
    """
    import cv2


    smoke_dir = Path(smoke_dir)
    path = smoke_dir / REFERENCE_NAME
    try:
        reference = json.loads(read_regular(path, "smoke reference", FleetError, "record it with `edge-deploy fleet "
                                            "reference ARTIFACT`", REFERENCE_LIMIT))
        names, recorded = reference["frames"], reference["lanes"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise FleetError(f"cannot read the smoke reference {path} ({exc}); record it with "
                         "`edge-deploy fleet reference ARTIFACT`.") from exc
    tolerance = float(reference.get("tolerance_px", TOLERANCE_PX))
    result = SmokeResult(passed=True, lanes=sum(len(x) for x in recorded))
    with LaneDetClient(url, model=model, transport="grpc", tls=tls) as client:
        client.wait_until_ready(timeout=timeout)
        for name, expected in zip(names, recorded):
            frame = cv2.imread(str(smoke_dir / name), cv2.IMREAD_COLOR)
            if frame is None:
                raise FleetError(f"cannot read the reference frame {smoke_dir / name}; copy the artifact again.")
            got = client.detect(frame)
            want = [Lane(np.asarray(x["points"], np.float32), x["score"]) for x in expected]
            dx = lane_dx(want, got) if want and got else []
            mean = float(np.mean(dx)) if dx else 0.0
            limit = tolerance * frame.shape[1] / 640.0
            ok = len(got) == len(want) and mean <= limit
            result.frames.append(FrameCheck(frame=name, expected=len(want), got=len(got),
                                            mean_dx=round(mean, 3) if np.isfinite(mean) else "inf", ok=ok))
            result.passed &= ok
    return result
