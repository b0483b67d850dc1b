"""UFLDv2's preprocessing: the client's fast path (OpenCV area resize to input_height / crop_ratio rows, the
bottom rows kept, lookup-table normalisation) against the official test transform written out here with
PIL (torchvision's Resize on a PIL image is PIL's antialiased bilinear resize; ToTensor; Normalize; keep the
bottom input_height rows). Pillow comes with matplotlib (the test extra)."""
from __future__ import annotations

import cv2
import numpy as np
import pytest
from PIL import Image

from edge_deploy.lanedet.preprocess import PreprocessSpec, PreprocessSpecError, Preprocessor
from edge_deploy.lanedet.ufldv2 import IMAGENET_MEAN, IMAGENET_STD, preset_preprocess
from edge_deploy.lanedet.ufldv2.presets import PRESETS
from edge_deploy.training.synthetic import scene

MEAN = np.array(IMAGENET_MEAN, np.float32).reshape(3, 1, 1)
STD = np.array(IMAGENET_STD, np.float32).reshape(3, 1, 1)


def official_transform(frame_bgr: np.ndarray, dataset: str) -> np.ndarray:
    p = PRESETS[dataset]
    image = Image.fromarray(np.ascontiguousarray(frame_bgr[:, :, ::-1]))  # RGB, as the official loader opens it
    image = image.resize((p.input_width, int(p.input_height / p.crop_ratio)), Image.BILINEAR)
    x = np.asarray(image, np.float32).transpose(2, 0, 1) / 255.0
    return ((x - MEAN) / STD)[:, -p.input_height:, :]


@pytest.mark.parametrize("dataset, size, mean_limit, max_limit", [
    ("culane", (590, 1640), 0.35, 12), ("tusimple", (720, 1280), 0.6, 32)])
def test_fast_preprocessing_is_close_to_the_official_transform(dataset, size, mean_limit, max_limit) -> None:
    """Differences in 8-bit levels (255 = full scale). Measured on synthetic frames: CULane mean 0.20 / max 8,
    TuSimple mean 0.41 / max 25 (OpenCV's bilinear resize: 0.29 / 16 and 1.06 / 49); the limits leave room
    for other frames, and a crop from the wrong end or the wrong colour order is far outside them."""
    pre = Preprocessor(preset_preprocess(PRESETS[dataset]))
    for seed in range(3):
        frame = scene(1_000_000_000 + seed, size[1], size[0]).frame
        levels = np.abs(pre(frame)[0] - official_transform(frame, dataset)) * STD * 255
        assert levels.mean() < mean_limit and levels.max() <= max_limit


def test_resized_height_resizes_taller_and_keeps_the_bottom_rows() -> None:
    spec = PreprocessSpec(height=4, width=6, resized_height=10, color="bgr", interpolation="area", scale=1.0)
    frame = np.random.default_rng(0).integers(0, 256, (25, 15, 3), dtype=np.uint8)
    expected = cv2.resize(frame, (6, 10), interpolation=cv2.INTER_AREA)[-4:].transpose(2, 0, 1).astype(np.float32)
    np.testing.assert_array_equal(Preprocessor(spec)(frame)[0], expected)
    assert spec.to_dict()["resized_height"] == 10 and PreprocessSpec.from_dict(spec.to_dict()) == spec
    with pytest.raises(PreprocessSpecError, match="resized_height"):
        PreprocessSpec(height=4, width=6, resized_height=3)


def test_only_the_kept_rows_are_resized_and_they_match_the_whole_resize() -> None:
    """CULane: source rows 207..589 resized to 346 rows stand for the whole 590 -> 533 resize (same ratio to within
    0.002 rows over the kept 320); its bottom rows differ from the whole resize's by at most one level in under
    1 % of the values (rounding)."""
    from edge_deploy.lanedet.preprocess import kept_rows

    assert kept_rows(590, 533, 320) == (383, 346)
    assert kept_rows(720, 400, 320) == (576, 320)  # TuSimple: an exact ratio (1.8)
    assert kept_rows(7, 5, 4) == (7, 5)  # no part of the frame keeps the ratio: the whole frame
    spec = PreprocessSpec(height=320, width=1600, resized_height=533, interpolation="area", scale=1.0)
    frame = scene(1_000_000_000, 1640, 590).frame
    whole = cv2.resize(frame, (1600, 533), interpolation=cv2.INTER_AREA)[-320:].transpose(2, 0, 1)
    diff = np.abs(Preprocessor(spec)(frame)[0] - whole.astype(np.float32))
    assert diff.max() <= 1 and (diff > 0).mean() < 0.01
