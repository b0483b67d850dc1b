"""Is a built plan the model it was built from? Deserialize, check its I/O, run it against ONNX Runtime.

`verify_plan` checks the engine's I/O tensors against the manifest's "io" section
(`edge_deploy.machine.plan_io.check_io`), runs the plan on the parity inputs of `convert` (`parity.parity_feeds`) and
compares its outputs with ONNX Runtime's (`parity.compare_to_reference`: raw tensors, then
decoded lanes, mean |dx| <= parity.PLAN_MAX_LANE_DX_PX at 640 wide), failing on the worst output.
"""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from ..artifact.manifest import IOSignature, Manifest
from ..errors import EngineError
from ..machine import tensorrt_api
from ..machine.plan_io import check_io
from ..export.parity import LaneCheck, compare_to_reference, ort_session, parity_feeds
from ..core.progress import Reporter
from ..artifact.records import Comparison, PlanVerify


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
    device_memory = trt.device_memory_bytes(engine)
    if not tensorrt_api.has_pycuda():
        reason = "pycuda is not installed (pip install 'edge-deploy[jetson]')"
        reporter.warn(f"the plan's I/O matches the manifest, but it was not run: {reason}")
        return PlanVerify(status="passed", io="ok", run=Comparison.skipped(reason), device_memory_bytes=device_memory)

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
    return PlanVerify(status="passed", io="ok", run=run, device_memory_bytes=device_memory)

