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
one-line messages. Everything but the calls to the server is shared with
AsyncLaneDetClient (base.py, served_model.py, buffers.py, request.py).
"""
from __future__ import annotations

import contextlib
import threading
import time
import weakref
from typing import TYPE_CHECKING, Any, Callable, Sequence, TypeVar

import numpy as np

from ..lanedet.lane import Lane
from .base import (
    CHANNEL_ARGS,
    DEFAULT_MODEL,
    DEFAULT_URL,
    UNREGISTER_GRACE,
    Backoff,
    ClientBase,
    ClientSettings,
    StageTimes,
    lanes_unavailable,
    release_slots,
    server_errors,
    unregister_is_final,
)
from .buffers import Slot
from .frames import check_frames
from .request import read_lanes
from .shm import ShmRegion
from ..tls import TLSConfig, client_options

if TYPE_CHECKING:
    from ..geometry.frame_markers import FrameMarkers

__all__ = ["DEFAULT_URL", "DEFAULT_MODEL", "LaneDetClient"]

T = TypeVar("T")


def _unregister(grpc_client: Any, names: list[str], timeout: float | None, grace: float = UNREGISTER_GRACE) -> None:
    for name in names:
        backoff = Backoff(grace, cap=0.2)
        while True:
            try:
                grpc_client.unregister_system_shared_memory(name, client_timeout=timeout)
                break
            except Exception as exc:  # noqa: BLE001 - best effort, see unregister_is_final
                delay = None if unregister_is_final(exc) else backoff.next()
                if delay is None:
                    break
                time.sleep(delay)


def _release_all(grpc_client: Any, slots: list[Slot], registered: set[str], timeout: float) -> None:
    """close() and the finalizer: unlink our regions, unregister them if the server is there, close the channel."""
    _unregister(grpc_client, release_slots(slots, registered, every_name=True), timeout)
    with contextlib.suppress(Exception):
        grpc_client.close()


class LaneDetClient(ClientBase):
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

    def __init__(
        self,
        url: str = DEFAULT_URL,
        model: str = DEFAULT_MODEL,
        *,
        version: str = "",
        transport: str = "auto",
        client_timeout: float = 10.0,
        retry_deadline: float = 30.0,
        conf_threshold: float | None = None,
        nms_threshold: float | None = None,
        top_k: int | None = None,
        connect: bool = True,
        tls: TLSConfig | None = None,
        strict: bool = False,
        camera: Any = None,
        track: bool = False,
        fps: float | None = None,
    ) -> None:
        import tritonclient.grpc as grpcclient

        super().__init__(ClientSettings.of(
            url, model, version=version, transport=transport, client_timeout=client_timeout,
            retry_deadline=retry_deadline, conf_threshold=conf_threshold, nms_threshold=nms_threshold, top_k=top_k,
            tls=tls, strict=strict, camera=camera, track=track, fps=fps))
        self._grpc = grpcclient.InferenceServerClient(url, **client_options(tls, CHANNEL_ARGS))
        self._lock = threading.RLock()
        self._call: Backoff | None = None  # the running call's own deadline, when it has one (RPC timeouts are cut)
        self._finalizer = weakref.finalize(self, _release_all, self._grpc, self._slots, self._registered,
                                          self.client_timeout)
        if connect:
            try:
                self._connect()
            except server_errors() as exc:
                raise self._error(exc) from None

    # -- lifecycle

    def __enter__(self) -> "LaneDetClient":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Unlink the shared memory regions, unregister them from the server and close the channel (idempotent)."""
        with self._lock:
            self._closed = True
            self._finalizer()

    def wait_until_ready(self, timeout: float = 60.0) -> "LaneDetClient":
        """Block until the server and the model are ready (and the client is set up), or raise after `timeout` s."""
        backoff = Backoff(timeout, cap=0.5)
        failure: Exception | None = None  # the latest attempt's that failed
        while True:
            self._check_open()
            step = backoff.rpc_timeout(self.client_timeout)
            last = None
            try:
                if self._grpc.is_server_live(client_timeout=step) and self._grpc.is_model_ready(
                    self.model_name, self.version, client_timeout=step
                ):
                    with self._lock:
                        self._connect()
                        self._register(self._unregistered(self._slots))
                    return self
            except server_errors() as exc:
                last = failure = self._attempt_failure(exc, failure)
            time.sleep(self._wait_delay(backoff, last, timeout))

    # -- detection

    def detect(
        self,
        frame: np.ndarray,
        *,
        color: str = "bgr",
        conf_threshold: float | None = None,
        nms_threshold: float | None = None,
        top_k: int | None = None,
        deadline: float | None = None,
    ) -> list[Lane]:
        """Lanes in one HxWx3 frame (BGR unless color="rgb"), best first, in frame pixels.

        deadline: seconds for the whole call, retries included; when it runs out (server unreachable, model not
        ready, or too slow an answer) the call raises `LanesUnavailable` and the next call carries on where this
        one stopped (reconnecting, re-registering shared memory). None: retry until `retry_deadline`."""
        return self.detect_batch([frame], color=color, conf_threshold=conf_threshold,
                                 nms_threshold=nms_threshold, top_k=top_k, deadline=deadline)[0]

    def detect_markers(self, frame: np.ndarray, *, deadline: float | None = None,
                       **detect_options: Any) -> tuple[list[Lane], FrameMarkers]:
        """Lanes in one frame (`deadline` and `detect_options` as for detect) and their markers in the vehicle frame
        (needs camera=; with track=True, call it for a video's frames in order)."""
        lanes = self.detect(frame, deadline=deadline, **detect_options)
        return lanes, self._frame_markers(lanes, frame)

    def detect_batch(
        self,
        frames: Sequence[np.ndarray],
        *,
        color: str = "bgr",
        conf_threshold: float | None = None,
        nms_threshold: float | None = None,
        top_k: int | None = None,
        deadline: float | None = None,
    ) -> list[list[Lane]]:
        """Lanes for each frame; frames go to the server in batches up to the model's batch size (`deadline`: as
        for detect, for all of them)."""
        checked = check_frames(frames, color)
        call = (conf_threshold, nms_threshold, top_k)
        budget = self._call_backoff(deadline) if deadline is not None else None
        if not self._lock.acquire(timeout=max(0.0, budget.left()) if budget else -1):
            raise lanes_unavailable("busy", deadline or 0.0, self.url, self.model_name)
        try:
            self._check_open()
            self._call = budget
            if self.model is None:  # connect=False: the server may still be starting
                self._with_retry(self._connect, budget, deadline)
            return [lanes for chunk in self._chunks(checked)
                    for lanes in self._with_retry(lambda: self._run(chunk, color, call), budget, deadline)]
        finally:
            self._call = None
            self._lock.release()

    def release(self) -> None:
        """Unregister this client's shared memory from the server and unlink it, keeping the client usable: its
        next call sets the regions up again (what `LaneStream.stop()` leaves behind: nothing)."""
        with self._lock:
            gone = release_slots(self._slots, self._registered, every_name=True)
            self._stale = True
            _unregister(self._grpc, gone, min(self.client_timeout, 1.0), grace=0.5)

    # -- calls to the server

    def _timeout(self) -> float:
        """An RPC's timeout: client_timeout, cut to what is left of the running call's own deadline."""
        return self._call.rpc_timeout(self.client_timeout) if self._call is not None else self.client_timeout

    def _grace(self) -> float:
        """How long to keep asking the server to drop a region it still holds, within the call's deadline."""
        return UNREGISTER_GRACE if self._call is None else max(0.0, min(UNREGISTER_GRACE, self._call.left()))

    def _connect(self) -> None:
        """Read metadata + config, validate, and (re)build the buffers if the model changed."""
        args = (self.model_name, self.version)
        metadata = self._grpc.get_model_metadata(*args, client_timeout=self._timeout())
        config = self._grpc.get_model_config(*args, client_timeout=self._timeout())
        ready = self._grpc.is_model_ready(*args, client_timeout=self._timeout())
        _unregister(self._grpc, self._adopt(metadata, config, ready), self._timeout(), self._grace())

    def _register(self, regions: list[ShmRegion]) -> None:
        for region in regions:
            with self._registering(region):
                region.register(self._grpc, self._timeout())

    def _run(self, frames: list[np.ndarray], color: str, call: tuple[Any, Any, Any]) -> list[list[Lane]]:
        """One attempt: (re)connect if needed, fill the slot, infer, decode."""
        if self._stale:
            self._connect()
        slot = self._slots[0]
        params = self._params(call)
        start = time.perf_counter()
        request, gone, new = self._prepare(slot, frames, color)
        _unregister(self._grpc, gone, self._timeout(), self._grace())
        self._register(new)
        prepared = time.perf_counter()
        result = self._grpc.infer(slot.model.name, request.inputs, model_version=self.version,
                                  outputs=request.outputs, client_timeout=self._timeout())
        answered = time.perf_counter()
        lanes = read_lanes(slot, request, result, params)
        if self.stage_log is not None:
            self.stage_log.append(StageTimes(prepared - start, answered - prepared, time.perf_counter() - answered,
                                             len(frames)))
        return lanes

    def _with_retry(self, attempt: Callable[[], T], budget: Backoff | None = None, deadline: float | None = None) -> T:
        backoff = budget or Backoff(self.retry_deadline, cap=1.0)
        while True:
            try:
                result = attempt()
            except server_errors() as exc:
                time.sleep(self._after_failure(backoff, exc, deadline))
                continue
            self.recoveries += backoff.retried
            return result
