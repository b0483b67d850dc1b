"""LaneDetClient: frames in, lanes out, from a Triton server over gRPC.

The client reads the served model's metadata and config once and configures
itself from them: the input name, dtype (FP32/FP16) and size, the batch size,
and the preprocessing spec and decode defaults that `edge-deploy install`
writes into the config parameters. Two kinds of model are accepted:

- a raw lane model (input [B,] 3 x H x W float, output [B,] N x 77): the client
  preprocesses the frame and decodes the raw output (`decode_lanes`);
- an ``NAME_pipeline`` ensemble (input a UINT8 H x W x 3 frame): the server
  preprocesses and decodes, the client only turns its padded lanes into `Lane`s.

Transport: when the server is on this host (a loopback URL) the tensors travel
through system shared memory (`shm.ShmRegion`): the preprocessing writes the
model input straight into the mapped region and the decoder reads the output
from it, so a request carries no tensor bytes. Otherwise, or with
transport="grpc", the tensors go inside the gRPC messages.

Every RPC has `client_timeout`. When the server is unreachable (UNAVAILABLE,
e.g. while it restarts) a call retries with backoff until `retry_deadline`,
re-reads the model description and re-registers the shared memory regions
with the new server process. Failures are `ClientError` subclasses with
one-line messages.
"""
from __future__ import annotations

import ipaddress
import json
import math
import threading
import time
import weakref
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence, TypeVar

import numpy as np

from ..errors import ClientError, FrameError, ModelMismatchError, ModelNotReadyError, ServerUnavailableError
from ..manifest import LANEATT_DECODE, LANEATT_PREPROCESS
from ..model_config import LANES, NUM_LANES, NUM_POINTS, PARAM_DECODE, PARAM_PREPROCESS, SCORES
from .decode import ROW_WIDTH, DecodeError, Lane, decode_lanes
from .shm import ShmRegion

__all__ = ["DEFAULT_URL", "DEFAULT_MODEL", "LaneDetClient", "LaneModel", "describe_model", "check_frame", "is_local_url"]

DEFAULT_URL = "127.0.0.1:8001"
DEFAULT_MODEL = "lanedet"
TRANSPORTS = ("auto", "shm", "grpc")
COLORS = ("bgr", "rgb")

# NAME_pipeline's outputs, as `edge-deploy install --pipeline` generates them (edge_deploy.model_config).
PIPE_OUTPUTS = (LANES, SCORES, NUM_POINTS, NUM_LANES)

_NUMPY_DTYPES = {"FP32": np.float32, "FP16": np.float16, "UINT8": np.uint8}
# Same defaults as tritonclient, plus a short reconnect backoff so a restarted
# server is found again within a second instead of gRPC's default (up to 120 s).
_CHANNEL_ARGS = [
    ("grpc.max_send_message_length", 2**31 - 1),
    ("grpc.max_receive_message_length", 2**31 - 1),
    ("grpc.keepalive_time_ms", 2**31 - 1),
    ("grpc.keepalive_timeout_ms", 20000),
    ("grpc.keepalive_permit_without_calls", False),
    ("grpc.http2.max_pings_without_data", 2),
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.min_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 1000),
]

T = TypeVar("T")


# --- what the server serves ----------------------------------------------------------------


@dataclass(frozen=True)
class LaneModel:
    """A served lane model as the client understands it (from metadata + config)."""

    name: str
    kind: str  # "raw" (client-side pre/post) | "pipeline" (server-side pre/post)
    input_name: str
    input_datatype: str  # FP32 | FP16 | UINT8
    input_shape: tuple[int, ...]  # the request shape for one batch (raw: [B,]3,H,W; pipeline: -1,-1,3)
    max_batch_size: int  # Triton's; 0 = no batch axis
    output_name: str = ""  # raw: the N x 77 tensor
    output_datatype: str = "FP32"
    num_rows: int = 0  # raw: N
    preprocess: dict[str, Any] = field(default_factory=dict)
    decode: dict[str, Any] = field(default_factory=dict)
    version: str = ""

    @property
    def batch_capacity(self) -> int:
        """How many frames one request carries at most."""
        if self.kind == "pipeline":
            return 1
        if self.max_batch_size > 0:
            return self.max_batch_size
        return self.input_shape[0] if len(self.input_shape) == 4 else 1

    @property
    def input_size(self) -> tuple[int, int]:
        """(H, W) of the model input (raw models)."""
        return int(self.input_shape[-2]), int(self.input_shape[-1])


