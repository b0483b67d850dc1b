"""CLRNet's grid_sample exports as ONNX GridSample, which TensorRT's ONNX parser imports from 8.5 on
(onnx-tensorrt docs/operators.md: "N" on branch 8.4-GA, "Y" from 8.5-GA): the plan build and doctor refuse an
older TensorRT in one line naming the op, the version and the source, by the ops of the graph (no family name)."""
from __future__ import annotations

from pathlib import Path

import pytest

from edge_deploy.deploy.doctor import FAIL, OK, onnx_op_check
from edge_deploy.machine import tensorrt_api
from edge_deploy.errors import EngineError


def test_an_older_tensorrt_is_refused_for_a_graph_with_gridsample_in_one_line() -> None:
    with pytest.raises(EngineError) as refused:
        tensorrt_api.check_ops({"Conv", "GridSample", "Relu"}, "8.4.3")
    message = str(refused.value)
    assert len(message.splitlines()) == 1
    assert "GridSample" in message and "TensorRT 8.4.3" in message and "from 8.5" in message
    assert "onnx-tensorrt" in message and "8.5-GA" in message
    for version in ("8.5.2", "8.6.1", "10.3.0", None):
        tensorrt_api.check_ops({"GridSample"}, version)
    tensorrt_api.check_ops({"Conv", "Resize"}, "8.4.3")  # no GridSample: nothing to refuse by op


def test_doctor_fails_the_convert_stage_for_an_older_tensorrt_naming_the_op() -> None:
    old, new = onnx_op_check("8.4.3"), onnx_op_check("10.3.0")
    assert old.status == FAIL and "GridSample" in old.detail and "8.5" in old.detail and "convert" in old.needed_for
    assert new.status == OK and "GridSample (from 8.5)" in new.detail


def test_the_clrnet_graph_holds_gridsample_and_the_plan_build_reads_the_ops(clrnet_artifact) -> None:
    from edge_deploy.engine.plan import onnx_ops

    _, artifact = clrnet_artifact
    ops = onnx_ops(Path(artifact) / "model.onnx")
    assert "GridSample" in ops and tensorrt_api.op_refusal(ops, "8.4.0")
    assert onnx_ops(Path(artifact) / "missing.onnx") == set()
