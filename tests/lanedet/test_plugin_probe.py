"""Plug-ins discovered in isolation (issue 54, class 5): `families` and `convert`'s flags describe plug-in families in a
child process bounded in time, so a plug-in whose import never returns, whose property raises, or that leaves a
non-daemon thread running costs one warning line naming its package, never a hang, a traceback or exit 70; touching a
built-in family never imports a plug-in; and a command that did import one (`convert PLUGIN`) still exits.

Real distributions on PYTHONPATH (tests/support/plugin_dists.py), found through the real entry point group, in fresh
processes, each bounded by a subprocess timeout far above what the contract allows (EDGE_DEPLOY_PLUGIN_TIMEOUT=2 s).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from plugin_dists import write_plugin

TIMEOUT_S = 2.0  # EDGE_DEPLOY_PLUGIN_TIMEOUT here: the hung plug-in costs this once per command
BOUND_S = 60.0  # the subprocess timeout: a hang fails the test instead of the suite

# The hung plug-in records its process id, so the test can see that nothing of it is left running.
HANG = ("import os, pathlib, threading\npathlib.Path(os.environ['EDP_PIDS']).joinpath(str(os.getpid())).touch()\n"
        "threading.Event().wait()")
THREAD = "import threading\nthreading.Thread(target=threading.Event().wait, name='plugin-forever').start()"
HOSTILE = {
    "hangs": (dict(before=HANG), f"importing and describing it did not finish within {TIMEOUT_S:g} s"),
    "titleprop": (dict(attrs="@property\ndef title(self):\n    raise RuntimeError('no title today')"),
                  "its title raised RuntimeError: no title today"),
    "backprop": (dict(attrs="@property\ndef backbones(self):\n    raise KeyError('resnet')"),
                 "its backbones raised KeyError: 'resnet'"),
    "dataprop": (dict(attrs="@property\ndef datasets(self):\n    raise ValueError('no presets')"),
                 "its datasets raised ValueError: no presets"),
}
OPTIONS = "from dataclasses import dataclass\n@dataclass\nclass Opts:\n    size: int = 3\n"


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> tuple[Path, dict[str, str]]:
    site = tmp_path_factory.mktemp("plugins")
    for case, (kwargs, _) in HOSTILE.items():
        write_plugin(site, case, **kwargs)
    write_plugin(site, "threaded", before=THREAD)  # otherwise a sound family: listed
    write_plugin(site, "fine", before=OPTIONS, attrs="options_type = Opts")
    env = {k: v for k, v in os.environ.items() if k != "EDGE_DEPLOY_DEBUG"}
    env["PYTHONPATH"] = os.pathsep.join([str(site), *filter(None, [env.get("PYTHONPATH")])])
    env["EDGE_DEPLOY_STATE_DIR"] = str(site / "state")
    env["EDGE_DEPLOY_PLUGIN_TIMEOUT"] = str(TIMEOUT_S)
    (site / "pids").mkdir()
    env["EDP_PIDS"] = str(site / "pids")
    return site, env


def run(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, *args], env=env, capture_output=True, text=True, timeout=BOUND_S,
                          stdin=subprocess.DEVNULL)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _left_running(site: Path) -> list[int]:
    """The hung plug-in's processes still running (none: the probe killed its child's process group)."""
    pids = [int(p.name) for p in (site / "pids").iterdir()]
    assert pids, "the hung plug-in never ran"
    deadline = time.monotonic() + 10  # a killed process is reaped by its parent right away; margin for a busy box
    while any(_alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    return [pid for pid in pids if _alive(pid)]


def test_families_lists_the_sound_ones_and_one_warning_per_hostile_plugin(site) -> None:
    done = run(site[1], "-m", "edge_deploy", "families", "--json")
    assert done.returncode == 0, done.stderr
    names = [row["name"] for row in json.loads(done.stdout)]
    assert names == ["laneatt", "ufldv2", "clrnet", "fine", "threaded"], names
    fine = json.loads(done.stdout)[3]
    assert fine["origin"] == "package edp-fine" and [o["flag"] for o in fine["options"]] == ["--size"]
    warnings = [line for line in done.stderr.splitlines() if line.startswith("warning:")]
    for case, (_, why) in HOSTILE.items():
        mine = [line for line in warnings if f"edp-{case} " in line]
        assert len(mine) == 1 and why in mine[0], (case, done.stderr)
    assert len(warnings) == len(HOSTILE) and "Traceback" not in done.stderr, done.stderr
    assert _left_running(site[0]) == []


IN_PROCESS = """
import json, sys
from edge_deploy.lanedet.family import SourceSpec, TensorSpec, family_for_outputs, get_family
get_family("ufldv2").options_from(SourceSpec("ufldv2"))
found = family_for_outputs([TensorSpec("predict_lanes", "FP32", (-1, 1000, 77))], True)
touched = sorted(m for m in sys.modules if m.startswith("edp_"))
from edge_deploy.cli.convert import _family_option_parameters  # convert's flags: plug-ins described, not imported
flags = [p.name for p in _family_option_parameters()]
print(json.dumps({"found": found.name, "touched": touched, "flags": flags,
                  "after_flags": sorted(m for m in sys.modules if m.startswith("edp_"))}))
