"""Preprocessor against the straightforward formulation (resize, astype, transpose, scale)."""
from __future__ import annotations

import importlib.util
import shutil
import sys
from pathlib import Path

import cv2
import numpy as np
import pytest
from module_imports import imported_packages

from edge_deploy.lanedet import preprocess as pre
from edge_deploy.lanedet.laneatt import FAMILY as LANEATT
from edge_deploy.lanedet.preprocess import (
    InvalidFrameError,
    Preprocessor,
    PreprocessSpec,
    PreprocessSpecError,
    preprocess,
)
from edge_deploy.synthetic.roads import road_scene
LANEATT_PREPROCESS = LANEATT.preprocess.to_dict()


def reference(frame, spec=PreprocessSpec(), color="bgr"):
    """The obvious implementation, FP32: cv2.resize, float64 arithmetic, one rounding to float32, NCHW."""
    if spec.crop:
        c = spec.crop
        frame = frame[c["top"] : frame.shape[0] - c["bottom"], c["left"] : frame.shape[1] - c["right"]]
    resized = cv2.resize(frame, (spec.width, spec.height), interpolation=pre.INTERPOLATIONS[spec.interpolation])
    if color != spec.color:
        resized = resized[:, :, ::-1]
    x = (resized.astype(np.float64) * spec.scale - np.array(spec.mean)) / np.array(spec.std)
    return x.astype(np.float32).transpose(2, 0, 1)[None]


def fp16_ulp(x: np.ndarray) -> np.ndarray:
    x16 = np.abs(x.astype(np.float16))
    return (np.nextafter(x16, np.float16(np.inf)) - x16).astype(np.float32)


@pytest.fixture(scope="module")
def frames():
    rng = np.random.default_rng(0)
    scene, _ = road_scene(seed=1)
    return [
        scene,
        rng.integers(0, 256, (590, 1640, 3), dtype=np.uint8),  # worst case for bicubic overshoot
        rng.integers(0, 256, (200, 300, 3), dtype=np.uint8),  # upscaling
        rng.integers(0, 256, (360, 640, 3), dtype=np.uint8),  # already model size
        np.ascontiguousarray(rng.integers(0, 256, (720, 1280, 4), dtype=np.uint8)[:, :, :3]),
        rng.integers(0, 256, (400, 700, 3), dtype=np.uint8)[::-1, 10:],  # non-contiguous view
    ]


def test_default_spec_is_the_manifest_default():
    spec = PreprocessSpec.from_dict(LANEATT_PREPROCESS)
    assert spec == PreprocessSpec()
    assert spec.to_dict() == LANEATT_PREPROCESS
    custom = PreprocessSpec(
        height=288, width=800, color="rgb", mean=[0.485, 0.456, 0.406], std=(0.229, 0.224, 0.225),
        interpolation="bilinear", crop={"top": 270},
    )
    assert PreprocessSpec.from_dict(custom.to_dict()) == custom
    assert custom.to_dict()["crop"] == {"top": 270, "bottom": 0, "left": 0, "right": 0}


def test_fp32_equals_reference_exactly(frames):
    p = Preprocessor()
    for frame in frames:
        got = p(frame)
        assert got.shape == (1, 3, 360, 640) and got.dtype == np.float32
        np.testing.assert_array_equal(got, reference(frame))
    # LaneATT's own formulation: img / 255. in float64, then float32
    frame = frames[0]
    resized = cv2.resize(frame, (640, 360), interpolation=cv2.INTER_CUBIC)
    np.testing.assert_array_equal(p(frame)[0], (resized / 255.0).astype(np.float32).transpose(2, 0, 1))


def test_fp16_is_fp32_rounded_and_within_one_ulp(frames):
    p16, p32 = Preprocessor(dtype=np.float16), Preprocessor(dtype=np.float32)
    for frame in frames:
        got = p16(frame)
        assert got.dtype == np.float16 and got.shape == (1, 3, 360, 640)
        ref = reference(frame)
        np.testing.assert_array_equal(got, p32(frame).astype(np.float16))
        assert np.all(np.abs(got.astype(np.float32) - ref) <= fp16_ulp(ref))
        # the naive path: float64 straight to float16
        naive = (cv2.resize(frame, (640, 360), interpolation=cv2.INTER_CUBIC) / 255.0).astype(np.float16)
        diff = np.abs(got[0].astype(np.float32) - naive.transpose(2, 0, 1).astype(np.float32))
        assert np.all(diff <= fp16_ulp(ref[0]))


def test_mean_std_rgb_model_and_crop(frames):
    spec = PreprocessSpec(
        height=288, width=800, color="rgb", mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225),
        crop={"top": 100, "left": 7, "right": 3},
    )
    p = Preprocessor(spec, batch=2)
    for frame in frames[:3]:
        np.testing.assert_array_equal(p(frame, index=1), reference(frame, spec))
        np.testing.assert_array_equal(p(frame[:, :, ::-1].copy(), color="rgb"), reference(frame, spec))
    assert spec.crop_box(590, 1640) == (100, 7, 490, 1630)


