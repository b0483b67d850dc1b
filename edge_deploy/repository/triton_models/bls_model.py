"""Triton Python-backend model NAME_pipeline of `install --pipeline bls`: a camera frame -> lanes, in one model.

Preprocesses the frame, calls the lane model NAME through Business Logic Scripting
(pb_utils.InferenceRequest(...).exec(), the version the server serves: a new or rolled-back
version of NAME is used without reloading this model), decodes with the family decoder's copy
and returns what the ensemble's NAME_postprocess returns: LANES, SCORES, NUM_POINTS, NUM_LANES.

Written by `edge-deploy install` as NAME_pipeline/V/model.py beside pipeline.json (what to call
and how: written from the artifact's manifest), pipeline_steps.py, decode.py, lane.py and, unless
the model preprocesses frames itself (convert --fuse-preprocess), preprocess.py. It imports only
numpy, cv2 and those copies (Triton's Python on a Jetson may not have edge_deploy installed).

Requests that arrive together are sent to NAME as one batch (up to its max_batch_size). Errors are
one line naming this model, its version and NAME; they avoid the phrases with which Triton reports
a changed or missing model, because this model is neither (LaneDetClient would retry them).

A call to NAME that has not answered after pipeline.json's call_timeout_s (0: wait forever) fails its
frames with a one-line error, and this instance serves the next request. The InferenceRequest's own
timeout (passed too) does not do that: on the 2.51 server a 0.5 s timeout ended neither a call NAME
was executing for 3 s nor one queued behind it (it bounds only a wait in a queue whose policy allows
it). So the call runs on a daemon thread and the instance stops waiting for it; a call still queued for
such a thread when its time is up is dropped. At most call_threads (pipeline.json) calls are outstanding per instance: while a
stalled NAME holds them all, further frames fail at once (one line) instead of queueing their tensors in memory.
"""
import json
import os
import queue
import re
import sys
import threading

import numpy as np
import triton_python_backend_utils as pb_utils

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pipeline_steps import LanePacker  # noqa: E402 - the copies in this version directory

OUTPUTS = ("LANES", "SCORES", "NUM_POINTS", "NUM_LANES")
_DTYPES = {"FP32": np.float32, "FP16": np.float16, "UINT8": np.uint8}
# What Triton says of a model it does not serve (now), and of a request the served version does not take.
_MISSING = ("unknown model", "not found", "no available version", "not ready", "is not loaded", "unavailable")
_OTHER_DIMS = ("unexpected shape", "data-type", "datatype", "byte size")
_TIMED_OUT = ("timeout expired", "timed out")  # a queue's rejection of a request waiting past its timeout
DEFAULT_CALL_TIMEOUT_S = 5.0  # pipeline.json written before call_timeout_s (model_config.BLS_CALL_TIMEOUT_S)
DEFAULT_CALL_THREADS = 4  # pipeline.json written before call_threads (model_config.BLS_CALL_THREADS)
# LaneDetClient reads these as "the model you called changed or went away" and re-reads it: reworded here.
_CLIENT_TRIGGERS = re.compile(r"unexpected shape for input|data-type is|not ready|unknown model|shared memory",
                              re.IGNORECASE)


class PipelineError(Exception):
    """One frame's (or one batch's) failure, already worded for the client."""


def _defused(message):
    """Triton's message, one line, without its request id and advice for other cases, the client's phrases reworded."""
    text = " ".join(str(message).split()).replace("[request id: <id_unknown>] ", "").split(" NOTE: ")[0]
    return _CLIENT_TRIGGERS.sub(lambda m: m.group(0).replace(" ", "_"), text)[:400]


class _TimedOut(Exception):
    """A call that has not answered in time."""


class _AllBusy(Exception):
    """Every call thread still waits for NAME (earlier calls that timed out)."""


class _Call:
    __slots__ = ("request", "response", "error", "done", "abandoned")

    def __init__(self, request):
        self.request, self.response, self.error, self.abandoned = request, None, None, False
        self.done = threading.Lock()
        self.done.acquire()