"""


def test_a_built_in_family_never_imports_a_plugin(site) -> None:
    done = run(site[1], "-c", IN_PROCESS)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout.splitlines()[-1])
    assert out["found"] == "laneatt" and out["touched"] == [] and out["after_flags"] == [], out
    assert "size" in out["flags"] and "topk_anchors" in out["flags"], out
    # the built-in convert, with every hostile plug-in installed: its own one-line error, the warnings, no traceback
    done = run(site[1], "-m", "edge_deploy", "convert", "ufldv2", "--dataset", "nope", "-o", str(site[0] / "art"),
               "--target", "onnx")
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert done.returncode == 2 and errors == ["error: UFLDv2 has no --dataset nope preset; use culane or tusimple."], \
        done.stderr
    assert "Traceback" not in done.stderr and not (site[0] / "art").exists()
    assert _left_running(site[0]) == []


def test_a_plugins_thread_does_not_keep_the_command_alive(site) -> None:
    """`convert threaded` imports the plug-in here (it was asked for by name); its non-daemon thread never ends, and
    the command still exits with its own error (the template family has no model builder)."""
    done = run(site[1], "-m", "edge_deploy", "convert", "threaded", "-o", str(site[0] / "art2"), "--target", "onnx")
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert done.returncode == 2 and len(errors) == 1 and "has no model builder" in errors[0], done.stderr
    assert "not waiting for thread plugin-forever" in done.stderr and "Traceback" not in done.stderr


def test_a_plugin_timeout_out_of_range_is_refused_in_one_line(site, monkeypatch) -> None:
    from edge_deploy.errors import PluginError
    from edge_deploy.lanedet.plugin_probe import probe_timeout

    done = run(dict(site[1], EDGE_DEPLOY_PLUGIN_TIMEOUT="nan"), "-m", "edge_deploy", "families")
    assert done.returncode == 2 and done.stderr.strip().splitlines() == [
        "error: EDGE_DEPLOY_PLUGIN_TIMEOUT='nan' is not a number of seconds from 0.1 to 3600; set it to one (the time "
        "one plug-in family may take to import), or unset it for 30."], done.stderr
    for value in ("0", "-1", "inf", "1e308", "1e-308", "soon", "0.09", "3600.5"):
        monkeypatch.setenv("EDGE_DEPLOY_PLUGIN_TIMEOUT", value)
        with pytest.raises(PluginError, match="is not a number of seconds from 0.1 to 3600"):
            probe_timeout()
    for value, seconds in (("0.1", 0.1), ("3600", 3600.0), (" 5 ", 5.0), ("", 30.0)):
        monkeypatch.setenv("EDGE_DEPLOY_PLUGIN_TIMEOUT", value)
        assert probe_timeout() == seconds


def test_an_artifact_of_a_hung_plugin_family_is_refused_without_importing_it_here(site, tmp_path) -> None:
    """A manifest naming a plug-in family (`install ART`) asks get_family for it by name, which imported the plug-in
    in the command's own process: one whose import never returns hung `install` for ever. It is probed in a child
    first, like `families` does (plant: drop `_probe_first(name)` from lane_family.get_family, and `install` runs past
    the subprocess timeout)."""
    import shutil

    from edge_deploy.artifact.manifest import Manifest

    art = tmp_path / "art"
    shutil.copytree(Path(__file__).resolve().parents[1] / "data" / "format1" / "tiny_fp16", art)
    manifest = Manifest.read(art).to_dict()  # the current format: format 1 has no family of its own
    manifest["family"] = "hangs"
    (art / "manifest.json").write_text(json.dumps(manifest))
    done = run(site[1], "-m", "edge_deploy", "install", str(art), "--repository", str(tmp_path / "repo"))
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert done.returncode == 2 and len(errors) == 1 and "Traceback" not in done.stderr, done.stderr
    assert f"lane-model family 'hangs' of edp-hangs is broken: importing and describing it did not finish within " \
           f"{TIMEOUT_S:g} s" in errors[0], errors
    assert not (tmp_path / "repo").exists()
    assert _left_running(site[0]) == []


def test_the_client_imports_its_served_plugin_family_without_a_probe_child(site) -> None:
    """A vehicle app's client looks up the family its served model's config names: that is the app's own plug-in,
    imported in its process anyway, and a probe child (a new Python, half a second or more) at its first detect would
    cost that call's deadline. So the client asks without a probe; the CLI's lookups probe (the test above). Plant:
    `probe=True` in client/served_model.py's get_family call, and the probe describes `fine` here."""
    script = (
        "from tritonclient.grpc import model_config_pb2 as pb\n"
        "from edge_deploy.client.served_model import _family\n"
        "from edge_deploy.lanedet import lane_family\n"
        "from edge_deploy.lanedet.contract import PARAM_FAMILY\n"
        "config = pb.ModelConfig(name='m')\n"
        "config.parameters[PARAM_FAMILY].string_value = 'fine'\n"
        "print(_family(config, False).name, 'fine' in lane_family._PROBED)\n")
    done = run(site[1], "-c", script)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["fine", "False"], done.stdout
