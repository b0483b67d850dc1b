"""Rollout policy: the canary batch, the batches after it, and when a batch stops the rollout."""
from __future__ import annotations

import math
from dataclasses import dataclass

from ..errors import EdgeDeployError
from ..core.numbers import Range, whole

HOSTS = whole(0, 100000, "hosts")  # --canary, and --batch / --max-fail given as a count
PERCENT = Range(0, 100, "percent")  # --batch / --max-fail given as a percentage


class FleetError(EdgeDeployError):
    """A fleet rollout or status that cannot go on (bad policy, inventory, missing Ansible, a stopped rollout)."""


@dataclass(frozen=True)
class Amount:
    """A number of hosts, or a percentage of some total ("3" or "25%")."""

    value: float
    percent: bool

    @classmethod
    def parse(cls, text: str | int, option: str) -> "Amount":
        raw = str(text).strip()
        percent = raw.endswith("%")
        number = raw[:-1] if percent else raw
        try:
            value = float(number) if percent else int(number)
        except ValueError:
            value = math.nan
        if not (PERCENT if percent else HOSTS).contains(value):
            raise FleetError(f"{option} {text!r} is neither a count (like 3: {HOSTS.describe()}) nor a percentage "
                             f"(like 25%: {PERCENT.describe()}).")
        return cls(float(value), percent)

    def of(self, total: int) -> float:
        """How many hosts this is out of `total` (a percentage may give a fraction)."""
        return self.value * total / 100.0 if self.percent else self.value


def batches(hosts: list[str], canary: int, batch: Amount) -> list[list[str]]:
    """The hosts in rollout order, cut into the canary batch and then batches of `batch` (of all hosts)."""
    if canary < 0:
        raise FleetError(f"--canary must be 0 or more hosts (got {canary}).")
    size = max(1, math.ceil(batch.of(len(hosts)))) if batch.percent else int(batch.value)
    if size < 1:
        raise FleetError(f"--batch must be at least 1 host (got {batch.value:g}).")
    out = [hosts[:canary]] if canary and hosts else []
    rest = hosts[canary:]
    out += [rest[i:i + size] for i in range(0, len(rest), size)]
    return out


def exceeds(failed: int, batch_size: int, max_fail: Amount, canary: bool) -> bool:
    """Whether a batch with `failed` failures stops the rollout: any failure of the canary does."""
    if failed == 0:
        return False
    if canary:
        return True
    return failed > max_fail.of(batch_size)