class _Calls:
    """request.exec() on daemon threads, the caller waiting at most `timeout` seconds for the response.

    A bare lock per call rather than a concurrent.futures.Future: measured in a BLS model on the 2.51 server
    (2 busy CPUs), the Future's handoff added 0.6 ms to a 1 ms call, the lock 0.2 ms."""

    def __init__(self, threads):
        self.jobs: queue.SimpleQueue = queue.SimpleQueue()
        self.free = threading.BoundedSemaphore(threads)  # calls outstanding, queued or running: at most `threads`
        for _ in range(threads):
            threading.Thread(target=self._work, daemon=True).start()

    def _work(self):
        while True:
            call = self.jobs.get()
            request, call.request = call.request, None
            if not call.abandoned:  # abandoned: its caller gave up while it waited for a thread
                try:
                    call.response = request.exec()
                except BaseException as exc:  # noqa: BLE001 - handed to the caller
                    call.error = exc
            del request
            call.done.release()
            self.free.release()
            del call  # an abandoned response is released now, not when the next job comes

    def run(self, request, timeout):
        """The response; _AllBusy at once when `threads` calls are outstanding; _TimedOut after `timeout` s (the
        call then goes on unwatched, its request released as soon as a thread is done with it)."""
        if not self.free.acquire(blocking=False):
            raise _AllBusy()
        call = _Call(request)
        del request
        self.jobs.put(call)
        if not call.done.acquire(timeout=timeout):
            call.abandoned = True
            call.request = None  # not yet taken by a thread: never sent, freed now
            raise _TimedOut()
        if call.error is not None:
            raise call.error
        return call.response


