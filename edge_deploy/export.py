"""torch -> ONNX: export, check, simplify, verify parity, assemble the manifest.

`export_artifact()` runs these stages into a working directory; the convert
flow around it (staging directory, TensorRT hand-off) is edge_deploy.convert.
torch, onnx and onnxruntime are imported inside the functions that use them.
"""
from __future__ import annotations

import contextlib
import inspect
import os
import sys
import tempfile
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

from . import __version__
from ._deps import require
from .errors import ConvertError
from .manifest import (
    FORMAT,
    LANEATT_DECODE,
    LANEATT_PREPROCESS,
    file_entry,
)
from .model_source import ONNX_NAME, SourceSpec, load_source, one_line
from .progress import Reporter

DEFAULT_ATOL = 1e-3
DEFAULT_RTOL = 1e-3
UNTRAINED_NOTICE = (
    "no --checkpoint: LaneATT gets seeded random weights; this is fine for testing the pipeline, "
    "but lanes from untrained weights mean nothing."
)

# ONNX TensorProto element type -> Triton datatype name.
_TRITON_DTYPES = {
    1: "FP32", 2: "UINT8", 3: "INT8", 4: "UINT16", 5: "INT16", 6: "INT32", 7: "INT64",
    9: "BOOL", 10: "FP16", 11: "FP64", 12: "UINT32", 13: "UINT64", 16: "BF16",
}


# --------------------------------------------------------------------------- options


@dataclass(frozen=True)
class BatchRange:
    """The batch sizes the model must serve; `dynamic=False` means a fixed batch dimension."""

    min: int
    opt: int
    max: int
    dynamic: bool

    def ends(self) -> list[int]:
        """Batch sizes parity is checked at: both ends of the range."""
        return sorted({self.min, self.max})

    def as_manifest(self) -> dict[str, Any]:
        return {"min": self.min, "opt": self.opt, "max": self.max, "dynamic": self.dynamic}


def batch_range(
    batch: int | None = None,
    min_batch: int | None = None,
    opt_batch: int | None = None,
    max_batch: int | None = None,
) -> BatchRange:
    """Resolve --batch / --min-batch / --opt-batch / --max-batch (default: dynamic 1..4, opt 1)."""
    if batch is not None:
        if any(v is not None for v in (min_batch, opt_batch, max_batch)):
            raise ConvertError(
                "--batch fixes the batch size and cannot be combined with --min-batch/--opt-batch/--max-batch; "
                "use one or the other."
            )
        if batch < 1:
            raise ConvertError(f"--batch must be at least 1 (got {batch}).")
        return BatchRange(batch, batch, batch, dynamic=False)
    lo = 1 if min_batch is None else min_batch
    hi = max(4, lo) if max_batch is None else max_batch
    opt = lo if opt_batch is None else opt_batch
    if lo < 1 or not lo <= opt <= hi:
        raise ConvertError(
            f"the batch range needs 1 <= min <= opt <= max (got min {lo}, opt {opt}, max {hi}); "
            "fix --min-batch/--opt-batch/--max-batch."
        )
    return BatchRange(lo, opt, hi, dynamic=True)


@dataclass
class ExportSettings:
    """How to export and verify."""

    opset: int = 17
    batch: BatchRange = field(default_factory=batch_range)
    input_name: str = "input"
    output_names: tuple[str, ...] = ("predict_lanes",)
    atol: float = DEFAULT_ATOL
    rtol: float = DEFAULT_RTOL
    simplify: bool = True
    seed: int = 0


# --------------------------------------------------------------------------- export and checks


@contextlib.contextmanager
def _captured_fds() -> Iterator[None]:
    """Redirect fd 1 and 2 (C++ prints included) into a temporary file for the duration.

    The TorchScript exporter prints the whole IR graph to stdout when an op
    fails, and several libraries print warnings from C++; none of that is for
    the user. With EDGE_DEPLOY_DEBUG=1 the captured text is written to stderr afterwards.
    """
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    with tempfile.TemporaryFile(mode="w+b") as sink:
        os.dup2(sink.fileno(), 1)
        os.dup2(sink.fileno(), 2)
        try:
            yield
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(saved[0])
            os.close(saved[1])
            if os.environ.get("EDGE_DEPLOY_DEBUG") == "1":
                sink.seek(0)
                sys.stderr.write(sink.read().decode(errors="replace"))


