"""The ONNX that convert writes: the IR version and opsets every consumer on the device accepts.

One place for the policy: every writer of an artifact's ONNX file (export, simplification,
the FP16 file, the fused preprocessing; any lane family) passes its model through
`conform()` or `save()`, and `problems()` is what the tests check each file with.

The consumers and their limits (sources in docs/convert.md, "The ONNX files' IR version and opset"):

| consumer | built with | IR accepted | ai.onnx opsets |
|---|---|---|---|
| TensorRT 8.5 (JetPack 5), onnx-tensorrt 8.5-GA | onnx 1.12 (its third_party/onnx submodule) | 8 | up to 17 (docs/operators.md) |
| TensorRT 10.3 (JetPack 6), onnx-tensorrt 10.x | onnx 1.16 (submodule; 1.17 from 10.6) | 10 | 9 to 20 (docs/operators.md) |
| onnxruntime 1.16 (the oldest Jetson wheel) | onnx 1.14.1 | 9 (refuses more) | up to 19 (refuses more) |

onnx 1.12 defines IR 8 (onnx docs/Versioning.md), so IR 8 is the newest all three read:
onnx-tensorrt does not check the IR version but parses the protobuf with the onnx it was built
with, and onnxruntime refuses a model whose IR version is above its onnx's ("Unsupported model
IR version: 10, max supported IR version: 9" from onnxruntime 1.16.3). Opsets 9..17 are what
TensorRT 10.x and 8.5 both parse; the default domain is the only one they import natively.

Sources (read for this table):
- https://github.com/onnx/onnx-tensorrt/blob/release/8.5-GA/docs/operators.md
  "TensorRT 8.5 supports operators up to Opset 17."; that branch's third_party/onnx submodule is
  onnx commit f7ee1ac, tag v1.12.0 (its .gitmodules still says `branch = rel-1.6.0`).
- https://github.com/onnx/onnx-tensorrt/blob/release/10.1-GA/docs/operators.md
  "TensorRT 10.0 supports operators in the inclusive range of opset 9 to opset 20."; submodule onnx
  990217f, tag v1.16.0 (.gitmodules `branch = v1.16.0`). release/10.3-GA
  (https://github.com/onnx/onnx-tensorrt/blob/release/10.3-GA/docs/operators.md), JetPack 6's line,
  could not be read when this was written (not in the stored mirror, GitHub unreachable): 10.1-GA is
  the newest branch checked.
- https://github.com/microsoft/onnxruntime/blob/v1.16.3/onnxruntime/core/graph/model.cc
  `ORT_THROW("Unsupported model IR version: ", ..., ", max supported IR version: ",
  ONNX_NAMESPACE::Version::IR_VERSION)`; the 1.16.3 wheel itself reports model.cc:179 "Unsupported
  model IR version: 10, max supported IR version: 9" (tests/export/test_onnx_target.py runs it).
- https://github.com/onnx/onnx/blob/main/docs/Versioning.md rows "1.12.0|8|17|3|1",
  "1.14.1|9|19|3|1", "1.16.0|10|21|5|1" (onnx version|IR version|opset ai.onnx|...).
"""
from __future__ import annotations

from typing import Any

from ..core.deps import require
from ..errors import ConvertError

IR_VERSION = 8  # onnx 1.12's: TensorRT 8.5's parser (onnx 1.12), TensorRT 10.3 (1.16), onnxruntime 1.16 (1.14.1)
MIN_OPSET = 9  # TensorRT 10.x parses ai.onnx opsets 9 to 20
MAX_OPSET = 17  # TensorRT 8.5 parses ai.onnx up to opset 17 (onnxruntime 1.16: 19, TensorRT 10.3: 20)
DEFAULT_OPSET = 17
DEFAULT_DOMAINS = ("", "ai.onnx")  # the ONNX spec's two names of the default operator set
# TensorProto element types IR 8 defines: 1..16 (FLOAT .. BFLOAT16); the FLOAT8 types are IR 9, the 4-bit ones IR 10.
# Source: onnx/onnx.proto, TensorProto.DataType and the Version enum. At v1.12.0 (IR_VERSION = 8)
# DataType ends with "BFLOAT16 = 16;" then "// Future extensions go here."
# (https://github.com/onnx/onnx/blob/v1.12.0/onnx/onnx.proto); v1.15.0's "IR VERSION 9 ... Added FLOAT8E4M3FN,
# FLOAT8E4M3FNUZ, FLOAT8E5M2, FLOAT8E5M2FNUZ." (17..20) and v1.16.0's "IR VERSION 10 ... Added UINT4, INT4." (21, 22).
_MAX_IR8_ELEM_TYPE = 16
CONSUMERS = "TensorRT 8.5 (JetPack 5), TensorRT 10.3 (JetPack 6) and onnxruntime 1.16"


