"""`edge-deploy rollout` and `fleet status` against real vehicles: network namespaces reached over SSH.

Each vehicle (tests/support/fleet_hosts.py) is a network namespace with a veth pair, a real
OpenSSH sshd and its own `edge-deploy serve --foreground --user` tritonserver on 127.0.0.1:8001 of
that namespace, with its own repository, HOME and state directory. Ansible (ansible-core) runs the
shipped role over real SSH. The vehicles differ the way a fleet does:

- vehicle1 and vehicle2 "have TensorRT 10.3 on an Orin Nano, JetPack 6.2": TensorRT cannot be
  installed here (no NVIDIA GPU), so their facts come from the fake board root of
  tests/data/jetson_root/orin_nano_jp62 (EDGE_DEPLOY_ROOT) and their builder is the stand-in trtexec
  of tests/support/jetson_fixtures.py (a process-boundary double that writes a fake plan and logs
  each build). Both have the same fingerprint, so the canary (vehicle1) builds the plan and vehicle2
  must reuse it: its trtexec must never run. The double's plan is no engine and the bundled
  tritonserver has no TensorRT backend, so these two serve the payload's model.onnx
  (`install --runtime python`, through the role's edge_deploy_install_args): the plan path is
  tested up to the plan, not served.
- vehicle3 has no TensorRT at all: no plan step, `install` picks the ONNX Runtime fallback. It
  serves its network (its veth address) with mutual TLS, as a vehicle whose lane model other ECUs
  consume: the role's health check, smoke inference and `fleet status` must go through TLS.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import cli_process
from manifest_files import manifest_json, write_manifest_json
from fleet_hosts import Fleet, controller_env, missing_parts
from small_artifact import build_onnx, make_artifact

from edge_deploy.artifact.manifest import file_entry

pytestmark = [pytest.mark.triton, pytest.mark.slow, pytest.mark.skipif(missing_parts() is not None,
                                                                        reason=str(missing_parts()))]
N = 300  # anchors of the small test model


def artifact(out: Path, anchors: Path, seed: int) -> Path:
    make_artifact(out, anchors, n=N, seed=seed)
    manifest = manifest_json(out)  # the FP16 report convert prints on the vehicles (every tensor fits)
    manifest["fp16"] = {"rule": "test", "tensors_checked": 5, "max_abs": 1.0, "nodes": [], "fp32_nodes": []}
    write_manifest_json(out, manifest)
    done = run_cli(out.parent, "fleet", "reference", str(out))
    assert done.returncode == 0, done.stderr
    return out


def broken_artifact(out: Path, anchors: Path) -> Path:
    """An artifact whose model.onnx no longer gives the lanes it recorded (replaced, manifest re-signed)."""
    artifact(out, anchors, seed=2)
    table = __import__("numpy").load(anchors)
    build_onnx(out / "model.onnx", table[__import__("numpy").linspace(0, len(table) - 1, N).astype(int)], seed=5)
    manifest = manifest_json(out)
    manifest["files"]["model.onnx"] = file_entry(out / "model.onnx").to_dict()
    write_manifest_json(out, manifest)
    return out


def run_cli(workdir: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return cli_process.run_cli(args, env=controller_env(workdir), timeout=timeout)


@pytest.fixture(scope="module")
def fleet(tmp_path_factory, laneatt_data):
    work = tmp_path_factory.mktemp("fleet")
    anchors = laneatt_data / "anchors_2784x77.npy"
    old = artifact(work / "artifacts" / "old", anchors, seed=0)
    fleet = Fleet(work / "vehicles", 3)
    try:
        fleet.open()
        for vehicle in fleet.vehicles:  # each vehicle serves the old version (1) before any rollout
            done = vehicle.cli("install", str(old), "--repository", str(vehicle.repository))
            assert done.returncode == 0, done.stderr
            vehicle.start_server(tls=vehicle.name == "vehicle3")  # one vehicle serves its network, mutual TLS
        fleet.wait_ssh()
        for vehicle in fleet.vehicles:
            vehicle.wait_serving()
        fleet.work = work
        fleet.anchors = anchors
        fleet.inv = fleet.inventory(work / "inventory.yml", {v.name: trt_vars(v) for v in fleet.vehicles[:2]})
        yield fleet
    finally:
        fleet.close()


def trt_vars(vehicle) -> dict:
    """Role variables of a vehicle with "TensorRT 10.3" (see the module docstring): its own board root and trtexec."""
    import shutil

    from jetson_fixtures import FAKE_TRTEXEC

    root = vehicle.root / "board"
    shutil.copytree(Path(__file__).resolve().parents[1] / "data" / "jetson_root" / "orin_nano_jp62", root)
    (root / "usr" / "sbin" / "nvpmodel").chmod(0o755)
    tool = vehicle.root / "trtexec"
    tool.write_text(FAKE_TRTEXEC.format(python=sys.executable, banner="100300"))
    tool.chmod(0o755)
    env = {k: vehicle.env[k] for k in ("HOME", "EDGE_DEPLOY_STATE_DIR", "PYTHONPATH")}
    env.update(EDGE_DEPLOY_ROOT=str(root), TRTEXEC=str(tool), FAKE_TRTEXEC_LOG=str(vehicle.root / "trtexec.jsonl"))
    return {"edge_deploy_environment": env, "edge_deploy_install_args": ["--runtime", "python"]}


def trtexec_builds(vehicle) -> int:
    log = vehicle.root / "trtexec.jsonl"
    return len(log.read_text().splitlines()) if log.exists() else 0


def status(fleet) -> dict:
    done = run_cli(fleet.work, "fleet", "status", "--inventory", str(fleet.inv), "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_clean_rollout_to_three_vehicles_reusing_the_plan(fleet) -> None:
    new = artifact(fleet.work / "artifacts" / "new", fleet.anchors, seed=1)
    reference = json.loads((new / "smoke" / "reference.json").read_text())
    assert sum(len(lanes) for lanes in reference["lanes"]) > 0  # the smoke check compares real lanes
    done = run_cli(fleet.work, "rollout", str(new), "--inventory", str(fleet.inv), "--canary", "1", "--batch", "2",
                   "--json")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    result = json.loads(done.stdout)
    assert result["batches"] == [["vehicle1"], ["vehicle2", "vehicle3"]]
    assert result["ok"] and not result["untouched"]
    payload = result["payload"]
    for vehicle in fleet.vehicles:
        r = result["results"][vehicle.name]
        assert r["status"] == "ok" and int(r["serving"]) == 2 and int(r["before"]) == 1, r
        state = vehicle.report()
        assert state["served"] == [2] and state["health"] == "ready"
    # the plan: built once by the canary, reused by the vehicle of the same fingerprint, none without TensorRT
    plans = {name: result["results"][name]["plan"] for name in ("vehicle1", "vehicle2", "vehicle3")}
    assert plans["vehicle1"]["built"] and not plans["vehicle1"]["reused"]
    assert plans["vehicle2"]["reused"] and not plans["vehicle2"]["built"]
    assert plans["vehicle1"]["fingerprint_key"] == plans["vehicle2"]["fingerprint_key"]
    assert not plans["vehicle3"]["built"] and not plans["vehicle3"]["reused"]
    assert [trtexec_builds(v) for v in fleet.vehicles] == [1, 0, 0]
    v1, v2, v3 = (vehicle.root / "stage" / payload for vehicle in fleet.vehicles)
    assert (v1 / "model.plan").read_bytes() == (v2 / "model.plan").read_bytes() == b"PLAN-from-trtexec"
    # vehicle3: only the device-independent part travelled (no plan), with the smoke reference
    assert sorted(p.name for p in v3.iterdir()) == ["manifest.json", "model.onnx", "smoke"]
    manifest = json.loads((v3 / "manifest.json").read_text())
    assert manifest["plan"] is None and "model.plan" not in manifest["files"]
    rows = status(fleet)
    assert list(rows) == ["vehicle1", "vehicle2", "vehicle3"]
    for row in rows.values():
        assert row["served_version"] == 2 and row["health"] == "ready"
        assert row["last_rollout"]["status"] == "ok" and row["last_rollout"]["payload"] == payload
    # the served manifest: the payload's where no plan was built, the plan's (shared) where it was
    assert rows["vehicle3"]["manifest_sha256"].startswith(payload)
    assert rows["vehicle1"]["manifest_sha256"] == rows["vehicle2"]["manifest_sha256"] != rows["vehicle3"]["manifest_sha256"]
    assert rows["vehicle1"]["fingerprint"]["tensorrt"] == rows["vehicle2"]["fingerprint"]["tensorrt"] == "10.3.0"
    assert rows["vehicle3"]["fingerprint"]["tensorrt"] is None  # ONNX Runtime serves there
    assert rows["vehicle3"]["url"] == f"{fleet.vehicles[2].address}:8001"  # reached over mutual TLS
    fleet.good_payload = payload


def test_failed_canary_stops_the_rollout_and_rolls_back(fleet) -> None:
    if not hasattr(fleet, "good_payload"):
        pytest.skip("needs the clean rollout first")
    before = {v.name: v.report() for v in fleet.vehicles}
    bad = broken_artifact(fleet.work / "artifacts" / "broken", fleet.anchors)
    done = run_cli(fleet.work, "rollout", str(bad), "--inventory", str(fleet.inv), "--canary", "1", "--batch", "2")
    assert done.returncode == 2, done.stdout + done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("error: rollout stopped: 1 of 1 host(s) of the canary batch failed") and \
        "untouched: vehicle2, vehicle3" in last, last
    assert "vehicle1 FAILED at smoke" in done.stdout and "rolled back, serving version 2" in done.stdout, done.stdout
    canary, *others = fleet.vehicles
    state = canary.report()
    assert state["served"] == [2] and state["health"] == "ready"  # the old version serves again
    # --keep 2 pruned version 1 once 3 was in; 3 stays on disk, the config pinned back to 2
    assert state["versions"] == [2, 3] and state["policy"] == [2]
    assert state["last_rollout"]["status"] == "failed" and state["last_rollout"]["step"] == "smoke"
    # a report field named error is empty when the rollback worked
    assert state["last_rollout"]["rolled_back"] in (True, "True") and state["last_rollout"]["rollback_error"] == ""
    for vehicle in others:  # never contacted: same state, same last rollout, no new payload copied
        now = vehicle.report()
        assert now["served"] == [2] and now["versions"] == before[vehicle.name]["versions"]
        assert now["last_rollout"] == before[vehicle.name]["last_rollout"]
        assert [p.name for p in (vehicle.root / "stage").iterdir()] == [fleet.good_payload]
    # fleet status, the table this time (the JSON is checked after the clean rollout)
    table = run_cli(fleet.work, "fleet", "status", "--inventory", str(fleet.inv))
    assert table.returncode == 0, table.stderr
    rows = {line.split()[1]: line for line in table.stdout.splitlines() if line.split()[1:2] and
            line.split()[1].startswith("vehicle")}
    assert list(rows) == ["vehicle1", "vehicle2", "vehicle3"], table.stdout
    assert "failed" in rows["vehicle1"] and "at smoke" in rows["vehicle1"] and "ready" in rows["vehicle1"]
    for name in ("vehicle2", "vehicle3"):
        assert f"ok {fleet.good_payload}" in rows[name] and "ready" in rows[name], rows[name]
    for row in rows.values():
        assert row.split()[3] == "2", row  # the served version column


def test_the_same_failing_rollout_run_again_rolls_back_again(fleet) -> None:
    # Issue 26: the second run of a failing rollout left the canary serving the broken model, because
    # install --keep 2 had pruned version 2 (the version it rolls back to) in favour of the failed 3.
    if not hasattr(fleet, "good_payload"):
        pytest.skip("needs the clean rollout first")
    bad = fleet.work / "artifacts" / "broken"
    if not bad.is_dir():
        pytest.skip("needs the failed canary first")
    canary, *others = fleet.vehicles
    before = {v.name: v.report() for v in others}
    for attempt in (4,):  # the same payload once more, as the operator would (the failed canary was the first run)
        done = run_cli(fleet.work, "rollout", str(bad), "--inventory", str(fleet.inv), "--canary", "1", "--batch", "2",
                       "--json")
        assert done.returncode == 2, done.stdout[-3000:] + done.stderr[-3000:]
        result = json.loads(done.stdout)
        assert result["stopped"] and result["untouched"] == ["vehicle2", "vehicle3"]
        r = result["results"]["vehicle1"]
        assert r["status"] == "failed" and r["step"] == "smoke", r
        assert r["rolled_back"] in (True, "True") and r["rollback_error"] == "" and int(r["serving"]) == 2, r
        state = canary.report()
        assert state["served"] == [2] and state["health"] == "ready"
        # --keep 2 pruned the version that failed before, never 2; this attempt's version stays unserved
        assert state["versions"] == [2, attempt] and state["policy"] == [2], state
        for vehicle in others:  # never contacted
            now = vehicle.report()
            assert now["served"] == [2] and now["versions"] == before[vehicle.name]["versions"]
            assert now["last_rollout"] == before[vehicle.name]["last_rollout"]
