"""The rollout report: each host's result as the role wrote it, typed (`HostResult`) and written back unchanged."""
from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from edge_deploy.fleet.rollout import HostResult, RolloutResult, _host_result

# What rollout.yml's "failed result" and `fleet record` write for a host (Ansible templating: strings, a
# number, the plan mapping), with a key this version does not know.
FAILED = {"host": "vehicle1", "status": "failed", "payload": "abc123", "step": "smoke", "message": "lanes differ",
          "before": 3, "rolled_back": "True", "rollback_error": "", "plan": {"built": False, "reused": True,
                                                                              "fingerprint_key": "k"},
          "serving": 3, "manifest_sha256": "f" * 64, "health": "ready", "finished": "2026-11-25T00:00:00Z",
          "future": [1]}


def test_a_host_report_reads_typed_and_writes_back_as_it_came(tmp_path: Path) -> None:
    (tmp_path / "vehicle1.json").write_text(json.dumps(FAILED))
    result = replace(_host_result(tmp_path / "vehicle1.json", "vehicle1", 2, tmp_path), batch=0)
    assert result.status == "failed" and not result.ok and result.step == "smoke" and result.serving == 3
    assert result.extra == {"future": [1]}
    assert list(result.to_dict().items()) == [*FAILED.items(), ("batch", 0)]  # same keys and order, batch last
    assert HostResult.from_dict(result.to_dict()) == result
    assert result["plan"]["reused"] is True and result.get("rolled_back") == "True"  # as the CLI reads it


def test_a_host_without_a_report_is_unreachable(tmp_path: Path) -> None:
    (tmp_path / "vehicle2.json").write_text("[not json")
    for name in ("vehicle2", "vehicle3"):  # a broken report and none at all
        result = replace(_host_result(tmp_path / f"{name}.json", name, 4, tmp_path), batch=1)
        assert result.to_dict() == {"host": name, "status": "failed", "step": "unreachable",
                                    "message": f"no result from the host (ansible-playbook exit 4; see "
                                               f"{tmp_path / 'ansible.log'})", "serving": None, "batch": 1}


def test_the_rollout_report_is_json_with_the_hosts_results(tmp_path: Path) -> None:
    ok = HostResult.from_dict({"host": "vehicle3", "status": "ok", "serving": 4})
    failed = HostResult.from_dict(FAILED)
    report = RolloutResult(payload="abc123", run_dir=tmp_path, batches=[["vehicle1"], ["vehicle3"]],
                           results={"vehicle1": failed, "vehicle3": ok})
    assert report.failed == ["vehicle1"]
    data = json.loads(json.dumps(report.to_dict()))
    assert data["results"] == {"vehicle1": FAILED, "vehicle3": {"host": "vehicle3", "status": "ok", "serving": 4}}
    assert data["ok"] is False


def test_the_smoke_summary_names_the_first_frame_that_differs() -> None:
    from edge_deploy.fleet.smoke import FrameCheck, SmokeResult

    frames = [FrameCheck("a.png", 2, 2, 0.1, True), FrameCheck("b.png", 2, 1, "inf", False)]
    assert SmokeResult(passed=False, frames=frames, lanes=4).summary() == (
        "smoke: 1 of 2 reference frame(s) differ; b.png: 1 lane(s) served, 2 recorded, mean |dx| inf")
    assert SmokeResult(passed=True, frames=frames[:1], lanes=2).summary() == (
        "smoke: 1 reference frame(s), 2 lane(s), all match")


# The keys `fleet report` prints, in order: rollout.yml reads served_version, served and url, status.yml hands the
# object to `fleet status` (issue 47 typed it as VehicleReport; the JSON must not change).
REPORT_KEYS = ["name", "repository", "url", "served", "served_version", "policy", "manifest_sha256", "versions",
               "health", "health_detail", "fingerprint", "last_rollout"]


def test_the_vehicle_report_keeps_its_keys_and_the_last_rollout_as_recorded(tmp_path: Path, monkeypatch) -> None:
    from dataclasses import fields

    from edge_deploy.artifact.manifest import MachineFingerprint
    from edge_deploy.fleet.device import record_result, report
    from edge_deploy.fleet.reports import VehicleReport

    monkeypatch.setenv("EDGE_DEPLOY_STATE_DIR", str(tmp_path / "state"))
    (tmp_path / "repo").mkdir()
    data = json.loads(json.dumps(report(tmp_path / "repo", "lanedet", "user").to_dict()))
    assert list(data) == REPORT_KEYS
    assert data["served"] == data["policy"] == data["versions"] == [] and data["last_rollout"] is None
    assert data["health"] == "no model" and data["url"] is None and data["served_version"] is None
    assert list(data["fingerprint"]) == [*(f.name for f in fields(MachineFingerprint)), "jetpack"]
    # `fleet record`: the role's keys as they came (its own "finished" keeps its place), then what is served now
    role = {k: v for k, v in FAILED.items() if k not in ("serving", "manifest_sha256", "health")}
    kept = record_result("user", HostResult.from_dict(role), tmp_path / "repo", "lanedet").to_dict()
    assert list(kept) == [*role, "serving", "manifest_sha256", "health"]
    assert kept["serving"] is None and kept["health"] == "no model" and kept["future"] == [1]
    again = report(tmp_path / "repo", "lanedet", "user")
    assert again.last_rollout is not None and again.last_rollout.to_dict() == kept
    assert list(record_result("user", HostResult.from_dict({"host": "v"}), None).to_dict()) == ["host", "finished"]
    # a row of `fleet status`: as the vehicle's JSON came (Ansible's to_nice_json sorts the keys), or unreachable
    row = json.loads(json.dumps(again.to_dict(), sort_keys=True))
    assert json.dumps(VehicleReport.from_dict(row).to_dict()) == json.dumps(row)
    assert list(VehicleReport.unreachable("ssh: no route").to_dict().items()) == [
        ("health", "unreachable"), ("health_detail", "ssh: no route")]
