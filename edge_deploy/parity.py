"""Parity: ONNX Runtime sessions, the seeded parity inputs, and numeric comparison.

`convert` checks torch against ONNX Runtime and the TensorRT stage checks the
plan against ONNX Runtime on the same `parity_inputs` (one seeded sequence, so
both stages see the very same arrays). onnxruntime is imported when used.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

import numpy as np

from ._deps import require
from .errors import ConvertError, one_line


def ort_session(model: Any) -> Any:
    """An ONNX Runtime CPU session for a path or ModelProto, quiet (errors only)."""
    ort = require("onnxruntime", "running the ONNX model")
    options = ort.SessionOptions()
    options.log_severity_level = 3
    source = str(model) if isinstance(model, (str, Path)) else model.SerializeToString()
    return ort.InferenceSession(source, options, providers=["CPUExecutionProvider"])


def run_ort(session: Any, input_name: str, batches: Sequence[Any]) -> list[list[Any]]:
    """Run each input array through `session`; one list of outputs per input."""
    results = []
    for array in batches:
        try:
            results.append(session.run(None, {input_name: array}))
        except Exception as exc:
            raise ConvertError(
                f"ONNX Runtime cannot run the exported model at batch {array.shape[0]}: {one_line(exc, 300)}."
            ) from exc
    return results


def tolerance_report(
    names: Sequence[str], reference: Sequence[Sequence[Any]], actual: Sequence[Sequence[Any]],
    atol: float, rtol: float,
) -> dict[str, dict[str, Any]]:
    """Max abs / rel error per output over all batches, and whether it is within tolerance.

    Within tolerance means |actual - reference| <= atol + rtol * |reference| for
    every element (numpy.allclose). max_rel is taken only over elements with
    |reference| > atol, where a relative error means something.
    """
    report: dict[str, dict[str, Any]] = {}
    for index, name in enumerate(names):
        max_abs = 0.0
        max_rel = 0.0
        ok = True
        for ref_outputs, act_outputs in zip(reference, actual):
            ref = np.asarray(ref_outputs[index], dtype=np.float64)
            act = np.asarray(act_outputs[index], dtype=np.float64)
            if ref.shape != act.shape:
                raise ConvertError(
                    f"output {name!r} has shape {list(act.shape)} in ONNX but {list(ref.shape)} in torch; "
                    "the export is wrong for this batch size."
                )
            with np.errstate(invalid="ignore"):
                diff = np.where(ref == act, 0.0, np.abs(act - ref))  # equal infinities match
            if not np.all(np.isfinite(diff)):
                max_abs = float("inf")
                ok = False
                continue
            if diff.size:
                max_abs = max(max_abs, float(diff.max()))
                big = np.abs(ref) > atol
                if big.any():
                    max_rel = max(max_rel, float((diff[big] / np.abs(ref[big])).max()))
                ok = ok and bool(np.all(diff <= atol + rtol * np.abs(ref)))
        report[name] = {"max_abs": max_abs, "max_rel": max_rel, "ok": ok}
    return report


def parity_inputs(sample_shape: Sequence[int], batches: Sequence[int], seed: int) -> list[np.ndarray]:
    """Seeded uniform [0, 1) float32 arrays (an image scaled by 1/255), one per batch size.

    NumPy only, so the TensorRT stage on a device without torch replays exactly
    the arrays `convert` checked: same shape, batches and seed -> same arrays.
    """
    rng = np.random.default_rng(seed)
    return [rng.random((int(b), *(int(d) for d in sample_shape)), dtype=np.float32) for b in batches]


def lane_dx(reference: Sequence[Any], candidate: Sequence[Any]) -> list[float]:
    """|dx| at shared ys between lanes matched greedily (closest first)."""
    def on_grid(lane: Any) -> dict[float, float]:
        points = np.asarray(lane.points, dtype=np.float64)
        return {round(float(y), 3): float(x) for x, y in points}

    ref = [on_grid(lane) for lane in reference]
    cand = [on_grid(lane) for lane in candidate]
    pairs = []
    for i, a in enumerate(ref):
        for j, b in enumerate(cand):
            common = sorted(set(a) & set(b))
            if common:
                dx = [abs(a[y] - b[y]) for y in common]
                pairs.append((sum(dx) / len(dx), i, j, dx))
    used_i: set[int] = set()
    used_j: set[int] = set()
    dxs: list[float] = []
    for _, i, j, dx in sorted(pairs, key=lambda p: p[0]):
        if i in used_i or j in used_j:
            continue
        used_i.add(i)
        used_j.add(j)
        dxs.extend(dx)
    if len(used_i) < min(len(ref), len(cand)):
        dxs.append(float("inf"))  # a lane with no vertical overlap with any other
    return dxs
