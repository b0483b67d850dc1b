"""What LaneDetClient and AsyncLaneDetClient share beyond the tensors (served_model, buffers, request).

The transport choice, how server errors map to `ClientError`s and which are
retried, the backoff, `ClientSettings` (the constructors' arguments, checked and
resolved once) and `ClientBase`: the state of a client (the model, its
request buffers, the regions the server knows) and every decision about it.
The two clients only add the calls to the server (tritonclient.grpc or
tritonclient.grpc.aio) in between.
"""
from __future__ import annotations

import contextlib
import inspect
import ipaddress
import time
import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Iterator, Mapping, Sequence, TypedDict, TypeVar

import numpy as np

from ..errors import (
    ClientError,
    LanesUnavailable,
    ModelChangedError,
    ModelUnavailable,
    ModelNotReadyError,
    ServerTimeoutError,
    ServerUnavailableError,
    TLSRefusedError,
    one_line,
)
from ..lanedet.decode_params import DecodeParams, DecodeParamsError, ScoreNmsDecodeParams
from .buffers import Slot
from .request import Request, build_request, read_lanes
from .served_model import LaneModel, decode_params, describe_model
from .shm import ShmRegion
from ..tls.config import SOCKET_CLOSED, TLSConfig, explain_refusal, handshake_failure
from ..geometry.frame_markers import LaneGeometry
from ..core.numbers import FPS, TIMEOUT_S, Range

if TYPE_CHECKING:
    from ..lanedet.lane import Lane

RETRY_DEADLINE_S = Range(0, TIMEOUT_S.high, "seconds")  # 0: no retries

DEFAULT_URL = "127.0.0.1:8001"
DEFAULT_MODEL = "lanedet"
TRANSPORTS = ("auto", "shm", "grpc")

# Same defaults as tritonclient, plus a short reconnect backoff so a restarted server is found again within a
# quarter of a second of listening instead of gRPC's default (up to 120 s): a LaneStream's first "ok" after a
# restart waits for it (1 s at most here left 2 of 5 outages over a second from ready to lanes; BENCHMARKS.md).
# On loopback or a vehicle's own network four connection attempts a second to a stopped server cost nothing.
CHANNEL_ARGS = [
    ("grpc.max_send_message_length", 2**31 - 1),
    ("grpc.max_receive_message_length", 2**31 - 1),
    ("grpc.keepalive_time_ms", 2**31 - 1),
    ("grpc.keepalive_timeout_ms", 20000),
    ("grpc.keepalive_permit_without_calls", False),
    ("grpc.http2.max_pings_without_data", 2),
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.min_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 250),
]


# --- transport -----------------------------------------------------------------------------