def _one_line(text: Any) -> str:
    return " ".join(str(text).split())


def _config_json(config: Any, key: str) -> dict[str, Any] | None:
    if key not in config.parameters:
        return None
    text = config.parameters[key].string_value
    try:
        value = json.loads(text) if text else {}
    except ValueError:
        raise ModelMismatchError(
            f"model {config.name!r} has an unreadable {key} parameter ({text[:60]!r}); reinstall it with `edge-deploy install`."
        ) from None
    return value if isinstance(value, dict) else None


def describe_model(metadata: Any, config: Any) -> LaneModel:
    """Turn get_model_metadata / get_model_config answers (protobuf) into a LaneModel, or raise ModelMismatchError."""
    cfg = getattr(config, "config", config)
    name = metadata.name
    max_batch = int(cfg.max_batch_size)
    inputs = list(metadata.inputs)
    outputs = list(metadata.outputs)
    preprocess = {**LANEATT_PREPROCESS, **(_config_json(cfg, PARAM_PREPROCESS) or {})}
    decode = {**LANEATT_DECODE, **(_config_json(cfg, PARAM_DECODE) or {})}
    version = metadata.versions[-1] if len(metadata.versions) else ""

    def shape_of(tensor: Any) -> tuple[int, ...]:
        return tuple(int(d) for d in tensor.shape)

    def sample(shape: tuple[int, ...]) -> tuple[int, ...]:
        return shape[1:] if max_batch > 0 else shape

    if len(inputs) != 1:
        raise ModelMismatchError(
            f"model {name!r} has {len(inputs)} inputs ({', '.join(t.name for t in inputs)}); a lane model has one "
            "(a 3xHxW float image, or a UINT8 HxWx3 frame for NAME_pipeline): check --model."
        )
    tin = inputs[0]
    in_shape = shape_of(tin)
    if tin.datatype == "UINT8":
        frame = sample(in_shape)
        names = {t.name for t in outputs}
        if len(frame) != 3 or frame[2] != 3 or not set(PIPE_OUTPUTS) <= names:
            raise ModelMismatchError(
                f"model {name!r} takes UINT8 {list(in_shape)} and returns {sorted(names)}; a lane pipeline takes an "
                f"HxWx3 frame and returns {', '.join(PIPE_OUTPUTS)}: install it with `edge-deploy install --pipeline`."
            )
        return LaneModel(name=name, kind="pipeline", input_name=tin.name, input_datatype="UINT8",
                         input_shape=in_shape, max_batch_size=max_batch, preprocess=preprocess, decode=decode,
                         version=version)
    if tin.datatype not in ("FP32", "FP16"):
        raise ModelMismatchError(
            f"model {name!r} input {tin.name!r} is {tin.datatype}; a lane model takes an FP32 or FP16 image "
            "(or UINT8 frames for NAME_pipeline): check --model."
        )
    image = sample(in_shape)
    batched_fixed = max_batch == 0 and len(image) == 4 and image[0] >= 1
    chw = image[1:] if batched_fixed else image
    if len(chw) != 3 or chw[0] != 3 or chw[1] <= 0 or chw[2] <= 0:
        raise ModelMismatchError(
            f"model {name!r} input {tin.name!r} has shape {list(in_shape)}; a lane model takes [batch,] 3 x H x W "
            "with fixed H and W: check --model."
        )
    lane_outputs = [t for t in outputs if len(sample(shape_of(t))) in (2, 3) and shape_of(t)[-1] == ROW_WIDTH]
    if not lane_outputs:
        shapes = ", ".join(f"{t.name} {list(shape_of(t))}" for t in outputs)
        raise ModelMismatchError(
            f"model {name!r} returns {shapes}; a lane model returns [batch,] N x {ROW_WIDTH} "
            "(2 logits, start_y, start_x, length, 72 x offsets): check --model."
        )
    tout = next((t for t in lane_outputs if t.name == "predict_lanes"), lane_outputs[0])
    rows = shape_of(tout)[-2]
    if rows <= 0 or tout.datatype not in ("FP32", "FP16"):
        raise ModelMismatchError(
            f"model {name!r} output {tout.name!r} is {tout.datatype} {list(shape_of(tout))}; the client needs a "
            f"fixed number of FP32/FP16 rows of {ROW_WIDTH}: check the exported model."
        )
    h, w = chw[1], chw[2]
    if (int(preprocess.get("height", h)), int(preprocess.get("width", w))) != (h, w):
        raise ModelMismatchError(
            f"model {name!r} takes {h}x{w} images but its config says preprocess to "
            f"{preprocess.get('height')}x{preprocess.get('width')}; reinstall it with `edge-deploy install`."
        )
    preprocess["height"], preprocess["width"] = h, w
    return LaneModel(name=name, kind="raw", input_name=tin.name, input_datatype=tin.datatype,
                     input_shape=in_shape, max_batch_size=max_batch, output_name=tout.name,
                     output_datatype=tout.datatype, num_rows=rows, preprocess=preprocess, decode=decode,
                     version=version)


