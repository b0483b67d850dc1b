"""INT8 calibration: the images, the model's own preprocessing, and the calibrator that feeds TensorRT.

Real image files, real preprocessing; TensorRT and pycuda are the doubles of
tests/support/trt_double.py (no GPU here: "device memory" is host bytes).
"""
from __future__ import annotations

from dataclasses import replace

from pathlib import Path

import numpy as np
import pytest
from trt_double import install_pycuda, make_tensorrt

from edge_deploy.engine import plan as engine
from edge_deploy.machine import tensorrt_api
from edge_deploy.engine.calibration import calibration_images, make_calibration
from edge_deploy.errors import EngineError

pytest_plugins = ["jetson_fixtures"]  # board, artifact, fake_trt, ... (shared fixtures)


def test_calibration_images_errors(tmp_path: Path) -> None:
    with pytest.raises(EngineError, match="needs --calibration-images"):
        calibration_images(None)
    with pytest.raises(EngineError, match="not a directory"):
        calibration_images(tmp_path / "missing")
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "notes.txt").write_text("no images here")
    with pytest.raises(EngineError, match="holds no images"):
        calibration_images(empty)


def test_calibration_batches_use_the_models_preprocessing(tmp_path: Path, artifact) -> None:
    import cv2

    directory, manifest = artifact
    images = tmp_path / "frames"
    images.mkdir()
    rng = np.random.default_rng(1)
    for i in range(5):
        cv2.imwrite(str(images / f"f{i}.png"), rng.integers(0, 255, (720, 1280, 3), dtype=np.uint8))
    found = calibration_images(images)
    assert len(found) == 5
    profile = engine.optimisation_profile(manifest)
    calibration = make_calibration(directory, manifest, found, "ab" * 32, profile)
    batches = list(calibration.batches())
    assert calibration.batch_size == 1 and len(batches) == 5
    raw = cv2.imread(str(found[0]))
    expected = cv2.resize(raw, (640, 360), interpolation=cv2.INTER_CUBIC).astype(np.float32) / 255.0
    np.testing.assert_allclose(batches[0][0], expected.transpose(2, 0, 1), rtol=0, atol=1e-6)
    assert calibration.cache_path.parent == directory


def test_int8_calibrator_feeds_preprocessed_batches_and_keeps_its_cache(monkeypatch, tmp_path, artifact) -> None:
    import cv2

    directory, manifest = artifact
    frames = tmp_path / "frames"
    frames.mkdir()
    for i in range(3):
        cv2.imwrite(str(frames / f"{i}.png"), np.full((720, 1280, 3), 40 * i, dtype=np.uint8))
    manifest.io = replace(manifest.io, batch=replace(manifest.io.batch, opt=2))
    profile = engine.optimisation_profile(manifest)
    images = calibration_images(frames)
    calibration = make_calibration(directory, manifest, images, "cd" * 32, profile)
    gpu = install_pycuda(monkeypatch)  # no GPU here: device memory is host bytes
    calibrator = tensorrt_api.make_calibrator(make_tensorrt("10.3.0"), calibration)
    assert calibrator.get_batch_size() == 2 and calibrator.read_calibration_cache() is None
    (address,) = calibrator.get_batch(["input"])
    fed = np.frombuffer(gpu.buffers[address], dtype=np.float32).reshape(2, 3, 360, 640)
    assert fed[0].max() == 0.0 and abs(float(fed[1].mean()) - 40 / 255) < 1e-6
    assert calibrator.get_batch(["input"]) is None  # 3 images, batches of 2: the short tail is dropped
    assert gpu.pushes == gpu.pops == 1
    calibrator.write_calibration_cache(b"TRT-100300-EntropyCalibration2\ninput: 3c010a14\n")
    assert calibration.cache_path.read_bytes().startswith(b"TRT-100300")
    assert calibrator.read_calibration_cache() == calibration.cache_path.read_bytes()
    with pytest.raises(EngineError, match="only 1 image"):
        make_calibration(directory, manifest, images[:1], "cd" * 32, profile)


def test_a_fixed_batch_model_calibrates_at_its_own_batch(tmp_path, artifact) -> None:
    """No optimisation profile for a fixed batch: the batch is the input's (was a NameError, pyflakes: `inputs`)."""
    import cv2

    directory, manifest = artifact
    frames = tmp_path / "frames"
    frames.mkdir()
    for i in range(5):
        cv2.imwrite(str(frames / f"{i}.png"), np.full((720, 1280, 3), 40 * i, dtype=np.uint8))
    manifest.io = replace(manifest.io, inputs=(replace(manifest.io.inputs[0], shape=(2, 3, 360, 640)),),
                          batch=replace(manifest.io.batch, min=2, opt=2, max=2, dynamic=False))
    profile = engine.optimisation_profile(manifest)
    assert profile == {}
    calibration = make_calibration(directory, manifest, calibration_images(frames), "ef" * 32, profile)
    batches = list(calibration.batches())
    assert calibration.batch_size == 2 and [b.shape[0] for b in batches] == [2, 2]  # the odd fifth is dropped


def test_the_calibration_digest_names_the_model(artifact) -> None:
    from edge_deploy.engine.calibration import calibration_digest

    _, manifest = artifact
    spec = manifest.preprocess
    assert calibration_digest("a" * 64, [], spec) != calibration_digest("b" * 64, [], spec)


def test_a_damaged_calibration_image_is_named_in_one_line(tmp_path, artifact) -> None:
    import cv2

    directory, manifest = artifact
    frames = tmp_path / "frames"
    frames.mkdir()
    cv2.imwrite(str(frames / "0.png"), np.full((720, 1280, 3), 40, dtype=np.uint8))
    (frames / "1.jpg").write_bytes(b"\xff\xd8 a truncated download")
    calibration = make_calibration(directory, manifest, calibration_images(frames), "ab" * 32,
                                   engine.optimisation_profile(manifest))
    with pytest.raises(EngineError) as refused:
        list(calibration.batches())
    message = str(refused.value)
    assert "\n" not in message and f"cannot decode {frames / '1.jpg'} as an image" in message, message
    assert message.startswith("calibration image: ") and "Remove or replace it" in message, message
