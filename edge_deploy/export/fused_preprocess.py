"""`convert --fuse-preprocess`: the client's preprocessing as ONNX nodes in front of the model.

The fused model takes the camera frame itself: UINT8 ``FRAME`` [B, H, W, 3] in the
camera's colour order (BGR), at one fixed frame size. The graph in front of the model:

    Cast(float32) -> [Slice: the spec's crop, and with resized_height only the source rows that reach the kept
    rows] -> Transpose(NCHW) [-> channel swap]
    -> Resize (bicubic: cubic, a = -0.75, half_pixel, exclude_outside 0: OpenCV's INTER_CUBIC; bilinear:
       linear, half_pixel: INTER_LINEAR; nearest: asymmetric floor: INTER_NEAREST; area and
       antialiased_bilinear: linear, see below)
    -> [Slice: the bottom rows (resized_height, UFLDv2's crop_ratio)]
    -> Round -> Clip(0, 255)  (OpenCV resizes uint8 to uint8: its output is rounded and saturated)
    -> Mul/Add per channel ((v * scale - mean) / std) -> [Cast(float16) for an FP16 input]

An antialiased resize (area, or Pillow's antialiased bilinear: UFLDv2's) cannot be expressed: ONNX Resize
antialiases only from opset 18, and TensorRT 8.5 (JetPack 5) reads opset <= 17. Such a spec is fused with the
bilinear crop-and-resize instead; its per-pixel difference to the client's resize is measured and recorded in the
manifest with the substitution (not held to the exact modes' limit), and lane differences are recorded and
warned about, not refused.

The rounding sits after the resize because that is where the client's own
preprocessing (lanedet/preprocess.py: cv2.resize on uint8, then a per-byte table) has
it; the measured difference with and without it is recorded in the manifest.

TensorRT: the Resize importer maps ``mode="cubic"`` to ``ResizeMode::kCUBIC`` with
``setCubicCoeff(cubic_coeff_a)`` from release 8.5 (onnx-tensorrt 8.5-GA,
builtin_op_importers.cpp, Resize; 8.4-GA refuses cubic), and a UINT8 network input
may only be cast to FP32/FP16 (same file, Cast), which is what this graph does. Its
docs/operators.md table still lists only nearest/linear; the importer is the fact.
The sizes input is a shape tensor (dynamic batch), the path of the importer without
the "cubic only on the innermost 2 dimensions" check for constant scales.
"""
from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from ..core.deps import require
from ..artifact.manifest import FP16_ONNX_NAME, ONNX_NAME, IOSignature, Manifest, TensorSpec, file_entry
from ..errors import ConvertError, one_line
from ..core.fsutil import atomic_path
from ..lanedet.preprocess import Preprocessor, PreprocessSpec, kept_rows
from .parity import LaneCheck, compare_to_reference, lanes_moved_reason, ort_session
from ..artifact.records import (Comparison, FrameRecord, FusedParity, FusedPreprocessRecord, PixelDiff, PixelParity,
                       Substitution)
from . import onnx_target
from ..core.progress import Reporter
from ..synthetic.roads import road_scene

FRAME_INPUT = "FRAME"
DEFAULT_FRAME_SIZE = (590, 1640)  # (height, width) of a CULane camera frame
PREFIX = "edge_deploy_pre/"
MAX_PIXEL_LEVELS = 2.0  # per value, in uint8 levels: OpenCV's fixed-point kernel vs float32 (measured: 1)
MAX_LANE_DX_PX = 0.5  # mean |dx| at 640 wide between fused and client-side preprocessing (model.onnx)
# model_fp16.onnx: its FP16 arithmetic tips near-ties (an NMS pick between two anchors of equal score, measured at
# 5 px on one lane of the demo weights) on inputs that differ by one uint8 level, so both of its runs are held to
# the FP16 check's limit; the preprocessing itself runs in FP32 before the model's cast to FP16 in both files.
MAX_LANE_DX_PX_FP16 = 1.0


def parse_frame_size(text: str) -> tuple[int, int]:
    """'1640x590' (width x height, as cameras are described) -> (height, width)."""
    try:
        width, height = (int(part) for part in text.lower().split("x"))
    except ValueError:
        raise ConvertError(f"--frame-size {text!r} is not WIDTHxHEIGHT (e.g. 1640x590).") from None
    if not (1 <= width <= 16384 and 1 <= height <= 16384):
        raise ConvertError(f"--frame-size {text!r} must have both sides between 1 and 16384 pixels.")
    return height, width


