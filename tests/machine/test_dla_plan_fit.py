"""A DLA plan on a board without that DLA core: `plan_mismatch` (what doctor and install ask) says so. The boards are
the fake Jetson roots of tests/data/jetson_root (a double for the Orin's /proc and /etc)."""
from __future__ import annotations

from pathlib import Path

from edge_deploy.artifact.manifest import PlanRecord
from edge_deploy.machine.facts import device_facts
from edge_deploy.machine.plan_fit import plan_mismatch

ROOTS = Path(__file__).resolve().parents[1] / "data" / "jetson_root"


def _plan_for(facts, dla_core):
    return PlanRecord(tensorrt=facts.tensorrt, cuda=facts.cuda, gpu=facts.gpu,
                      compute_capability=facts.compute_capability, l4t=facts.l4t, dla_core=dla_core)


def test_a_dla_plan_needs_its_core_on_the_board():
    agx = device_facts(ROOTS / "agx_orin_jp60", probe_gpu=False)
    nano = device_facts(ROOTS / "orin_nano_jp62", probe_gpu=False)
    assert agx.dla_cores == 2 and not nano.dla_cores
    assert plan_mismatch(_plan_for(agx, 1), agx) == []
    assert plan_mismatch(_plan_for(agx, None), agx) == []
    problems = plan_mismatch(_plan_for(nano, 0), nano)
    assert problems == ["DLA core: the plan runs on DLA core 0, this board has 0 DLA cores"]
