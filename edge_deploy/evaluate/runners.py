"""The models `evaluate` runs: an artifact's ONNX in ONNX Runtime, or a served model through LaneDetClient.

A model is named by a spec string:
- `DIR` or `DIR:fp32`: the artifact's model.onnx; `DIR:fp16`: its model_fp16.onnx;
- `grpc://HOST:PORT/MODEL`: a model served by tritonserver (LaneDetClient, shared memory on the same host).
Both decode with the model's lane-family decoder and the artifact's (or served config's) decode defaults.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

import numpy as np

from ..artifact.manifest import FP16_ONNX_NAME, ONNX_NAME, Manifest, not_a_file
from ..errors import EvaluationError
from ..lanedet.lane import Lane
from ..client.sync_client import LaneDetClient
from ..lanedet.preprocess import Preprocessor, resize
from ..export.parity import ort_session

_ONNX_FILES = {"fp32": ONNX_NAME, "fp16": FP16_ONNX_NAME}


class LaneRunner(Protocol):
    """Something that turns one BGR frame into lanes in that frame's pixels."""

    name: str

    def detect(self, frame: np.ndarray) -> list[Lane]: ...

    def close(self) -> None: ...


class OnnxRunner:
    """An artifact's ONNX model in ONNX Runtime (CPU), with the client's own preprocessing and decoding."""

    def __init__(self, artifact_dir: Path, precision: str = "fp32", manifest: Manifest | None = None) -> None:
        """`manifest`: the artifact's manifest when it is not written yet (convert's staging directory)."""
        if precision not in _ONNX_FILES:
            raise EvaluationError(f"unknown precision {precision!r} in the model spec; use :fp32 or :fp16.")
        path = Path(artifact_dir) / _ONNX_FILES[precision]
        why = not_a_file(path)
        if why is not None:
            hint = "convert with --precision fp16" if precision == "fp16" else "run `edge-deploy convert`"
            if why != "does not exist":
                hint = f"it must be the ONNX model file; put the file itself there, or {hint}"
            raise EvaluationError(f"{path} {why}; {hint}.")
        manifest = manifest if manifest is not None else Manifest.read(artifact_dir)
        if not manifest.io.inputs or not manifest.io.outputs:
            raise EvaluationError(f"the manifest of {artifact_dir} lists no inputs/outputs; re-run `edge-deploy convert`.")
        self.family = manifest.lane_family()
        if self.family is None:
            raise EvaluationError(f"{artifact_dir} holds no lane model (its manifest names no lane-model family); "
                                  "evaluate scores lane models.")
        self.lane_outputs = [t.name for t in self.family.lane_outputs(manifest.io.outputs, manifest.io.batch.dynamic)]
        self.name = f"{artifact_dir}:{precision}"
        self.session = ort_session(path)
        # The session's own input, not the manifest's: an FP16 ONNX may take FP16 input.
        model_input = self.session.get_inputs()[0]
        dtype = np.float16 if "float16" in model_input.type else np.float32
        self.input_name = model_input.name
        self.pre = Preprocessor(manifest.preprocess, dtype, 1)
        self.decode = manifest.decode
        # convert --fuse-preprocess: the model takes the uint8 frame at one size and preprocesses it itself.
        frame = manifest.fused_frame
        self.frame_size = (frame.height, frame.width) if "uint8" in model_input.type and frame else None

    def _lanes(self, model_input: np.ndarray, size: tuple[int, int]) -> list[Lane]:
        """Run one frame's model input; its lanes in the frame (of `size`) the model saw, crop box included."""
        top, left, height, width = self.pre.spec.crop_box(*size)
        outputs = self.session.run(self.lane_outputs, {self.input_name: model_input})
        lanes = self.family.decode([np.asarray(o[0], dtype=np.float32) for o in outputs], self.decode,
                                   (height, width), self.pre.spec.width)
        if top or left:
            lanes = [Lane(lane.points + np.array([left, top], dtype=np.float32), lane.score) for lane in lanes]
        return lanes

    def detect(self, frame: np.ndarray) -> list[Lane]:
        if self.frame_size is not None:
            return self._detect_fused(frame)
        return self._lanes(self.pre(frame), (frame.shape[0], frame.shape[1]))

    def _detect_fused(self, frame: np.ndarray) -> list[Lane]:
        """A fused model: the frame (resized to the model's frame size if needed, as the client does) in, lanes
        mapped back."""
        size = self.frame_size
        assert size is not None
        fitted = frame if frame.shape[:2] == size else resize(frame, size, self.pre.spec.interpolation)
        lanes = self._lanes(np.ascontiguousarray(fitted)[None], size)
        scale = np.array([frame.shape[1] / size[1], frame.shape[0] / size[0]], dtype=np.float32)
        return [Lane(lane.points * scale, lane.score) for lane in lanes]

    def close(self) -> None:
        pass


class ServedRunner:
    """A served model through LaneDetClient (configured from the served config)."""

    def __init__(self, url: str, model: str, timeout: float = 30.0, tls: Any = None) -> None:
        self.name = f"grpc://{url}/{model}"
        self.client = LaneDetClient(url, model=model, tls=tls)
        self.client.wait_until_ready(timeout=timeout)

    def detect(self, frame: np.ndarray) -> list[Lane]:
        return self.client.detect(frame)

    def close(self) -> None:
        self.client.close()


def open_runner(spec: str, tls: Any = None) -> Any:
    """The runner a spec names (see the module docstring); one-line EvaluationError when it cannot.

    tls: a TLSConfig for a served model behind mutual TLS (`edge-deploy serve --tls-*`).
    """
    if spec.startswith("grpc://"):
        rest = spec[len("grpc://"):]
        url, _, model = rest.partition("/")
        if not url or not model:
            raise EvaluationError(f"cannot read the model spec {spec!r}; write grpc://HOST:PORT/MODEL.")
        return ServedRunner(url, model, tls=tls)
    path, _, precision = spec.rpartition(":") if spec.endswith((":fp16", ":fp32")) else (spec, "", "fp32")
    if not Path(path).is_dir():
        raise EvaluationError(f"{path} is not an artifact directory; give one written by `edge-deploy convert`, "
                              "or grpc://HOST:PORT/MODEL for a served model.")
    return OnnxRunner(Path(path), precision)
