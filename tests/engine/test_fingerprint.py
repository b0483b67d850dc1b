"""Plan fingerprints: what changed, in words, and whether a recorded plan runs on this machine.

Machines are the fake Jetson roots of tests/data/jetson_root; the rebuild
decision as build_plan takes it is in tests/test_engine.py.
"""
from __future__ import annotations

from edge_deploy.artifact.manifest import PlanRecord
from edge_deploy.engine import plan as engine
from edge_deploy.machine.facts import device_facts
from edge_deploy.engine.fingerprint import plan_fingerprint
from edge_deploy.machine.plan_fit import fingerprint_diff, plan_mismatch
from edge_deploy.core.sizes import GiB

pytest_plugins = ["jetson_fixtures"]  # board, artifact, fake_trt, ... (shared fixtures)


def test_fingerprint_diff_names_what_changed(board, artifact) -> None:
    _, manifest = artifact
    built = engine.build_settings(manifest, engine.EngineOptions(), GiB)
    orin = device_facts(board("agx_orin_jp60"))
    recorded = plan_fingerprint(orin, "8.6.2.3", "a" * 64, built)
    assert fingerprint_diff(recorded, plan_fingerprint(orin, "8.6.2", "a" * 64, built)) == []
    nano = device_facts(board("orin_nano_jp62"))
    changes = fingerprint_diff(recorded, plan_fingerprint(nano, "10.3.0", "b" * 64, built))
    text = " | ".join(changes)
    assert "TensorRT: 8.6.2.3 -> 10.3.0" in text
    assert "CUDA: 12.2.140 -> 12.6.68" in text
    assert "L4T release: 36.3.0 -> 36.4.3" in text
    assert "ONNX model (sha256): aaaaaaaaaaaa… -> bbbbbbbbbbbb…" in text
    assert not any(c.startswith(("GPU", "compute capability", "precision")) for c in changes)
    orin.cuda = "12.2.999"  # a CUDA patch release does not invalidate plans
    assert fingerprint_diff(recorded, plan_fingerprint(orin, "8.6.2", "a" * 64, built)) == []
    fp32 = engine.build_settings(manifest, engine.EngineOptions(precision="fp32"), GiB)
    changes = fingerprint_diff(recorded, plan_fingerprint(orin, "8.6.2", "a" * 64, fp32))
    assert changes == ["precision: fp16 -> fp32", "FP32-pinned nodes: 1 node(s) -> 0 node(s)"]


def test_plan_mismatch_for_the_repository(board) -> None:
    desktop = device_facts(board("x86_desktop"))
    recorded = PlanRecord.from_dict({"tensorrt": "8.6.2", "cuda": "12.2.140", "gpu": "Orin", "compute_capability": "8.7",
                                     "l4t": "36.3.0"})
    changes = plan_mismatch(recorded, desktop)
    assert "TensorRT: the plan was built with 8.6.2, this machine has none" in changes
    assert len(changes) == 5
    assert plan_mismatch(recorded, device_facts(board("agx_orin_jp60"))) == []
    assert plan_mismatch(None, desktop) == ["no plan fingerprint recorded (built by something other than edge-deploy)"]
