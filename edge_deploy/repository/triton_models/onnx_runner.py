"""Triton Python-backend model: run this version's model.onnx with ONNX Runtime on CPU.

Written by `edge-deploy install --runtime python` as NAME/V/model.py beside
model.onnx (model_fp16.onnx with `install --fp16`) and manifest.json. The I/O
names and datatypes come from the model's config (FP16 I/O included).
Requests that arrive together (dynamic batching) are concatenated along the
batch axis up to max_batch_size and run in one session call.
"""
import json
import os

import numpy as np
import triton_python_backend_utils as pb_utils

_NUMPY = {
    "BOOL": np.bool_, "UINT8": np.uint8, "UINT16": np.uint16, "UINT32": np.uint32, "UINT64": np.uint64,
    "INT8": np.int8, "INT16": np.int16, "INT32": np.int32, "INT64": np.int64,
    "FP16": np.float16, "FP32": np.float32, "FP64": np.float64,
}


MAX_THREADS = 64  # edge_deploy.core.numbers.MAX_THREADS: this file runs in Triton's Python, without edge_deploy


def _thread_count(text):
    """The ONNX Runtime threads `text` names (install --threads, or $EDGE_DEPLOY_ORT_THREADS of the server), 1 to
    MAX_THREADS; a ValueError in one line (the model does not load, the server says why) for anything else: ONNX
    Runtime crashes (SIGSEGV, the whole server with it) making a pool of 100000 threads."""
    value = str(text).strip()
    if not value.isdigit() or not 1 <= int(value) <= MAX_THREADS:
        raise ValueError(f"EDGE_DEPLOY_ORT_THREADS={value[:40]!r} (or edge_deploy.ort_threads) is not a whole number "
                         f"of threads in [1, {MAX_THREADS}]; set it in that range, or unset it for one per core.")
    return int(value)


class TritonPythonModel:
    def initialize(self, args):
        import onnxruntime as ort

        version_dir = os.path.join(args["model_repository"], args["model_version"])
        config = json.loads(args["model_config"])
        self.max_batch = int(config.get("max_batch_size", 0))
        self.inputs = [(t["name"], _NUMPY[t["data_type"].replace("TYPE_", "")]) for t in config["input"]]
        self.outputs = [t["name"] for t in config["output"]]
        threads = config.get("parameters", {}).get("edge_deploy.ort_threads", {}).get("string_value") \
            or os.environ.get("EDGE_DEPLOY_ORT_THREADS", "")  # parity.ORT_THREADS_ENV, through tritonserver
        options = ort.SessionOptions()
        if str(threads).strip():  # intra-op; inter-op too (used only when a session runs graph branches in parallel)
            options.intra_op_num_threads = options.inter_op_num_threads = _thread_count(threads)
        self.session = ort.InferenceSession(
            os.path.join(version_dir, "model.onnx"), options, providers=["CPUExecutionProvider"]
        )

    def _gather(self, request):
        arrays = []
        for name, dtype in self.inputs:
            tensor = pb_utils.get_input_tensor_by_name(request, name)
            if tensor is None:
                raise ValueError(f"missing input {name}")
            arrays.append(np.ascontiguousarray(tensor.as_numpy(), dtype=dtype))
        return arrays

    def _run(self, groups):
        """Run a list of per-request input lists as one batch; return per-request output lists."""
        if len(groups) == 1 or self.max_batch == 0:
            return [self.session.run(self.outputs, dict(zip([n for n, _ in self.inputs], g))) for g in groups]
        feed = {name: np.concatenate([g[i] for g in groups]) for i, (name, _) in enumerate(self.inputs)}
        results = self.session.run(self.outputs, feed)
        sizes = np.cumsum([len(g[0]) for g in groups])[:-1]
        per_output = [np.split(r, sizes) for r in results]
        return [[outs[j] for outs in per_output] for j in range(len(groups))]

    def execute(self, requests):
        responses = [None] * len(requests)
        pending: list[tuple[int, list]] = []
        rows = 0
        batches = []
        for index, request in enumerate(requests):
            try:
                arrays = self._gather(request)
            except Exception as exc:  # noqa: BLE001 - reported to the client
                responses[index] = pb_utils.InferenceResponse(error=pb_utils.TritonError(str(exc)))
                continue
            size = len(arrays[0]) if self.max_batch else 1
            if pending and rows + size > self.max_batch:
                batches.append(pending)
                pending, rows = [], 0
            pending.append((index, arrays))
            rows += size
        if pending:
            batches.append(pending)
        for batch in batches:
            try:
                outputs = self._run([arrays for _, arrays in batch])
            except Exception as exc:  # noqa: BLE001
                for index, _ in batch:
                    responses[index] = pb_utils.InferenceResponse(error=pb_utils.TritonError(str(exc)))
                continue
            for (index, _), outs in zip(batch, outputs):
                responses[index] = pb_utils.InferenceResponse(
                    [pb_utils.Tensor(name, np.ascontiguousarray(out)) for name, out in zip(self.outputs, outs)]
                )
        return responses