def test_rgb_frames_are_swapped_to_the_model_order(frames):
    frame = frames[0]
    p = Preprocessor()
    bgr = p(frame).copy()
    np.testing.assert_array_equal(p(np.ascontiguousarray(frame[:, :, ::-1]), color="rgb"), bgr)
    swapped = p(frame, color="rgb")
    np.testing.assert_array_equal(swapped[0, ::-1], bgr[0])


def test_batch_slots_and_external_buffer(frames):
    out = np.zeros((3, 3, 360, 640), np.float16)
    p = Preprocessor(dtype="float16", batch=3, out=out)
    view = p.batch(frames[:2])
    assert view.shape == (2, 3, 360, 640) and np.shares_memory(view, out)
    np.testing.assert_array_equal(out[0], reference(frames[0])[0].astype(np.float16))
    np.testing.assert_array_equal(out[1], reference(frames[1])[0].astype(np.float16))
    assert not out[2].any()  # untouched slot
    slot = p(frames[3], index=2)
    assert np.shares_memory(slot, out[2])
    np.testing.assert_array_equal(out[0], reference(frames[0])[0].astype(np.float16))  # others intact
    one = preprocess(frames[0])
    np.testing.assert_array_equal(one, reference(frames[0]))


@pytest.mark.parametrize(
    ("frame", "match"),
    [
        (np.zeros((360, 640), np.uint8), "shape"),
        (np.zeros((360, 640, 4), np.uint8), "shape"),
        (np.zeros((0, 640, 3), np.uint8), "empty"),
        (np.zeros((360, 0, 3), np.uint8), "empty"),
        (np.zeros((360, 640, 3), np.float32), "dtype"),
        (np.zeros((360, 640, 3), np.uint16), "dtype"),
        ([[[0, 0, 0]]], "numpy array"),
        (None, "numpy array"),
    ],
)
def test_bad_frames_raise_one_line_value_errors(frame, match):
    p = Preprocessor(dtype=np.float16)
    before = p.output.copy()
    with pytest.raises(InvalidFrameError, match=match) as info:
        p(frame)
    assert isinstance(info.value, ValueError) and "\n" not in str(info.value)
    np.testing.assert_array_equal(p.output, before)


def test_bad_options_raise():
    frame = np.zeros((10, 10, 3), np.uint8)
    with pytest.raises(InvalidFrameError, match="too small"):
        Preprocessor(PreprocessSpec(crop={"top": 10}))(frame)
    with pytest.raises(InvalidFrameError, match="color"):
        Preprocessor()(frame, color="yuv")
    with pytest.raises(PreprocessSpecError, match="index"):
        Preprocessor(batch=2)(frame, index=2)
    with pytest.raises(InvalidFrameError, match="frames"):
        Preprocessor(batch=2).batch([frame] * 3)
    for bad in (
        lambda: Preprocessor(dtype=np.float64),
        lambda: Preprocessor(batch=0),
        lambda: Preprocessor(out=np.zeros((1, 3, 360, 640), np.float16)),
        lambda: Preprocessor(PreprocessSpec(scale=1.0, std=(1e-4, 1, 1)), dtype=np.float16),
        lambda: PreprocessSpec(height=0),
        lambda: PreprocessSpec(width=3.5),
        lambda: PreprocessSpec(color="yuv"),
        lambda: PreprocessSpec(std=(1, 0, 1)),
        lambda: PreprocessSpec(mean=(0, 0)),
        lambda: PreprocessSpec(interpolation="lanczos7"),
        lambda: PreprocessSpec(layout="NHWC"),
        lambda: PreprocessSpec(crop={"middle": 3}),
        lambda: PreprocessSpec(crop={"top": -1}),
        lambda: PreprocessSpec.from_dict({**LANEATT_PREPROCESS, "gamma": 2.2}),
    ):
        with pytest.raises(PreprocessSpecError) as info:
            bad()
        assert isinstance(info.value, ValueError) and "\n" not in str(info.value)


def test_preprocess_module_is_self_contained(tmp_path, frames):
    imported = imported_packages(Path(pre.__file__))
    assert imported <= {"numpy", "cv2", "__future__"} | set(sys.stdlib_module_names)
    # a Triton Python-backend model imports a copy of the file from its version directory
    copy = tmp_path / "preprocess.py"
    shutil.copy(pre.__file__, copy)
    spec = importlib.util.spec_from_file_location("copied_preprocess", copy)
    module = importlib.util.module_from_spec(spec)
    sys.modules["copied_preprocess"] = module  # dataclasses look the module up while decorating
    try:
        spec.loader.exec_module(module)
        spec_dict = {**LANEATT_PREPROCESS, "crop": {"top": 50}}
        copied = module.Preprocessor(module.PreprocessSpec.from_dict(spec_dict), np.float16)(frames[0])
        ours = Preprocessor(PreprocessSpec.from_dict(spec_dict), np.float16)(frames[0])
        np.testing.assert_array_equal(copied, ours)
    finally:
        del sys.modules["copied_preprocess"]


