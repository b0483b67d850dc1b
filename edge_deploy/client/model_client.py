"""ModelClient: any model Triton serves, with the guarantees LaneDetClient has (it is LaneDetClient's base).

It reads the served model's metadata and config once (`TensorModel`), sends named arrays (or, when the model
declares image preprocessing, a camera frame) through system shared memory on this host, bounds every call by
`deadline=` (`ModelUnavailable` with a `reason` when it runs out), reconnects after a server restart (re-reading
the model and registering its regions again) and follows a new version of the model. The connection, retry and
deadline logic lives here and in base.py; LaneDetClient (sync_client.py) adds the lane decode on top and
DetectorClient (detector_client.py) the box decode.
"""
from __future__ import annotations

import contextlib
import threading
import time
import weakref
from dataclasses import replace
from typing import Any, Callable, Mapping, TypeVar

import numpy as np

from ..errors import ClientError, FrameError, ModelChangedError, ModelUnavailable
from ..tls.config import TLSConfig, client_options
from .base import (
    CHANNEL_ARGS,
    CLOSE_WITHIN,
    DEFAULT_URL,
    UNREGISTER_GRACE,
    Backoff,
    ClientBase,
    ClientSettings,
    ReadyWait,
    Unregistering,
    forget_regions,
    release_slots,
    server_errors,
)
from ..runtime import in_background
from .shared_input import SharedInputPool
from .shm import ShmRegion
from .tensor_model import NUMPY_OF, FrameInput, TensorModel, TensorSlot, describe_tensor_model

__all__ = ["ModelClient"]

T = TypeVar("T")


CLEANUP_WITHIN = 30.0  # seconds the background cleanup keeps asking a server that did not answer in time


def unregister(grpc_client: Any, names: list[str], timeout: float | None, grace: float = UNREGISTER_GRACE) -> list[str]:
    """Ask the server to drop the regions `names`, all within `grace` seconds (each RPC's timeout `timeout`, cut to
    what is left), repeating while it still holds one (unregister_is_final). Returns the names it could not drop in
    time (a hung or busy server): the caller keeps them for later."""
    pending = Unregistering(names, grace)
    while pending.left:
        failure = None
        try:
            grpc_client.unregister_system_shared_memory(pending.left[0], client_timeout=pending.timeout(timeout or grace))
        except Exception as exc:  # noqa: BLE001 - best effort, see unregister_is_final
            failure = exc
        delay = pending.after(failure)
        if delay is None:
            break
        time.sleep(delay)
    return pending.left


def _cleanup(grpc_client: Any, names: list[str], timeout: float, within: float) -> None:
    """close()'s part that may outlast it: drop `names` on the server (`within` seconds), then close the channel."""
    unregister(grpc_client, names, timeout, within)
    with contextlib.suppress(Exception):
        grpc_client.close()


def _release_all(grpc_client: Any, slots: list[Any], registered: set[str], timeout: float,
                 pools: list[SharedInputPool], pending: set[str]) -> None:
    """The finalizer (a client never closed, at exit or when collected): unlink our regions, unregister them within
    CLOSE_WITHIN if the server answers, close the channel."""
    _cleanup(grpc_client, _unlink_all(slots, registered, pools, pending), min(timeout, CLOSE_WITHIN), CLOSE_WITHIN)


def _unlink_all(slots: list[Any], registered: set[str], pools: list[SharedInputPool],
                later: set[str] | None = None) -> list[str]:
    """Unlink every region of a client's (its slots' and the shared-input ones it uploaded into); the names to
    unregister: all of them, and those `later` held (emptied: the caller unregisters them now)."""
    names = [*release_slots(slots, registered, every_name=True),
             *(region.name for pool in pools for region in pool.close()), *(later or ())]
    registered.difference_update(names)
    if later is not None:
        later.clear()
    return names


