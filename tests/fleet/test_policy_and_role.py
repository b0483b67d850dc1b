"""The rollout policy, the shipped role's layout and syntax (ansible-playbook --syntax-check), doctor --json."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from cli_process import run_cli

from edge_deploy.fleet import ansible as fa
from edge_deploy.fleet.policy import Amount, FleetError, batches, exceeds

REPO = Path(__file__).resolve().parents[2]
HOSTS = [f"v{i}" for i in range(1, 11)]


def test_batches_canary_first_then_counts_or_percentages() -> None:
    assert batches(HOSTS, 1, Amount.parse("3", "--batch")) == [["v1"], ["v2", "v3", "v4"], ["v5", "v6", "v7"],
                                                               ["v8", "v9", "v10"]]
    # a percentage is of all hosts, rounded up: 25% of 10 -> 3
    assert [len(b) for b in batches(HOSTS, 2, Amount.parse("25%", "--batch"))] == [2, 3, 3, 2]
    assert batches(HOSTS[:2], 0, Amount.parse("100%", "--batch")) == [["v1", "v2"]]
    assert batches(HOSTS[:1], 3, Amount.parse("1", "--batch")) == [["v1"]]
    for bad in ("0", "-1", "x", "150%"):
        with pytest.raises(FleetError, match="--batch"):
            batches(HOSTS, 1, Amount.parse(bad, "--batch"))


def test_max_fail_counts_and_percentages_the_canary_tolerates_nothing() -> None:
    assert exceeds(1, 1, Amount.parse("5", "--max-fail"), canary=True)
    assert not exceeds(0, 1, Amount.parse("0", "--max-fail"), canary=True)
    assert exceeds(1, 4, Amount.parse("0", "--max-fail"), canary=False)
    assert not exceeds(1, 4, Amount.parse("1", "--max-fail"), canary=False)
    assert exceeds(2, 4, Amount.parse("1", "--max-fail"), canary=False)
    assert not exceeds(1, 4, Amount.parse("25%", "--max-fail"), canary=False)  # "exceeds": more than 25 %
    assert exceeds(2, 4, Amount.parse("25%", "--max-fail"), canary=False)


def test_rollout_refuses_keep_below_two_as_a_library_call(tmp_path) -> None:
    # the rule `rollout --keep` enforces is rollout()'s: a library caller gets the same line, before any work
    from edge_deploy.fleet.rollout import rollout

    runs = tmp_path / "runs"
    line = ("--keep must be at least 2 (got 1): the previous version is what a failed vehicle rolls back to.")
    for how in ({"keep": 1}, {"extra_vars": {"edge_deploy_keep": "1"}}, {"extra_vars": {"edge_deploy_keep": 1}}):
        with pytest.raises(FleetError) as refused:
            rollout(tmp_path / "art", tmp_path / "hosts.ini", run_root=runs, **how)
        assert str(refused.value) == line
    with pytest.raises(FleetError, match="--keep must be a whole number of versions, at least 2 \\(got 'two'\\)"):
        rollout(tmp_path / "art", tmp_path / "hosts.ini", run_root=runs, extra_vars={"edge_deploy_keep": "two"})
    assert not runs.exists()


def test_role_is_laid_out_as_ansible_expects_and_parses() -> None:
    role = fa.ROLES_DIR / "edge_deploy"
    for part in ("tasks/main.yml", "tasks/rollout.yml", "tasks/plan.yml", "tasks/status.yml", "defaults/main.yml",
                 "meta/main.yml"):
        assert (role / part).is_file(), part
    if not Path(sys.executable).with_name("ansible-playbook").exists():
        pytest.skip("ansible-core is not installed")
    env = fa.ansible_env({"ANSIBLE_HOME": "/tmp/edge-deploy-ansible-syntax"})
    for book in ("rollout.yml", "status.yml"):
        done = subprocess.run([fa.find_tool("ansible-playbook"), "-i", "localhost,", "--syntax-check",
                               str(fa.playbook(book))], capture_output=True, text=True, env=env, timeout=120)
        assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.slow
def test_wheel_ships_the_role(tmp_path) -> None:
    done = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w",
                           str(tmp_path), str(REPO)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    wheel = next(tmp_path.glob("edge_deploy-*.whl"))
    names = set(zipfile.ZipFile(wheel).namelist())
    for part in ("tasks/main.yml", "tasks/rollout.yml", "tasks/plan.yml", "tasks/status.yml", "defaults/main.yml",
                 "meta/main.yml"):
        assert f"edge_deploy/fleet/ansible/roles/edge_deploy/{part}" in names, part
    assert "edge_deploy/fleet/ansible/rollout.yml" in names and "edge_deploy/fleet/ansible/status.yml" in names


def test_doctor_json_for_a_comma_list(tmp_path) -> None:
    env = dict(os.environ, PYTHONPATH=str(REPO), EDGE_DEPLOY_ROOT=str(REPO / "tests/data/jetson_root/orin_nano_jp62"))
    done = run_cli(["doctor", "--for", "convert,serve", "--json"], env=env, timeout=120)
    data = json.loads(done.stdout)
    assert set(data["stages"]) == {"convert", "serve"}
    assert done.returncode == (0 if data["ready"] else 1)
    # no TensorRT module or trtexec here: convert is blocked by the plan builder, and no plan can be built
    assert "plan builder" in data["stages"]["convert"]["blockers"] and data["plan_builder"] is None
    assert data["fingerprint"]["tensorrt"] == "10.3.0" and data["fingerprint"]["jetpack"]  # read from the board's files
    assert any(c["name"] == "tritonserver" for c in data["checks"])
    bad = run_cli(["doctor", "--for", "convert,deploy", "--json"], env=env, timeout=120)
    assert bad.returncode == 2 and bad.stderr.startswith("error: --for must be")


def test_extra_vars_lists_as_json_and_role_types_checked(tmp_path) -> None:
    # Issue 26: -e 'edge_deploy_install_args=["--fp16"]' reached the role as a string and every host failed
    # with "can only concatenate list ... to list".
    from edge_deploy.fleet.role_vars import LIST_VARS, MAPPING_VARS, parse_extra_vars

    assert parse_extra_vars(['edge_deploy_install_args=["--fp16"]', "edge_deploy_keep=3",
                             '{"edge_deploy_environment": {"A": "1"}}']) == {
        "edge_deploy_install_args": ["--fp16"], "edge_deploy_keep": "3", "edge_deploy_environment": {"A": "1"}}
    for bad, says in (("edge_deploy_install_args=--fp16", "edge_deploy_install_args must be a list"),
                      ('{"edge_deploy_command": "edge-deploy"}', "edge_deploy_command must be a list"),
                      ("edge_deploy_environment=A=1", "edge_deploy_environment must be a mapping"),
                      ('edge_deploy_install_args=["--fp16"', "is not KEY=VALUE, a JSON object")):
        with pytest.raises(FleetError, match=says):
            parse_extra_vars([bad])
    # the checked names are exactly the role's list and mapping defaults
    import yaml

    defaults = yaml.safe_load((REPO / "edge_deploy/fleet/ansible/roles/edge_deploy/defaults/main.yml").read_text())
    assert sorted(LIST_VARS) == sorted(k for k, v in defaults.items() if isinstance(v, list))
    assert sorted(MAPPING_VARS) == sorted(k for k, v in defaults.items() if isinstance(v, dict))
    # on the command line: one line, exit 2, before any host is contacted
    inventory = tmp_path / "hosts.ini"
    inventory.write_text("v1 ansible_host=192.0.2.1\n")
    done = subprocess.run([sys.executable, "-m", "edge_deploy", "rollout", str(tmp_path), "-i", str(inventory),
                           "-e", "edge_deploy_install_args=--fp16"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "edge_deploy_install_args must be a list" in done.stderr and "-e 'edge_deploy_install_args=" in done.stderr


def _failed_result_fields() -> dict:
    """The shipped role's `failed result` fact (tasks/rollout.yml), expressions as written."""
    import yaml

    def tasks(items):  # noqa: ANN001, ANN202 - tasks, with those of blocks, rescues and always
        for task in items or []:
            yield task
            for part in ("block", "rescue", "always"):
                yield from tasks(task.get(part))

    rollout = yaml.safe_load((fa.ROLES_DIR / "edge_deploy" / "tasks" / "rollout.yml").read_text())
    found = [t for t in tasks(rollout) if t.get("name") == "edge-deploy | failed result"]
    assert len(found) == 1
    return found[0]["ansible.builtin.set_fact"]["_ed_result"]


