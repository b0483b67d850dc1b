"""Is a built plan the model it was built from? Deserialize, check its I/O, run it against ONNX Runtime.

`check_io` compares the engine's I/O tensors with the manifest's "io" section;
`compare_to_reference` compares the plan's outputs with ONNX Runtime's on the same
feeds twice: raw tensors (max abs/rel per output) and decoded lanes (same count,
mean |dx| <= MAX_LANE_DX_PX at 640 wide). `verify_plan` does all of it on the
parity inputs of `convert` (`parity_feeds`) and fails naming the worst output.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Sequence

from ..artifact import Manifest
from ..errors import EngineError
from ..parity import lane_dx, parity_inputs
from ..progress import Reporter
from . import tensorrt_api

MAX_LANE_DX_PX = 2.0  # mean |dx| allowed between ONNX Runtime and plan lanes, 640-wide pixels
LANE_WIDTH = 77  # values per lane row of LaneATT's output (docs/design.md)


def check_io(tensors: Sequence[tensorrt_api.TensorInfo], io: dict[str, Any], where: str = "the plan") -> None:
    """The engine's I/O names, datatypes and shapes must be the manifest's; one-line EngineError otherwise."""
    expected = {t["name"]: (True, t) for t in io.get("inputs", [])}
    expected.update({t["name"]: (False, t) for t in io.get("outputs", [])})
    found = {t.name: t for t in tensors}
    missing = sorted(set(expected) - set(found))
    extra = sorted(set(found) - set(expected))
    if missing or extra:
        raise EngineError(
            f"{where} does not have the manifest's inputs/outputs (missing {missing or 'none'}, unexpected "
            f"{extra or 'none'}): it was built from another model; rebuild with `edge-deploy convert --force`."
        )
    for name, (is_input, spec) in expected.items():
        tensor = found[name]
        kind = "input" if is_input else "output"
        if tensor.is_input != is_input:
            raise EngineError(f"{where}: {name!r} is an {kind} in the manifest but not in the plan; rebuild it.")
        if tensor.datatype != spec["datatype"]:
            raise EngineError(
                f"{where}: {kind} {name!r} is {tensor.datatype}, the manifest says {spec['datatype']}; rebuild it."
            )
        want = [int(d) for d in spec["shape"]]
        if len(want) != len(tensor.shape) or any(w != g for w, g in zip(want, tensor.shape)):
            raise EngineError(
                f"{where}: {kind} {name!r} has shape {tensor.shape}, the manifest says {want}; rebuild it."
            )
    batch = io.get("batch") or {}
    for tensor in tensors:
        if tensor.is_input and tensor.profile is not None and batch:
            low, high = tensor.profile[0][0], tensor.profile[2][0]
            if (low, high) != (int(batch.get("min", low)), int(batch.get("max", high))):
                raise EngineError(
                    f"{where}: input {tensor.name!r} accepts batch {low}..{high}, the manifest says "
                    f"{batch.get('min')}..{batch.get('max')}; rebuild it."
                )


def parity_feeds(manifest: dict[str, Any]) -> list[dict[str, Any]]:
    """The feeds `convert` checked ONNX Runtime on: `parity_inputs` per input, one feed per parity batch size,
    then `road_feed` (for a lane model) so that the lane comparison sees lanes, not noise."""
    view = Manifest(manifest)
    io, parity, batch = view.io, view.parity, view.batch
    sizes = parity.get("batches") or sorted({int(batch.get("min", 1)), int(batch.get("max", 1))})
    seed = int(parity.get("seed", 0))
    inputs = io.get("inputs", [])
    if not inputs:
        raise EngineError("the manifest lists no model inputs; re-run `edge-deploy convert`.")
    # input k gets seed + k: a single-input model (LaneATT) sees exactly convert's arrays
    per_input = [parity_inputs(t["shape"][1:], sizes, seed + k) for k, t in enumerate(inputs)]
    for k, tensor in enumerate(inputs):
        if tensor.get("datatype") == "UINT8":  # a fused model's camera frames (--fuse-preprocess)
            per_input[k] = [(array * 256).astype("uint8") for array in per_input[k]]
    feeds = [{t["name"]: arrays[i] for t, arrays in zip(inputs, per_input)} for i in range(len(sizes))]
    return feeds + road_feed(manifest)


ROAD_FRAMES = 4


def road_feed(manifest: dict[str, Any], count: int = ROAD_FRAMES) -> list[dict[str, Any]]:
    """Synthetic road frames (held-out seeds) as one feed of a lane model (one image input with a
    preprocessing spec): preprocessed as the client does, or as UINT8 camera frames for a fused model;
    [] for other models. A trained model finds no lane in random inputs, so without these the lane
    comparison would compare nothing with nothing."""
    import numpy as np

    view = Manifest(manifest)
    inputs = view.io.get("inputs", [])
    if len(inputs) != 1 or not view.preprocess:
        return []
    shape = [int(d) for d in inputs[0].get("shape", [])]
    fused = inputs[0].get("datatype") == "UINT8" and len(shape) == 4 and shape[3] == 3
    if not fused and shape[1:2] != [3]:
        return []
    from ..lanedet.preprocess import Preprocessor, PreprocessSpec
    from ..lanedet.synthetic import EVAL_SEED_BASE, scene

    batch = view.batch
    low, high = int(batch.get("min", 1)), int(batch.get("max", 1))
    size = min(max(count, low), high)
    if fused:
        height, width = shape[1], shape[2]
        frames = [scene(EVAL_SEED_BASE + i, width, height).frame for i in range(size)]
        return [{inputs[0]["name"]: np.stack(frames)}]
    pre = Preprocessor(PreprocessSpec.from_dict(view.preprocess), np.float32, size)
    for i in range(size):
        pre(scene(EVAL_SEED_BASE + i, 1640, 590).frame, index=i)
    return [{inputs[0]["name"]: pre.output.copy()}]


def compare_to_reference(
    reference: Sequence[dict[str, Any]],
    actual: Sequence[dict[str, Any]],
    decode: dict[str, Any],
    lane_output: str | None,
    image_size: tuple[int, int] = (360, 640),
    decoder: Callable[..., list[Any]] | None = None,
    *,
    max_dx_px: float = MAX_LANE_DX_PX,
    subject: str = "the plan",
) -> dict[str, Any]:
    """ONNX Runtime vs the plan (`subject`) on the same feeds: raw max abs/rel per output, then decoded lanes.

    max_rel is max|plan - ort| / max|ort| over the output (relative to its range:
    logits near 0 make per-element ratios meaningless). Lanes pass when every
    image has the same number of lanes and the mean |dx| over matched lanes is
    <= max_dx_px at 640 wide (the FP16 ONNX model is held to 1 px, a plan to 2 px).
    """
    import numpy as np

    outputs: dict[str, dict[str, float]] = {}
    for ref_feed, act_feed in zip(reference, actual):
        for name, ref in ref_feed.items():
            ref_arr = np.asarray(ref, dtype=np.float64)
            act_arr = np.asarray(act_feed[name], dtype=np.float64)
            if ref_arr.shape != act_arr.shape:
                raise EngineError(
                    f"output {name!r} has shape {list(act_arr.shape)} from {subject} but {list(ref_arr.shape)} "
                    "from ONNX Runtime; rebuild with `edge-deploy convert --force`."
                )
            diff = np.abs(act_arr - ref_arr)
            finite = bool(np.all(np.isfinite(act_arr)))
            max_abs = float(diff.max()) if diff.size and finite else (0.0 if finite else float("inf"))
            scale = float(np.abs(ref_arr).max()) if ref_arr.size else 0.0
            max_rel = max_abs / scale if scale > 0 else (0.0 if max_abs == 0 else float("inf"))
            entry = outputs.setdefault(name, {"max_abs": 0.0, "max_rel": 0.0})
            entry["max_abs"] = max(entry["max_abs"], max_abs)
            entry["max_rel"] = max(entry["max_rel"], max_rel)
    worst = max(outputs, key=lambda n: outputs[n]["max_rel"]) if outputs else None
    report: dict[str, Any] = {"outputs": outputs, "worst_output": worst, "passed": True, "problems": []}
    for name, entry in outputs.items():
        if not np.isfinite(entry["max_abs"]):
            report["passed"] = False
            report["problems"].append(f"output {name!r} has inf/NaN values from {subject}")
    if lane_output is None:
        report["lanes"] = None
        return report
    if decoder is None:
        from ..lanedet.decode import decode_lanes as decoder
    params = {k: decode[k] for k in ("conf_threshold", "nms_threshold", "top_k") if k in decode}
    counts_ref, counts_plan, dxs = [], [], []
    image = 0
    for ref_feed, act_feed in zip(reference, actual):
        for ref_raw, act_raw in zip(np.asarray(ref_feed[lane_output]), np.asarray(act_feed[lane_output])):
            try:
                ref_lanes = decoder(ref_raw, image_size=image_size, **params)
                act_lanes = decoder(act_raw, image_size=image_size, **params)
            except ValueError as exc:
                raise EngineError(f"cannot decode the output {lane_output!r} of {subject}: {exc}") from exc
            counts_ref.append(len(ref_lanes))
            counts_plan.append(len(act_lanes))
            if len(ref_lanes) != len(act_lanes):
                report["passed"] = False
                report["problems"].append(
                    f"image {image}: {len(act_lanes)} lane(s) from {subject}, {len(ref_lanes)} from the reference"
                )
            dxs.extend(lane_dx(ref_lanes, act_lanes))
            image += 1
    mean_dx = float(sum(dxs) / len(dxs)) if dxs else 0.0
    # dx is in pixels of image_size's width; the limit is defined at 640 wide.
    mean_dx_640 = mean_dx * 640.0 / float(image_size[1])
    if mean_dx_640 > max_dx_px:
        report["passed"] = False
        report["problems"].append(f"lanes moved by {mean_dx_640:.2f} px on average (limit {max_dx_px:g} px)")
    report["lanes"] = {
        "images": image,
        "lanes_onnxruntime": sum(counts_ref),
        "lanes_plan": sum(counts_plan),
        "mean_dx_px": mean_dx_640,
        "max_mean_dx_px": max_dx_px,
    }
    return report


def lane_output_name(manifest: dict[str, Any]) -> str | None:
    """The output holding lane rows (last axis LANE_WIDTH), decoded for the lane comparison."""
    for tensor in Manifest(manifest).io.get("outputs", []):
        if tensor.get("shape") and int(tensor["shape"][-1]) == LANE_WIDTH:
            return str(tensor["name"])
    return None


def verify_plan(plan_path: Path, onnx_path: Path, manifest: dict[str, Any], trt: tensorrt_api.TensorRT,
                reporter: Reporter | None = None, dla_core: int | None = None,
                io: dict[str, Any] | None = None) -> dict[str, Any]:
    """Deserialize the plan, check its I/O against the manifest, run it and compare with ONNX Runtime.

    Returns the manifest's plan "verify" section; without pycuda only the I/O is checked.
    onnx_path: the FP32 reference model; dla_core: the DLA core the plan was built for (None: GPU);
    io: the plan's expected I/O (default: the manifest's; model_fp16.onnx's for a plan built from it).
    """
    reporter = reporter or Reporter()
    engine = trt.deserialize(Path(plan_path).read_bytes(), where=str(plan_path), dla_core=dla_core)
    check_io(trt.io_tensors(engine), io if io is not None else Manifest(manifest).io, where=str(plan_path))
    result: dict[str, Any] = {"status": "passed", "io": "ok"}
    if not tensorrt_api.has_pycuda():
        reason = "pycuda is not installed (pip install 'edge-deploy[jetson]')"
        reporter.warn(f"the plan's I/O matches the manifest, but it was not run: {reason}")
        result["run"] = {"status": "skipped", "reason": reason}
        return result
    from ..parity import ort_session

    feeds = parity_feeds(manifest)
    session = ort_session(Path(onnx_path))
    names = [o.name for o in session.get_outputs()]
    reference = [dict(zip(names, session.run(None, feed))) for feed in feeds]
    actual = [trt.run(engine, feed) for feed in feeds]
    view = Manifest(manifest)
    report = compare_to_reference(reference, actual, view.decode, lane_output_name(manifest), view.input_size)
    report["batches"] = [int(next(iter(f.values())).shape[0]) for f in feeds]
    if not report["passed"]:
        worst = report["worst_output"]
        stats = report["outputs"].get(worst, {})
        problems = report["problems"]
        summary = "; ".join(problems[:3]) + (f" (and {len(problems) - 3} more)" if len(problems) > 3 else "")
        raise EngineError(
            f"the plan does not reproduce ONNX Runtime: {summary}; worst output {worst!r} "
            f"(max abs {stats.get('max_abs', float('nan')):.3g}, max rel {stats.get('max_rel', float('nan')):.3g}); "
            "try --precision fp32 or pass --no-verify to keep it anyway."
        )
    result["run"] = {"status": "passed", **{k: v for k, v in report.items() if k not in ("passed", "problems")}}
    return result