def pil_resize(frame: np.ndarray, height: int, width: int) -> np.ndarray:
    """Pillow's own bilinear resize (antialiased when shrinking): what "antialiased_bilinear" stands for."""
    from PIL import Image

    return np.asarray(Image.fromarray(np.ascontiguousarray(frame)).resize((width, height), Image.BILINEAR))


def test_antialiased_bilinear_is_an_interpolation_of_specs():
    spec = PreprocessSpec(interpolation="Antialiased_Bilinear")
    assert spec.interpolation == "antialiased_bilinear" and "antialiased_bilinear" in pre.INTERPOLATIONS
    assert PreprocessSpec.from_dict(spec.to_dict()) == spec
    with pytest.raises(PreprocessSpecError, match="antialiased_bilinear"):  # the error lists it
        PreprocessSpec(interpolation="lanczos7")


def test_antialiased_bilinear_is_pillows_resize_within_two_levels(frames):
    """Every frame of the fixture (down, up, the same size, a 4-channel slice, a reversed view) against Pillow:
    the 8.8 fixed-point weights are 2 levels off at most on uniform noise (measured: 2 / mean 0.18), 1 on the
    road scene (mean 0.01)."""
    spec = PreprocessSpec(interpolation="antialiased_bilinear", scale=1.0)
    p = Preprocessor(spec)
    assert np.abs(p(frames[0])[0] - pil_resize(frames[0], 360, 640).transpose(2, 0, 1)).max() <= 1
    for frame in frames:
        want = pil_resize(frame, spec.height, spec.width).transpose(2, 0, 1).astype(np.float32)
        diff = np.abs(p(frame)[0] - want)
        assert diff.max() <= 2 and diff.mean() < 0.2, (frame.shape, diff.max(), diff.mean())
        np.testing.assert_array_equal(pre.resize(frame, (spec.height, spec.width), "antialiased_bilinear"),
                                      p(frame)[0].transpose(1, 2, 0).astype(np.uint8))


def test_antialiased_bilinear_with_crop_rgb_fp16(frames):
    spec = PreprocessSpec(interpolation="antialiased_bilinear", color="rgb", crop={"top": 31, "left": 7, "right": 4},
                          mean=(0.4, 0.5, 0.6), std=(0.2, 0.3, 0.25))
    frame = frames[0]
    cropped = frame[31:, 7:-4]
    x32 = Preprocessor(spec)(frame)
    np.testing.assert_array_equal(x32, reference(pre.resize(cropped, (360, 640), "antialiased_bilinear"),
                                                 PreprocessSpec(color="rgb", mean=spec.mean, std=spec.std)))
    np.testing.assert_array_equal(Preprocessor(spec, np.float16)(frame), x32.astype(np.float16))


def test_antialiased_bilinear_keeps_flat_frames_flat():
    """Each output's 8.8 fixed-point weights sum to exactly 1: a flat frame of any value stays that value."""
    for value in (0, 1, 127, 128, 254, 255):
        frame = np.full((590, 1640, 3), value, np.uint8)
        out = pre.AntialiasedBilinear((590, 1640), (533, 1600), 320)(frame)
        assert out.shape == (320, 1600, 3) and (out == value).all()
        assert (pre.resize(frame[:97, :131], (45, 300), "antialiased_bilinear") == value).all()


def test_resize_with_the_other_interpolations_is_cv2_resize(frames):
    for name, flag in pre.INTERPOLATIONS.items():
        if name != "antialiased_bilinear":
            np.testing.assert_array_equal(pre.resize(frames[2], (51, 77), name),
                                          cv2.resize(frames[2], (77, 51), interpolation=flag))


def test_antialiased_bilinear_bad_sizes_raise_one_line_errors():
    resample = pre.AntialiasedBilinear((100, 200), (50, 80), 20)
    with pytest.raises(InvalidFrameError, match="takes 200x100"):
        resample(np.zeros((101, 200, 3), np.uint8))
    for bad in (lambda: pre.AntialiasedBilinear((100, 200), (50, 80), 51),
                lambda: pre.AntialiasedBilinear((0, 200), (50, 80))):
        with pytest.raises(PreprocessSpecError) as info:
            bad()
        assert "\n" not in str(info.value)


def test_antialiased_bilinear_in_threads_equals_one_thread(frames):
    """The resamplers hold scratch buffers: each thread has its own (Preprocessors in threads, as a server runs)."""
    from concurrent.futures import ThreadPoolExecutor

    spec = PreprocessSpec(interpolation="antialiased_bilinear", resized_height=500, width=700)
    inputs = [frames[0], frames[1], frames[4]] * 4
    want = [Preprocessor(spec)(frame).copy() for frame in inputs]

    def run(frame):
        return Preprocessor(spec)(frame).copy()

    with ThreadPoolExecutor(4) as pool:
        got = list(pool.map(run, inputs))
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a, b)