@pytest.fixture
def ansible_in_process():
    """Importing ansible-core replaces sys.intern for the whole process (its _sys_intern_patch), and torch._dynamo,
    imported later by other tests of the same run, refuses the replacement: put the original back afterwards."""
    intern = sys.intern
    yield
    sys.intern = intern


@pytest.mark.parametrize(("rollback", "rolled_back", "error"), [
    ({"changed": True, "rc": 0, "stdout": "rolled lanedet back to version 2",
      "stdout_lines": ["rolled lanedet back to version 2"],
      "stderr_lines": ["✓ load lanedet version 2 (1.5 s)"]}, True, ""),
    ({"changed": True, "rc": 2, "stdout_lines": [],
      "stderr_lines": ["✓ check lanedet (0.1 s)", "error: lanedet has no version 2 (versions: 3, 4)"]},
     False, "error: lanedet has no version 2 (versions: 3, 4)"),
    ({"changed": True, "rc": 1, "stdout_lines": [], "stderr_lines": []}, False, "the rollback failed"),
    ({"changed": False, "skipped": True, "skip_reason": "Conditional result was False"}, False, ""),
], ids=["rolled-back", "failed-with-stderr", "failed-silently", "skipped"])
def test_rollout_report_rollback_error_is_empty_unless_the_rollback_failed(rollback, rolled_back, error,
                                                                          ansible_in_process) -> None:
    # Issue 26: after a successful rollback the report's rollback_error held its "✓ load ..." progress line.
    # The role's own expressions, rendered by Ansible's Templar (the fleet suite covers them only end to end).
    pytest.importorskip("ansible")
    import ansible.template as at
    from ansible.module_utils.parsing.convert_bool import boolean
    from ansible.parsing.dataloader import DataLoader

    trusted = getattr(at, "trust_as_template", lambda text: text)  # ansible-core >= 2.19 renders only trusted text
    fields = _failed_result_fields()
    templar = at.Templar(loader=DataLoader(), variables={"_ed_rollback": rollback})
    assert boolean(templar.template(trusted(fields["rolled_back"]))) is rolled_back
    assert str(templar.template(trusted(fields["rollback_error"]))).strip() == error