# --- inputs --------------------------------------------------------------------------------


def check_frame(frame: Any, index: int | None = None) -> np.ndarray:
    """`frame` as an HxWx3 uint8 image, or FrameError.

    uint8 frames pass through untouched; float frames (0..255, e.g. after OpenCV
    float maths) must be finite and are rounded and clipped to uint8.
    """
    where = "frame" if index is None else f"frame {index}"
    if not isinstance(frame, np.ndarray):
        raise FrameError(f"{where} is a {type(frame).__name__}, not a numpy array; pass an HxWx3 uint8 image (cv2.imread).")
    if frame.ndim != 3 or frame.shape[2] != 3:
        raise FrameError(
            f"{where} has shape {tuple(frame.shape)}; expected HxWx3 (a colour image: convert grey or BGRA "
            "images with cv2.cvtColor)."
        )
    if frame.size == 0:
        raise FrameError(f"{where} is empty (shape {tuple(frame.shape)}); check the camera or the file it came from.")
    if frame.dtype == np.uint8:
        return frame
    if frame.dtype.kind == "f":
        if not np.isfinite(frame).all():
            raise FrameError(f"{where} contains NaN or infinite values; pass a uint8 image or finite 0..255 floats.")
        return np.clip(np.rint(frame), 0, 255).astype(np.uint8)
    raise FrameError(f"{where} has dtype {frame.dtype}; expected uint8 (or float in 0..255).")


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


def _bgr(frame: np.ndarray, color: str) -> np.ndarray:
    if color not in COLORS:
        raise FrameError(f"unknown color order {color!r}; use 'bgr' (OpenCV) or 'rgb'.")
    return frame if color == "bgr" else frame[:, :, ::-1]


# --- buffers -------------------------------------------------------------------------------


def _make_preprocessor(spec: dict[str, Any], dtype: Any, batch: int, out: np.ndarray | None) -> Any:
    """A Preprocessor writing into `out` (e.g. the shared memory view) or its own buffer."""
    from .preprocess import PreprocessSpec, PreprocessSpecError, Preprocessor

    try:
        return Preprocessor(PreprocessSpec.from_dict(spec), dtype=dtype, batch=batch, out=out)
    except PreprocessSpecError as exc:
        raise ModelMismatchError(
            f"the served model's preprocessing spec is not usable: {exc}; reinstall it with `edge-deploy install`."
        ) from None


