"""AsyncLaneDetClient: the asyncio variant of LaneDetClient for pipelined camera loops.

Several frames can be in flight at once (`max_in_flight`): each request takes
one slot (its own input/output buffers and shared memory regions, created at
`connect()` and reused), so while the server works on frame n the client
preprocesses frame n+1 and decodes frame n-1::

    async with AsyncLaneDetClient("127.0.0.1:8001", "lanedet") as client:
        tasks = [asyncio.create_task(client.detect(f)) for f in frames]
        for lanes in await asyncio.gather(*tasks): ...

Same model handling, transport, retries and errors as `LaneDetClient`: all but
the calls to the server (tritonclient.grpc.aio here) is shared with it
(base.py, served_model.py, buffers.py, request.py).
"""
from __future__ import annotations

import asyncio
import time
import weakref
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from ..errors import ClientError
from ..lanedet.lane import Lane
from .base import (
    CHANNEL_ARGS,
    CLOSE_WITHIN,
    DEFAULT_MODEL,
    DEFAULT_URL,
    DETECT_DEFAULTS,
    Backoff,
    ClientBase,
    ClientSettings,
    DetectOptions,
    LaneClientOptions,
    ReadyWait,
    Unregistering,
    detect_call,
    release_slots,
    server_errors,
    spelled_out,
    worst_reason,
)
from .buffers import Slot
from .frames import check_frames
from .served_model import LaneModel
from .shm import ShmRegion
from ..tls.config import client_options

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from ..geometry.frame_markers import FrameMarkers

__all__ = ["AsyncLaneDetClient"]

# How far past its deadline a call may run before it is cut off: the RPCs inside are cut to the deadline already
# (their own errors say more than a cut-off would), this only bounds what has no timeout of its own.
DEADLINE_SLACK = 0.005


