"""Parity: ONNX Runtime sessions, the seeded parity inputs, and numeric comparison.

`convert` checks torch against ONNX Runtime and the TensorRT stage checks the
plan against ONNX Runtime on the same `parity_inputs` (one seeded sequence, so
both stages see the very same arrays). `parity_feeds` adds held-out road frames
(`road_feed`), and `compare_to_reference` compares any candidate (the plan,
model_fp16.onnx, the fused model) with ONNX Runtime: raw tensors, then decoded
lanes. onnxruntime is imported when used.
"""
from __future__ import annotations

from pathlib import Path
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from ..core.deps import require
from ..artifact.manifest import Manifest
from ..errors import ConvertError, EdgeDeployError, EngineError, one_line
from ..core.numbers import THREADS
from ..artifact.records import Comparison, LaneComparison, OutputError
from ..lanedet.preprocess import Preprocessor
from ..synthetic.roads import EVAL_SEED_BASE, scene

Feed = dict[str, np.ndarray]  # input or output name -> its batch

PLAN_MAX_LANE_DX_PX = 2.0  # mean |dx| allowed between ONNX Runtime and plan lanes, 640-wide pixels
ROAD_FRAMES = 4


ORT_THREADS_ENV = "EDGE_DEPLOY_ORT_THREADS"


def ort_threads() -> int | None:
    """$EDGE_DEPLOY_ORT_THREADS: the intra-op threads of edge-deploy's own ONNX Runtime sessions (convert's checks,
    evaluate, the Python-backend runner) on a machine shared with other work; None (unset): one per core. A whole
    number in numbers.THREADS ([1, 64]): ONNX Runtime crashed (SIGSEGV) making a pool of 100000."""
    return THREADS.env(ORT_THREADS_ENV, None, EdgeDeployError,
                       advice="set it in that range, or unset it for one thread per core.")


def ort_session(model: Any) -> Any:
    """An ONNX Runtime CPU session for a path or ModelProto, quiet (errors only)."""
    ort = require("onnxruntime", "running the ONNX model")
    options = ort.SessionOptions()
    options.log_severity_level = 3
    threads = ort_threads()
    if threads is not None:
        options.intra_op_num_threads = threads
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
) -> dict[str, OutputError]:
    """Max abs / rel error per output over all batches, and whether it is within tolerance (`ok`).

    Within tolerance means |actual - reference| <= atol + rtol * |reference| for
    every element (numpy.allclose). max_rel is taken only over elements with
    |reference| > atol, where a relative error means something.
    """
    report: dict[str, OutputError] = {}
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
        report[name] = OutputError(max_abs=max_abs, max_rel=max_rel, ok=ok)
    return report


def parity_inputs(sample_shape: Sequence[int], batches: Sequence[int], seed: int) -> list[np.ndarray]:
    """Seeded uniform [0, 1) float32 arrays (an image scaled by 1/255), one per batch size.

    NumPy only, so the TensorRT stage on a device without torch replays exactly
    the arrays `convert` checked: same shape, batches and seed -> same arrays.
    """
    rng = np.random.default_rng(seed)
    return [rng.random((int(b), *(int(d) for d in sample_shape)), dtype=np.float32) for b in batches]


def lane_dx(reference: Sequence[Any], candidate: Sequence[Any]) -> list[float]:
    """|dx| between lanes matched greedily (closest first), on common rows: the rows of both lanes inside the y
    range they share, each lane's x there interpolated linearly between its own points. So decoders that sample
    their own rows (between a lane's ends) compare as well as those on one fixed set of rows. A lane left without
    a partner sharing part of its range adds inf."""
    def sorted_points(lane: Any) -> np.ndarray:
        points = np.asarray(lane.points, dtype=np.float64).reshape(-1, 2)
        return points[np.argsort(points[:, 1], kind="stable")]

    ref = [sorted_points(lane) for lane in reference]
    cand = [sorted_points(lane) for lane in candidate]
    pairs = []
    for i, a in enumerate(ref):
        for j, b in enumerate(cand):
            if not len(a) or not len(b):
                continue
            low, high = max(a[0, 1], b[0, 1]), min(a[-1, 1], b[-1, 1])
            rows = np.unique(np.concatenate([a[:, 1], b[:, 1]]))
            rows = rows[(rows >= low) & (rows <= high)]
            if rows.size:
                dx = np.abs(np.interp(rows, a[:, 1], a[:, 0]) - np.interp(rows, b[:, 1], b[:, 0]))
                pairs.append((float(dx.mean()), i, j, dx.tolist()))
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


