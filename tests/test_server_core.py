"""The bundled tritonserver is found and serves a Python-backend model (real server, real gRPC)."""
from __future__ import annotations

import numpy as np
import pytest

pytestmark = pytest.mark.triton

ADD_ONE = '''
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [
            pb_utils.InferenceResponse(
                [pb_utils.Tensor("Y", pb_utils.get_input_tensor_by_name(r, "X").as_numpy() + 1)]
            )
            for r in requests
        ]
'''

CONFIG = '''
name: "add_one"
backend: "python"
max_batch_size: 0
input [ { name: "X" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "Y" data_type: TYPE_FP32 dims: [ 4 ] } ]
instance_group [ { kind: KIND_CPU count: 1 } ]
'''


def test_bundled_server_serves_python_backend_model(tmp_path, start_triton) -> None:
    import tritonclient.grpc as grpcclient

    model = tmp_path / "repo" / "add_one"
    (model / "1").mkdir(parents=True)
    (model / "config.pbtxt").write_text(CONFIG)
    (model / "1" / "model.py").write_text(ADD_ONE)
    server = start_triton(tmp_path / "repo")
    client = grpcclient.InferenceServerClient(server.url)
    x = np.arange(4, dtype=np.float32)
    inp = grpcclient.InferInput("X", [4], "FP32")
    inp.set_data_from_numpy(x)
    np.testing.assert_array_equal(client.infer("add_one", [inp]).as_numpy("Y"), x + 1)
    assert server.stop(timeout=30) == 0
