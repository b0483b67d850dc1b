"""AsyncLaneDetClient: the asyncio variant of LaneDetClient for pipelined camera loops.

Several frames can be in flight at once (`max_in_flight`): each request takes
one slot (its own input/output buffers and shared memory regions, created at
`connect()` and reused), so while the server works on frame n the client
preprocesses frame n+1 and decodes frame n-1::

    async with AsyncLaneDetClient("127.0.0.1:8001", "lanedet") as client:
        tasks = [asyncio.create_task(client.detect(f)) for f in frames]
        for lanes in await asyncio.gather(*tasks): ...

Same model handling, transport, retries and errors as `LaneDetClient`
(see edge_deploy/lanedet/client.py).
"""
from __future__ import annotations

import asyncio
import time
import weakref
from typing import Any, Sequence

import numpy as np

from ..errors import ClientError, FrameError, ModelNotReadyError, ServerUnavailableError
from .client import (
    _CHANNEL_ARGS,
    COLORS,
    DEFAULT_MODEL,
    DEFAULT_URL,
    DecodeParams,
    LaneModel,
    _decode_params,
    _is_retryable,
    _pipeline_request,
    _raw_request,
    _read_pipeline,
    _read_raw,
    _Slot,
    _status,
    _to_client_error,
    check_frame,
    describe_model,
    resolve_transport,
)
from .decode import Lane
from .shm import ShmRegion

__all__ = ["AsyncLaneDetClient"]


def _unlink_all(regions: list[ShmRegion]) -> None:
    # At exit there is no event loop to unregister with; the names still go.
    for region in regions:
        region.close()
    regions.clear()


