"""One plug-in family's bug is that family's, never the CLI's (issue 44, items 4-7, and 12's `convert MyLane`).

Real distributions on PYTHONPATH (tests/support/plugin_dists.py: what pip writes), found through the real
`edge_deploy.families` entry point group, in fresh processes (the registry is per process, so nothing here leaks
into other tests). Each broken plug-in is left out with one warning line naming its package and why; asked for by
name, it says whose bug it is in one line, exit 2; every other family and command keeps working.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from plugin_dists import write_plugin

OPTIONS = "@dataclass\nclass Opts:\n{fields}\n"

# case -> (write_plugin arguments, what its error says)
BROKEN = {
    "initraises": (dict(methods="def __init__(self):\n    raise RuntimeError('no GPU here')", family="Family"),
                   "importing edp_initraises:FAMILY failed (RuntimeError: no GPU here)"),
    "listopt": (dict(before=OPTIONS.format(fields="    sizes: list = field(default_factory=list)"),
                     attrs="options_type = Opts"), "family option Opts.sizes: give it a default and a type of"),
    "intbackbones": (dict(attrs="backbones = (18, 34)"), "its backbones are not names"),
    "outputopt": (dict(before=OPTIONS.format(fields="    output: str = 'x'"), attrs="options_type = Opts"),
                  "named like convert's own --output"),
    "importerror": (dict(before="raise ImportError('needs libfoo')"), "failed (ImportError: needs libfoo)"),
    "valueerror": (dict(before="raise ValueError('bad config')"), "failed (ValueError: bad config)"),
    "missingobj": (dict(entry="missingobj = edp_missingobj:NOPE"), "failed (AttributeError:"),
    "notfamily": (dict(family="42"), "it is int, not a LaneFamily"),
    "badtitle": (dict(title="5"), "its title is not a non-empty string"),
    "baddatasets": (dict(attrs="datasets = {'culane': 1}"), "its datasets is not a mapping of names to DatasetPreset"),
    "nodecoder": (dict(decoder="edp_nodecoder.nope"), "its decoder_module 'edp_nodecoder.nope' cannot be found"),
    "exits": (dict(before="sys.exit(3)"), "importing edp_exits:FAMILY called sys.exit(3)"),
}
# load() fails only when convert asks for the model
AT_LOAD = {
    "loadraises": (dict(methods="def load(self, spec):\n    raise RuntimeError('weights missing')"),
                   "its load() raised RuntimeError: weights missing"),
    "loadwrong": (dict(methods="def load(self, spec):\n    return 42"), "its load() returned int, not a LoadedModel"),
}
# well-behaved, but their calls raise: never the user's conversion of another family
MISBEHAVING = {
    "recograises": dict(methods="def recognizes_checkpoint(self, keys):\n    raise KeyError('boom')"),
    "matchraises": dict(lane_outputs="raise TypeError('shape is None')"),
}


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> tuple[Path, dict[str, str]]:
    site = tmp_path_factory.mktemp("plugins")
    for case, (kwargs, _) in {**BROKEN, **AT_LOAD}.items():
        write_plugin(site, case, **kwargs)
    for case, kwargs in MISBEHAVING.items():
        write_plugin(site, case, **kwargs)
    # valid str and int options in a module without `from __future__ import annotations`
    write_plugin(site, "plainopts", future=False, attrs="options_type = Opts",
                 before=OPTIONS.format(fields="    size: int = 3\n    mode: str | None = None"))
    write_plugin(site, "printer", before="print('hello from a plug-in')")
    write_plugin(site, "mylane", family_name="MyLane")
    env = {k: v for k, v in os.environ.items() if k != "EDGE_DEPLOY_DEBUG"}
    env["PYTHONPATH"] = os.pathsep.join([str(site), *filter(None, [env.get("PYTHONPATH")])])
    env["EDGE_DEPLOY_STATE_DIR"] = str(site / "state")
    return site, env


def run(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, *args], env=env, capture_output=True, text=True, timeout=120)


def test_every_command_works_and_each_broken_plugin_is_one_warning_line(site) -> None:
    # (a malformed entry_points.txt only here: torch's own import reads every distribution's, and fails on it)
    env = dict(site[1])
    write_plugin(site[0] / "more", "noequals", entry="a line without an equals sign")
    env["PYTHONPATH"] = os.pathsep.join([str(site[0] / "more"), env["PYTHONPATH"]])
    listed = run(env, "-m", "edge_deploy", "families", "--json")
    assert listed.returncode == 0, listed.stderr
    names = [row["name"] for row in json.loads(listed.stdout)]  # strict JSON: the plug-in's print went to stderr
    assert names[:3] == ["laneatt", "ufldv2", "clrnet"] and {"plainopts", "printer", "MyLane"} <= set(names)
    assert not set(BROKEN) & set(names)
    plain = next(row for row in json.loads(listed.stdout) if row["name"] == "plainopts")
    assert [(o["flag"], o["type"]) for o in plain["options"]] == [("--size", "int"), ("--mode", "str")]
    warnings = [line for line in listed.stderr.splitlines() if line.startswith("warning:")]
    for case, (_, why) in BROKEN.items():
        mine = [line for line in warnings if f"edp-{case} " in line]
        assert len(mine) == 1 and why in mine[0], (case, listed.stderr)
    assert any("package edp-noequals is left out: its entry_points.txt cannot be read" in w for w in warnings)
    assert "Traceback" not in listed.stderr and "hello from a plug-in" in listed.stderr
    for command in (["status"], ["convert", "--help"], ["models", "--repository", str(site[0] / "none")]):
        done = run(env, "-m", "edge_deploy", *command)
        assert done.returncode in (0, 2, 3) and "Traceback" not in done.stderr, (command, done.stderr)
    assert "--size" in run(env, "-m", "edge_deploy", "convert", "--help").stdout


ASK_EACH = """
import json, sys
from edge_deploy.cli import error_line
from edge_deploy.export.source import load_source
from edge_deploy.lanedet.family import SourceSpec
out = {}
for case in sys.argv[1:]:
    try:
        load_source(SourceSpec(model=case))
    except Exception as exc:
        out[case] = error_line(exc)