# ONNX Resize attributes per interpolation of a spec, and the interpolations only approximated (why).
RESIZE_ATTRIBUTES: dict[str, dict[str, str | float]] = {
    "bicubic": {"mode": "cubic", "cubic_coeff_a": -0.75, "coordinate_transformation_mode": "half_pixel",
                "exclude_outside": 0},
    "bilinear": {"mode": "linear", "coordinate_transformation_mode": "half_pixel"},
    "nearest": {"mode": "nearest", "coordinate_transformation_mode": "asymmetric", "nearest_mode": "floor"},
    "area": {"mode": "linear", "coordinate_transformation_mode": "half_pixel"},
    "antialiased_bilinear": {"mode": "linear", "coordinate_transformation_mode": "half_pixel"},
}
_NO_ANTIALIAS = "bilinear: an antialiased resize needs ONNX opset 18, TensorRT 8.5 reads opset <= 17"
SUBSTITUTED = {"area": _NO_ANTIALIAS, "antialiased_bilinear": _NO_ANTIALIAS}


def resize_description(spec: PreprocessSpec) -> str:
    """The graph's resize in words (the manifest's "graph")."""
    attrs = ", ".join(f"{k}={v}" for k, v in RESIZE_ATTRIBUTES[spec.interpolation].items())
    kept = (f", the rows that reach the bottom {spec.height} of {spec.resized_height} (crop-and-resize)"
            if spec.resized_height is not None else "")
    return f"Resize({attrs}){kept}"


def preprocess_graph(spec: PreprocessSpec, frame_size: tuple[int, int], batch_dim: Any, out_name: str,
                     out_dtype: str, opset: int = onnx_target.DEFAULT_OPSET, *, round_uint8: bool = True) -> Any:
    """The preprocessing ModelProto: FRAME uint8 [batch_dim, H, W, 3] -> `out_name` [batch_dim, 3, h, w].

    round_uint8=False leaves out the Round/Clip after the resize (only to measure what it is worth).
    """
    onnx = require("onnx", "fusing the preprocessing into the model")
    from onnx import TensorProto, helper, numpy_helper


    pre = spec
    frame_h, frame_w = frame_size
    top, left, box_h, box_w = pre.crop_box(frame_h, frame_w)
    resized_h = pre.height
    if pre.resized_height is not None:  # resize only the source rows that reach the kept rows, as the client does
        source_rows, resized_h = kept_rows(box_h, pre.resized_height, pre.height)
        top, box_h = top + box_h - source_rows, source_rows
    nodes, inits = [], []

    def const(name: str, value: np.ndarray) -> str:
        inits.append(numpy_helper.from_array(value, PREFIX + name))
        return PREFIX + name

    def node(op: str, inputs: list[str], output: str, **attrs: Any) -> str:
        nodes.append(helper.make_node(op, inputs, [PREFIX + output], name=PREFIX + output, **attrs))
        return PREFIX + output

    x = node("Cast", [FRAME_INPUT], "float", to=TensorProto.FLOAT)
    if (top, left, box_h, box_w) != (0, 0, frame_h, frame_w):
        x = node("Slice", [x, const("crop_starts", np.array([top, left], np.int64)),
                           const("crop_ends", np.array([top + box_h, left + box_w], np.int64)),
                           const("crop_axes", np.array([1, 2], np.int64))], "crop")
    x = node("Transpose", [x], "nchw", perm=[0, 3, 1, 2])
    if pre.color != "bgr":  # FRAME is BGR; the model wants RGB
        x = node("Gather", [x, const("rgb_order", np.array([2, 1, 0], np.int64))], "rgb", axis=1)
    if (box_h, box_w) != (resized_h, pre.width):
        shape = node("Shape", [x], "shape")
        lead = node("Slice", [shape, const("zero", np.array([0], np.int64)), const("two", np.array([2], np.int64))],
                    "lead")
        sizes = node("Concat", [lead, const("hw", np.array([resized_h, pre.width], np.int64))], "sizes", axis=0)
        x = node("Resize", [x, "", "", sizes], "resized", **RESIZE_ATTRIBUTES[pre.interpolation])
        if resized_h != pre.height:  # the bottom rows
            x = node("Slice", [x, const("kept_starts", np.array([resized_h - pre.height], np.int64)),
                               const("kept_ends", np.array([resized_h], np.int64)),
                               const("kept_axes", np.array([2], np.int64))], "kept")
        if round_uint8:  # OpenCV's uint8 output, see the module docstring
            x = node("Round", [x], "rounded")
            x = node("Clip", [x, const("lo", np.array(0.0, np.float32)), const("hi", np.array(255.0, np.float32))],
                     "clipped")
    # (v * scale - mean) / std as one multiply-add per channel.
    mul = np.array([pre.scale / s for s in pre.std], np.float32).reshape(1, 3, 1, 1)
    add = np.array([-m / s for m, s in zip(pre.mean, pre.std)], np.float32).reshape(1, 3, 1, 1)
    x = node("Mul", [x, const("mul", mul)], "scaled")
    if np.any(add != 0):
        x = node("Add", [x, const("add", add)], "normalized")
    if out_dtype == "FP16":
        x = node("Cast", [x], "half", to=TensorProto.FLOAT16)
    nodes.append(helper.make_node("Identity", [x], [out_name], name=PREFIX + "out"))
    elem = TensorProto.FLOAT16 if out_dtype == "FP16" else TensorProto.FLOAT
    graph = helper.make_graph(
        nodes, "edge_deploy_preprocess",
        [helper.make_tensor_value_info(FRAME_INPUT, TensorProto.UINT8, [batch_dim, frame_h, frame_w, 3])],
        [helper.make_tensor_value_info(out_name, elem, [batch_dim, 3, pre.height, pre.width])],
        initializer=inits,
    )
    model = onnx_target.make_model(graph, opset)
    onnx.checker.check_model(model)
    return model