class _Slot:
    """The buffers of one request in flight: model input, model output, and their shm regions."""

    def __init__(self, model: LaneModel, use_shm: bool) -> None:
        self.model = model
        self.use_shm = use_shm
        self.regions: list[ShmRegion] = []
        self.input: np.ndarray | None = None
        self.output: np.ndarray | None = None
        self.pre: Any = None
        self.in_region: ShmRegion | None = None
        self.out_region: ShmRegion | None = None
        if model.kind == "raw":
            cap = model.batch_capacity
            h, w = model.input_size
            dtype = np.dtype(_NUMPY_DTYPES[model.input_datatype])
            in_shape = (cap, 3, h, w)
            out_dtype = np.dtype(_NUMPY_DTYPES[model.output_datatype])
            out_shape = (cap, model.num_rows, ROW_WIDTH)
            if use_shm:
                self.in_region = ShmRegion(int(np.prod(in_shape)) * dtype.itemsize, "in")
                self.regions.append(self.in_region)
                self.out_region = ShmRegion(int(np.prod(out_shape)) * out_dtype.itemsize, "out")
                self.regions.append(self.out_region)
                self.input = self.in_region.array(dtype, in_shape)
                self.output = self.out_region.array(out_dtype, out_shape)
            self.pre = _make_preprocessor(model.preprocess, dtype.type, cap, self.input)
            if self.input is None:
                self.input = self.pre.output

    def frame_view(self, shape: tuple[int, ...]) -> tuple[np.ndarray, ShmRegion | None, bool]:
        """Pipeline: a uint8 view of `shape` in the input region, growing it (a new region) if too small.

        Returns the view, the replaced region (to unregister and close) if any, and
        whether a new region was made (to register).
        """
        nbytes = int(np.prod(shape))
        if self.in_region is not None and self.in_region.byte_size >= nbytes:
            return self.in_region.array(np.uint8, shape), None, False
        old = self.in_region
        if old is not None:
            self.regions.remove(old)
        # Headroom so a stream of slightly different sizes does not re-create the region.
        self.in_region = ShmRegion(max(nbytes, 1640 * 590 * 3), "frame")
        self.regions.append(self.in_region)
        return self.in_region.array(np.uint8, shape), old, True

    def drop_views(self) -> None:
        """Forget every numpy view of the regions (they must be gone before a region closes)."""
        self.input = self.output = self.pre = None

    def close(self) -> None:
        self.drop_views()
        self.in_region = self.out_region = None
        for region in self.regions:
            region.close()
        self.regions.clear()


# --- requests ------------------------------------------------------------------------------


@dataclass
class _Request:
    """One inference request, ready to send (and everything needed to read its answer)."""

    inputs: list[Any]
    outputs: list[Any]
    count: int
    sizes: list[tuple[int, int]]


def _raw_request(grpc: Any, model: LaneModel, slot: _Slot, frames: Sequence[np.ndarray], color: str) -> _Request:
    from .preprocess import InvalidFrameError

    b = len(frames)
    for i, frame in enumerate(frames):
        try:
            slot.pre(frame, index=i, color=color)
        except InvalidFrameError as exc:
            raise FrameError(f"frame {i}: {exc}.") from None
    cap = model.batch_capacity
    fixed = model.max_batch_size == 0
    shape = list(model.input_shape) if fixed else [b, *model.input_shape[1:]]
    sent = cap if fixed and len(model.input_shape) == 4 else b  # a fixed-batch model always gets its batch
    inp = grpc.InferInput(model.input_name, shape, model.input_datatype)
    out = grpc.InferRequestedOutput(model.output_name)
    per_in = slot.input[0].nbytes
    if slot.use_shm:
        inp.set_shared_memory(slot.in_region.name, per_in * sent)
        out.set_shared_memory(slot.out_region.name, slot.output[0].nbytes * sent)
    else:
        inp.set_data_from_numpy(slot.input[:sent].reshape(shape))
    return _Request([inp], [out], b, [f.shape[:2] for f in frames])


