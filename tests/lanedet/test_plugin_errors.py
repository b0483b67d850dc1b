"""Whose error a failure is (issue 55, items 16 and 17): a bug inside a built-in family surfaces as that bug (edge-deploy's
internal error, exit 70), never as a "broken plug-in" warning; a plug-in's own one-line error about the user's input (a
ConvertError about a bad checkpoint) reaches the user as that error, never blamed on the plug-in's package, and the
plug-in stays listed.

In fresh processes (the family registry is per process). The built-in family's bug is made by replacing one of its
methods in that child process with one that raises: the only way to have a bug in edge-deploy's own family without
editing it. The plug-in is a real distribution on PYTHONPATH (tests/support/plugin_dists.py)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from plugin_dists import write_plugin


def _env(site: Path | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "EDGE_DEPLOY_DEBUG"}
    if site is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(site), *filter(None, [env.get("PYTHONPATH")])])
    return env


def _run(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, *args], env=env, capture_output=True, text=True, timeout=120)


BUILTIN_BUG = """
import json, sys
from edge_deploy.lanedet.family import SourceSpec, TensorSpec, family_for_outputs, get_family, known_families

def bug(*args, **kwargs):
    raise ZeroDivisionError("a bug inside the family")

family = get_family("ufldv2")
family.load = bug                       # convert's call of the family
get_family("clrnet").matches = bug  # a question every family is asked
out = {}
try:
    from edge_deploy.export.source import load_source
    load_source(SourceSpec(model="ufldv2"))
except BaseException as exc:
    out["load"] = type(exc).__name__
try:
    family_for_outputs([TensorSpec("nobody's", "FP32", (-1, 3))], True)
except BaseException as exc:
    out["asked"] = type(exc).__name__
out["listed"] = [f.name for f in known_families()]
print(json.dumps(out))
if sys.argv[1:] == ["cli"]:
    from edge_deploy.cli import main
    sys.argv = ["edge-deploy", "convert", "ufldv2", "-o", sys.argv[0] + ".out", "--target", "onnx"]
    main()
"""


def test_a_bug_inside_a_built_in_family_is_that_bug(tmp_path: Path) -> None:
    script = tmp_path / "builtin_bug.py"
    script.write_text(BUILTIN_BUG)
    done = _run(_env(), str(script), "cli")
    out = json.loads(done.stdout.splitlines()[0])
    assert out == {"load": "ZeroDivisionError", "asked": "ZeroDivisionError",
                   "listed": ["laneatt", "ufldv2", "clrnet"]}, (out, done.stderr)
    assert "left out" not in done.stderr and "broken" not in done.stderr, done.stderr
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 70 and len(lines) == 1, done.stderr
    assert lines[0].startswith("error: internal error (ZeroDivisionError: a bug inside the family); this is a bug of "
                               "edge-deploy"), lines[0]


CHECKPOINT_ERROR = "raise ConvertError(f'checkpoint {spec.checkpoint} is not a Picky checkpoint: it has no head.*; ' " \
                   "'pass the .pt the Picky trainer saves.')"


def test_a_plugins_own_error_about_the_input_reaches_the_user_as_it_is(tmp_path: Path) -> None:
    site = tmp_path / "site"
    write_plugin(site, "picky", before="from edge_deploy.errors import ConvertError",
                 methods=f"def load(self, spec):\n    {CHECKPOINT_ERROR}")
    env = _env(site)
    env["EDGE_DEPLOY_STATE_DIR"] = str(tmp_path / "state")
    checkpoint = tmp_path / "wrong.pt"
    checkpoint.write_bytes(b"not a picky checkpoint")
    done = _run(env, "-m", "edge_deploy", "convert", "picky", "--checkpoint", str(checkpoint), "-o",
                str(tmp_path / "art"), "--target", "onnx")
    expected = (f"error: checkpoint {checkpoint} is not a Picky checkpoint: it has no head.*; pass the .pt the Picky "
                "trainer saves.")
    assert done.returncode == 2 and done.stderr.strip().splitlines() == [expected], done.stderr
    assert not (tmp_path / "art").exists()
    # in one process: the error is the plug-in's ConvertError, and the plug-in is still a family afterwards
    probe = ("import json\nfrom edge_deploy.errors import ConvertError\nfrom edge_deploy.export.source import load_source\n"
             "from edge_deploy.lanedet.family import SourceSpec, family_names, known_families\n"
             f"try:\n    load_source(SourceSpec(model='picky', checkpoint={str(checkpoint)!r}))\n"
             "except ConvertError as exc:\n    kind = type(exc).__name__\n"
             "print(json.dumps([kind, [f.name for f in known_families()]]))\n")
    done = _run(env, "-c", probe)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.splitlines()[-1]) == ["ConvertError", ["laneatt", "ufldv2", "clrnet", "picky"]]
    assert "warning" not in done.stderr and "broken" not in done.stderr, done.stderr
