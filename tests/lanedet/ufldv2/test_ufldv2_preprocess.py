"""UFLDv2's preprocessing: the client's path (Pillow's antialiased bilinear resize to input_height / crop_ratio
rows, only the bottom rows computed, lookup-table normalisation; or OpenCV's area resize, which older manifests
name) against the official test transform written out here with PIL (torchvision's Resize on a PIL image is
PIL's antialiased bilinear resize; ToTensor; Normalize; keep the bottom input_height rows). Pillow comes with
matplotlib (the test extra)."""
from __future__ import annotations

from dataclasses import replace

import cv2
import numpy as np
import pytest
from PIL import Image

from edge_deploy.lanedet.preprocess import (PreprocessSpec, PreprocessSpecError, Preprocessor,
                                            antialiased_bilinear_weights)
from edge_deploy.lanedet.ufldv2 import IMAGENET_MEAN, IMAGENET_STD, preset_preprocess
from edge_deploy.lanedet.ufldv2.presets import PRESETS
from edge_deploy.synthetic.roads import scene

MEAN = np.array(IMAGENET_MEAN, np.float32).reshape(3, 1, 1)
STD = np.array(IMAGENET_STD, np.float32).reshape(3, 1, 1)


def official_transform(frame_bgr: np.ndarray, dataset: str) -> np.ndarray:
    p = PRESETS[dataset]
    image = Image.fromarray(np.ascontiguousarray(frame_bgr[:, :, ::-1]))  # RGB, as the official loader opens it
    image = image.resize((p.input_width, int(p.input_height / p.crop_ratio)), Image.BILINEAR)
    x = np.asarray(image, np.float32).transpose(2, 0, 1) / 255.0
    return ((x - MEAN) / STD)[:, -p.input_height:, :]


def levels_from_official(dataset: str, size: tuple[int, int], interpolation: str) -> tuple[float, float]:
    """(mean, max) difference to the official transform in 8-bit levels (255 = full scale), 3 synthetic frames."""
    pre = Preprocessor(replace(preset_preprocess(PRESETS[dataset]), interpolation=interpolation))
    levels = []
    for seed in range(3):
        frame = scene(1_000_000_000 + seed, size[1], size[0]).frame
        levels.append(np.abs(pre(frame)[0] - official_transform(frame, dataset)) * STD * 255)
    return float(np.mean([lv.mean() for lv in levels])), float(max(lv.max() for lv in levels))


def test_the_presets_resize_as_pillow_does() -> None:
    assert all(preset_preprocess(p).interpolation == "antialiased_bilinear" for p in PRESETS.values())


@pytest.mark.parametrize("dataset, size, mean_limit, max_limit", [
    ("culane", (590, 1640), 0.06, 5), ("tusimple", (720, 1280), 0.005, 1),
    ("culane", (591, 1641), 0.06, 5), ("tusimple", (721, 1279), 0.015, 1),  # odd sizes
    ("culane", (1080, 1920), 0.035, 1), ("tusimple", (590, 1640), 0.01, 1),  # frames of another data set's size
])
def test_preprocessing_is_close_to_the_official_transform(dataset, size, mean_limit, max_limit) -> None:
    """Measured (mean / max levels): CULane 0.052 / 5 (OpenCV's bilinear for its 1640 -> 1600 columns; Pillow's
    exact weights there: 0.006 / 1), TuSimple 0.002 / 1; 591x1641 0.049 / 4, 721x1279 0.012 / 1, 1080x1920 to
    CULane 0.027 / 1, 590x1640 to TuSimple 0.009 / 1. The area resize (old manifests): 0.20 / 8 and 0.41 / 25."""
    mean, worst = levels_from_official(dataset, size, "antialiased_bilinear")
    assert mean < mean_limit and worst <= max_limit + 1e-3, (mean, worst)


@pytest.mark.parametrize("dataset, size, mean_limit, max_limit", [
    ("culane", (590, 1640), 0.35, 12), ("tusimple", (720, 1280), 0.6, 32)])
def test_area_preprocessing_of_older_manifests_is_close_to_the_official_transform(dataset, size, mean_limit,
                                                                                  max_limit) -> None:
    """Differences in 8-bit levels. Measured on synthetic frames: CULane mean 0.20 / max 8, TuSimple mean 0.41 /
    max 25 (OpenCV's bilinear resize: 0.29 / 16 and 1.06 / 49); the limits leave room for other frames, and a
    crop from the wrong end or the wrong colour order is far outside them."""
    mean, worst = levels_from_official(dataset, size, "area")
    assert mean < mean_limit and worst <= max_limit


def pillow_triangle(in_size: int, out_size: int) -> list[tuple[int, list[float]]]:
    """Pillow's precompute_coeffs for the bilinear filter written out per output pixel, in Python floats."""
    scale = in_size / out_size
    filter_scale = max(scale, 1.0)
    support = filter_scale
    out = []
    for xx in range(out_size):
        center = (xx + 0.5) * scale
        xmin = max(int(center - support + 0.5), 0)
        xmax = min(int(center + support + 0.5), in_size)
        w = [max(1.0 - abs((x - center + 0.5) * (1.0 / filter_scale)), 0.0) for x in range(xmin, xmax)]
        total = sum(w)
        out.append((xmin, [v / total for v in w]))
    return out


@pytest.mark.parametrize("in_size, out_size", [(590, 533), (1640, 1600), (720, 400), (1280, 800), (7, 5),
                                               (1, 3), (13, 29), (1080, 533), (1920, 1600), (3, 1)])
def test_weights_are_pillows_triangle_filter(in_size, out_size) -> None:
    first, weights = antialiased_bilinear_weights(in_size, out_size)
    assert weights.shape[0] == out_size
    for (xmin, want), start, got in zip(pillow_triangle(in_size, out_size), first, weights):
        assert start == xmin
        np.testing.assert_allclose(got[:len(want)], want, rtol=0, atol=1e-15)
        assert not got[len(want):].any()


def test_weights_are_pillows_own() -> None:
    """Pillow resizing a float image whose row i is the unit impulse at column i gives its weights themselves."""
    for in_size, out_size in ((1280, 800), (590, 533), (13, 29)):
        impulses = Image.fromarray(np.eye(in_size, dtype=np.float32), mode="F")
        pillow = np.asarray(impulses.resize((out_size, in_size), Image.BILINEAR), np.float64)  # [source, output]
        first, weights = antialiased_bilinear_weights(in_size, out_size)
        dense = np.zeros((in_size, out_size))
        for x, (start, w) in enumerate(zip(first, weights)):
            dense[start:start + len(w), x] = w[:in_size - start]
        np.testing.assert_allclose(dense, pillow, rtol=0, atol=1e-6)


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
