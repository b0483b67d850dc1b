"""INT8 calibration input: --calibration-images through the model's own preprocessing.

`make_calibration` gives the builder a `tensorrt_api.Calibration`: batches of
preprocessed frames at the optimisation profile's batch size, and a cache file
beside the plan named after `calibration_digest` (model + images + preprocessing),
so an unchanged calibration is not run twice.
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

from ..artifact.manifest import Manifest, sha256_file
from ..lanedet.preprocess import Preprocessor, PreprocessSpec
from ..errors import EngineError, FrameError
from ..machine import tensorrt_api
from ..media.images import read_image

IMAGE_SUFFIXES = {".jpg", ".jpeg", ".png", ".bmp", ".tif", ".tiff", ".webp"}


def calibration_images(directory: Path | None) -> list[Path]:
    """The image files of --calibration-images (sorted), or a one-line EngineError."""
    if directory is None:
        raise EngineError(
            "--precision int8 needs --calibration-images DIR: a few hundred frames like the ones the model will see."
        )
    directory = Path(directory)
    if not directory.is_dir():
        raise EngineError(f"--calibration-images {directory} is not a directory.")
    images = sorted(p for p in directory.rglob("*") if p.suffix.lower() in IMAGE_SUFFIXES and p.is_file())
    if not images:
        raise EngineError(
            f"--calibration-images {directory} holds no images ({', '.join(sorted(IMAGE_SUFFIXES))}); "
            "put a few hundred representative frames there."
        )
    return images


def calibration_digest(onnx_sha256: str, images: Sequence[Path], spec: PreprocessSpec) -> str:
    """Identifies a calibration (model + image contents + preprocessing): names its cache file."""
    digest = hashlib.sha256(onnx_sha256.encode())
    digest.update(json.dumps(spec.to_dict(), sort_keys=True).encode())
    for image in images:
        digest.update(sha256_file(image).encode())
    return digest.hexdigest()


def _preprocessor(spec: PreprocessSpec, batch: int) -> Any:
    """The model's own preprocessing (edge_deploy.lanedet.preprocess) for the manifest's spec."""
    try:
        return Preprocessor(spec, batch=batch)
    except ValueError as exc:
        raise EngineError(f"the manifest's preprocess spec is not usable for calibration: {exc}") from exc


def _read_image(path: Path) -> Any:
    try:
        return read_image(path)
    except FrameError as exc:
        raise EngineError(f"calibration image: {exc} Remove or replace it in the calibration directory.") from None


def make_calibration(artifact_dir: Path, manifest: Manifest, images: Sequence[Path], digest: str,
                     profile: Mapping[str, Sequence[Sequence[int]]]) -> tensorrt_api.Calibration:
    """The INT8 calibration feed: the model's preprocessing over the images, in batches of the profile's opt."""
    import numpy as np

    inputs = manifest.io.inputs
    name = inputs[0].name if inputs else "input"
    # no profile for a fixed-batch input: its batch is the shape's
    batch = profile[name][1][0] if name in profile else int(inputs[0].shape[0] if inputs and inputs[0].shape else 1)
    batch = max(1, batch)
    if len(images) < batch:
        raise EngineError(
            f"INT8 calibration runs in batches of {batch} (the optimisation batch) but only {len(images)} "
            "image(s) were given; add more images to --calibration-images."
        )
    preprocessor = _preprocessor(manifest.preprocess, batch)

    def batches() -> Iterator[Any]:
        # Whole batches only (calibration runs at the profile's opt shape); a short tail is dropped.
        for start in range(0, len(images) - batch + 1, batch):
            frames = [_read_image(image) for image in images[start : start + batch]]
            yield np.array(preprocessor.batch(frames), copy=True)

    return tensorrt_api.Calibration(name, batch, batches, Path(artifact_dir) / f"calibration-{digest[:16]}.cache")