class AsyncLaneDetClient:
    """Detect lanes with several frames in flight (asyncio, tritonclient.grpc.aio).

    Arguments as for LaneDetClient, plus max_in_flight: how many requests may be
    outstanding at once (each has its own buffers). Call `await connect()` (or use
    `async with`) before detecting.
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
        max_in_flight: int = 4,
    ) -> None:
        if max_in_flight < 1:
            raise ClientError(f"max_in_flight must be >= 1, got {max_in_flight}.")
        self.url = url
        self.model_name = model
        self.version = str(version)
        self.transport = resolve_transport(transport, url)
        self.client_timeout = float(client_timeout)
        self.retry_deadline = float(retry_deadline)
        self.max_in_flight = int(max_in_flight)
        self._overrides = (conf_threshold, nms_threshold, top_k)
        self._grpc: Any = None
        self.model: LaneModel | None = None
        self._defaults: DecodeParams | None = None
        self._free: asyncio.Queue[_Slot] | None = None
        self._slots: list[_Slot] = []
        self._generation = 0
        self._regions: list[ShmRegion] = []
        self._registered: set[str] = set()
        self._stale = False
        self._was_ready = False
        self._closed = False
        self.recoveries = 0  # calls that succeeded after the server had been unavailable
        self._setup_lock: asyncio.Lock | None = None
        self._finalizer = weakref.finalize(self, _unlink_all, self._regions)

    # -- lifecycle

    async def __aenter__(self) -> "AsyncLaneDetClient":
        return await self.connect()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def _client(self) -> Any:
        if self._grpc is None:
            import tritonclient.grpc.aio as aio

            self._grpc = aio.InferenceServerClient(self.url, channel_args=_CHANNEL_ARGS)
            self._setup_lock = asyncio.Lock()
            self._free = asyncio.Queue()
        return self._grpc

    async def connect(self) -> "AsyncLaneDetClient":
        """Read the model description, make the slots and register their shared memory."""
        from tritonclient.utils import InferenceServerException

        self._check_open()
        self._client()
        try:
            await self._load_model()
            await self._register_all()
        except InferenceServerException as exc:
            raise _to_client_error(exc, self.url, self.model_name, self.client_timeout) from None
        return self

    async def close(self) -> None:
        """Unregister and unlink every region and close the channel (idempotent)."""
        if self._closed:
            return
        self._closed = True
        for slot in self._slots:
            slot.drop_views()
        self._slots.clear()
        self._free = None
        if self._grpc is not None:
            for region in list(self._regions):
                if region.name in self._registered:
                    try:
                        await self._grpc.unregister_system_shared_memory(region.name, client_timeout=1.0)
                    except Exception:  # noqa: BLE001 - the server may be gone
                        pass
            self._registered.clear()
        self._finalizer()
        if self._grpc is not None:
            await self._grpc.close()
            self._grpc = None

    @property
    def shm_regions(self) -> list[str]:
        """Names of this client's shared memory regions."""
        return [r.name for r in self._regions]

    async def wait_until_ready(self, timeout: float = 60.0) -> "AsyncLaneDetClient":
        """Wait until the server and model are ready and the client is set up, or raise after `timeout` s."""
        from tritonclient.utils import InferenceServerException

        client = self._client()
        deadline = time.monotonic() + timeout
        delay = 0.05
        last: Exception | None = None
        while True:
            self._check_open()
            step = max(0.05, min(self.client_timeout, deadline - time.monotonic()))
            try:
                if await client.is_server_live(client_timeout=step) and await client.is_model_ready(
                    self.model_name, self.version, client_timeout=step
                ):
                    self._stale = self._stale or self.model is not None
                    await self._load_model()
                    await self._register_all()
                    return self
                last = None
            except ModelNotReadyError as exc:
                last = exc
            except InferenceServerException as exc:
                last = _to_client_error(exc, self.url, self.model_name, self.client_timeout)
            if time.monotonic() + delay >= deadline:
                if isinstance(last, ServerUnavailableError):
                    raise ServerUnavailableError(
                        f"Triton at {self.url} was not reachable within {timeout:g} s; start it with "
                        "`edge-deploy serve` or check --url."
                    )
                raise ModelNotReadyError(
                    f"model {self.model_name!r} was not ready on {self.url} within {timeout:g} s; install it "
                    "with `edge-deploy install` and check `edge-deploy models`."
                )
            await asyncio.sleep(delay)
            delay = min(delay * 2, 0.5)

    # -- detection

    async def detect(
        self,
        frame: np.ndarray,
        *,
        color: str = "bgr",
        conf_threshold: float | None = None,
        nms_threshold: float | None = None,
        top_k: int | None = None,
    ) -> list[Lane]:
        """Lanes in one HxWx3 frame (BGR unless color="rgb"), best first, in frame pixels."""
        frame = check_frame(frame)
        return (await self._detect_chunk([frame], color, conf_threshold, nms_threshold, top_k))[0]

    async def detect_batch(
        self,
        frames: Sequence[np.ndarray],
        *,
        color: str = "bgr",
        conf_threshold: float | None = None,
        nms_threshold: float | None = None,
        top_k: int | None = None,
    ) -> list[list[Lane]]:
        """Lanes for each frame: batches up to the model's batch size, sent concurrently."""
        checked = [check_frame(f, i if len(frames) > 1 else None) for i, f in enumerate(frames)]
        if self.model is None:
            await self.connect()
        assert self.model is not None
        cap = self.model.batch_capacity
        chunks = [checked[i : i + cap] for i in range(0, len(checked), cap)]
        parts = await asyncio.gather(
            *(self._detect_chunk(c, color, conf_threshold, nms_threshold, top_k) for c in chunks)
        )
        return [lanes for part in parts for lanes in part]

    # -- internals

    def _check_open(self) -> None:
        if self._closed:
            raise ClientError("this AsyncLaneDetClient is closed; create a new one.")

    async def _load_model(self) -> None:
        """(Re)read metadata + config; rebuild the slots when the model changed."""
        assert self._setup_lock is not None
        async with self._setup_lock:
            if self.model is not None and not self._stale:
                return
            client = self._client()
            metadata = await client.get_model_metadata(self.model_name, self.version, client_timeout=self.client_timeout)
            config = await client.get_model_config(self.model_name, self.version, client_timeout=self.client_timeout)
            if not await client.is_model_ready(self.model_name, self.version, client_timeout=self.client_timeout):
                raise ModelNotReadyError(
                    f"model {self.model_name!r} is loaded on {self.url} but not ready; check `edge-deploy models`."
                )
            model = describe_model(metadata, config)
            if model != self.model or not self._slots:
                await self._drop_slots()
                self.model = model
                conf, nms, top_k = self._overrides
                self._defaults = DecodeParams(
                    float(model.decode["conf_threshold"] if conf is None else conf),
                    float(model.decode["nms_threshold"] if nms is None else nms),
                    int(model.decode["top_k"] if top_k is None else top_k),
                )
                self._generation += 1
                assert self._free is not None
                while not self._free.empty():  # slots of the old model: dropped above
                    self._free.get_nowait()
                for _ in range(self.max_in_flight):
                    slot = _Slot(model, self.transport == "shm")
                    slot.generation = self._generation  # type: ignore[attr-defined]
                    self._slots.append(slot)
                    self._regions.extend(slot.regions)
                    self._free.put_nowait(slot)
            self._stale = False
            self._was_ready = True

    async def _drop_slots(self) -> None:
        for slot in self._slots:
            slot.drop_views()
            for region in list(slot.regions):
                await self._unregister(region)
        self._slots.clear()

    async def _unregister(self, region: ShmRegion) -> None:
        if region.name in self._registered:
            try:
                await self._grpc.unregister_system_shared_memory(region.name, client_timeout=self.client_timeout)
            except Exception:  # noqa: BLE001 - gone with a restarted server
                pass
            self._registered.discard(region.name)
        if region in self._regions:
            self._regions.remove(region)
        region.close()

    async def _register(self, regions: list[ShmRegion]) -> None:
        from tritonclient.utils import InferenceServerException

        for region in regions:
            if region.name in self._registered or region.closed:
                continue
            try:
                await region.register_async(self._grpc, self.client_timeout)
            except InferenceServerException as exc:
                if _status(exc) != "ALREADY_EXISTS":
                    raise
            self._registered.add(region.name)

    async def _register_all(self) -> None:
        if self.transport == "shm":
            await self._register([r for s in self._slots for r in s.regions])

    async def _acquire(self) -> _Slot:
        assert self._free is not None
        return await self._free.get()

    def _release(self, slot: _Slot) -> None:
        if getattr(slot, "generation", None) == self._generation and self._free is not None and not self._closed:
            self._free.put_nowait(slot)

    async def _detect_chunk(
        self, frames: list[np.ndarray], color: str, conf: float | None, nms: float | None, top_k: int | None
    ) -> list[list[Lane]]:
        from tritonclient.utils import InferenceServerException
        import tritonclient.grpc as grpcmod

        if color not in COLORS:
            raise FrameError(f"unknown color order {color!r}; use 'bgr' (OpenCV) or 'rgb'.")
        self._check_open()
        if self.model is None:
            await self.connect()
        deadline = time.monotonic() + self.retry_deadline
        delay = 0.05
        retried = False
        while True:
            slot = None
            try:
                if self._stale:
                    await self._load_model()
                assert self.model is not None and self._defaults is not None
                model = self.model
                params = _decode_params(model, conf, nms, top_k, self._defaults)
                slot = await self._acquire()
                if getattr(slot, "generation", None) != self._generation:
                    continue  # a slot of a model that changed: it is dropped, take another
                if model.kind == "raw":
                    request = _raw_request(grpcmod, model, slot, frames, color)
                else:
                    request, replaced, created = _pipeline_request(grpcmod, model, slot, frames[0], color)
                    if replaced is not None:
                        await self._unregister(replaced)
                    if created:
                        self._regions.append(slot.in_region)
                if slot.use_shm:
                    await self._register(slot.regions)
                result = await self._grpc.infer(model.name, request.inputs, model_version=self.version,
                                                outputs=request.outputs, client_timeout=self.client_timeout)
                self.recoveries += retried
                if model.kind == "raw":
                    return _read_raw(model, slot, request, result, params)
                return [_read_pipeline(model, result, params)]
            except InferenceServerException as exc:
                retry = _is_retryable(exc, self._was_ready)
                error: ClientError = _to_client_error(exc, self.url, self.model_name, self.client_timeout)
            except ModelNotReadyError as exc:
                retry, error = self._was_ready, exc
            finally:
                if slot is not None:
                    self._release(slot)
            if not retry or time.monotonic() + delay > deadline:
                if retry and self.retry_deadline > 0:
                    raise type(error)(f"{str(error).rstrip('.')} (retried for {self.retry_deadline:g} s).") from None
                raise error from None
            self._registered.clear()
            self._stale = True
            retried = True
            await asyncio.sleep(delay)
            delay = min(delay * 2, 1.0)

    def __repr__(self) -> str:
        kind = self.model.kind if self.model else "not connected"
        return (f"AsyncLaneDetClient({self.url!r}, {self.model_name!r}, transport={self.transport!r}, "
                f"max_in_flight={self.max_in_flight}, {kind})")
