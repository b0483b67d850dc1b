"""LaneDetClient: frames in, lanes out, from a Triton server over gRPC.

The client reads the served model's metadata and config once and configures
itself from them: the input name, dtype (FP32/FP16) and size, the batch size,
and the preprocessing spec and decode defaults that `edge-deploy install`
writes into the config parameters. It serves a raw lane model (pre/post on the
client) and an ``NAME_pipeline`` ensemble (pre/post on the server) alike
(served_model.py, buffers.py, request.py).

Transport: when the server is on this host (a loopback URL) the tensors travel
through system shared memory (`shm.ShmRegion`): the preprocessing writes the
model input straight into the mapped region and the decoder reads the output
from it, so a request carries no tensor bytes. Otherwise, or with
transport="grpc", the tensors go inside the gRPC messages.

Every RPC has `client_timeout`. When the server is unreachable (UNAVAILABLE,
e.g. while it restarts) a call retries with backoff until `retry_deadline`,
re-reads the model description and re-registers the shared memory regions
with the new server process. When the server answers for another version of
the model than the one the client read (an install changed its rows, input
size or datatype), the client re-reads the model and repeats the request.
Failures are `ClientError` subclasses with
one-line messages. The connection, the retries and the deadlines are ModelClient's
(model_client.py), which LaneDetClient extends with the lane decode; everything but the
calls to the server is shared with AsyncLaneDetClient (base.py, served_model.py,
buffers.py, request.py).
"""
from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from ..errors import LanesUnavailable
from ..lanedet.lane import Lane
from .base import (DEFAULT_MODEL, DEFAULT_URL, DETECT_DEFAULTS, Backoff, ClientSettings, DetectOptions,
                   LaneClientOptions, detect_call, spelled_out)
from .buffers import Slot
from .frames import check_frames
from .model_client import ModelClient
from .served_model import LaneModel, describe_model

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from ..geometry.frame_markers import FrameMarkers

__all__ = ["DEFAULT_URL", "DEFAULT_MODEL", "LaneDetClient"]



class LaneDetClient(ModelClient):
    """Detect lanes in camera frames with a lane model served by Triton.

    >>> with LaneDetClient("127.0.0.1:8001", "lanedet") as client:   # doctest: +SKIP
    ...     lanes = client.detect(cv2.imread("frame.png"))

    url, model, version: where and what to ask (version "" = the server's choice).
    transport: "auto" (shared memory when the server is on this host, else gRPC),
    "shm" or "grpc". client_timeout: seconds for every RPC. retry_deadline: how long
    a call keeps retrying while the server is unavailable (0 = no retries).
    conf_threshold, nms_threshold, top_k: decode defaults for this client (else the
    model config's). connect=False defers reading the model to the first call or
    `wait_until_ready`. One request at a time per client (calls are serialised by a
    lock); use AsyncLaneDetClient for several frames in flight. strict: with a model
    that has the preprocessing fused in (`convert --fuse-preprocess`), refuse frames of
    another size than the model's (FrameError) instead of resizing them on the CPU
    with a one-time warning. camera: a `edge_deploy.geometry.Camera` (Camera.from_yaml(path)) for
    `detect_markers`, the lanes as cubic markers in the vehicle frame with the ego lane's figures;
    track=True follows them across calls with stable ids (docs/geometry.md). fps: the frames/s of the
    stream `detect_markers` is called on, frame by frame: each verdict then checks the offset's jump too.

    Shared memory regions are made with mode 0660 and, when this process is in
    the group named by $EDGE_DEPLOY_SHM_GROUP (default ``video``), given that group,
    so a tritonserver running as another user of the group can map them: the
    system unit of `edge-deploy serve` runs as user ``edge-deploy`` in group
    ``video``. On a Jetson, run the app as a member of ``video`` (it usually is, for
    the GPU and the camera), or pass transport="grpc".
    """

    unavailable_error = LanesUnavailable
    shares_frame_input = False  # it writes its own preprocessing straight into its request buffer

    @spelled_out(ClientSettings.of)
    def __init__(self, url: str = DEFAULT_URL, model: str = DEFAULT_MODEL, *, connect: bool = True,
                 **options: Unpack[LaneClientOptions]) -> None:
        self._open(ClientSettings.of(url, model, **options), connect)

    def _describe(self, metadata: Any, config: Any) -> LaneModel:
        return describe_model(metadata, config)

    def _make_slots(self, model: Any) -> None:
        self._slots.extend(Slot(model, self.transport == "shm") for _ in range(self.max_in_flight))

    # -- detection

    @spelled_out(DETECT_DEFAULTS)
    def detect(self, frame: np.ndarray, *, deadline: float | None = None,
               **options: Unpack[DetectOptions]) -> list[Lane]:
        """Lanes in one HxWx3 frame (BGR unless color="rgb"), best first, in frame pixels; conf_threshold,
        nms_threshold, top_k: this call's decode settings (else the client's, else the model's).

        deadline: seconds for the whole call, retries included; when it runs out (server unreachable, model not
        ready, or too slow an answer) the call raises `LanesUnavailable` and the next call carries on where this
        one stopped (reconnecting, re-registering shared memory). None: retry until `retry_deadline`."""
        return self.detect_batch([frame], deadline=deadline, **options)[0]

    @spelled_out(DETECT_DEFAULTS)
    def detect_markers(self, frame: np.ndarray, *, deadline: float | None = None,
                       **detect_options: Unpack[DetectOptions]) -> tuple[list[Lane], FrameMarkers]:
        """Lanes in one frame (`deadline` and `detect_options` as for detect) and their markers in the vehicle frame
        (needs camera=; with track=True, call it for a video's frames in order)."""
        lanes = self.detect(frame, deadline=deadline, **detect_options)
        return lanes, self._frame_markers(lanes, frame)

    @spelled_out(DETECT_DEFAULTS)
    def detect_batch(self, frames: Sequence[np.ndarray], *, deadline: float | None = None,
                     **options: Unpack[DetectOptions]) -> list[list[Lane]]:
        """Lanes for each frame; frames go to the server in batches up to the model's batch size (`deadline` and
        `options`: as for detect, for all of them)."""
        color, call = detect_call(options)
        checked = check_frames(frames, color)

        def run(budget: Backoff | None) -> list[list[Lane]]:
            if self.model is None:  # connect=False: the server may still be starting
                self._with_retry(self._connect, budget, deadline)
            return [lanes for chunk in self._chunks(checked)
                    for lanes in self._with_retry(lambda: self._run(chunk, color, call), budget, deadline)]

        return self._locked(run, deadline)


    # -- the calls to the server

    def _run(self, frames: list[np.ndarray], color: str, call: tuple[Any, Any, Any]) -> list[list[Lane]]:
        """One attempt: (re)connect if needed, fill the slot, infer, decode."""
        if self._stale:
            self._connect()
        slot = self._slots[0]
        params = self._params(call)
        start = time.perf_counter()
        request, gone, new = self._prepare(slot, frames, color)
        self._drop_on_server(gone)
        self._register(new)
        prepared = time.perf_counter()
        result = self._grpc.infer(slot.model.name, request.inputs, model_version=self.version,
                                  outputs=request.outputs, client_timeout=self._timeout())
        return self._lanes(slot, request, result, params, (start, prepared, time.perf_counter()))