def is_local_url(url: str) -> bool:
    """True when `url` points at this host (loopback address, localhost, or a unix socket)."""
    if url.startswith("unix:"):
        return True
    host = url.rsplit(":", 1)[0] if url.count(":") == 1 or url.startswith("[") else url
    host = host.strip("[]")
    if host in ("localhost", "ip6-localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def resolve_transport(transport: str, url: str) -> str:
    """'shm' or 'grpc' for a transport request ('auto' = shm on this host)."""
    if transport not in TRANSPORTS:
        raise ClientError(f"unknown transport {transport!r}; use one of {', '.join(TRANSPORTS)}.")
    if transport == "auto":
        return "shm" if is_local_url(url) else "grpc"
    if transport == "shm" and not is_local_url(url):
        raise ClientError(
            f"transport 'shm' needs the server on this host, but {url} is not a loopback address; use transport='grpc'."
        )
    return transport


# --- errors and retries --------------------------------------------------------------------


def server_errors() -> tuple[type[Exception], ...]:
    """What a failed call to the server raises: tritonclient's exception, or ModelNotReadyError from our checks."""
    from tritonclient.utils import InferenceServerException

    return InferenceServerException, ModelNotReadyError


def status_of(exc: Any) -> str:
    """The gRPC status name of a tritonclient exception ('' for other exceptions)."""
    status = exc.status() if hasattr(exc, "status") else None
    return (status or "").replace("StatusCode.", "")


# What Triton answers a request built for another version of the model (2.51's messages).
_OTHER_VERSION = ("shared memory size specified with the request for output", "unexpected shape for input",
                  "data-type is")


def model_changed(exc: Exception) -> bool:
    """Whether a failure says the server now serves another version of the model (same server process)."""
    if isinstance(exc, ModelChangedError):
        return True
    msg = one_line(exc, 2000).lower() if status_of(exc) else ""
    return any(fragment in msg for fragment in _OTHER_VERSION)


def is_retryable(exc: Exception, was_ready: bool) -> bool:
    """UNAVAILABLE, or (after we were served once) a model or shm region the server forgot on restart,
    or a model the server replaced by another version."""
    if isinstance(exc, ModelNotReadyError) or model_changed(exc):
        return was_ready
    status = status_of(exc)
    msg = one_line(exc, 2000).lower()
    if handshake_failure(msg):
        return False  # certificates do not change by waiting
    if status == "UNAVAILABLE":
        # A server that closes the connection before we were ever served refuses our TLS (or lack of it).
        return was_ready or SOCKET_CLOSED not in msg
    if "shared memory region" in msg and ("unable to find" in msg or "not found" in msg):
        return True
    return was_ready and status == "NOT_FOUND" and "model" in msg


def unavailability(exc: Exception) -> str | None:
    """Why a failure means "no lanes now" rather than a mistake: "unreachable" (no server answers), "not_ready" (the
    model is missing, loading or being replaced) or "slow" (the RPC ran out of time); None for any other failure (a
    bad frame, a model that does not fit, TLS refused), which waiting does not mend."""
    if isinstance(exc, ModelNotReadyError) or model_changed(exc):
        return "not_ready"
    status, msg = status_of(exc), one_line(exc, 2000).lower()
    if handshake_failure(msg):
        return None
    if status == "UNAVAILABLE":
        return "slow" if timed_out(msg) else "unreachable"
    if status == "DEADLINE_EXCEEDED":
        return "slow"
    if "shared memory region" in msg and ("unable to find" in msg or "not found" in msg):
        return "not_ready"  # a restarted server that does not know our regions yet
    if status == "NOT_FOUND" or "not ready" in msg or "unknown model" in msg:
        return "not_ready"
    return None


def worst_reason(reasons: set[str]) -> str:
    """Of what the attempts of a call whose deadline ran out met, what says most: a server gone before a model not
    ready, before a slot of this client's still taken, before a slow answer ("slow" when they met nothing)."""
    return next((r for r in ("unreachable", "not_ready", "busy", "slow") if r in reasons), "slow")


def lanes_unavailable(reason: str, deadline: float, url: str, model: str,
                      kind: type[ModelUnavailable] = LanesUnavailable) -> ModelUnavailable:
    """The one-line LanesUnavailable (or another `kind` of ModelUnavailable) of a call whose `deadline` (seconds)
    ran out for `reason`."""
    why = {
        "unreachable": f"Triton at {url} is unreachable (stopped or restarting)",
        "not_ready": f"model {model!r} is not ready on {url} (loading, restarting or not installed)",
        "slow": f"Triton at {url} did not answer in time (overloaded, restarting, or the model is slower than the "
                "deadline)",
        "busy": "another call of this client was still running",
    }[reason]
    what = "lanes" if issubclass(kind, LanesUnavailable) else f"answer from {model!r}"
    return kind(f"no {what} within the deadline of {deadline * 1000:g} ms: {why}; the next call carries on "
                "(reconnecting if needed).", reason)


# Not plain "timeout": gRPC 1.67 reports a connect attempt to a refused port cut short by the call's deadline as
# "Timeout occurred: FD Shutdown", which is a server that is not there, not a busy one.
_TIMED_OUT = ("timed out", "deadline exceeded")


def timed_out(msg: str) -> bool:
    """Whether an UNAVAILABLE failure is a connection the server took but did not answer in time (a busy server;
    gRPC says "connection attempt timed out before receiving SETTINGS frame"), not a refused or lost one."""
    return any(word in msg.lower() for word in _TIMED_OUT)


def to_client_error(exc: Any, url: str, model: str, client_timeout: float | None,
                    tls: TLSConfig | None = None) -> ClientError:
    """A one-line ClientError for a tritonclient exception."""
    status, msg = status_of(exc), one_line(exc, 2000)
    refusal = explain_refusal(tls, msg) if status in ("UNAVAILABLE", "UNKNOWN") else None
    if refusal is not None:
        return TLSRefusedError(f"{'TLS connection' if tls else 'connection'} to Triton at {url} failed: {refusal}.")
    if status == "DEADLINE_EXCEEDED" or (status == "UNAVAILABLE" and timed_out(msg)):
        return ServerTimeoutError(
            f"Triton at {url} took the request but did not answer in time ({msg}; a request waits at most "
            f"client_timeout={client_timeout} s, less when the call's deadline or retry_deadline has less left); "
            "the server is busy or hung, not gone: check `edge-deploy status`, or raise the timeout (--timeout, "
            "client_timeout)."
        )
    if status == "UNAVAILABLE":
        why = "refused the connection: nothing listens there" if "refused" in msg.lower() else "is unreachable"
        return ServerUnavailableError(
            f"Triton at {url} {why} ({msg}); start it with `edge-deploy serve` or check --url."
        )
    if model_changed(exc):
        return ModelChangedError(
            f"model {model!r} at {url} now takes or returns other tensors than when the client read it ({msg}); "
            "a new version was loaded: the next call re-reads the model."
        )
    if status == "NOT_FOUND" or "not ready" in msg.lower() or "unknown model" in msg.lower():
        return ModelNotReadyError(
            f"model {model!r} is not ready on {url} ({msg}); install it with `edge-deploy install` "
            "and check `edge-deploy models`."
        )
    return ClientError(f"request to {model!r} at {url} failed: {status or 'error'}: {msg}")


class Backoff:
    """Sleeps between attempts: 50 ms, doubling up to `cap`, as long as they end before the deadline.

    `floor`: the shortest RPC timeout `rpc_timeout` gives (50 ms for the retry deadline; a caller's own
    `deadline=` gets 1 ms, so no RPC outlives the call's deadline by more than that)."""

    def __init__(self, seconds: float, cap: float, *, floor: float = 0.05, first: float = 0.05) -> None:
        self.seconds = seconds
        self.deadline = time.monotonic() + seconds
        self.cap = cap
        self.floor = floor
        self.delay = first
        self.retried = False  # has a sleep been granted
        self.reasons: set[str] = set()  # what the failed attempts of a call with its own deadline ran into

    def left(self) -> float:
        """Seconds to the deadline (negative once past it)."""
        return self.deadline - time.monotonic()

    def rpc_timeout(self, limit: float) -> float:
        """`limit`, cut to the time left (at least `floor`)."""
        return max(self.floor, min(limit, self.deadline - time.monotonic()))

    def next(self) -> float | None:
        """The next sleep, or None when it would end past the deadline."""
        if time.monotonic() + self.delay > self.deadline:
            return None
        delay, self.delay = self.delay, min(self.delay * 2, self.cap)
        self.retried = True
        return delay


# --- shared memory bookkeeping -------------------------------------------------------------

UNREGISTER_GRACE = 2.0  # seconds to keep asking the server to drop a region it still holds
CLOSE_WITHIN = 1.0  # seconds close() (and an app's release()) may spend asking the server to drop regions


def unregister_is_final(exc: Exception) -> bool:
    """Whether a failed unregister is not worth repeating.

    A server that is gone (restarted) took its mapping with it; one that took the connection and did not answer
    (hung, busy) still holds it. Otherwise Triton
    can still hold a region for a request it has just answered (seen with the
    ensemble's frame region), so the call is repeated briefly.
    """
    status = status_of(exc)
    if status == "UNAVAILABLE":
        return not timed_out(one_line(exc, 2000).lower())  # a connection that timed out may be a hung server's
    return status == "NOT_FOUND"


class Unregistering:
    """Regions a client asks the server to drop, all within one bound: the next name, each RPC's timeout, and what
    follows each try (the sync and async clients share it; their calls differ only in awaiting)."""

    def __init__(self, names: Sequence[str], within: float) -> None:
        self.left = list(names)
        self.backoff = Backoff(within, cap=0.2)

    def timeout(self, limit: float) -> float:
        return self.backoff.rpc_timeout(limit)

    def after(self, failure: Exception | None) -> float | None:
        """After a try at `left[0]` (`failure`: how it failed): 0 to go on at once (dropped, or gone with its
        server), a sleep before trying it again (the server still holds it, or did not answer), or None when the
        bound is over (what is left stays in `left`)."""
        if failure is None or unregister_is_final(failure):
            self.left.pop(0)
            return 0.0
        return self.backoff.next()


def forget_regions(regions: Sequence[ShmRegion], registered: set[str]) -> list[str]:
    """Close (unlink) `regions`; returns the names among them the server has, for the caller to unregister."""
    names = [r.name for r in regions if r.name in registered]
    registered.difference_update(names)
    for region in regions:
        region.close()
    return names


def release_slots(slots: list[Any], registered: set[str], *, every_name: bool = False) -> list[str]:
    """Close the regions of every slot and empty `slots`; returns the names to unregister: those the server is known
    to have, or with `every_name` all of them (after a failed call the client cannot know which a server kept)."""
    for slot in slots:
        slot.drop_views()
    regions = [r for slot in slots for r in slot.regions]  # closed ones too: unlinked here (at exit) is not unregistered
    slots.clear()
    known = forget_regions(regions, registered)
    return list(dict.fromkeys(r.name for r in regions)) if every_name else known


# --- the client state ----------------------------------------------------------------------


@dataclass(frozen=True)
class StageTimes:
    """Where one request's time went on the client, in seconds: writing the frames into the request (the
    preprocessing of a raw model), the call to the server, turning the answer into lanes (decoding)."""

    preprocess: float
    request: float
    decode: float
    frames: int


@dataclass(frozen=True)
class ClientSettings:
    """What a lane client is asked, checked and resolved once: LaneDetClient and AsyncLaneDetClient build one
    from their (same) arguments with `ClientSettings.of` and hand it to `ClientBase`."""

    url: str
    model: str
    version: str
    transport: str  # resolved: "shm" or "grpc"
    client_timeout: float
    retry_deadline: float
    overrides: tuple[float | None, float | None, int | None]  # conf_threshold, nms_threshold, top_k (None: the model's)
    tls: TLSConfig | None = None
    strict: bool = False  # fused models: refuse frames of another size instead of resizing them
    camera: Any = None  # an edge_deploy.geometry.Camera, for detect_markers
    track: bool = False
    fps: float | None = None  # detect_markers' frames are a stream at this rate (the offset's jump is checked)

    @classmethod
    def of(cls, url: str = DEFAULT_URL, model: str = DEFAULT_MODEL, *, version: str = "", transport: str = "auto",
           client_timeout: float = 10.0, retry_deadline: float = 30.0, conf_threshold: float | None = None,
           nms_threshold: float | None = None, top_k: int | None = None, tls: TLSConfig | None = None,
           strict: bool = False, camera: Any = None, track: bool = False,
           fps: float | None = None) -> "ClientSettings":
        """The clients' constructor arguments checked (one-line ClientErrors) and resolved."""
        if tls is not None and not isinstance(tls, TLSConfig):
            raise ClientError(f"tls must be a TLSConfig(ca=..., cert=..., key=...) or None, not {type(tls).__name__}.")
        try:  # refused here, not at the first detect(): the rules the decode parameters are made with
            ScoreNmsDecodeParams.check_given(conf_threshold=conf_threshold, nms_threshold=nms_threshold, top_k=top_k)
        except DecodeParamsError as exc:
            raise ClientError(f"{exc}.") from None
        resolved = resolve_transport(transport, url)
        if track and camera is None:
            raise ClientError("track=True follows lane markers, which need camera=Camera.from_yaml(path).")
        if fps is not None and (camera is None or not FPS.contains(fps)):
            raise ClientError(f"fps={fps!r}: give the frames per second (more than 0) of the stream detect_markers "
                              f"follows ({FPS.describe()}), with camera=Camera.from_yaml(path).")
        TIMEOUT_S.check("client_timeout", client_timeout, ClientError)
        RETRY_DEADLINE_S.check("retry_deadline", retry_deadline, ClientError)
        return cls(url, model, str(version), resolved, float(client_timeout), float(retry_deadline),
                   (conf_threshold, nms_threshold, top_k), tls, bool(strict), camera, bool(track),
                   None if fps is None else float(fps))


class LaneClientOptions(TypedDict, total=False):
    """The keyword arguments LaneDetClient and AsyncLaneDetClient take beside their own: `ClientSettings.of`'s, which
    checks them and holds their defaults."""

    version: str
    transport: str
    client_timeout: float
    retry_deadline: float
    conf_threshold: float | None
    nms_threshold: float | None
    top_k: int | None
    tls: TLSConfig | None
    strict: bool
    camera: Any
    track: bool
    fps: float | None


DETECT_DEFAULTS: dict[str, object] = {"color": "bgr", "conf_threshold": None, "nms_threshold": None, "top_k": None}


class DetectOptions(TypedDict, total=False):
    """What a lane client's detect and detect_batch take beside the frames and the deadline: the frames' color
    order ("bgr", the default, or "rgb") and the call's decode settings (None: the client's, else the model's)."""

    color: str
    conf_threshold: float | None
    nms_threshold: float | None
    top_k: int | None


_DETECT_KEYWORDS = frozenset(DetectOptions.__annotations__)  # read once, not at every detect


def detect_call(options: Mapping[str, Any]) -> tuple[str, tuple[float | None, float | None, int | None]]:
    """A detect call's `DetectOptions`: its color and its decode settings (conf_threshold, nms_threshold, top_k);
    a keyword it does not know is refused as Python refuses one."""
    unknown = sorted(set(options) - _DETECT_KEYWORDS)
    if unknown:
        raise TypeError(f"detect got an unexpected keyword argument {unknown[0]!r}")
    return (options.get("color", DETECT_DEFAULTS["color"]),
            (options.get("conf_threshold"), options.get("nms_threshold"), options.get("top_k")))


_Function = TypeVar("_Function", bound=Callable[..., Any])


def spelled_out(keywords: Callable[..., Any] | Mapping[str, object]) -> Callable[[_Function], _Function]:
    """Show the keywords a `**options: Unpack[...]` method takes in its signature, with their defaults (help(),
    inspect.signature, editors that read __signature__): `keywords`'s own keyword-only parameters (ClientSettings.of,
    which holds the constructor's defaults) or a mapping of names to defaults (DETECT_DEFAULTS)."""
    def spell(function: _Function) -> _Function:
        signature = inspect.signature(function)
        own = [p for p in signature.parameters.values() if p.kind is not p.VAR_KEYWORD]
        if callable(keywords):
            more = [p for p in inspect.signature(keywords).parameters.values() if p.kind is p.KEYWORD_ONLY]
        else:
            more = [inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=value)
                    for name, value in keywords.items()]
        taken = {p.name for p in own}
        function.__signature__ = signature.replace(  # type: ignore[attr-defined]
            parameters=own + [p for p in more if p.name not in taken])
        return function
    return spell