class AsyncLaneDetClient(ClientBase):
    """Detect lanes with several frames in flight (asyncio, tritonclient.grpc.aio).

    Arguments as for LaneDetClient (shared memory permissions too), plus
    max_in_flight: how many requests may be outstanding at once (each has its own
    buffers). Call `await connect()` (or use `async with`) before detecting; with connect=False, `async with` does
    not connect and the first call does, within its own `deadline=` (for an app that starts before the server). camera, track, fps: as for
    LaneDetClient (`await detect_markers(frame)`: markers made in the order of the calls).
    """

    @spelled_out(ClientSettings.of)
    def __init__(self, url: str = DEFAULT_URL, model: str = DEFAULT_MODEL, *, max_in_flight: int = 4,
                 connect: bool = True, **options: Unpack[LaneClientOptions]) -> None:
        if max_in_flight < 1:
            raise ClientError(f"max_in_flight must be >= 1, got {max_in_flight}.")
        super().__init__(ClientSettings.of(url, model, **options))
        self.max_in_flight = int(max_in_flight)
        self._connect_on_enter = connect
        import tritonclient.grpc.aio  # noqa: F401 - imported now, not inside the first call's deadline

        self._grpc: Any = None  # made on first use, inside the event loop
        self._setup_lock = asyncio.Lock()
        self._free: asyncio.Queue[Slot] = asyncio.Queue()
        self._marker_calls = self._markers_done = 0  # detect_markers' turns, in the order of the calls
        self._markers_turn = asyncio.Condition()
        # At exit there is no event loop to unregister with; the names still go.
        self._finalizer = weakref.finalize(self, release_slots, self._slots, self._registered)

    # -- lifecycle

    async def __aenter__(self) -> "AsyncLaneDetClient":
        return await self.connect() if self._connect_on_enter else self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def connect(self) -> "AsyncLaneDetClient":
        """Read the model description, make the slots and register their shared memory."""
        self._check_open()
        try:
            await self._load_model()
            await self._register(self._unregistered(self._slots))
        except server_errors() as exc:
            raise self._error(exc) from None
        return self

    async def close(self) -> None:
        """Unregister and unlink every region and close the channel (idempotent), within CLOSE_WITHIN (1 s) whatever
        the server does."""
        if self._closed:
            return
        self._closed = True
        gone = release_slots(self._slots, self._registered, every_name=True)
        if self._grpc is not None:
            await self._unregister(gone, within=CLOSE_WITHIN)  # a hung server does not hold close() longer
            await self._grpc.close()
            self._grpc = None

    async def wait_until_ready(self, timeout: float = 60.0) -> "AsyncLaneDetClient":
        """Wait until the server and model are ready and the client is set up, or raise after `timeout` s."""
        waiting = ReadyWait(self, timeout)
        while True:
            step = waiting.attempt()
            try:
                client = self._client()
                if await client.is_server_live(client_timeout=step) and await client.is_model_ready(
                    self.model_name, self.version, client_timeout=step
                ):
                    self._stale = True
                    await self._load_model()
                    await self._register(self._unregistered(self._slots))
                    return self
            except server_errors() as exc:
                waiting.failed(exc)
            await asyncio.sleep(waiting.delay())

    # -- detection

    @spelled_out(DETECT_DEFAULTS)
    async def detect(self, frame: np.ndarray, *, deadline: float | None = None,
                     **options: Unpack[DetectOptions]) -> list[Lane]:
        """Lanes in one HxWx3 frame (BGR unless color="rgb"), best first, in frame pixels. deadline: seconds for
        the whole call, retries included, else `LanesUnavailable`; options as for LaneDetClient.detect."""
        color, call = detect_call(options)
        frames = check_frames([frame], color)
        budget = self._call_backoff(deadline)
        return (await self._within(budget, deadline, self._detect_chunk(frames, color, call, budget, deadline)))[0]

    @spelled_out(DETECT_DEFAULTS)
    async def detect_markers(self, frame: np.ndarray, *, deadline: float | None = None,
                             **detect_options: Unpack[DetectOptions]) -> tuple[list[Lane], FrameMarkers]:
        """Lanes in one frame (`deadline` and `detect_options` as for detect) and their markers in the vehicle frame
        (needs camera=). Several calls may be in flight: their markers are made in the order of the calls, so with
        track=True start them in the video's frame order."""
        ticket = self._marker_calls
        self._marker_calls += 1
        try:
            lanes = await self.detect(frame, deadline=deadline, **detect_options)
            async with self._markers_turn:
                await self._markers_turn.wait_for(lambda: self._markers_done == ticket)
                return lanes, self._frame_markers(lanes, frame)
        finally:  # a failed call gives up its turn too, or every later one would wait for it forever
            async with self._markers_turn:
                await self._markers_turn.wait_for(lambda: self._markers_done == ticket)
                self._markers_done += 1
                self._markers_turn.notify_all()

    @spelled_out(DETECT_DEFAULTS)
    async def detect_batch(self, frames: Sequence[np.ndarray], *, deadline: float | None = None,
                           **options: Unpack[DetectOptions]) -> list[list[Lane]]:
        """Lanes for each frame: batches up to the model's batch size, sent concurrently (`deadline` and `options`:
        as for detect, for all of them)."""
        color, call = detect_call(options)
        checked = check_frames(frames, color)
        budget = self._call_backoff(deadline)

        async def run() -> list[list[Lane]]:
            if self.model is None:
                await self._detect_chunk([], color, call, budget, deadline)  # connects within the deadline
            parts = await asyncio.gather(*(self._detect_chunk(chunk, color, call, budget, deadline)
                                           for chunk in self._chunks(checked)))
            return [lanes for part in parts for lanes in part]

        return await self._within(budget, deadline, run())

    async def _within(self, budget: Backoff | None, deadline: float | None, call: Any) -> Any:
        """Await `call`, cut off when the call's own deadline ends (whatever it waits on: the channel's first
        connection, a setup RPC, a free slot), as LaneDetClient's calls are: LanesUnavailable with the worst reason
        its attempts met, else "slow"."""
        if budget is None:
            return await call
        try:
            return await asyncio.wait_for(call, max(0.0, budget.left()) + DEADLINE_SLACK)
        except asyncio.TimeoutError:
            raise self._unavailable(worst_reason(budget.reasons), deadline) from None

    # -- calls to the server

    def _client(self) -> Any:
        if self._grpc is None:
            import tritonclient.grpc.aio as aio

            self._grpc = aio.InferenceServerClient(self.url, **client_options(self.tls, CHANNEL_ARGS))
        return self._grpc

    def _make_slots(self, model: LaneModel) -> None:
        super()._make_slots(model)
        while not self._free.empty():  # slots of the old model, already closed
            self._free.get_nowait()
        for slot in self._slots:
            self._free.put_nowait(slot)

    async def _load_model(self, budget: Backoff | None = None) -> None:
        """(Re)read metadata + config unless up to date; new slots when the model changed."""
        async with self._setup_lock:
            if self.model is not None and not self._stale:
                return  # another task did it meanwhile
            client, args = self._client(), (self.model_name, self.version)
            metadata = await client.get_model_metadata(*args, client_timeout=self._rpc_timeout(budget))
            config = await client.get_model_config(*args, client_timeout=self._rpc_timeout(budget))
            ready = await client.is_model_ready(*args, client_timeout=self._rpc_timeout(budget))
            await self._unregister(self._adopt(metadata, config, ready), budget)

    async def _unregister(self, names: list[str], budget: Backoff | None = None, within: float | None = None) -> None:
        """Ask the server to drop `names`, all within `within` seconds (default: UNREGISTER_GRACE, cut to the call's
        deadline), repeating while it still holds one (unregister_is_final); best effort past that."""
        if within is None:
            within = self._unregister_within(budget)
        pending = Unregistering(names, within)
        while pending.left:
            failure = None
            try:
                await self._grpc.unregister_system_shared_memory(
                    pending.left[0], client_timeout=pending.timeout(self._rpc_timeout(budget)))
            except Exception as exc:  # noqa: BLE001 - best effort, see unregister_is_final
                failure = exc
            delay = pending.after(failure)
            if delay is None:
                return
            await asyncio.sleep(delay)

    async def _register(self, regions: list[ShmRegion], budget: Backoff | None = None) -> None:
        for region in regions:
            with self._registering(region):
                await region.register_async(self._grpc, self._rpc_timeout(budget))

    async def _free_slot(self, budget: Backoff | None, deadline: float | None) -> Slot:
        """A free slot; with a deadline, only as long as it lasts (all slots busy: LanesUnavailable "busy")."""
        if budget is None:
            return await self._free.get()
        # what the call is waiting on, should its deadline cut it off here. It stays when the wait is cancelled:
        # an event loop that wakes late runs this wait's timeout and _within's together, and _within reports.
        budget.reasons.add("busy")
        try:
            slot = await asyncio.wait_for(self._free.get(), max(0.0, budget.left()))
        except asyncio.TimeoutError:
            raise self._unavailable("busy", deadline) from None
        budget.reasons.discard("busy")
        return slot

    async def _detect_chunk(self, frames: list[np.ndarray], color: str, call: tuple[Any, Any, Any],
                            budget: Backoff | None = None, deadline: float | None = None) -> list[list[Lane]]:
        """One request with retries (until `budget`'s deadline when the call has one, else `retry_deadline`): take a
        free slot, fill it, infer, decode, give the slot back. No frames: only connect."""
        self._check_open()
        if self.model is None and budget is None:
            await self.connect()
        backoff = self._retries(budget)
        while True:
            slot: Slot | None = None
            try:
                if self._stale or self.model is None:
                    await self._load_model(budget)
                if not frames:
                    return []
                params = self._params(call)
                slot = await self._free_slot(budget, deadline)
                if slot not in self._slots:
                    continue  # a slot of a model that changed meanwhile: closed, take another
                start = time.perf_counter()
                request, gone, new = self._prepare(slot, frames, color)
                await self._unregister(gone, budget)
                await self._register(new, budget)
                prepared = time.perf_counter()
                result = await self._grpc.infer(slot.model.name, request.inputs, model_version=self.version,
                                                outputs=request.outputs, client_timeout=self._rpc_timeout(budget))
                self.recoveries += backoff.retried
                return self._lanes(slot, request, result, params, (start, prepared, time.perf_counter()))
            except server_errors() as exc:
                delay = self._after_failure(backoff, exc, deadline)
            finally:
                if slot is not None and slot in self._slots:
                    self._free.put_nowait(slot)
            await asyncio.sleep(delay)