print(json.dumps(out))
"""


def test_a_broken_plugin_asked_for_says_whose_bug_it_is(site) -> None:
    _, env = site
    # through the command line for two of them; every case through the CLI's own error mapping in one process
    for case in ("initraises", "loadraises"):
        done = run(env, "-m", "edge_deploy", "convert", case, "-o", str(site[0] / f"out-{case}"), "--target", "onnx")
        errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
        assert done.returncode == 2 and len(errors) == 1 and f"this is a bug of edp-{case}" in errors[0], done.stderr
        assert "Traceback" not in done.stderr
    cases = {**BROKEN, **AT_LOAD}
    done = run(env, "-c", ASK_EACH, *cases)
    assert done.returncode == 0, done.stderr
    lines = json.loads(done.stdout.splitlines()[-1])
    for case, (_, why) in cases.items():
        line, code = lines[case]
        assert code == 2 and "\n" not in line, (case, line)
        assert f"lane-model family {case!r} of edp-{case} is broken: " in line and why in line, (case, line)
        assert f"this is a bug of edp-{case}, not of edge-deploy" in line, line


PROBE = """
import json, sys
import numpy as np
from edge_deploy.lanedet.checkpoint import refuse_other_family
from edge_deploy.lanedet.family import TensorSpec, family_for_outputs
from edge_deploy.export.source import classify_model, family_named
out = {}
refuse_other_family("ckpt.pt", {"backbone.conv1.weight": 0, 7: 1}, "laneatt")  # nobody claims it: no error
out["refused"] = "none"
spec = [TensorSpec("predict_lanes", "FP32", (-1, 1000, 77))]
found = family_for_outputs(spec, True)
out["outputs"] = found.name if found else None
out["named"] = [family_named("MyLane"), family_named("mylane"), classify_model("MyLane")]
from edge_deploy.export.source import load_source
from edge_deploy.lanedet.family import SourceSpec
refused = []
for given in ({"backbone": "resnet18"}, {"dataset": "culane"}, {"options": {"size": 2, "topk_anchors": 5}}):
    try:
        load_source(SourceSpec(model="plainopts", **given))
    except Exception as exc:
        refused.append(str(exc))
out["refused_options"] = refused
print(json.dumps(out))
"""


def test_another_familys_failure_never_fails_the_users_conversion(site) -> None:
    pytest.importorskip("torch", reason="lanedet/checkpoint.py reads torch checkpoints: the Python 3.10 run has no torch")
    _, env = site
    done = run(env, "-c", PROBE)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout.splitlines()[-1])
    refused = out.pop("refused_options")
    assert out == {"refused": "none", "outputs": "laneatt", "named": ["MyLane", "MyLane", "family"]}
    # a family without backbones, data sets or LaneATT's options refuses them, before its own load() runs
    assert refused == ["Plainopts has no --backbone resnet18; use no choice of backbone (drop --backbone).",
                       "Plainopts has no --dataset culane preset; use none (drop --dataset).",
                       "--topk-anchors only applies to LaneATT; Plainopts takes --dataset, --backbone, --checkpoint, "
                       "--size, --mode."], refused
    for case, call in (("recograises", "recognizes_checkpoint()"), ("matchraises", "matches()")):
        mine = [line for line in done.stderr.splitlines() if f"edp-{case} " in line]
        assert len(mine) == 1 and f"its {call} raised" in mine[0], done.stderr