class ReadyWait:
    """The attempts of one wait_until_ready (the sync and async clients share it; their calls differ only in
    awaiting): each attempt's RPC timeout, what a failed one leaves, and the sleep before the next."""

    def __init__(self, client: "ClientBase", timeout: float) -> None:
        self.client = client
        self.timeout = timeout
        self.backoff = Backoff(timeout, cap=0.5)
        self.failure: Exception | None = None  # the latest attempt's that failed
        self.last: Exception | None = None  # this attempt's failure (None: the server answered, not ready)

    def attempt(self) -> float:
        """Start an attempt (on an open client): its RPCs' timeout."""
        self.client._check_open()
        self.last = None
        return self.backoff.rpc_timeout(self.client.client_timeout)

    def failed(self, exc: Exception) -> None:
        self.last = self.failure = self.client._attempt_failure(exc, self.failure)

    def delay(self) -> float:
        """The sleep before the next attempt, or the wait's error once its timeout is over."""
        return self.client._wait_delay(self.backoff, self.last, self.timeout)


class ClientBase:
    """The state of a lane client and its decisions; subclasses make the calls to the server.

    Requests in flight at once: `max_in_flight` (1 here), each with its own `Slot`.
    """

    max_in_flight = 1
    unavailable_error: type[ModelUnavailable] = LanesUnavailable  # what a call whose deadline ran out raises

    def __init__(self, settings: ClientSettings) -> None:
        self.settings = settings
        self.url = settings.url
        self.tls = settings.tls
        self.model_name = settings.model
        self.version = settings.version
        self.transport = settings.transport
        self.client_timeout = settings.client_timeout
        self.retry_deadline = settings.retry_deadline
        self.model: Any = None  # set once the server has described it (a LaneModel for a lane client)
        self.recoveries = 0  # calls that succeeded after the server had been unavailable
        self._overrides = settings.overrides  # this client's conf_threshold, nms_threshold, top_k (None: the model's)
        self._slots: list[Any] = []  # Slots (a lane client) or TensorSlots (ModelClient); shared with the finalizer
        self._registered: set[str] = set()  # names of our regions the server has
        self._stale = False  # the server may have restarted: re-read the model before the next request
        self._closed = False
        self.strict = settings.strict
        self._warned_resize = False
        # detect_markers: the camera's lane geometry (edge_deploy.geometry: numpy, OpenCV, PyYAML only)
        self.geometry = None
        if settings.camera is not None:
            self.geometry = LaneGeometry(settings.camera, track=settings.track, fps=settings.fps)
        # `edge-deploy bench`: when a list, each request appends its StageTimes (None: not timed).
        self.stage_log: list[StageTimes] | None = None

    @property
    def shm_regions(self) -> list[str]:
        """Names of this client's shared memory regions (empty with gRPC transport)."""
        return [r.name for slot in self._slots for r in slot.regions]

    def _frame_markers(self, lanes: list[Any], frame: np.ndarray) -> Any:
        if self.geometry is None:
            raise ClientError(f"detect_markers needs the camera: create the {type(self).__name__} with "
                              "camera=Camera.from_yaml(path).")
        return self.geometry.frame_markers(lanes, frame)

    def _unavailable(self, reason: str, deadline: float | None) -> ModelUnavailable:
        return lanes_unavailable(reason, deadline or 0.0, self.url, self.model_name, self.unavailable_error)

    def _describe(self, metadata: Any, config: Any) -> Any:
        """The served model as this client understands it (a lane client: a `LaneModel`)."""
        return describe_model(metadata, config)

    def _check_open(self) -> None:
        if self._closed:
            raise ClientError(f"this {type(self).__name__} is closed; create a new one.")

    def _error(self, exc: Exception) -> ClientError:
        if isinstance(exc, ClientError):
            return exc
        return to_client_error(exc, self.url, self.model_name, self.client_timeout, self.tls)

    def _adopt(self, metadata: Any, config: Any, ready: bool) -> list[str]:
        """Take the model the server describes, with new slots if it changed; returns region names to unregister."""
        if not ready:
            raise ModelNotReadyError(
                f"model {self.model_name!r} is loaded on {self.url} but not ready; check `edge-deploy models` "
                "and the server log."
            )
        model = self._describe(metadata, config)
        gone: list[str] = []
        if model != self.model or not self._slots:
            gone = release_slots(self._slots, self._registered)
            self.model = model
            self._make_slots(model)
        self._stale = False
        return gone

    def _make_slots(self, model: LaneModel) -> None:
        self._slots.extend(Slot(model, self.transport == "shm") for _ in range(self.max_in_flight))

    def _unregistered(self, slots: Sequence[Any]) -> list[ShmRegion]:
        """The regions of `slots` the server does not have yet."""
        return [r for slot in slots for r in slot.regions if r.name not in self._registered and not r.closed]

    @contextlib.contextmanager
    def _registering(self, region: ShmRegion) -> Iterator[None]:
        """Around the RPC that registers `region`: note it as registered."""
        try:
            yield
        except Exception as exc:
            # ALREADY_EXISTS: the same server still has it (we only lost track after an error).
            if status_of(exc) != "ALREADY_EXISTS":
                raise
        self._registered.add(region.name)

    def _chunks(self, frames: list[np.ndarray]) -> list[list[np.ndarray]]:
        """Checked frames in requests of at most the model's batch capacity."""
        assert self.model is not None
        cap = self.model.batch_capacity
        return [frames[i : i + cap] for i in range(0, len(frames), cap)]

    def _prepare(self, slot: Slot, frames: list[np.ndarray], color: str) -> tuple[Request, list[str], list[ShmRegion]]:
        """Write `frames` into `slot`: the request, the region names to unregister and the regions to register."""
        request, replaced = build_request(slot, frames, color, strict=self.strict)
        if request.resized and not self._warned_resize:
            self._warned_resize = True
            size = slot.model.frame_size or (0, 0)
            warnings.warn(
                f"{slot.model.name} takes {size[1]}x{size[0]} camera frames (preprocessing fused into the model); "
                "frames of other sizes are resized on the CPU first (warned once; strict=True refuses them)",
                RuntimeWarning, stacklevel=4,
            )
        gone = forget_regions([replaced], self._registered) if replaced is not None else []
        return request, gone, self._unregistered([slot])

    def _lanes(self, slot: Slot, request: Request, result: Any, params: DecodeParams,
               times: tuple[float, float, float]) -> list[list[Lane]]:
        """The lanes of an answered request; with `stage_log` on, its StageTimes (`times`: time.perf_counter() at
        the request's start, once it was written, once it was answered)."""
        lanes = read_lanes(slot, request, result, params)
        if self.stage_log is not None:
            start, prepared, answered = times
            self.stage_log.append(StageTimes(prepared - start, answered - prepared, time.perf_counter() - answered,
                                             len(request.boxes)))
        return lanes

    def _params(self, call: tuple[float | None, float | None, int | None]) -> DecodeParams:
        """The decode settings of a call: its own values over this client's over the model config's."""
        assert self.model is not None
        (conf, nms, top_k), (my_conf, my_nms, my_top_k) = call, self._overrides
        return decode_params(self.model, my_conf if conf is None else conf, my_nms if nms is None else nms,
                             my_top_k if top_k is None else top_k, self.model.decode)

    def _call_backoff(self, deadline: float | None) -> Backoff | None:
        """The budget of a call with its own `deadline` (seconds), which bounds its RPCs and its retries; None for a
        call without one."""
        if deadline is None:
            return None
        if not deadline > 0 or deadline == float("inf"):
            raise ClientError(f"deadline must be a positive number of seconds (or None), not {deadline!r}.")
        return Backoff(float(deadline), cap=0.05, floor=0.001, first=0.01)

    def _retries(self, budget: Backoff | None) -> Backoff:
        """The retries of one request: within the call's `budget`, or (a call without a deadline) `retry_deadline`."""
        return budget or Backoff(self.retry_deadline, cap=1.0)

    def _rpc_timeout(self, budget: Backoff | None) -> float:
        """An RPC's timeout: client_timeout, cut to what is left of the call's own deadline (`budget`)."""
        return budget.rpc_timeout(self.client_timeout) if budget is not None else self.client_timeout

    def _unregister_within(self, budget: Backoff | None) -> float:
        """How long to keep asking the server to drop a region it still holds: UNREGISTER_GRACE, within the call's
        own deadline (`budget`)."""
        return UNREGISTER_GRACE if budget is None else max(0.0, min(UNREGISTER_GRACE, budget.left()))

    def _after_failure(self, backoff: Backoff, exc: Exception, deadline: float | None = None) -> float:
        """The sleep before retrying a failed call, or raise its ClientError (LanesUnavailable when the call has a
        `deadline` and the failure is one that waiting may mend)."""
        changed = model_changed(exc)  # the same server process, another version of the model
        if deadline is not None:
            reason = unavailability(exc)
            if reason is not None:
                if reason != "slow":
                    # a restarted server may not know our model or regions: the next call picks up where this one
                    # stopped. A slow one is the same process (a new one shows itself by forgetting our regions,
                    # "not_ready"): re-reading and re-registering would only add RPCs to a loaded server.
                    self._expect_new_server(changed)
                backoff.reasons.add(reason)
                delay = backoff.next()
                if delay is None:
                    # an RPC to a server that went away can end in a timeout while gRPC reconnects: what an
                    # earlier attempt saw says more than "slow". A slot another request of the call waits for
                    # ("busy", async) is not why this one's RPCs failed.
                    raise self._unavailable(worst_reason(backoff.reasons - {"busy"}), deadline) from None
                return delay
        retry = is_retryable(exc, self.model is not None)
        error = self._error(exc)
        delay = backoff.next() if retry else None
        self._stale = self._stale or changed
        if delay is None:
            if retry and self.retry_deadline > 0:
                raise type(error)(f"{str(error).rstrip('.')} (retried for {self.retry_deadline:g} s).") from None
            raise error from None
        self._expect_new_server(changed)
        return delay

    def _expect_new_server(self, changed: bool) -> None:
        """After a failure that may come from a restart: re-read the model before the next request, and (unless the
        same server only changed the model's version) register our regions again."""
        if not changed:
            # The server may be a new process: it knows neither our regions nor, perhaps, the same model.
            self._registered.clear()
        self._stale = True

    def _attempt_failure(self, exc: Exception, earlier: Exception | None) -> Exception:
        """The failure of one wait_until_ready attempt. A server an earlier attempt saw take the connection without
        answering (`earlier`) stays so when a later attempt ends unreachable without a refusal: gRPC 1.67 reports an
        attempt cut short by its timeout as "Timeout occurred: FD Shutdown", whatever the server did."""
        error = self._error(exc)
        if (isinstance(earlier, ServerTimeoutError) and isinstance(error, ServerUnavailableError)
                and "refused" not in one_line(exc, 2000).lower()):
            return earlier
        return error

    def _wait_delay(self, backoff: Backoff, last: Exception | None, timeout: float) -> float:
        """The next sleep of wait_until_ready, or its error once `timeout` is over (`last`: the last failure)."""
        delay = backoff.next()
        if delay is not None:
            return delay
        if isinstance(last, ServerTimeoutError):
            raise ServerTimeoutError(
                f"Triton at {self.url} took the connection but did not answer within {timeout:g} s (busy or hung); "
                "check `edge-deploy status`, or wait longer."
            )
        if isinstance(last, ServerUnavailableError):
            raise ServerUnavailableError(
                f"Triton at {self.url} was not reachable within {timeout:g} s; start it with "
                "`edge-deploy serve` or check --url."
            )
        raise ModelNotReadyError(
            f"model {self.model_name!r} was not ready on {self.url} within {timeout:g} s; install it with "
            "`edge-deploy install` and check `edge-deploy models`."
        )

    def __repr__(self) -> str:
        kind = self.model.kind if self.model else "not connected"
        extra = f", max_in_flight={self.max_in_flight}" if self.max_in_flight > 1 else ""
        return f"{type(self).__name__}({self.url!r}, {self.model_name!r}, transport={self.transport!r}{extra}, {kind})"
