"""The suite's `run_cli` (tests/support/cli_process.py): a call forked from the warm interpreter gives what a new
`python -m edge_deploy` interpreter gives, for the things the tests look at (exit status, stdout, stderr, files
written relative to the directory, what the environment changes, the timeout), and falls back to a new interpreter
where the environment changes how Python starts."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from cli_process import NEW_INTERPRETER_ENV, run_cli, warm_server
from conftest import free_port

BOARD = Path(__file__).resolve().parents[1] / "data" / "jetson_root" / "orin_nano_jp62"

pytestmark = pytest.mark.skipif(NEW_INTERPRETER_ENV in os.environ, reason=f"${NEW_INTERPRETER_ENV} is set: every "
                                "call of this run starts a new interpreter, and there is no warm one to compare")


def new_interpreter(args: list[str], **kwargs) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "edge_deploy", *args], capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, timeout=120, **kwargs)


def warm(args: list[str], **kwargs) -> subprocess.CompletedProcess[str]:
    before = warm_server().forked
    done = run_cli(args, timeout=120, **kwargs)
    assert warm_server().forked == before + 1, "the call did not run in a forked child"
    return done


@pytest.mark.parametrize("args", [
    ["status", "--bogus"],                       # a usage error: exit 2, the program name as `python -m` gives it
    ["families"],                                # stdout
    ["models", "--repository", "/nonexistent"],  # a one-line error of edge-deploy's own
    ["certs", "--help"],                         # rich's help panel
])
def test_a_warm_call_gives_what_a_new_interpreter_gives(args) -> None:
    fresh, forked = new_interpreter(args), warm(args)
    assert (forked.returncode, forked.stdout, forked.stderr) == (fresh.returncode, fresh.stdout, fresh.stderr)
    assert forked.stdout or forked.stderr


def test_the_environment_and_directory_are_the_calls(tmp_path) -> None:
    env = {**os.environ, "EDGE_DEPLOY_ROOT": str(BOARD)}
    fresh = new_interpreter(["doctor", "--for", "serve", "--json"], env=env)
    forked = warm(["doctor", "--for", "serve", "--json"], env=env)
    assert json.loads(forked.stdout)["fingerprint"] == json.loads(fresh.stdout)["fingerprint"]
    assert json.loads(forked.stdout)["fingerprint"]["jetpack"]  # read from the board's files: $EDGE_DEPLOY_ROOT held
    done = warm(["sample", "-o", "frames", "-n", "1", "--width", "64", "--height", "64"], cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "frames" / "road-000.png").is_file()  # relative to the call's directory


def test_a_call_past_its_timeout_is_killed_and_raises_as_subprocess_does(tmp_path) -> None:
    url = f"127.0.0.1:{free_port()}"  # nothing listens: health keeps asking until --wait runs out
    start = time.monotonic()
    with pytest.raises(subprocess.TimeoutExpired):
        run_cli(["health", "--url", url, "--model", "m", "--wait", "120"], timeout=2)
    assert time.monotonic() - start < 60  # killed at its timeout, not waited for until --wait gives up
    done = warm(["health", "--url", url, "--model", "m"])  # the server still answers after a kill
    assert done.returncode != 0 and done.stderr.startswith("error: ")


def test_a_pythonpath_the_warm_interpreter_does_not_have_starts_a_new_one(tmp_path) -> None:
    (tmp_path / "sitecustomize.py").write_text("import sys\nprint('new interpreter', file=sys.stderr)\n")
    before = warm_server().forked
    done = run_cli(["families"], env={**os.environ, "PYTHONPATH": str(tmp_path)}, timeout=120)
    assert warm_server().forked == before
    assert done.returncode == 0 and done.stderr.startswith("new interpreter"), done.stderr
