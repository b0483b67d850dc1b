"""Does the model file say what its manifest says? Checked by `install` before anything is written.

config.pbtxt is generated from the manifest's "io" section, so a manifest that does not
describe the model (edited by hand, copied from another artifact) would install, load,
report ready, and then fail every request. The ONNX graph's inputs and outputs (names,
datatypes, shapes) must be the manifest's; a plan's are read by deserializing it where
TensorRT is installed (on the device), and are otherwise left to the server's load.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from ..core.deps import require
from ..artifact.manifest import MANIFEST_NAME, ONNX_TRITON_DTYPES, IOSignature, TensorSpec
from ..errors import EdgeDeployError, RepositoryError, one_line
from ..machine import tensorrt_api
from ..machine.plan_io import check_io


def _onnx_tensors(path: Path) -> tuple[dict[str, tuple[str, list[int] | None]], dict[str, tuple[str, list[int] | None]]]:
    """(inputs, outputs) of an ONNX file: name -> (Triton datatype, dims with -1 for symbolic; None if undeclared)."""
    onnx = require("onnx", "checking model.onnx against its manifest")
    try:
        model = onnx.load(str(path), load_external_data=False)
    except Exception as exc:  # noqa: BLE001 - DecodeError and friends
        raise RepositoryError(
            f"{path} is not a readable ONNX model ({one_line(exc, 120, first_line=True)}); "
            "convert the model again."
        ) from exc
    initializers = {init.name for init in model.graph.initializer}

    def describe(value: Any) -> tuple[str, list[int] | None]:
        tensor = value.type.tensor_type
        dtype = ONNX_TRITON_DTYPES.get(tensor.elem_type, f"ONNX type {tensor.elem_type}")
        if not tensor.HasField("shape"):
            return dtype, None
        return dtype, [d.dim_value if d.HasField("dim_value") else -1 for d in tensor.shape.dim]

    inputs = {v.name: describe(v) for v in model.graph.input if v.name not in initializers}
    outputs = {v.name: describe(v) for v in model.graph.output}
    return inputs, outputs


def _compare(kind: str, found: dict[str, tuple[str, list[int] | None]], listed: tuple[TensorSpec, ...]) -> list[str]:
    problems = []
    expected = {t.name: t for t in listed}
    missing = sorted(set(expected) - set(found))
    extra = sorted(set(found) - set(expected))
    if missing or extra:
        problems.append(f"{kind}s {sorted(found)} in the model, {sorted(expected)} in the manifest")
        return problems
    for name, spec in expected.items():
        dtype, dims = found[name]
        if dtype != spec.datatype:
            problems.append(f"{kind} {name!r} is {dtype} in the model, {spec.datatype} in the manifest")
        want = list(spec.shape)
        if dims is None:
            continue
        # A symbolic model dim (-1) takes any size; a fixed one must be what the manifest says.
        if len(dims) != len(want) or any(d != -1 and d != w for d, w in zip(dims, want)):
            problems.append(f"{kind} {name!r} has shape {dims} in the model, {want} in the manifest")
    return problems


def check_onnx_signature(onnx_path: Path, io: IOSignature) -> None:
    """RepositoryError unless the ONNX graph's inputs and outputs are the manifest's `io` section."""
    inputs, outputs = _onnx_tensors(onnx_path)
    problems = _compare("input", inputs, io.inputs) + _compare("output", outputs, io.outputs)
    if problems:
        raise RepositoryError(
            f"{onnx_path.parent / MANIFEST_NAME} does not describe {onnx_path.name}: {'; '.join(problems[:3])}; "
            "the manifest was edited or belongs to another model: convert the model again."
        )


def check_plan_signature(plan_path: Path, io: IOSignature, dla_core: int | None = None) -> bool:
    """Where TensorRT is installed, RepositoryError unless the plan's I/O is the manifest's; False when not checked."""
    if tensorrt_api.module_version() is None:
        return False
    try:
        trt = tensorrt_api.load()
        engine = trt.deserialize(plan_path.read_bytes(), where=str(plan_path), dla_core=dla_core)
        check_io(trt.io_tensors(engine), io, where=str(plan_path))
    except EdgeDeployError as exc:
        raise RepositoryError(str(exc)) from exc
    return True