def fuse(model: Any, spec: PreprocessSpec, frame_size: tuple[int, int]) -> Any:
    """`model` (one image input [B, 3, h, w]) with the preprocessing in front: its input becomes FRAME."""
    onnx = require("onnx", "fusing the preprocessing into the model")
    from onnx import TensorProto, compose

    inputs = [i for i in model.graph.input if i.name not in {t.name for t in model.graph.initializer}]
    if len(inputs) != 1:
        raise ConvertError(f"--fuse-preprocess needs a model with one image input; this one has {len(inputs)}.")
    image = inputs[0]
    ttype = image.type.tensor_type
    dtypes = {TensorProto.FLOAT: "FP32", TensorProto.FLOAT16: "FP16"}
    if ttype.elem_type not in dtypes or len(ttype.shape.dim) != 4:
        raise ConvertError(
            f"--fuse-preprocess needs a float [batch, 3, H, W] model input; {image.name!r} is not one."
        )
    lead = ttype.shape.dim[0]
    batch_dim = lead.dim_param if lead.HasField("dim_param") else int(lead.dim_value)
    onnx_target.conform(model)
    opset = onnx_target.default_opset(model) or onnx_target.DEFAULT_OPSET
    pre = preprocess_graph(spec, frame_size, batch_dim, image.name, dtypes[ttype.elem_type], opset)
    pre.ir_version = model.ir_version  # merge_models wants both at one IR version
    # The preprocessing graph's output is named like the model input: merge joins the two by that name.
    try:
        fused = compose.merge_models(pre, model, io_map=[(image.name, image.name)], prefix1="", prefix2="")
        # merge_models concatenates both models' opset_import lists: conform lists each domain once.
        onnx_target.conform(fused, what="the fused model")
        onnx.checker.check_model(fused)
    except Exception as exc:  # noqa: BLE001 - onnx raises plain exceptions
        raise ConvertError(f"cannot fuse the preprocessing into the model: {one_line(exc, 200)}") from exc
    return fused


def fused_io(io: IOSignature, frame_size: tuple[int, int]) -> IOSignature:
    """The I/O of a fused model: the FRAME input instead of the image input, outputs unchanged."""
    lead = io.inputs[0].shape[0]
    return replace(io, inputs=(TensorSpec(FRAME_INPUT, "UINT8", (lead, *frame_size, 3)),))


def fuse_file(path: Path, spec: PreprocessSpec, frame_size: tuple[int, int]) -> None:
    """Rewrite the ONNX file at `path` with the preprocessing fused in."""
    onnx = require("onnx", "fusing the preprocessing into the model")
    fused = fuse(onnx.load(str(path)), spec, frame_size)
    with atomic_path(path) as tmp:
        onnx_target.save(fused, tmp, what=f"the fused {path.name}")