def _pipeline_request(
    grpc: Any, model: LaneModel, slot: _Slot, frame: np.ndarray, color: str
) -> tuple[_Request, ShmRegion | None, bool]:
    shape = list(frame.shape) if model.max_batch_size == 0 else [1, *frame.shape]
    src = _bgr(frame, color)
    inp = grpc.InferInput(model.input_name, shape, "UINT8")
    old, created = None, False
    if slot.use_shm:
        view, old, created = slot.frame_view(tuple(frame.shape))
        np.copyto(view, src)
        inp.set_shared_memory(slot.in_region.name, view.nbytes)
        del view
    else:
        inp.set_data_from_numpy(np.ascontiguousarray(src).reshape(shape))
    outputs = [grpc.InferRequestedOutput(name) for name in PIPE_OUTPUTS]
    return _Request([inp], outputs, 1, [frame.shape[:2]]), old, created


@dataclass(frozen=True)
class DecodeParams:
    """The decode settings of one call."""

    conf_threshold: float
    nms_threshold: float
    top_k: int


def _decode_params(model: LaneModel, conf: float | None, nms: float | None, top_k: int | None,
                   defaults: DecodeParams) -> DecodeParams:
    """Per-call values over the client's defaults, checked (and, for a pipeline, checked against the server's)."""
    try:
        params = DecodeParams(
            conf_threshold=float(defaults.conf_threshold if conf is None else conf),
            nms_threshold=float(defaults.nms_threshold if nms is None else nms),
            top_k=int(defaults.top_k if top_k is None else top_k),
        )
        integral = top_k is None or int(top_k) == top_k
    except (TypeError, ValueError):
        raise ClientError(
            f"conf_threshold, nms_threshold and top_k must be numbers, got {conf!r}, {nms!r} and {top_k!r}."
        ) from None
    if not math.isfinite(params.conf_threshold) or not (math.isfinite(params.nms_threshold) and params.nms_threshold >= 0):
        raise ClientError(
            f"conf_threshold must be finite and nms_threshold finite and >= 0, got {params.conf_threshold} and "
            f"{params.nms_threshold}."
        )
    if params.top_k < 1 or not integral:
        raise ClientError(f"top_k must be an integer >= 1, got {top_k!r}.")
    if model.kind == "pipeline":
        server = DecodeParams(float(model.decode["conf_threshold"]), float(model.decode["nms_threshold"]),
                              int(model.decode["top_k"]))
        # The ensemble decodes with its configured values; a stricter threshold or a smaller
        # top_k can still be applied to its lanes here, anything else cannot.
        if (params.conf_threshold < server.conf_threshold or params.top_k > server.top_k
                or not math.isclose(params.nms_threshold, server.nms_threshold)):
            raise ClientError(
                f"{model.name} decodes on the server with conf_threshold={server.conf_threshold}, "
                f"nms_threshold={server.nms_threshold}, top_k={server.top_k}; it can only be made stricter per call "
                "(higher conf_threshold, lower top_k): use the raw model for other values."
            )
    return params


def _read_raw(model: LaneModel, slot: _Slot, request: _Request, result: Any, params: DecodeParams) -> list[list[Lane]]:
    if slot.use_shm:
        raw = slot.output
    else:
        raw = result.as_numpy(model.output_name).reshape(-1, model.num_rows, ROW_WIDTH)
    try:
        return [
            decode_lanes(raw[i], conf_threshold=params.conf_threshold, nms_threshold=params.nms_threshold,
                         top_k=params.top_k, image_size=request.sizes[i])
            for i in range(request.count)
        ]
    except DecodeError as exc:
        raise ClientError(f"cannot decode the output of {model.name}: {exc}") from None


