"""The hosts of an Ansible inventory, in inventory order (read by `ansible-inventory`, any format it reads)."""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

from .ansible import ansible_env, find_tool
from .policy import FleetError


def inventory_hosts(inventory: Path, limit: str | None = None) -> list[str]:
    """Host names of `inventory` (optionally `--limit`ed), each once, in the order the inventory lists them."""
    if not Path(inventory).exists():
        raise FleetError(f"inventory {inventory} does not exist; pass --inventory FILE (an Ansible inventory).")
    argv = [find_tool("ansible-inventory"), "-i", str(inventory), "--list"]
    if limit:
        argv += ["--limit", limit]
    done = subprocess.run(argv, capture_output=True, text=True, env=ansible_env(), timeout=120)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no message"])[-1]
        raise FleetError(f"ansible-inventory could not read {inventory} ({last}); fix the inventory.")
    data = json.loads(done.stdout)
    order: list[str] = []

    def walk(group: str, seen: set[str]) -> None:
        if group in seen:
            return
        seen.add(group)
        entry = data.get(group, {})
        for host in entry.get("hosts", []):
            if host not in order:
                order.append(host)
        for child in entry.get("children", []):
            walk(child, seen)

    walk("all", set())
    if not order:
        raise FleetError(f"inventory {inventory} lists no hosts{' matching ' + repr(limit) if limit else ''}.")
    return order
