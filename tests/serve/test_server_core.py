"""The bundled tritonserver is found and serves a Python-backend model (real server, real gRPC)."""
from __future__ import annotations

import numpy as np
import pytest
from triton_helpers import write_model

pytestmark = pytest.mark.triton


def test_bundled_server_serves_python_backend_model(tmp_path, start_triton) -> None:
    import tritonclient.grpc as grpcclient

    write_model(tmp_path / "repo", "add_one")
    server = start_triton(tmp_path / "repo")
    client = grpcclient.InferenceServerClient(server.url)
    x = np.arange(4, dtype=np.float32)
    inp = grpcclient.InferInput("X", [4], "FP32")
    inp.set_data_from_numpy(x)
    np.testing.assert_array_equal(client.infer("add_one", [inp]).as_numpy("Y"), x + 1)
    assert server.stop(timeout=30) == 0