def _read_pipeline(model: LaneModel, result: Any, params: DecodeParams) -> list[Lane]:
    """Lanes from NAME_pipeline's padded outputs, with a stricter per-call threshold / top_k applied."""
    lanes_out = result.as_numpy(LANES)
    points = lanes_out.reshape(-1, lanes_out.shape[-2], 2)
    scores = result.as_numpy(SCORES).reshape(-1)
    counts = result.as_numpy(NUM_POINTS).reshape(-1)
    n = min(int(result.as_numpy(NUM_LANES).reshape(-1)[0]), len(scores))
    lanes = [Lane(points[i, : int(counts[i])], float(scores[i])) for i in range(n)]
    if params.conf_threshold > float(model.decode["conf_threshold"]):
        lanes = [lane for lane in lanes if lane.score > params.conf_threshold]
    return lanes[: params.top_k]


# --- errors --------------------------------------------------------------------------------


def _status(exc: Any) -> str:
    status = exc.status() if hasattr(exc, "status") else None
    return (status or "").replace("StatusCode.", "")


def _message(exc: Any) -> str:
    msg = exc.message() if hasattr(exc, "message") else str(exc)
    return _one_line(msg)


def _is_retryable(exc: Any, was_ready: bool) -> bool:
    """UNAVAILABLE, or (after we were served once) a model or shm region the server forgot on restart."""
    status = _status(exc)
    if status == "UNAVAILABLE":
        return True
    msg = _message(exc).lower()
    if "shared memory region" in msg and ("unable to find" in msg or "not found" in msg):
        return True
    return was_ready and status == "NOT_FOUND" and "model" in msg


def _to_client_error(exc: Any, url: str, model: str, client_timeout: float | None) -> ClientError:
    status, msg = _status(exc), _message(exc)
    if status == "UNAVAILABLE":
        return ServerUnavailableError(
            f"Triton at {url} is unreachable ({msg}); start it with `edge-deploy serve` or check --url."
        )
    if status == "DEADLINE_EXCEEDED":
        return ServerUnavailableError(
            f"Triton at {url} did not answer within client_timeout={client_timeout} s; the server is overloaded "
            "or hung: check `edge-deploy serve` status, or raise client_timeout."
        )
    if status == "NOT_FOUND" or "not ready" in msg.lower() or "unknown model" in msg.lower():
        return ModelNotReadyError(
            f"model {model!r} is not ready on {url} ({msg}); install it with `edge-deploy install` "
            "and check `edge-deploy models`."
        )
    return ClientError(f"request to {model!r} at {url} failed: {status or 'error'}: {msg}")


def _release_all(grpc_client: Any, regions: list[ShmRegion], registered: set[str], timeout: float) -> None:
    """Unregister our regions from the server (if it is there), unlink them, close the channel."""
    for region in regions:
        if region.name in registered:
            try:
                grpc_client.unregister_system_shared_memory(region.name, client_timeout=timeout)
            except Exception:  # noqa: BLE001 - the server may be gone; its mapping went with it
                pass
        region.close()
    registered.clear()
    regions.clear()
    try:
        grpc_client.close()
    except Exception:  # noqa: BLE001
        pass


# --- the client ----------------------------------------------------------------------------