def parity_feeds(manifest: Manifest) -> list[Feed]:
    """The feeds `convert` checked ONNX Runtime on: `parity_inputs` per input, one feed per parity batch size,
    then `road_feed` (for a lane model) so that the lane comparison sees lanes, not noise."""
    parity, batch = manifest.parity, manifest.io.batch
    sizes = list((parity.batches if parity else None) or batch.ends())
    seed = (parity.seed if parity else None) or 0
    inputs = manifest.io.inputs
    if not inputs:
        raise EngineError("the manifest lists no model inputs; re-run `edge-deploy convert`.")
    # input k gets seed + k: a single-input model (LaneATT) sees exactly convert's arrays
    per_input = [parity_inputs(t.shape[1:], sizes, seed + k) for k, t in enumerate(inputs)]
    for k, tensor in enumerate(inputs):
        if tensor.datatype == "UINT8":  # a fused model's camera frames (--fuse-preprocess)
            per_input[k] = [(array * 256).astype("uint8") for array in per_input[k]]
    feeds = [{t.name: arrays[i] for t, arrays in zip(inputs, per_input)} for i in range(len(sizes))]
    return feeds + road_feed(manifest)


def road_feed(manifest: Manifest, count: int = ROAD_FRAMES) -> list[Feed]:
    """Synthetic road frames (held-out seeds) as one feed of a lane model (one image input with a
    preprocessing spec): preprocessed as the client does, or as UINT8 camera frames for a fused model;
    [] for other models. A trained model finds no lane in random inputs, so without these the lane
    comparison would compare nothing with nothing."""
    inputs = manifest.io.inputs
    if len(inputs) != 1 or manifest.family is None:
        return []
    shape = list(inputs[0].shape)
    fused = inputs[0].datatype == "UINT8" and len(shape) == 4 and shape[3] == 3
    if not fused and shape[1:2] != [3]:
        return []

    batch = manifest.io.batch
    size = min(max(count, batch.min), batch.max)
    if fused:
        height, width = shape[1], shape[2]
        frames = [scene(EVAL_SEED_BASE + i, width, height).frame for i in range(size)]
        return [{inputs[0].name: np.stack(frames)}]
    pre = Preprocessor(manifest.preprocess, np.float32, size)
    for i in range(size):
        pre(scene(EVAL_SEED_BASE + i, 1640, 590).frame, index=i)
    return [{inputs[0].name: pre.output.copy()}]


@dataclass(frozen=True)
class LaneCheck:
    """How to compare two runs of a lane model in lanes: its family, the outputs the family decodes, the
    decode defaults, the image size to decode at, and the width the dx limits are held at.

    The family says at which frame size its lanes are checked (`LaneFamily.check_image_size`): the original
    frames of the model's data set where its preset gives their size (UFLDv2 and CLRNet: 1640x590 CULane,
    1280x720 TuSimple, ...), held at that width ("mean |dx| <= 1 px at the original width"); otherwise the
    model's input size, held at 640 wide (LaneATT's input width).
    """

    family: Any  # edge_deploy.lanedet.family.LaneFamily
    outputs: tuple[str, ...]
    decode: Any  # ScoreNmsDecodeParams
    image_size: tuple[int, int]
    limit_width: float = 640.0  # dx limits are in pixels of an image this wide

    @classmethod
    def of(cls, manifest: Manifest) -> LaneCheck | None:
        """The check for a manifest's model, or None when it has no lane family."""
        family = manifest.lane_family()
        if family is None:
            return None
        try:
            outputs = family.lane_outputs(manifest.io.outputs, manifest.io.batch.dynamic)
        except ValueError:
            return None
        names = tuple(t.name for t in outputs)
        size = family.check_image_size(manifest.source.dataset, manifest.decode)
        if size is not None:
            return cls(family, names, manifest.decode, tuple(size), float(size[1]))
        return cls(family, names, manifest.decode, manifest.input_size)

    def lanes(self, feed: Feed, index: int) -> list[Any]:
        arrays = [np.asarray(feed[name])[index] for name in self.outputs]
        return self.family.decode(arrays, self.decode, self.image_size, self.image_size[1])


def compare_to_reference(
    reference: Sequence[Feed],
    actual: Sequence[Feed],
    lane_check: LaneCheck | None,
    *,
    max_dx_px: float = PLAN_MAX_LANE_DX_PX,
    subject: str = "the plan",
) -> Comparison:
    """ONNX Runtime vs the plan (`subject`) on the same feeds: raw max abs/rel per output, then decoded lanes.

    max_rel is max|plan - ort| / max|ort| over the output (relative to its range:
    logits near 0 make per-element ratios meaningless). Lanes pass when every
    image has the same number of lanes and the mean |dx| over matched lanes is
    <= max_dx_px at the lane check's limit_width (640 wide for LaneATT, the data set's original width for
    UFLDv2; the FP16 ONNX model is held to 1 px, a plan to 2 px).
    """
    outputs = _raw_errors(reference, actual, subject)
    worst = max(outputs, key=lambda n: outputs[n].max_rel or 0.0) if outputs else None
    problems = [f"output {name!r} has inf/NaN values from {subject}"
                for name, entry in outputs.items() if not np.isfinite(entry.max_abs or 0.0)]
    lanes = None
    if lane_check is not None:
        lanes, lane_problems = _lane_comparison(reference, actual, lane_check, max_dx_px, subject)
        problems += lane_problems
    return Comparison(outputs=outputs, worst_output=worst, passed=not problems, problems=tuple(problems),
                      lanes=lanes)