def export_kwargs(settings: ExportSettings, output_names: Sequence[str]) -> dict[str, Any]:
    """The torch.onnx.export keyword arguments `convert` uses (the benchmark reuses them)."""
    torch = require("torch", "exporting to ONNX")
    kwargs: dict[str, Any] = {
        "opset_version": settings.opset,
        "input_names": [settings.input_name],
        "output_names": list(output_names),
        "do_constant_folding": True,
    }
    if settings.batch.dynamic:
        kwargs["dynamic_axes"] = {name: {0: "batch"} for name in [settings.input_name, *output_names]}
    # The TorchScript-based exporter: its graphs are what TensorRT's ONNX parser is
    # known to take, it needs no onnxscript, and it runs with the torch of JetPack.
    # torch >= 2.5 has the `dynamo` switch (default True since 2.9); older ones only this path.
    if "dynamo" in inspect.signature(torch.onnx.export).parameters:
        kwargs["dynamo"] = False
    return kwargs


def trace_batch(batch: BatchRange) -> int:
    """Batch size of the example input for tracing: 2 when dynamic, so no size-1 shortcut gets baked in."""
    if not batch.dynamic:
        return batch.min
    return min(batch.max, max(2, batch.opt))


def export_onnx(module: Any, example: Any, path: Path, settings: ExportSettings,
                output_names: Sequence[str]) -> None:
    """torch.onnx.export to `path`, turning exporter failures into one-line ConvertErrors."""
    torch = require("torch", "exporting to ONNX")
    kwargs = export_kwargs(settings, output_names)
    with warnings.catch_warnings(), _captured_fds():
        # Deprecation notices about the legacy exporter and tracer warnings are
        # noise here: parity at both ends of the batch range catches what matters.
        warnings.simplefilter("ignore")
        try:
            with torch.no_grad():
                torch.onnx.export(module, (example,), str(path), **kwargs)
        except Exception as exc:
            message = one_line(exc, 300)
            if "is not supported" in message or "UnsupportedOperator" in type(exc).__name__:
                hint = "replace the op in the model, register a custom symbolic, or try another --opset"
            else:
                hint = "see EDGE_DEPLOY_DEBUG=1 for the exporter's output"
            raise ConvertError(f"torch.onnx.export failed: {message}; {hint}.") from exc
    if not path.is_file():
        raise ConvertError("torch.onnx.export wrote no file; re-run with EDGE_DEPLOY_DEBUG=1.")


def check_onnx(path: Path) -> None:
    """onnx.checker on the file; full_check adds strict shape inference (types and shapes must agree)."""
    onnx = require("onnx", "checking the ONNX model")
    try:
        onnx.checker.check_model(str(path), full_check=True)
    except Exception as exc:
        raise ConvertError(f"the exported ONNX model does not pass onnx.checker: {one_line(exc, 300)}.") from exc


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


def compare_outputs(
    names: Sequence[str], reference: Sequence[Sequence[Any]], actual: Sequence[Sequence[Any]],
    atol: float, rtol: float,
) -> dict[str, dict[str, Any]]:
    """Max abs / rel error per output over all batches, and whether it is within tolerance.

    Within tolerance means |actual - reference| <= atol + rtol * |reference| for
    every element (numpy.allclose). max_rel is taken only over elements with
    |reference| > atol, where a relative error means something.
    """
    import numpy as np

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


def _model_inputs(sample_shape: tuple[int, ...], batches: Sequence[int], seed: int) -> list[Any]:
    """Seeded uniform [0, 1) inputs (an image scaled by 1/255), one array per batch size."""
    torch = require("torch", "checking parity")
    generator = torch.Generator().manual_seed(seed)
    return [torch.rand((b, *sample_shape), generator=generator).numpy() for b in batches]