class LaneDetClient:
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
    lock); use AsyncLaneDetClient for several frames in flight.
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
    ) -> None:
        import tritonclient.grpc as grpcclient

        self.url = url
        self.model_name = model
        self.version = str(version)
        self.transport = resolve_transport(transport, url)
        self.client_timeout = float(client_timeout)
        self.retry_deadline = float(retry_deadline)
        self._overrides = (conf_threshold, nms_threshold, top_k)
        self._grpcmod = grpcclient
        self._grpc = grpcclient.InferenceServerClient(url, channel_args=_CHANNEL_ARGS)
        self._lock = threading.RLock()
        self.model: LaneModel | None = None
        self._defaults: DecodeParams | None = None
        self._slot: _Slot | None = None
        self._regions: list[ShmRegion] = []  # shared with the finalizer: every live region of this client
        self._registered: set[str] = set()
        self._stale = False  # the server may have restarted: re-read the model before the next request
        self._was_ready = False
        self._closed = False
        self.recoveries = 0  # calls that succeeded after the server had been unavailable
        self._finalizer = weakref.finalize(self, _release_all, self._grpc, self._regions, self._registered, 1.0)
        if connect:
            self._connect_checked()

    # -- lifecycle

    def __enter__(self) -> "LaneDetClient":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Unregister and unlink the shared memory regions and close the channel (idempotent)."""
        with self._lock:
            self._closed = True
            if self._slot is not None:
                self._slot.drop_views()
                self._slot = None
            self._finalizer()

    @property
    def shm_regions(self) -> list[str]:
        """Names of this client's shared memory regions (empty with gRPC transport)."""
        return [r.name for r in self._regions]

    def wait_until_ready(self, timeout: float = 60.0) -> "LaneDetClient":
        """Block until the server and the model are ready (and the client is set up), or raise after `timeout` s."""
        from tritonclient.utils import InferenceServerException

        deadline = time.monotonic() + timeout
        last: Exception | None = None
        delay = 0.05
        while True:
            self._check_open()
            step = max(0.05, min(self.client_timeout, deadline - time.monotonic()))
            try:
                if self._grpc.is_server_live(client_timeout=step) and self._grpc.is_model_ready(
                    self.model_name, self.version, client_timeout=step
                ):
                    with self._lock:
                        self._connect()
                        self._register()
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
                    f"model {self.model_name!r} was not ready on {self.url} within {timeout:g} s; install it with "
                    "`edge-deploy install` and check `edge-deploy models`."
                )
            time.sleep(delay)
            delay = min(delay * 2, 0.5)

    # -- detection

    def detect(
        self,
        frame: np.ndarray,
        *,
        color: str = "bgr",
        conf_threshold: float | None = None,
        nms_threshold: float | None = None,
        top_k: int | None = None,
    ) -> list[Lane]:
        """Lanes in one HxWx3 frame (BGR unless color="rgb"), best first, in frame pixels."""
        return self.detect_batch([frame], color=color, conf_threshold=conf_threshold,
                                 nms_threshold=nms_threshold, top_k=top_k)[0]

    def detect_batch(
        self,
        frames: Sequence[np.ndarray],
        *,
        color: str = "bgr",
        conf_threshold: float | None = None,
        nms_threshold: float | None = None,
        top_k: int | None = None,
    ) -> list[list[Lane]]:
        """Lanes for each frame; frames go to the server in batches up to the model's batch size."""
        checked = [check_frame(f, i if len(frames) > 1 else None) for i, f in enumerate(frames)]
        if color not in COLORS:
            raise FrameError(f"unknown color order {color!r}; use 'bgr' (OpenCV) or 'rgb'.")
        with self._lock:
            self._check_open()
            if self.model is None:  # connect=False: the server may still be starting
                self._with_retry(self._connect)
            assert self.model is not None and self._defaults is not None
            params = _decode_params(self.model, conf_threshold, nms_threshold, top_k, self._defaults)
            cap = self.model.batch_capacity
            results: list[list[Lane]] = []
            for start in range(0, len(checked), cap):
                chunk = checked[start : start + cap]
                results.extend(self._with_retry(lambda: self._run(chunk, color, params)))
            return results

    # -- internals

    def _check_open(self) -> None:
        if self._closed:
            raise ClientError("this LaneDetClient is closed; create a new one.")

    def _rpc(self, fn: Callable[..., T], *args: Any) -> T:
        return fn(*args, client_timeout=self.client_timeout)

    def _connect_checked(self) -> None:
        from tritonclient.utils import InferenceServerException

        try:
            self._connect()
        except InferenceServerException as exc:
            raise _to_client_error(exc, self.url, self.model_name, self.client_timeout) from None

    def _connect(self) -> None:
        """Read metadata + config, validate, and (re)build the buffers if the model changed."""
        metadata = self._rpc(self._grpc.get_model_metadata, self.model_name, self.version)
        config = self._rpc(self._grpc.get_model_config, self.model_name, self.version)
        if not self._rpc(self._grpc.is_model_ready, self.model_name, self.version):
            raise ModelNotReadyError(
                f"model {self.model_name!r} is loaded on {self.url} but not ready; check `edge-deploy models` "
                "and the server log."
            )
        model = describe_model(metadata, config)
        if model != self.model or self._slot is None:
            self._drop_slot()
            self.model = model
            conf, nms, top_k = self._overrides
            self._defaults = DecodeParams(
                float(model.decode["conf_threshold"] if conf is None else conf),
                float(model.decode["nms_threshold"] if nms is None else nms),
                int(model.decode["top_k"] if top_k is None else top_k),
            )
            self._slot = _Slot(model, self.transport == "shm")
            self._regions.extend(self._slot.regions)
        self._stale = False
        self._was_ready = True

    def _drop_slot(self) -> None:
        if self._slot is None:
            return
        self._slot.drop_views()
        for region in list(self._slot.regions):
            self._unregister(region)
        self._slot.close()
        self._slot = None

    def _unregister(self, region: ShmRegion) -> None:
        if region.name in self._registered:
            try:
                self._grpc.unregister_system_shared_memory(region.name, client_timeout=self.client_timeout)
            except Exception:  # noqa: BLE001 - already gone with a restarted server
                pass
            self._registered.discard(region.name)
        if region in self._regions:
            self._regions.remove(region)
        region.close()

    def _register(self) -> None:
        from tritonclient.utils import InferenceServerException

        if self._slot is None:
            return
        for region in self._slot.regions:
            if region.name in self._registered:
                continue
            try:
                region.register(self._grpc, self.client_timeout)
            except InferenceServerException as exc:
                # ALREADY_EXISTS: the same server still has it (we only lost track after an error).
                if _status(exc) != "ALREADY_EXISTS":
                    raise
            self._registered.add(region.name)

    def _run(self, frames: list[np.ndarray], color: str, params: DecodeParams) -> list[list[Lane]]:
        """One attempt: (re)connect if needed, fill the slot, infer, decode."""
        if self._stale:
            self._connect()
        assert self.model is not None and self._slot is not None
        model, slot = self.model, self._slot
        if model.kind == "raw":
            request = _raw_request(self._grpcmod, model, slot, frames, color)
        else:
            request, replaced, created = _pipeline_request(self._grpcmod, model, slot, frames[0], color)
            if replaced is not None:
                self._unregister(replaced)
            if created:
                self._regions.append(slot.in_region)
        if slot.use_shm:
            self._register()
        result = self._grpc.infer(model.name, request.inputs, model_version=self.version,
                                  outputs=request.outputs, client_timeout=self.client_timeout)
        if model.kind == "raw":
            return _read_raw(model, slot, request, result, params)
        return [_read_pipeline(model, result, params)]

    def _with_retry(self, attempt: Callable[[], T]) -> T:
        from tritonclient.utils import InferenceServerException

        deadline = time.monotonic() + self.retry_deadline
        delay = 0.05
        retried = False
        while True:
            try:
                result = attempt()
                self.recoveries += retried
                return result
            except InferenceServerException as exc:
                retry = _is_retryable(exc, self._was_ready)
                error: ClientError = _to_client_error(exc, self.url, self.model_name, self.client_timeout)
            except ModelNotReadyError as exc:
                retry, error = self._was_ready, exc
            if not retry or time.monotonic() + delay > deadline:
                if retry and self.retry_deadline > 0:
                    raise type(error)(f"{str(error).rstrip('.')} (retried for {self.retry_deadline:g} s).") from None
                raise error from None
            # The server may be a new process: it knows neither our regions nor, perhaps, the same model.
            self._registered.clear()
            self._stale = True
            retried = True
            time.sleep(delay)
            delay = min(delay * 2, 1.0)

    def __repr__(self) -> str:
        kind = self.model.kind if self.model else "not connected"
        return f"LaneDetClient({self.url!r}, {self.model_name!r}, transport={self.transport!r}, {kind})"