# --------------------------------------------------------------------------- parity and the artifact stage


def parity_frames(frame_size: tuple[int, int], seed: int, count: int = 3) -> list[np.ndarray]:
    """Synthetic road scenes at the camera's size (lanes to compare), seeded."""
    height, width = frame_size
    return [road_scene(width, height, seed=seed + i)[0] for i in range(count)]


def pixel_parity(spec: PreprocessSpec, frame_size: tuple[int, int], frames: list[np.ndarray],
                 seed: int) -> PixelParity:
    """The fused preprocessing (ONNX Runtime) vs the client's (lanedet/preprocess.py), per pixel.

    The frames plus one of uniform noise (the worst case for a cubic kernel's overshoot).
    Differences are in model-input units (1/255 = one uint8 level with LaneATT's scale).
    """
    noise = np.random.default_rng(seed).integers(0, 256, (*frame_size, 3), dtype=np.uint8)
    pre = spec
    client = Preprocessor(pre)
    # One uint8 level in model-input units, per channel: scale / std.
    level = np.array([abs(pre.scale / s) for s in pre.std], np.float64).reshape(1, 3, 1, 1)
    diffs: dict[bool, PixelDiff] = {}
    for rounded in (True, False):
        session = ort_session(preprocess_graph(spec, frame_size, 1, "image", "FP32", round_uint8=rounded))
        worst, levels, differing, total = 0.0, 0.0, 0, 0
        for frame in [*frames, noise]:
            want = client(frame)
            got = session.run(None, {FRAME_INPUT: frame[None]})[0]
            diff = np.abs(got.astype(np.float64) - want)
            worst = max(worst, float(diff.max()))
            levels = max(levels, float((diff / level).max()))
            differing += int(np.count_nonzero(diff > 1e-6))
            total += diff.size
        diffs[rounded] = PixelDiff(max_abs=worst, max_levels=levels, fraction_differing=differing / total)
    return PixelParity(frames=len(frames) + 1, rounded=diffs[True], unrounded=diffs[False],
                       max_abs=diffs[True].max_abs, max_levels=diffs[True].max_levels)


def lane_parity(raw_path: Path, fused_path: Path, manifest: Manifest, frames: list[np.ndarray],
                max_dx_px: float = MAX_LANE_DX_PX) -> Comparison:
    """Lanes of the fused model on frames vs the unfused model on the client's preprocessing of them."""
    raw, fused = ort_session(raw_path), ort_session(fused_path)
    image = raw.get_inputs()[0]
    dtype = np.float16 if image.type == "tensor(float16)" else np.float32
    client = Preprocessor(manifest.preprocess, dtype=dtype)
    names = [o.name for o in raw.get_outputs()]
    reference, actual = [], []
    for frame in frames:
        reference.append(dict(zip(names, raw.run(None, {image.name: client(frame)}))))
        actual.append(dict(zip(names, fused.run(None, {FRAME_INPUT: frame[None]}))))
    report = compare_to_reference(reference, actual, LaneCheck.of(manifest), max_dx_px=max_dx_px,
                                  subject="the fused model")
    lanes = report.lanes
    if lanes is not None:  # the two sides named for what they are here; the width is the check's own
        lanes = replace(lanes, lanes_client=lanes.lanes_onnxruntime, lanes_fused=lanes.lanes_plan,
                        lanes_onnxruntime=None, lanes_plan=None, dx_width_px=None)
    return replace(report, worst_output=None, lanes=lanes)