def _raw_errors(reference: Sequence[Feed], actual: Sequence[Feed], subject: str) -> dict[str, OutputError]:
    """Max abs and max rel (to the output's range) per output over all feeds."""
    worst: dict[str, tuple[float, float]] = {}
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
            old_abs, old_rel = worst.get(name, (0.0, 0.0))
            worst[name] = (max(old_abs, max_abs), max(old_rel, max_rel))
    return {name: OutputError(max_abs=a, max_rel=r) for name, (a, r) in worst.items()}


def _lane_comparison(reference: Sequence[Feed], actual: Sequence[Feed], lane_check: LaneCheck, max_dx_px: float,
                     subject: str) -> tuple[LaneComparison, list[str]]:
    """The decoded lanes of both sides compared per image, and what failed."""
    image_size = lane_check.image_size
    counts_ref, counts_plan, dxs, problems = [], [], [], []
    image = 0
    for ref_feed, act_feed in zip(reference, actual):
        for index in range(len(np.asarray(ref_feed[lane_check.outputs[0]]))):
            try:
                ref_lanes = lane_check.lanes(ref_feed, index)
                act_lanes = lane_check.lanes(act_feed, index)
            except ValueError as exc:
                raise EngineError(f"cannot decode the output {', '.join(lane_check.outputs)} of {subject}: "
                                  f"{exc}") from exc
            counts_ref.append(len(ref_lanes))
            counts_plan.append(len(act_lanes))
            if len(ref_lanes) != len(act_lanes):
                problems.append(
                    f"image {image}: {len(act_lanes)} lane(s) from {subject}, {len(ref_lanes)} from the reference"
                )
            dxs.extend(lane_dx(ref_lanes, act_lanes))
            image += 1
    mean_dx = float(sum(dxs) / len(dxs)) if dxs else 0.0
    # dx is in pixels of image_size's width; the limit is defined at lane_check.limit_width wide.
    width = float(lane_check.limit_width)
    mean_dx_at_width = mean_dx * width / float(image_size[1])
    if mean_dx_at_width > max_dx_px:
        problems.append(f"lanes moved by {mean_dx_at_width:.2f} px on average at {width:g} wide "
                        f"(limit {max_dx_px:g} px)")
    compared = sum(counts_ref) + sum(counts_plan) > 0
    lanes = LaneComparison(
        images=image, lanes_onnxruntime=sum(counts_ref), lanes_plan=sum(counts_plan), mean_dx_px=mean_dx_at_width,
        max_mean_dx_px=max_dx_px, dx_width_px=width,
        # zero lanes against zero lanes proves nothing: said, not counted as a pass of the lane check
        verified=compared, note=None if compared else NOT_VERIFIED_NO_LANES)
    return lanes, problems


NOT_VERIFIED_NO_LANES = "not verified: no lanes to compare (the model finds none on the check frames)"
# Raw outputs this close (max abs error / output range) cannot lose accuracy; lanes that still move do so at
# decisions taken at near-ties (a score at the threshold, two grid cells almost equal).
NEAR_TIE_MAX_REL = 1e-2


def worst_output(report: Comparison) -> OutputError:
    """The output entry of `compare_to_reference`'s report with the largest relative error."""
    return report.worst()


def lanes_moved_reason(report: Comparison, subject: str) -> str:
    """Why lanes moved between the reference and `subject` although the check failed, for its message: near-ties
    when the raw outputs agree (then FP16 or fusion is not to blame), else a real loss of accuracy."""
    worst = report.worst()
    max_abs, max_rel = worst.max_abs or 0.0, worst.max_rel or 0.0
    if max_rel <= NEAR_TIE_MAX_REL:
        return (f"the raw outputs agree (max abs {max_abs:.2g}, {max_rel:.2%} of their range), so "
                "the lanes moved where the model decides at near-ties (scores at the threshold, almost equal cells), "
                f"which {subject} tips either way")
    return f"the raw outputs differ by up to {max_rel:.1%} of their range in {subject}"


def lanes_line(lanes: LaneComparison, counts: str) -> str:
    """`counts` (who found how many lanes) and the mean |dx| against its limit, or why nothing was verified."""
    if lanes.verified is False:
        return f"{counts}: {lanes.note or NOT_VERIFIED_NO_LANES}"
    return f"{counts}, mean |dx| {lanes.mean_dx_px or 0.0:.2f} px (limit {lanes.max_mean_dx_px or 0.0:g} px)"
