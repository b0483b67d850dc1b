"""$EDGE_DEPLOY_ORT_THREADS: the intra-op threads of edge-deploy's own ONNX Runtime sessions (parity.ort_session, used
by convert's checks and evaluate), read by the real ONNX Runtime; the suite itself runs with 1 (conftest.py)."""
from __future__ import annotations

import pytest

from edge_deploy.errors import EdgeDeployError
from edge_deploy.export.parity import ORT_THREADS_ENV, ort_session

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")


def _identity() -> "onnx.ModelProto":
    from onnx import TensorProto, helper

    graph = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


@pytest.mark.parametrize("value, threads", [("3", 3), (" 1 ", 1), ("", 0)])
def test_the_sessions_take_the_threads_the_environment_names(monkeypatch, value, threads) -> None:
    monkeypatch.setenv(ORT_THREADS_ENV, value)  # "": unset, ONNX Runtime's own default (0: one per core)
    assert ort_session(_identity()).get_session_options().intra_op_num_threads == threads


@pytest.mark.parametrize("value", ["0", "two", "-1", "1.5"])
def test_a_value_that_is_no_thread_count_is_refused_in_one_line(monkeypatch, value) -> None:
    monkeypatch.setenv(ORT_THREADS_ENV, value)
    with pytest.raises(EdgeDeployError) as refused:
        ort_session(_identity())
    message = str(refused.value)
    assert "\n" not in message and f"{ORT_THREADS_ENV}={value!r}" in message and "unset it" in message