class ModelClient(ClientBase):
    """Run any model Triton serves: named arrays in, named arrays out.

    >>> with ModelClient("127.0.0.1:8001", "objects") as client:   # doctest: +SKIP
    ...     outputs = client.infer({"images": batch}, deadline=0.05)

    url, model, version: where and what to ask (version "" = the server's choice). transport: "auto" (shared memory
    when the server is on this host, else gRPC), "shm" or "grpc". client_timeout: seconds for every RPC.
    retry_deadline: how long a call without its own `deadline` keeps retrying while the server is unavailable.
    connect=False defers reading the model to the first call or `wait_until_ready`. tls: a `TLSConfig` beyond
    loopback. One request at a time per client (calls are serialised by a lock).
    """

    unavailable_error = ModelUnavailable

    def __init__(self, url: str = DEFAULT_URL, model: str = "model", *, version: str = "", transport: str = "auto",
                 client_timeout: float = 10.0, retry_deadline: float = 30.0, connect: bool = True,
                 tls: TLSConfig | None = None) -> None:
        self._open(ClientSettings.of(url, model, version=version, transport=transport, client_timeout=client_timeout,
                                     retry_deadline=retry_deadline, tls=tls), connect)

    @classmethod
    def from_settings(cls: type[T], settings: ClientSettings, *, connect: bool = True) -> T:
        """A new client as `settings` describe it (another client's `.settings`): what a stream run in a child
        process (LaneStream's process=True) makes there."""
        client = cls.__new__(cls)
        client._open(settings, connect)  # type: ignore[attr-defined]
        return client

    def _open(self, settings: ClientSettings, connect: bool) -> None:
        """The constructors' shared part: the channel, the lock, the finalizer; the model read unless connect=False."""
        import tritonclient.grpc as grpcclient

        super().__init__(settings)
        self._grpc = grpcclient.InferenceServerClient(settings.url, **client_options(settings.tls, CHANNEL_ARGS))
        self._lock = threading.RLock()
        self._call: Backoff | None = None  # the running call's own deadline, when it has one (RPC timeouts are cut)
        self._pools: list[SharedInputPool] = []  # where `share` uploads (one, made on first use)
        self.input_copies = 0  # frame inputs copied into this client's own region (a shared upload is not)
        # regions unlinked here that a server did not answer for in time: dropped at the next connect or close()
        self._unregister_later: set[str] = set()
        self._finalizer = weakref.finalize(self, _release_all, self._grpc, self._slots, self._registered,
                                          self.client_timeout, self._pools, self._unregister_later)
        if connect:
            try:
                self._connect()
            except server_errors() as exc:
                raise self._error(exc) from None

    # -- lifecycle

    def __enter__(self: T) -> T:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Unlink the shared memory regions, unregister them from the server and close the channel (idempotent).
        Returns within CLOSE_WITHIN (1 s) past a call in flight, whatever the server does: what a hung server has not
        dropped by then is asked again in the background for up to CLEANUP_WITHIN (30 s) while the process lives."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._finalizer.detach()
            left = self._unregister_now(_unlink_all(self._slots, self._registered, self._pools,
                                                    self._unregister_later))
            if left:
                in_background(lambda: _cleanup(self._grpc, left, self.client_timeout, CLEANUP_WITHIN),
                              "edge-deploy-unregister")
            else:
                _cleanup(self._grpc, [], 0.0, 0.0)

    def wait_until_ready(self: Any, timeout: float = 60.0) -> Any:
        """Block until the server and the model are ready (and the client is set up), or raise after `timeout` s."""
        waiting = ReadyWait(self, timeout)
        while True:
            step = waiting.attempt()
            try:
                if self._grpc.is_server_live(client_timeout=step) and self._grpc.is_model_ready(
                    self.model_name, self.version, client_timeout=step
                ):
                    with self._lock:
                        self._connect()
                        self._register(self._unregistered(self._slots))
                    return self
            except server_errors() as exc:
                waiting.failed(exc)
            time.sleep(waiting.delay())

    def release(self) -> None:
        """Unregister this client's shared memory from the server and unlink it, keeping the client usable: its
        next call sets the regions up again (what a stream's `stop()` leaves behind: nothing). Spends at most
        CLOSE_WITHIN (1 s) on the server; regions a hung server did not drop by then are dropped at the next call."""
        with self._lock:
            gone = _unlink_all(self._slots, self._registered, self._pools)
            self._stale = True
            self._unregister_later.update(self._unregister_now(gone))

    # -- inference

    def _describe(self, metadata: Any, config: Any) -> Any:
        return describe_tensor_model(metadata, config)

    def _make_slots(self, model: Any) -> None:
        self._slots.extend(TensorSlot(model, self.transport == "shm") for _ in range(self.max_in_flight))

    shares_frame_input = True  # a PerceptionStream converts a frame once for every client with the same key

    def frame_input_key(self, *, deadline: float | None = None) -> tuple[Any, ...]:
        """What another model must share with this one to take the same frame input (`FrameInput.key_of`); reads
        the model first when the client has not yet."""
        if self.model is None:
            self._locked(lambda budget: self._with_retry(self._connect, budget, deadline), deadline)
        return FrameInput.key_of(self.model)

    def frame_input(self, frame: np.ndarray, *, color: str = "bgr", deadline: float | None = None) -> FrameInput:
        """`frame` made into this model's image input (reading the model first when needed): what `infer` sends
        for a frame, and what a PerceptionStream makes once for every model that shares it."""
        self.frame_input_key(deadline=deadline)
        return FrameInput.of(frame, self.model, color)

    def share(self, prepared: FrameInput) -> FrameInput:
        """`prepared` with its tensor uploaded once into a shared region of this client's (`shared_input.py`): every
        client of this server with shared memory then sends it by name, copying nothing. As it is over gRPC."""
        if self.transport != "shm":
            return prepared
        with self._lock:
            if not self._pools:
                self._pools.append(SharedInputPool(self.url))
            pool = self._pools[0]
        return replace(prepared, upload=pool.upload(prepared.tensor))

    @property
    def shared_uploads(self) -> int:
        """Frame inputs this client uploaded for every model that takes them (`share`)."""
        return sum(pool.uploads for pool in self._pools)

    def infer(self, inputs: Mapping[str, np.ndarray] | np.ndarray | FrameInput, *,
              deadline: float | None = None) -> dict[str, np.ndarray]:
        """The model's outputs (name -> array, copies) for `inputs`: a dict of named arrays (with the batch axis
        when the model has one), or a frame (HxWx3 BGR uint8) when the model declares image preprocessing.

        deadline: seconds for the whole call, retries included; when it runs out (server unreachable, model not
        ready, or too slow an answer) the call raises `ModelUnavailable` (its `reason` says which) and the next
        call carries on where this one stopped. None: retry until `retry_deadline`."""
        return self._locked(lambda budget: self._infer_locked(inputs, budget, deadline), deadline)

    def _locked(self, work: Callable[[Backoff | None], T], deadline: float | None) -> T:
        """Run `work` holding this client's lock, within `deadline` (the wait for the lock included)."""
        budget = self._call_backoff(deadline)
        if not self._lock.acquire(timeout=max(0.0, budget.left()) if budget else -1):
            raise self._unavailable("busy", deadline)
        try:
            self._check_open()
            self._call = budget
            return work(budget)
        finally:
            self._call = None
            self._lock.release()

    def _infer_locked(self, inputs: Any, budget: Backoff | None, deadline: float | None) -> dict[str, np.ndarray]:
        if self.model is None:
            self._with_retry(self._connect, budget, deadline)
        return self._with_retry(lambda: self._infer_once(inputs), budget, deadline)

    def _arrays(self, inputs: Any) -> dict[str, np.ndarray]:
        """The request's arrays by input name, checked against the model (one-line ClientErrors)."""
        model: TensorModel = self.model
        if isinstance(inputs, FrameInput):
            if inputs.key != FrameInput.key_of(model):
                raise FrameError(f"this frame input was made for another model's preprocessing than {model.name!r}'s.")
            return {model.inputs[0].name: inputs.tensor}
        if isinstance(inputs, np.ndarray):
            return {model.inputs[0].name: FrameInput.of(inputs, model).tensor}
        if not isinstance(inputs, Mapping):
            raise ClientError(f"inputs must be a dict of arrays by input name (or a frame), not "
                              f"{type(inputs).__name__}.")
        names = [t.name for t in model.inputs]
        if sorted(inputs) != sorted(names):
            raise ClientError(f"model {model.name!r} takes the inputs {', '.join(names)}; got "
                              f"{', '.join(map(str, inputs)) or 'none'}.")
        arrays = {}
        for tensor in model.inputs:
            array = np.ascontiguousarray(inputs[tensor.name], dtype=NUMPY_OF[tensor.datatype])
            sample = array.shape[1:] if model.max_batch_size > 0 else array.shape
            batch_ok = model.max_batch_size == 0 or 1 <= array.shape[0] <= model.max_batch_size if array.ndim else False
            if len(sample) != len(tensor.shape) or not batch_ok or any(
                    d > 0 and d != s for d, s in zip(tensor.shape, sample)):
                want = ([f"1..{model.max_batch_size}"] if model.max_batch_size > 0 else []) + list(tensor.shape)
                raise ClientError(f"input {tensor.name!r} of {model.name!r} takes {want} (-1: any), not "
                                  f"{list(array.shape)}.")
            arrays[tensor.name] = array
        return arrays

    def _infer_once(self, inputs: Any) -> dict[str, np.ndarray]:
        """One attempt: (re)connect if needed, fill the slot, infer, copy the outputs out."""
        import tritonclient.grpc as grpcclient

        if self._stale:
            self._connect()
        model: TensorModel = self.model
        slot: TensorSlot = self._slots[0]
        arrays = self._arrays(inputs)
        batch = next(iter(arrays.values())).shape[0] if model.max_batch_size > 0 else 1
        upload = inputs.upload if isinstance(inputs, FrameInput) and slot.use_shm else None
        if upload is not None and upload.url != self.url:
            upload = None  # uploaded for another server: copied here as any frame input
        request = []
        for name, array in arrays.items():
            tensor = grpcclient.InferInput(name, list(array.shape), next(t.datatype for t in model.inputs
                                                                          if t.name == name))
            if upload is not None:
                if upload.name not in self._registered:
                    with self._registering(upload.region):
                        upload.region.register(self._grpc, self._timeout())
                tensor.set_shared_memory(upload.name, upload.nbytes)
            elif slot.use_shm:
                self.input_copies += isinstance(inputs, (FrameInput, np.ndarray))
                region, old = slot.input_region(name, array.nbytes)
                if old is not None:
                    self._drop_on_server(forget_regions([old], self._registered))
                np.copyto(region.array(array.dtype, array.shape), array)
                tensor.set_shared_memory(region.name, array.nbytes)
            else:
                tensor.set_data_from_numpy(array)
            request.append(tensor)
        self._register(self._unregistered([slot]))
        wanted = []
        for spec in model.outputs:
            output = grpcclient.InferRequestedOutput(spec.name)
            out_region = slot.outputs.get(spec.name)
            if out_region is not None:
                output.set_shared_memory(out_region.name, self._output_bytes(spec, batch))
            wanted.append(output)
        result = self._grpc.infer(model.name, request, model_version=self.version, outputs=wanted,
                                  client_timeout=self._timeout())
        return {spec.name: self._output(result, slot, spec, batch) for spec in model.outputs}

    def _output_bytes(self, spec: Any, batch: int) -> int:
        shape = self.model.sample_shape(spec)
        count = int(np.prod(shape)) * (batch if self.model.max_batch_size > 0 else 1)
        return count * np.dtype(NUMPY_OF[spec.datatype]).itemsize

    def _output(self, result: Any, slot: TensorSlot, spec: Any, batch: int) -> np.ndarray:
        """An output as a new array; one of another shape or datatype than the model's means another version."""
        answered = result.get_output(spec.name)
        shape = [int(d) for d in answered.shape] if answered is not None else []
        want = ([batch] if self.model.max_batch_size > 0 else []) + list(spec.shape)
        if answered is None or answered.datatype != spec.datatype or len(shape) != len(want) or any(
                w > 0 and w != s for w, s in zip(want, shape)):
            got = f"{answered.datatype} {shape}" if answered is not None else f"no {spec.name!r}"
            raise ModelChangedError(f"model {self.model.name!r} answered with {got}, not the {spec.datatype} {want} "
                                    f"{spec.name!r} it had when the client read it: the server loaded another version; "
                                    "the next call re-reads the model.")
        region = slot.outputs.get(spec.name)
        if region is not None:
            return region.array(NUMPY_OF[spec.datatype], tuple(shape)).copy()
        return np.array(result.as_numpy(spec.name), copy=True)

    # -- calls to the server

    def _timeout(self) -> float:
        """An RPC's timeout: client_timeout, cut to what is left of the running call's own deadline."""
        return self._rpc_timeout(self._call)

    def _grace(self) -> float:
        """How long to keep asking the server to drop a region it still holds, within the call's deadline."""
        return self._unregister_within(self._call)

    def _connect(self) -> None:
        """Read metadata + config, validate, and (re)build the buffers if the model changed."""
        args = (self.model_name, self.version)
        if self._unregister_later:  # what a server that did not answer at release() or a restart still holds
            later = sorted(self._unregister_later)
            self._unregister_later.difference_update(later)
            self._drop_on_server(later)
        metadata = self._grpc.get_model_metadata(*args, client_timeout=self._timeout())
        config = self._grpc.get_model_config(*args, client_timeout=self._timeout())
        ready = self._grpc.is_model_ready(*args, client_timeout=self._timeout())
        self._drop_on_server(self._adopt(metadata, config, ready))

    def _unregister_now(self, names: list[str]) -> list[str]:
        """close() and release(): unregister `names` within CLOSE_WITHIN; those the server did not drop by then."""
        return unregister(self._grpc, names, min(self.client_timeout, CLOSE_WITHIN), CLOSE_WITHIN)

    def _drop_on_server(self, names: list[str]) -> None:
        """Unregister `names` within the call's time; those the server did not answer for wait for the next connect."""
        self._unregister_later.update(unregister(self._grpc, names, self._timeout(), self._grace()))

    def _register(self, regions: list[ShmRegion]) -> None:
        for region in regions:
            with self._registering(region):
                region.register(self._grpc, self._timeout())

    def _with_retry(self, attempt: Callable[[], T], budget: Backoff | None = None, deadline: float | None = None) -> T:
        backoff = self._retries(budget)
        while True:
            try:
                result = attempt()
            except server_errors() as exc:
                time.sleep(self._after_failure(backoff, exc, deadline))
                continue
            self.recoveries += backoff.retried
            return result
