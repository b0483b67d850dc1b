"""What a vehicle tells the controller, typed: its state (`VehicleReport`, printed by `fleet report`, a row of
`fleet status`) and the result of its last rollout (`HostResult`, kept by `fleet record`).

Both are JSON other tools read (the role's rollout.yml and status.yml, `fleet status --json`), so each is a
`Record`: read once, written back with the keys and key order it came with, unknown keys kept.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from ..machine.plan_fit import HostFingerprint
from ..artifact.records import Record, read_int, read_ints, read_record, read_str


@dataclass(frozen=True, eq=False)
class HostResult(Record):
    """One host's outcome of a rollout: what the role reported (its rollout.yml "result"; `fleet record` adds
    serving, manifest_sha256, health, finished), or "unreachable" when no report came; `batch` is added here.

    Its values come from Ansible templating (a version may be a number or a string, rolled_back "True"), so they
    are kept as they came; keys not listed here stay in `extra`.
    """

    host: str | None = None
    status: str | None = None  # "ok" | "failed"
    payload: str | None = None
    step: str | None = None
    message: str | None = None
    before: Any = None  # the version served before
    rolled_back: Any = None
    rollback_error: str | None = None
    plan: Any = None  # {"built", "reused", "fingerprint_key"}
    serving: Any = None
    manifest_sha256: str | None = None
    health: str | None = None
    finished: str | None = None
    batch: int | None = None

    _SECTION = "rollout result"
    _ALWAYS = frozenset({"serving"})

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def updated(self, **values: Any) -> HostResult:
        """`values` set as a JSON object's update would set them: a key already there keeps its place, a new one
        goes last, in the order given, and is written even when it is null. (A record read from `{}` has no keys
        yet, so the nulls a built record writes are not taken for keys it had.)"""
        order = self.key_order or tuple(k for k, v in self.to_dict().items() if v is not None or k not in self._ALWAYS)
        return replace(self, **values, key_order=order + tuple(k for k in values if k not in order))


@dataclass(frozen=True, eq=False)
class VehicleReport(Record):
    """One vehicle's state: `fleet report` prints it (the role reads served_version, served, url), `fleet status`
    shows one per host.

    Every field defaults to None (not written), so that a row read from a host, or the row of a host that gave no
    report (`unreachable`), writes only its own keys; `fleet report` builds it with all of them (`empty`).
    """

    name: str | None = None
    repository: str | None = None
    url: str | None = None
    served: tuple[int, ...] | None = None
    served_version: int | None = None
    policy: tuple[int, ...] | None = None
    manifest_sha256: str | None = None
    versions: tuple[int, ...] | None = None
    health: str | None = None  # "ready" | "not ready" | "unreachable" | "no server" | "no model" | "unreadable"
    health_detail: str | None = None
    fingerprint: HostFingerprint | None = None
    last_rollout: HostResult | None = None
    fingerprint_error: str | None = None  # written only when this machine's facts could not be read

    _SECTION = "vehicle report"
    _READERS = {
        **{name: read_str for name in ("name", "repository", "url", "manifest_sha256", "health", "health_detail",
                                       "fingerprint_error")},
        **{name: read_ints for name in ("served", "policy", "versions")},
        "served_version": read_int,
        "fingerprint": read_record(HostFingerprint),
        "last_rollout": read_record(HostResult),
    }
    _ALWAYS = frozenset({"url", "served_version", "manifest_sha256", "fingerprint", "last_rollout"})

    @classmethod
    def empty(cls, name: str, repository: str) -> VehicleReport:
        """A vehicle that serves nothing yet: every key of `fleet report`, none known."""
        return cls(name=name, repository=repository, served=(), policy=(), versions=(), health="no server",
                   health_detail="")

    @classmethod
    def unreachable(cls, reason: str) -> VehicleReport:
        """The row of a host that gave no report: its health and why."""
        return cls(health="unreachable", health_detail=reason, key_order=("health", "health_detail"))
