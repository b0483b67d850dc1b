"""install.json: what install wrote into one version directory, read and checked once.

Rollback rebuilds a version's config from it (its role, runtime, install options, pipeline kind), so a record
written by an older edge-deploy must still read: records from before pipeline kinds mean the ensemble, options
from before `precision` carry a bool `fp16`, and keys this version does not know are kept and written back.
"""
from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .._version import __version__
from . import model_config as mc
from .pipeline_kind import PipelineKind

INSTALL_RECORD = "install.json"
ROLES = ("model", "preprocess", "postprocess", "pipeline")
_KNOWN = {"tool", "installed", "artifact", "role", "runtime", "options", "pipeline"}


@dataclass(frozen=True)
class InstallRecord:
    role: str = "model"  # one of ROLES: the lane model itself, or a model of its pipeline
    runtime: str | None = None  # the lane model's runtime (tensorrt, onnxruntime, ...); a Python model's: "python"
    options: mc.ConfigOptions = field(default_factory=mc.ConfigOptions)
    pipeline: PipelineKind | None = None  # a pipeline's kind, as written (None: written before kinds)
    artifact: str | None = None
    installed: str | None = None  # UTC, ISO 8601
    tool: dict[str, str] = field(default_factory=lambda: {"name": "edge-deploy", "version": __version__})
    extra: dict[str, object] = field(default_factory=dict)  # keys written by a newer edge-deploy, kept

    @property
    def kind(self) -> PipelineKind:
        """The pipeline kind (records written before kinds: the ensemble, the only kind there was)."""
        return self.pipeline or PipelineKind.ENSEMBLE

    @property
    def is_bls_pipeline(self) -> bool:
        return self.role == "pipeline" and self.kind is PipelineKind.BLS

    @classmethod
    def new(cls, runtime: str, role: str, options: mc.ConfigOptions, artifact: Path,
            pipeline: PipelineKind | None = None) -> "InstallRecord":
        return cls(role=role, runtime=runtime, options=options, pipeline=pipeline, artifact=str(artifact),
                   installed=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))

    def to_json(self) -> bytes:
        data: dict[str, object] = {"tool": self.tool, "installed": self.installed, "artifact": self.artifact,
                                   "role": self.role, "runtime": self.runtime, "options": self.options.to_dict()}
        if self.pipeline is not None:
            data["pipeline"] = self.pipeline.value
        return json.dumps({**data, **self.extra}, indent=2).encode() + b"\n"

    @classmethod  # data: install.json as parsed, Any until each field is read here (the record's from_dict)
    def from_json_dict(cls, data: dict[str, Any]) -> "InstallRecord | None":
        """The record of install.json's parsed JSON; None for one that is not a record install wrote."""
        role = data.get("role", "model")
        options = data.get("options") or {}
        if role not in ROLES or not isinstance(options, dict):
            return None
        try:
            pipeline = PipelineKind(data["pipeline"]) if "pipeline" in data else None
        except ValueError:
            pipeline = PipelineKind.ENSEMBLE  # an unknown kind: served as the ensemble it must have been
        tool = data.get("tool")
        return cls(role=role, runtime=data.get("runtime"), options=mc.ConfigOptions.from_dict(options),
                   pipeline=pipeline, artifact=data.get("artifact"), installed=data.get("installed"),
                   tool=tool if isinstance(tool, dict) else {}, extra={k: v for k, v in data.items() if k not in _KNOWN})

    @classmethod
    def read(cls, vdir: Path) -> "InstallRecord | None":
        """The install.json of version directory `vdir`; None where it is missing or unreadable."""
        try:
            data = json.loads((Path(vdir) / INSTALL_RECORD).read_text())
        except (OSError, ValueError):
            return None
        return cls.from_json_dict(data) if isinstance(data, dict) else None
