"""DetectorClient: ModelClient + the object-detector decode (edge_deploy.detect), boxes in the frame's pixels;
AsyncModelClient / AsyncDetectorClient: the same calls for asyncio, on a small pool of sync clients, so they keep
the sync clients' deadlines exactly (every call is a sync call run in a worker thread)."""
from __future__ import annotations

import asyncio
import functools
import time
from typing import Any, Callable, Generic, Mapping, TypeVar

import numpy as np

from ..detect.decode import DetectParams, decode_detections
from ..detect.detections import Detections
from ..errors import ClientError, DetectionError, ModelMismatchError
from .model_client import ModelClient
from ..lanedet.contract import PARAM_DECODE
from .tensor_model import FrameInput, config_json

__all__ = ["AsyncDetectorClient", "AsyncModelClient", "DetectorClient"]

C = TypeVar("C", bound=ModelClient)
T = TypeVar("T")


class DetectorClient(ModelClient):
    """Detect objects in camera frames with a detector served by Triton (converted from ONNX by `edge-deploy
    convert MODEL.onnx`, installed by `edge-deploy install`): `detect(frame, deadline=)` -> `Detections`.

    The model's config says how frames are fitted (letterbox or stretch) and its output layout (YOLO [B, 4+C, A] or
    EfficientNMS); conf_threshold, iou_threshold and max_detections default to the config's decode settings (the
    manifest's), per client and per call. Everything else as for ModelClient.
    """

    def __init__(self, url: str = "127.0.0.1:8001", model: str = "objects", *, conf_threshold: float | None = None,
                 iou_threshold: float | None = None, max_detections: int | None = None, **options: Any) -> None:
        self._overrides_detect = (conf_threshold, iou_threshold, max_detections)
        if any(v is not None for v in self._overrides_detect):
            self._detect_params(None)  # refused here (one line), not at the first call
        super().__init__(url, model, **options)

    def _describe(self, metadata: Any, config: Any) -> Any:
        model = super()._describe(metadata, config)
        if model.detection is None or model.preprocess is None:
            raise ModelMismatchError(f"model {model.name!r} is not an object detector edge-deploy installed (no "
                                     "edge_deploy.detection in its config): convert its ONNX file with `edge-deploy "
                                     "convert MODEL.onnx` and install that, or use ModelClient for raw outputs.")
        found = config_json(getattr(config, "config", config), PARAM_DECODE)
        self._decode_defaults = found if isinstance(found, dict) else {}
        return model

    def _detect_params(self, call: tuple[Any, Any, Any] | None) -> DetectParams:
        base = getattr(self, "_decode_defaults", {})
        values = dict(zip(("conf_threshold", "iou_threshold", "max_detections"),
                          (base.get("conf_threshold", 0.25), base.get("nms_threshold", 0.45), base.get("top_k", 100))))
        for key, mine, now in zip(values, self._overrides_detect, call or (None, None, None)):
            values[key] = now if now is not None else mine if mine is not None else values[key]
        try:
            return DetectParams(**values)
        except DetectionError as exc:
            raise ClientError(str(exc)) from None

    def detect(self, frame: np.ndarray | FrameInput, *, deadline: float | None = None, color: str = "bgr",
               conf_threshold: float | None = None, iou_threshold: float | None = None,
               max_detections: int | None = None) -> Detections:
        """The objects in one HxWx3 frame (BGR unless color="rgb"; or a FrameInput made once for several models),
        best first, boxes in the frame's pixels. deadline: as for ModelClient.infer (`ModelUnavailable`)."""
        call = (conf_threshold, iou_threshold, max_detections)
        self._detect_params(call)  # a bad value is refused before the request
        prepared = frame if isinstance(frame, FrameInput) else None

        def run(budget: Any) -> Detections:
            nonlocal prepared
            if self.model is None:
                self._with_retry(self._connect, budget, deadline)
            if prepared is None:
                prepared = FrameInput.of(frame, self.model, color)  # type: ignore[arg-type]
            outputs = self._with_retry(lambda: self._infer_once(prepared), budget, deadline)
            layout = self.model.detection.layout
            return decode_detections(outputs, layout=layout, params=self._detect_params(call),
                                     letterbox=prepared.letterbox)[0]

        return self._locked(run, deadline)


class _AsyncPool(Generic[C]):
    """`size` sync clients and the asyncio side of taking a free one within a call's deadline."""

    def __init__(self, make: Callable[[], C], size: int) -> None:
        if isinstance(size, bool) or not isinstance(size, int) or not 1 <= size <= 64:
            raise ClientError(f"max_in_flight must be an integer from 1 to 64, not {size!r}.")
        self.clients = [make() for _ in range(size)]
        self._free: asyncio.Queue[C] | None = None

    async def run(self, call: Callable[[C, float | None], T], deadline: float | None) -> T:
        if self._free is None:
            self._free = asyncio.Queue()
            for client in self.clients:
                self._free.put_nowait(client)
        started = time.monotonic()
        try:
            client = await asyncio.wait_for(self._free.get(), deadline) if deadline is not None \
                else await self._free.get()
        except asyncio.TimeoutError:
            raise self.clients[0]._unavailable("busy", deadline) from None
        left = None if deadline is None else max(0.001, deadline - (time.monotonic() - started))
        try:
            return await asyncio.get_running_loop().run_in_executor(None, functools.partial(call, client, left))
        finally:
            self._free.put_nowait(client)

    def close(self) -> None:
        for client in self.clients:
            client.close()


class AsyncModelClient:
    """ModelClient for asyncio: up to `max_in_flight` (default 4) calls at once, each on its own sync client (its own
    shared memory), so deadlines, reconnects and version changes behave exactly as the sync client's. Arguments
    as for ModelClient."""

    client_type: type[ModelClient] = ModelClient

    def __init__(self, url: str = "127.0.0.1:8001", model: str = "model", *, max_in_flight: int = 4,
                 **options: Any) -> None:
        self._pool: _AsyncPool[Any] = _AsyncPool(lambda: self.client_type(url, model, **options), max_in_flight)

    @property
    def model(self) -> Any:
        return self._pool.clients[0].model

    async def infer(self, inputs: Mapping[str, np.ndarray] | np.ndarray | FrameInput, *,
                    deadline: float | None = None) -> dict[str, np.ndarray]:
        """As ModelClient.infer; the wait for a free client counts against `deadline` ("busy" when it runs out)."""
        return await self._pool.run(lambda client, left: client.infer(inputs, deadline=left), deadline)

    async def close(self) -> None:
        self._pool.close()

    async def __aenter__(self) -> "AsyncModelClient":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


class AsyncDetectorClient(AsyncModelClient):
    """DetectorClient for asyncio (as AsyncModelClient)."""

    client_type = DetectorClient

    def __init__(self, url: str = "127.0.0.1:8001", model: str = "objects", **options: Any) -> None:
        super().__init__(url, model, **options)

    async def detect(self, frame: np.ndarray, *, deadline: float | None = None, **detect_options: Any) -> Detections:
        """As DetectorClient.detect."""
        return await self._pool.run(lambda client, left: client.detect(frame, deadline=left, **detect_options),
                                    deadline)
