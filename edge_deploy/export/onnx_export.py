"""torch.onnx.export, onnx.checker, onnxslim and the manifest's I/O signature.

torch, onnx and onnxslim are imported inside the functions that use them.
"""
from __future__ import annotations

import contextlib
import inspect
import os
import sys
import tempfile
import warnings
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence, TypedDict

from ..core.deps import require
from ..artifact.manifest import ONNX_TRITON_DTYPES, BatchRange, IOSignature, TensorSpec
from ..errors import ConvertError, one_line
from ..core.fsutil import atomic_path
from .parity import ort_session, run_ort, tolerance_report
from ..artifact.records import SimplifyReport
from . import onnx_target
from .settings import ExportSettings


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


class ExportKwargs(TypedDict, total=False):
    """The torch.onnx.export keyword arguments `convert` passes (torch's API)."""

    opset_version: int
    input_names: list[str]
    output_names: list[str]
    do_constant_folding: bool
    dynamic_axes: dict[str, dict[int, str]]  # tensor name -> {axis: its name}
    dynamo: bool


def export_kwargs(settings: ExportSettings, output_names: Sequence[str]) -> ExportKwargs:
    """The torch.onnx.export keyword arguments `convert` uses (the benchmark reuses them)."""
    torch = require("torch", "exporting to ONNX")
    kwargs = ExportKwargs(opset_version=settings.opset, input_names=[settings.input_name],
                          output_names=list(output_names), do_constant_folding=True)
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
    # The exporter stamps the IR version of the onnx it was built with (8 for opset 17 up to torch 2.13).
    onnx_target.conform_file(path, what="the exported ONNX model")


def check_onnx(path: Path) -> None:
    """onnx.checker on the file; full_check adds strict shape inference (types and shapes must agree)."""
    onnx = require("onnx", "checking the ONNX model")
    try:
        onnx.checker.check_model(str(path), full_check=True)
    except Exception as exc:
        raise ConvertError(f"the exported ONNX model does not pass onnx.checker: {one_line(exc, 300)}.") from exc


def simplify_onnx(path: Path, input_name: str, inputs: Sequence[Any], baseline: Sequence[Sequence[Any]],
                  names: Sequence[str], atol: float, rtol: float) -> tuple[SimplifyReport, list[list[Any]]]:
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
    report = SimplifyReport(tool=f"onnxslim {getattr(onnxslim, '__version__', '?')}",
                            nodes_before=len(original.graph.node))
    try:
        with warnings.catch_warnings(), _captured_fds():
            warnings.simplefilter("ignore")
            slim = onnxslim.slim(original)
        if slim is None:
            raise RuntimeError("onnxslim returned no model")
        onnx_target.conform(slim, what="the simplified model")
        onnx.checker.check_model(slim)
        outputs = run_ort(ort_session(slim), input_name, inputs)
    except Exception as exc:  # any failure of the optional step keeps the exported graph
        return replace(report, applied=False, reason=f"simplification failed: {one_line(exc)}"), \
            [list(o) for o in baseline]
    same = tolerance_report(names, baseline, outputs, atol, rtol)
    if not all(entry.ok for entry in same.values()):
        worst = max(same, key=lambda n: same[n].max_abs or 0.0)
        reason = f"simplified graph changed {worst!r} by {same[worst].max_abs or 0.0:.3g}"
        return replace(report, applied=False, reason=reason), [list(o) for o in baseline]
    with atomic_path(path) as tmp:
        onnx_target.save(slim, tmp, what="the simplified model")
    report = replace(report, applied=True, nodes_after=len(slim.graph.node),
                     max_abs_change={n: e.max_abs or 0.0 for n, e in same.items()})
    return report, outputs


def io_signature(model: Any, batch: BatchRange) -> IOSignature:
    """The I/O signature of an (inferred) ONNX graph."""
    initializers = {init.name for init in model.graph.initializer}

    def describe(value: Any) -> TensorSpec:
        tensor = value.type.tensor_type
        dims = tuple(d.dim_value if d.HasField("dim_value") else -1 for d in tensor.shape.dim)
        return TensorSpec(value.name, ONNX_TRITON_DTYPES.get(tensor.elem_type, str(tensor.elem_type)), dims)

    return IOSignature(tuple(describe(v) for v in model.graph.input if v.name not in initializers),
                       tuple(describe(v) for v in model.graph.output), batch)


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
