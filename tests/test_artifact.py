"""The manifest's typed view: each section with its default, and the I/O signature as TensorSpecs."""
from __future__ import annotations

from edge_deploy.artifact import Manifest, TensorSpec


def test_sections_default_to_empty_and_plan_to_none() -> None:
    view = Manifest({"format": 1, "io": None, "plan": None})
    assert (view.io, view.batch, view.preprocess, view.decode, view.files, view.parity, view.fp16) == ({},) * 7
    assert view.plan is None and view.inputs == [] and view.input_size == (360, 640)


def test_io_signature_is_typed() -> None:
    view = Manifest({
        "io": {"inputs": [{"name": "input", "datatype": "FP16", "shape": ["-1", 3, 288, 800]}],
               "outputs": [{"name": "predict_lanes", "datatype": "FP32", "shape": [-1, 1000, 77]}],
               "batch": {"min": 1, "max": 4}},
        "preprocess": {"height": 288, "width": 800},
        "plan": {"tensorrt": "10.3.0"},
    })
    assert view.inputs == [TensorSpec("input", "FP16", (-1, 3, 288, 800))]
    assert view.outputs[0].shape == (-1, 1000, 77)
    assert view.batch == {"min": 1, "max": 4} and view.input_size == (288, 800)
    assert view.plan == {"tensorrt": "10.3.0"}
