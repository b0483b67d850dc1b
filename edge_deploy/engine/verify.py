"""Is a built plan the model it was built from? Deserialize, check its I/O, run it against ONNX Runtime.

`check_io` compares the engine's I/O tensors with the manifest's "io" section;
`verify_plan` runs the plan on the parity inputs of `convert` (`parity.parity_feeds`) and
compares its outputs with ONNX Runtime's (`parity.compare_to_reference`: raw tensors, then
decoded lanes, mean |dx| <= parity.PLAN_MAX_LANE_DX_PX at 640 wide), failing on the worst output.
"""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Sequence

from ..artifact import IOSignature, Manifest
from ..errors import EngineError
from ..parity import LaneCheck, compare_to_reference, parity_feeds
from ..progress import Reporter
from ..records import Comparison, PlanVerify
from . import tensorrt_api



def check_io(tensors: Sequence[tensorrt_api.TensorInfo], io: IOSignature, where: str = "the plan") -> None:
    """The engine's I/O names, datatypes and shapes must be the manifest's; one-line EngineError otherwise."""
    expected = {t.name: (True, t) for t in io.inputs}
    expected.update({t.name: (False, t) for t in io.outputs})
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
        if tensor.datatype != spec.datatype:
            raise EngineError(
                f"{where}: {kind} {name!r} is {tensor.datatype}, the manifest says {spec.datatype}; rebuild it."
            )
        want = list(spec.shape)
        if len(want) != len(tensor.shape) or any(w != g for w, g in zip(want, tensor.shape)):
            raise EngineError(
                f"{where}: {kind} {name!r} has shape {tensor.shape}, the manifest says {want}; rebuild it."
            )
    batch = io.batch
    for tensor in tensors:
        if tensor.is_input and tensor.profile is not None and batch.dynamic:
            low, high = tensor.profile[0][0], tensor.profile[2][0]
            if (low, high) != (batch.min, batch.max):
                raise EngineError(
                    f"{where}: input {tensor.name!r} accepts batch {low}..{high}, the manifest says "
                    f"{batch.min}..{batch.max}; rebuild it."
                )


def verify_plan(plan_path: Path, onnx_path: Path, manifest: Manifest, trt: tensorrt_api.TensorRT,
                reporter: Reporter | None = None, dla_core: int | None = None,
                io: IOSignature | None = None) -> PlanVerify:
    """Deserialize the plan, check its I/O against the manifest, run it and compare with ONNX Runtime.

    Returns the manifest's plan "verify" section; without pycuda only the I/O is checked.
    onnx_path: the FP32 reference model; dla_core: the DLA core the plan was built for (None: GPU);
    io: the plan's expected I/O (default: the manifest's; model_fp16.onnx's for a plan built from it).
    """
    reporter = reporter or Reporter()
    engine = trt.deserialize(Path(plan_path).read_bytes(), where=str(plan_path), dla_core=dla_core)
    check_io(trt.io_tensors(engine), io if io is not None else manifest.io, where=str(plan_path))
    if not tensorrt_api.has_pycuda():
        reason = "pycuda is not installed (pip install 'edge-deploy[jetson]')"
        reporter.warn(f"the plan's I/O matches the manifest, but it was not run: {reason}")
        return PlanVerify(status="passed", io="ok", run=Comparison.skipped(reason))
    from ..parity import ort_session

    feeds = parity_feeds(manifest)
    session = ort_session(Path(onnx_path))
    names = [o.name for o in session.get_outputs()]
    reference = [dict(zip(names, session.run(None, feed))) for feed in feeds]
    actual = [trt.run(engine, feed) for feed in feeds]
    check = LaneCheck.of(manifest)
    # The plan's lane limit stays in 640-wide pixels, as before UFLDv2's FP16 ONNX check moved to the data set's
    # original width (issue 23 asked that of the ONNX check; a stricter plan check cannot be tried without TensorRT).
    report = compare_to_reference(reference, actual, check and replace(check, limit_width=640.0))
    if not report.passed:
        worst = report.worst_output
        stats = (report.outputs or {}).get(worst or "")
        nan = float("nan")
        problems = report.problems or ()
        summary = "; ".join(problems[:3]) + (f" (and {len(problems) - 3} more)" if len(problems) > 3 else "")
        raise EngineError(
            f"the plan does not reproduce ONNX Runtime: {summary}; worst output {worst!r} "
            f"(max abs {stats.max_abs if stats else nan:.3g}, max rel {stats.max_rel if stats else nan:.3g}); "
            "try --precision fp32 or pass --no-verify to keep it anyway."
        )
    run = replace(report, status="passed", passed=None, problems=None,
                  batches=tuple(int(next(iter(f.values())).shape[0]) for f in feeds))
    return PlanVerify(status="passed", io="ok", run=run)

