"""Rollout wall time: one `edge-deploy rollout` to N vehicles vs N sequential single-host rollouts.

The vehicles are tests/support/fleet_hosts.py's: network namespaces with a real sshd and their own
`serve --foreground` tritonserver, reached over SSH by Ansible. Both ways run the very same role
(doctor, copy, install --keep 2, health, smoke, result) with no TensorRT (ONNX Runtime serves):

- fleet: `edge-deploy rollout ART --canary 1 --batch N-1` (canary, then the rest in parallel);
- fleet, no canary: `--canary 0 --batch N` (every host in one batch);
- sequential: for each host, `edge-deploy rollout ART --limit HOST --canary 0 --batch 1`.

Needs root (network namespaces), sshd and ansible-core. Prints a JSON summary.

    sudo PYTHONPATH=. .venv/bin/python benchmarks/fleet_rollout.py --hosts 3
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "support"))

from fleet_hosts import Fleet, controller_env, missing_parts  # noqa: E402
from small_artifact import make_artifact  # noqa: E402


def rollout(work: Path, artifact: Path, inventory: Path, *args: str) -> float:
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "edge_deploy", "rollout", str(artifact), "-i", str(inventory), *args],
                          env=controller_env(work), capture_output=True, text=True, timeout=1800)
    seconds = time.monotonic() - started
    if done.returncode != 0:
        raise SystemExit(f"rollout {' '.join(args)} failed: {done.stderr.strip()[-500:]}")
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=3)
    args = parser.parse_args()
    why = missing_parts()
    if why:
        raise SystemExit(f"cannot make vehicles here: {why}")
    with tempfile.TemporaryDirectory(prefix="fleet-bench-") as tmp:
        work = Path(tmp)
        anchors = ROOT / "tests" / "data" / "laneatt" / "anchors_2784x77.npy"
        arts = [make_artifact(work / f"art{i}", anchors, n=300, seed=i) for i in range(4)]
        for art in arts:
            subprocess.run([sys.executable, "-m", "edge_deploy", "fleet", "reference", str(art)], check=True,
                           env=controller_env(work), capture_output=True, timeout=300)
        fleet = Fleet(work / "vehicles", args.hosts, tag="b")
        try:
            fleet.open()
            for vehicle in fleet.vehicles:
                done = vehicle.cli("install", str(arts[0]), "--repository", str(vehicle.repository))
                assert done.returncode == 0, done.stderr
                vehicle.start_server()
            fleet.wait_ssh()
            for vehicle in fleet.vehicles:
                vehicle.wait_serving()
            inventory = fleet.inventory(work / "inventory.yml")
            n = args.hosts
            fleet_s = rollout(work, arts[1], inventory, "--canary", "1", "--batch", str(max(1, n - 1)))
            one_batch_s = rollout(work, arts[2], inventory, "--canary", "0", "--batch", str(n))
            per_host = [rollout(work, arts[3], inventory, "--limit", v.name, "--canary", "0", "--batch", "1")
                        for v in fleet.vehicles]
        finally:
            fleet.close()
    load = Path("/proc/loadavg").read_text().split()[:3]
    print(json.dumps({
        "hosts": n,
        "fleet_canary_then_rest_s": round(fleet_s, 1),
        "fleet_one_batch_s": round(one_batch_s, 1),
        "sequential_single_host_s": round(sum(per_host), 1),
        "sequential_per_host_s": [round(s, 1) for s in per_host],
        "speedup_one_batch": round(sum(per_host) / one_batch_s, 2),
        "speedup_canary_then_rest": round(sum(per_host) / fleet_s, 2),
        "loadavg_after": load,
    }, indent=2))


if __name__ == "__main__":
    main()