def _torch_outputs(module: Any, array: Any) -> list[Any]:
    torch = require("torch", "checking parity")
    try:
        with torch.no_grad():
            out = module(torch.from_numpy(array))
    except Exception as exc:
        raise ConvertError(
            f"the model fails on an input of shape {list(array.shape)}: {one_line(exc)}; check --input-shape "
            "(and that the batch range suits the model)."
        ) from exc
    if isinstance(out, torch.Tensor):
        out = (out,)
    if not isinstance(out, (tuple, list)) or not all(isinstance(t, torch.Tensor) for t in out):
        raise ConvertError(
            f"the model returns {type(out).__name__}; convert needs a tensor or a tuple of tensors."
        )
    return [t.detach().cpu().numpy() for t in out]


def simplify_onnx(path: Path, input_name: str, inputs: Sequence[Any], baseline: Sequence[Sequence[Any]],
                  names: Sequence[str], atol: float, rtol: float) -> tuple[dict[str, Any], list[list[Any]]]:
    """Simplify the model at `path` in place when that keeps its results; report what happened.

    Returns the report and the ORT outputs of the model that was kept.
    """
    # onnxslim rather than onnxsim: onnxslim is a pure-Python wheel that installs
    # anywhere onnx does (a Jetson included) and is actively maintained; onnxsim is
    # a C++ extension whose wheels lag new Pythons and aarch64, and building it on
    # the device needs cmake and a long compile. Both fold constants and remove
    # redundant shape ops, which is what TensorRT's parser benefits from.
    onnx = require("onnx", "simplifying the ONNX model")
    onnxslim = require("onnxslim", "simplifying the ONNX model")
    original = onnx.load(str(path))
    report: dict[str, Any] = {"tool": f"onnxslim {getattr(onnxslim, '__version__', '?')}",
                              "nodes_before": len(original.graph.node)}
    try:
        with warnings.catch_warnings(), _captured_fds():
            warnings.simplefilter("ignore")
            slim = onnxslim.slim(original)
        if slim is None:
            raise RuntimeError("onnxslim returned no model")
        onnx.checker.check_model(slim)
        outputs = run_ort(ort_session(slim), input_name, inputs)
    except Exception as exc:  # any failure of the optional step keeps the exported graph
        report.update(applied=False, reason=f"simplification failed: {one_line(exc)}")
        return report, [list(o) for o in baseline]
    same = compare_outputs(names, baseline, outputs, atol, rtol)
    if not all(entry["ok"] for entry in same.values()):
        worst = max(same, key=lambda n: same[n]["max_abs"])
        report.update(applied=False, reason=f"simplified graph changed {worst!r} by {same[worst]['max_abs']:.3g}")
        return report, [list(o) for o in baseline]
    tmp = path.with_suffix(".slim.onnx")
    onnx.save(slim, str(tmp))
    os.replace(tmp, path)
    report.update(applied=True, nodes_after=len(slim.graph.node),
                  max_abs_change={n: e["max_abs"] for n, e in same.items()})
    return report, outputs


def io_signature(model: Any, batch: BatchRange) -> dict[str, Any]:
    """The manifest's io section from an (inferred) ONNX graph."""
    initializers = {init.name for init in model.graph.initializer}

    def describe(value: Any) -> dict[str, Any]:
        tensor = value.type.tensor_type
        dims = [d.dim_value if d.HasField("dim_value") else -1 for d in tensor.shape.dim]
        return {"name": value.name, "datatype": _TRITON_DTYPES.get(tensor.elem_type, str(tensor.elem_type)),
                "shape": dims}

    return {
        "inputs": [describe(v) for v in model.graph.input if v.name not in initializers],
        "outputs": [describe(v) for v in model.graph.output],
        "batch": batch.as_manifest(),
    }


# --------------------------------------------------------------------------- the export stages