def opset_problem(opset: int) -> str | None:
    """Why `opset` is outside what the consumers parse, or None."""
    if MIN_OPSET <= opset <= MAX_OPSET:
        return None
    return (f"opset {opset} is outside {MIN_OPSET} to {MAX_OPSET}, the opsets {CONSUMERS} all parse "
            f"(TensorRT 8.5 stops at {MAX_OPSET}, TensorRT 10 starts at {MIN_OPSET})")


def default_opset(model: Any) -> int | None:
    """The model's ai.onnx opset, or None when it imports none."""
    return next((o.version for o in model.opset_import if o.domain in DEFAULT_DOMAINS), None)


def problems(model: Any) -> list[str]:
    """What in `model` (a ModelProto) a consumer above would refuse or misread; empty when nothing."""
    found: list[str] = []
    if model.ir_version > IR_VERSION:
        found.append(f"IR version {model.ir_version} is above {IR_VERSION}")
    domains = [o.domain or "ai.onnx" for o in model.opset_import]
    for domain in sorted({d for d in domains if domains.count(d) > 1}):
        found.append(f"opset_import lists the {domain} domain {domains.count(domain)} times")
    others = sorted({d for d in domains if d != "ai.onnx"})
    if others:
        found.append(f"operator domains other than ai.onnx: {', '.join(others)}")
    opset = default_opset(model)
    if opset is None:
        found.append("no ai.onnx opset is imported")
    elif (why := opset_problem(opset)) is not None:
        found.append(why)
    newer = sorted({t for t in _elem_types(model) if t > _MAX_IR8_ELEM_TYPE})
    if newer:
        found.append(f"tensor element types {newer} are newer than IR {IR_VERSION}")
    return found


def conform(model: Any, *, what: str = "the ONNX model") -> Any:
    """`model` made what the consumers read, in place: IR version at most IR_VERSION, each opset imported once.

    An IR version is only lowered (the graph uses nothing newer: checked), never raised. ConvertError
    (one line) when something cannot be fixed here: an opset or operator domain outside the target.
    """
    if model.ir_version > IR_VERSION:
        model.ir_version = IR_VERSION
    seen: dict[str, int] = {}
    unique = []
    for entry in model.opset_import:
        domain = "" if entry.domain in DEFAULT_DOMAINS else entry.domain
        if domain in seen:
            if seen[domain] != entry.version:
                raise ConvertError(f"{what} imports the {domain or 'ai.onnx'} domain at opsets {seen[domain]} and "
                                   f"{entry.version}; a model has one opset per domain.")
            continue
        seen[domain] = entry.version
        unique.append((entry.domain, entry.version))
    if len(unique) != len(model.opset_import):
        onnx = require("onnx", "writing the ONNX model")
        del model.opset_import[:]
        model.opset_import.extend(onnx.helper.make_opsetid(domain, version) for domain, version in unique)
    left = problems(model)
    if left:
        raise ConvertError(f"{what} cannot be written for {CONSUMERS}: {'; '.join(left)}; "
                           f"export with the default --opset {DEFAULT_OPSET} and standard ONNX operators.")
    return model


def make_model(graph: Any, opset: int = DEFAULT_OPSET) -> Any:
    """A ModelProto of `graph` at the target's IR version and `opset` (what onnx.helper.make_model would
    stamp with the installed onnx's newest IR version, which older consumers refuse)."""
    onnx = require("onnx", "writing the ONNX model")
    return conform(onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", opset)],
                                          ir_version=IR_VERSION))


def save(model: Any, path: Any, *, what: str = "the ONNX model") -> None:
    """conform() and onnx.save (the only way an artifact's ONNX file is written). An OSError (a full disk)
    goes to the caller, whose staging directory turns it into its one-line message."""
    onnx = require("onnx", "writing the ONNX model")
    conform(model, what=what)
    onnx.save(model, str(path))


def conform_file(path: Any, *, what: str | None = None) -> None:
    """Rewrite the ONNX file at `path` when it is not what the consumers read (a file another tool wrote)."""
    onnx = require("onnx", "writing the ONNX model")
    model = onnx.load(str(path))
    if problems(model):  # else the file is left as it is
        save(model, path, what=what or str(path))


def _elem_types(model: Any) -> set[int]:
    """Element types of the graph's declared tensors, initializers and Cast targets (subgraphs included)."""
    types: set[int] = set()

    def walk(graph: Any) -> None:
        for value in [*graph.input, *graph.output, *graph.value_info]:
            if value.type.HasField("tensor_type"):
                types.add(value.type.tensor_type.elem_type)
        types.update(init.data_type for init in graph.initializer)
        for node in graph.node:
            for attribute in node.attribute:
                if node.op_type == "Cast" and attribute.name == "to":
                    types.add(attribute.i)
                if attribute.HasField("g"):
                    walk(attribute.g)
                for sub in attribute.graphs:
                    walk(sub)

    walk(model.graph)
    return types