class TritonPythonModel:
    def initialize(self, args):
        self.name = args["model_name"]
        self.version = args["model_version"]
        try:
            with open(os.path.join(args["model_repository"], self.version, "pipeline.json")) as fh:
                spec = json.load(fh)
        except (OSError, ValueError) as exc:
            base = self.name[: -len("_pipeline")] if self.name.endswith("_pipeline") else self.name
            raise PipelineError(  # short: health shows the first 200 characters of the reason
                f"pipeline.json of {self.name} version {self.version} is damaged ({type(exc).__name__}): "
                f"install again with --pipeline bls, or `edge-deploy rollback {base}`"
            ) from None
        self.model = spec["model"]  # NAME, called at the version the server serves
        model_input = spec["input"]
        self.input_name = model_input["name"]
        self.input_dims = [int(d) for d in model_input["shape"]]
        self.outputs = [(t["name"], [int(d) for d in t["shape"][1:]]) for t in spec["outputs"]]
        # Frames per call: up to max_batch_size for a model with a batch axis, else its fixed batch.
        self.dynamic = spec["max_batch_size"] > 0
        self.batch = spec["max_batch_size"] if self.dynamic else max(1, self.input_dims[0])
        frame = spec["fused_frame"]
        self.fused = frame is not None
        if not self.fused:
            from preprocess import Preprocessor, PreprocessSpec  # the copy beside this file

            self.pre = Preprocessor(PreprocessSpec.from_dict(spec["preprocess"]), _DTYPES[model_input["datatype"]], 1)
        self.frame_input = self.input_name if self.fused else "FRAME"
        self.pack = LanePacker(spec["decode"], spec["preprocess"], spec["max_points"],
                               (int(frame["height"]), int(frame["width"])) if frame else None)
        # NAME's outputs in CPU memory (a TensorRT model's are on the GPU otherwise); older stubs lack the option.
        self.options = {}
        if hasattr(pb_utils, "PreferredMemory"):
            self.options["preferred_memory"] = pb_utils.PreferredMemory(pb_utils.TRITONSERVER_MEMORY_CPU, 0)
        self.timeout_s = float(spec.get("call_timeout_s", DEFAULT_CALL_TIMEOUT_S))
        self.call_threads = int(spec.get("call_threads", DEFAULT_CALL_THREADS))
        self.calls = _Calls(self.call_threads) if self.timeout_s > 0 else None
        if self.timeout_s > 0:
            try:  # the request's own timeout, in microseconds (older stubs may lack it)
                self._request([], timeout=int(self.timeout_s * 1e6))
                self.options["timeout"] = int(self.timeout_s * 1e6)
            except TypeError:
                pass

    def _request(self, inputs, **options):
        return pb_utils.InferenceRequest(model_name=self.model, requested_output_names=[n for n, _ in self.outputs],
                                         inputs=inputs, **options)

    def _where(self):
        return f"{self.name} version {self.version}"

    def _prepare(self, request, alone):
        """The model input of one request ([1, ...]) and the frame's (H, W) (None: a fused model's fixed size).
        `alone`: the only request of this execute, so the preprocessor's buffer need not be copied."""
        frame = pb_utils.get_input_tensor_by_name(request, self.frame_input)
        if frame is None:
            raise PipelineError(f"{self.name}: the request has no {self.frame_input} input")
        frame = frame.as_numpy()
        if self.fused:
            return np.ascontiguousarray(frame), None
        tensor = self.pre(frame, 0, "bgr")
        return (tensor if alone else np.array(tensor)), frame.shape[:2]

    def _timed_out(self):
        return (f"{self._where()}: {self.model} did not answer within {self.timeout_s:g} s (call_timeout_s in "
                f"{self.name}/{self.version}/pipeline.json): it is stalled or overloaded; check `edge-deploy models "
                f"{self.model}` and the server log, restart the server or roll {self.model} back (`edge-deploy "
                f"rollback {self.model}`), or raise call_timeout_s if its frames take that long.")

    def _explain(self, message):
        low = message.lower()
        if any(s in low for s in _TIMED_OUT):
            return self._timed_out()
        if any(s in low for s in _MISSING):
            return (f"{self._where()} calls {self.model}, which this server does not serve now "
                    f"({_defused(message)}); load it again with `edge-deploy install` or `edge-deploy rollback "
                    f"{self.model}`, and see `edge-deploy models {self.model}`.")
        if any(s in low for s in _OTHER_DIMS):
            return (f"{self._where()} sends {self.input_name} {self.input_dims}, which the version of {self.model} "
                    f"served now does not take ({_defused(message)}): a version with other dims is served; install it "
                    f"with `edge-deploy install --pipeline bls` so that its pipeline matches, or roll {self.model} back.")
        return f"{self._where()}: the call to {self.model} failed: {_defused(message)}"

    def _call(self, batch):
        """Run NAME on `batch` ([n, ...]); its lane outputs, copied out of the response."""
        request = self._request([pb_utils.Tensor(self.input_name, batch)], **self.options)
        if self.calls is None:
            response = request.exec()
        else:
            try:
                response = self.calls.run(request, self.timeout_s)
            except _TimedOut:
                raise PipelineError(self._timed_out()) from None
            except _AllBusy:
                raise PipelineError(f"{self._where()}: {self.call_threads} earlier calls to {self.model} are still "
                                    f"unanswered (each timed out after {self.timeout_s:g} s): it is stalled; check "
                                    f"`edge-deploy models {self.model}` and the server log, restart the server or roll "
                                    f"{self.model} back (`edge-deploy rollback {self.model}`).") from None
        if response.has_error():
            raise PipelineError(self._explain(response.error().message()))
        arrays = []
        for name, dims in self.outputs:
            tensor = pb_utils.get_output_tensor_by_name(response, name)
            if tensor is None:
                raise PipelineError(f"{self._where()}: {self.model} returned no {name}: a version with other outputs "
                                    f"is served; install it with `edge-deploy install --pipeline bls`.")
            # A copy: the response's shared memory is released with it.
            array = np.array(tensor.as_numpy())
            if list(array.shape[1:]) != dims:
                raise PipelineError(
                    f"{self._where()}: {self.model} returns {name} {list(array.shape[1:])} per frame, not the {dims} "
                    f"this pipeline decodes: a version with other dims is served; install it with "
                    f"`edge-deploy install --pipeline bls` so that its pipeline matches, or roll {self.model} back.")
            arrays.append(array)
        return arrays

    def _groups(self, ready):
        return [ready[i: i + self.batch] for i in range(0, len(ready), self.batch)]

    def execute(self, requests):
        responses = [None] * len(requests)
        ready = []
        for index, request in enumerate(requests):
            try:
                ready.append((index, *self._prepare(request, len(requests) == 1)))
            except Exception as exc:  # noqa: BLE001 - reported to the client, one line
                responses[index] = _error(exc, self.name)
        for group in self._groups(ready):
            inputs = [x for _, x, _ in group]
            if not self.dynamic and len(inputs) < self.batch:  # a fixed batch: fill it with the last frame
                inputs += inputs[-1:] * (self.batch - len(inputs))
            try:
                outputs = self._call(inputs[0] if len(inputs) == 1 else np.concatenate(inputs))
            except Exception as exc:  # noqa: BLE001
                for index, _, _ in group:
                    responses[index] = _error(exc, self._where())
                continue
            for k, (index, _, size) in enumerate(group):
                try:
                    tensors = self.pack([array[k] for array in outputs], size)
                    responses[index] = pb_utils.InferenceResponse(
                        [pb_utils.Tensor(n, a) for n, a in zip(OUTPUTS, tensors)])
                except Exception as exc:  # noqa: BLE001
                    responses[index] = _error(exc, f"{self._where()}: cannot decode the output of {self.model}")
        return responses


def _error(exc, where):
    message = str(exc) if isinstance(exc, PipelineError) else f"{where}: {_defused(exc)}"
    return pb_utils.InferenceResponse(error=pb_utils.TritonError(" ".join(message.split())))