def export_artifact(source: SourceSpec, settings: ExportSettings, workdir: Path, reporter: Reporter) -> dict[str, Any]:
    """Load MODEL, write `workdir`/model.onnx (checked, simplified, parity-verified) and return its manifest.

    The manifest's "plan" is None and model.plan is not listed; the caller
    writes manifest.json (see edge_deploy.convert).
    """
    with reporter.stage("load model"):
        loaded = load_source(source)
        if not loaded.source["trained"]:
            reporter.warn(UNTRAINED_NOTICE)

    with reporter.stage("torch reference"):
        inputs = _model_inputs(loaded.sample_shape, settings.batch.ends(), settings.seed)
        example_np = _model_inputs(loaded.sample_shape, [trace_batch(settings.batch)], settings.seed + 1)[0]
        reference = [_torch_outputs(loaded.module, array) for array in inputs]
        names = _output_names(settings.output_names, len(reference[0]))

    onnx_path = workdir / ONNX_NAME
    with reporter.stage("export ONNX"):
        torch = require("torch", "exporting to ONNX")
        export_onnx(loaded.module, torch.from_numpy(example_np), onnx_path, settings, names)

    with reporter.stage("check ONNX"):
        check_onnx(onnx_path)
        ort_outputs = run_ort(ort_session(onnx_path), settings.input_name, inputs)

    simplify_report: dict[str, Any] = {"applied": False, "reason": "disabled (--no-simplify)"}
    if settings.simplify:
        with reporter.stage("simplify"):
            simplify_report, ort_outputs = simplify_onnx(onnx_path, settings.input_name, inputs, ort_outputs,
                                                         names, settings.atol, settings.rtol)
            if not simplify_report["applied"]:
                reporter.warn(f"kept the unsimplified graph: {simplify_report['reason']}")

    with reporter.stage("parity"):
        parity = compare_outputs(names, reference, ort_outputs, settings.atol, settings.rtol)
        for name, entry in parity.items():
            if not entry["ok"]:
                raise ConvertError(
                    f"parity check failed: output {name!r} differs between torch and ONNX Runtime by "
                    f"{entry['max_abs']:.3g} (max abs; rel {entry['max_rel']:.3g}) beyond atol {settings.atol:g} / "
                    f"rtol {settings.rtol:g}; the export does not reproduce the model."
                )

    with reporter.stage("FP16 report"):
        from .fp16_report import fp16_report

        onnx = require("onnx", "the FP16 report")
        final_model = onnx.shape_inference.infer_shapes(onnx.load(str(onnx_path)))
        fp16 = fp16_report(final_model, settings.input_name, inputs, settings.batch.dynamic)

    preprocess = dict(LANEATT_PREPROCESS)
    if len(loaded.sample_shape) == 3:
        preprocess["height"], preprocess["width"] = int(loaded.sample_shape[1]), int(loaded.sample_shape[2])
    return {
        "format": FORMAT,
        "tool": {"name": "edge-deploy", "version": __version__},
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "source": loaded.source,
        "files": {ONNX_NAME: file_entry(onnx_path)},
        "io": io_signature(final_model, settings.batch),
        "export": {
            "exporter": f"torch {torch.__version__} (TorchScript-based torch.onnx.export)",
            "onnx": onnx.__version__,
            "opset": settings.opset,
            "trace_batch": int(example_np.shape[0]),
            "simplify": simplify_report,
        },
        "preprocess": preprocess,
        "decode": dict(LANEATT_DECODE),
        "parity": {
            "reference": "torch (CPU, FP32) vs ONNX Runtime (CPUExecutionProvider, FP32)",
            "tolerance": {"atol": settings.atol, "rtol": settings.rtol},
            "batches": settings.batch.ends(),
            "seed": settings.seed,
            "outputs": {n: {"max_abs": e["max_abs"], "max_rel": e["max_rel"]} for n, e in parity.items()},
        },
        "fp16": fp16,
        "plan": None,
    }


def _output_names(requested: Sequence[str], count: int) -> list[str]:
    if len(requested) == count:
        return list(requested)
    raise ConvertError(
        f"the model returns {count} output(s) but --output-name gives {len(requested)} "
        f"({', '.join(requested)}); pass one name per output, comma-separated."
    )


def build_bare_export(module: Any, example: Any, path: Path, settings: ExportSettings,
                      output_names: Sequence[str]) -> Callable[[], None]:
    """A zero-argument bare torch.onnx.export with convert's settings (for the benchmark)."""
    torch = require("torch", "exporting to ONNX")
    kwargs = export_kwargs(settings, output_names)

    def run() -> None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with torch.no_grad():
                torch.onnx.export(module, (example,), str(path), **kwargs)

    return run