def fuse_artifact(workdir: Path, manifest: Manifest, frame_size: tuple[int, int], seed: int = 0,
                  reporter: Any = None) -> FusedPreprocessRecord:
    """Fuse the preprocessing into model.onnx (and model_fp16.onnx), check parity, record it in `manifest`.

    Runs after export's own checks (which compare the unfused graph with torch). The
    files are replaced in `workdir`; io, files and fp16.onnx.io of the manifest follow.
    ConvertError when the fused model does not give the client-side lanes.
    """
    reporter = reporter or Reporter()
    workdir = Path(workdir)
    spec = manifest.preprocess
    frames = parity_frames(frame_size, seed)
    pixels = pixel_parity(spec, frame_size, frames, seed)
    if (pixels.max_levels or 0.0) > MAX_PIXEL_LEVELS and spec.interpolation not in SUBSTITUTED:
        raise ConvertError(
            f"the fused preprocessing differs from the client's by {pixels.max_levels:.2f} uint8 levels at most "
            f"(limit {MAX_PIXEL_LEVELS:g}); convert without --fuse-preprocess."
        )
    lanes = {name: _fuse_file_checked(workdir, name, manifest, frame_size, frames, reporter)
             for name in (ONNX_NAME, FP16_ONNX_NAME) if (workdir / name).is_file()}
    manifest.io = fused_io(manifest.io, frame_size)
    record = manifest.fp16_onnx
    if record is not None and record.io is not None and manifest.fp16 is not None:
        manifest.fp16 = replace(manifest.fp16, onnx=replace(record, io=fused_io(record.io, frame_size)))
    resizer = ("Pillow's antialiased bilinear (AntialiasedBilinear)" if spec.interpolation == "antialiased_bilinear"
               else f"cv2.resize {spec.interpolation}")
    section = FusedPreprocessRecord(
        input=FRAME_INPUT,
        frame=FrameRecord(height=frame_size[0], width=frame_size[1], datatype="UINT8", layout="NHWC", color="bgr"),
        graph=(f"Cast -> [crop Slice] -> Transpose NCHW -> {resize_description(spec)} -> Round -> Clip(0, 255) "
               "-> Mul/Add (scale, mean, std) -> model input dtype"),
        substituted=(Substitution(interpolation=spec.interpolation, by=SUBSTITUTED[spec.interpolation])
                     if spec.interpolation in SUBSTITUTED else None),
        parity=FusedParity(
            reference=f"lanedet/preprocess.py ({resizer} on uint8, per-byte table) vs the "
                      "fused graph in ONNX Runtime (CPU)",
            seed=seed,
            pixels=pixels,
            lanes=lanes,
            max_mean_dx_px={ONNX_NAME: MAX_LANE_DX_PX, FP16_ONNX_NAME: MAX_LANE_DX_PX_FP16},
        ),
    )
    manifest.fused_preprocess = section
    first = next(iter(lanes.values())).lanes if lanes else None
    rounded, unrounded = pixels.rounded or PixelDiff(), pixels.unrounded or PixelDiff()
    reporter.info(
        f"fused preprocessing: FRAME uint8 {frame_size[1]}x{frame_size[0]}; vs client-side max "
        f"{pixels.max_levels or 0.0:.2f} level(s) per pixel ({rounded.fraction_differing or 0.0:.2%} of values "
        f"differ; {unrounded.max_levels or 0.0:.1f} without uint8 rounding)"
        + (f"; lanes {first.lanes_fused} (client-side {first.lanes_client}), mean |dx| "
           f"{first.mean_dx_px or 0.0:.3f} px" if first else "")
    )
    return section


def _fuse_file_checked(workdir: Path, name: str, manifest: Manifest, frame_size: tuple[int, int],
                       frames: list[np.ndarray], reporter: Any) -> Comparison:
    """Fuse the preprocessing into workdir/name, compare its lanes with the unfused file's and record the file."""
    spec = manifest.preprocess
    path = workdir / name
    original = path.with_name(f".{name}.unfused")
    path.replace(original)
    try:
        shutil.copyfile(original, path)
        fuse_file(path, spec, frame_size)
        limit = MAX_LANE_DX_PX_FP16 if name == FP16_ONNX_NAME else MAX_LANE_DX_PX
        lanes = lane_parity(original, path, manifest, frames, limit)
    finally:
        original.unlink(missing_ok=True)
    problems = lanes.problems or ()
    if not lanes.passed and spec.interpolation in SUBSTITUTED:
        # Another resampler than the client's: lanes that move are the substitution's measured cost, recorded
        # (parity.lanes) and said, not refused; the exact resamplers are held to the limit below.
        reporter.warn(
            f"{name}: with the {SUBSTITUTED[spec.interpolation]} the lanes differ from client-side "
            f"preprocessing ({'; '.join(problems[:2])}); check the fused model with "
            "`edge-deploy evaluate` on your frames before serving it.")
    elif not lanes.passed:
        raise ConvertError(
            f"the fused preprocessing does not reproduce the client's in {name}: "
            f"{'; '.join(problems[:3])}; {lanes_moved_reason(lanes, 'the fused graph')}; "
            "convert without --fuse-preprocess."
        )
    manifest.files[name] = file_entry(path)
    return lanes
