"""manifest.json: what an artifact directory holds and how it was made, as one typed `Manifest`.

An artifact directory (written by `convert`) holds model.onnx, model_fp16.onnx
(FP16 precision), model.plan when a TensorRT engine was built, and
manifest.json. `Manifest` owns that file: reading (with the migration of older
formats), validation, and writing. Every stage takes and returns a `Manifest`;
nothing else parses manifest.json.

Format 2 (this version)::

    {
      "format": 2,
      "tool": {"name": "edge-deploy", "version": "0.1.0"},
      "created": "2026-11-22T07:00:00Z",
      "family": "laneatt" | "ufldv2" | null,  lane-model family (edge_deploy.lanedet.family); null: no lane decoder
      "precision": "fp16" | "fp32" | "int8",    what convert was asked for (install follows it)
      "source": {"kind": <family> | "torchscript" | "factory", "spec": str, "trained": bool, ...}: where the
                model came from (edge_deploy.lanedet.model_source.ModelSource: the common keys, a family's own),
      "files": {"model.onnx": {"sha256": str, "bytes": int}, ...},
      "io": {"inputs":  [{"name", "datatype", "shape"}], "outputs": [...],
             "batch": {"min", "opt", "max", "dynamic"}},
      "preprocess": {"height", "width", "color", "scale", "mean", "std", "interpolation", "crop",
                     "resized_height", "layout"},
      "decode": the family's decode parameters: LaneATT {"conf_threshold", "nms_threshold", "top_k"},
                UFLDv2 {"row_anchor", "col_anchor", "local_width", "top_k"},
      "export", "parity", "fp16", "plan", "timings", "evaluation", "fused_preprocess":
          the reports of the stages that made them (docs/design.md, "The artifact and manifest"),
          read into the typed records of edge_deploy.artifact.records (plan: `PlanRecord`)
    }

Datatypes are Triton's names (FP32, FP16, INT64, ...). In "shape" a -1 on
axis 0 is the dynamic batch axis; a fixed-batch model has its batch size there
and batch.dynamic = false.

Format 1 (edge-deploy 0.1.0 before the lane-family interface) had no "family"
and no "precision" and could leave "decode"/"preprocess" partial; `migrate`
derives them (see `_migrate_1`), so every artifact the released code wrote
still installs and serves.
"""
from __future__ import annotations

import errno
import json
import os
import stat
import time
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any, BinaryIO, Callable, Mapping, Sequence, TypeVar

from .._version import __version__
from ..core.bounded_read import special_kind
from ..errors import EdgeDeployError, ManifestError
from ..core.fsutil import sha256_file, sha256_stream, write_json_atomic
from .io_signature import BatchRange, IOSignature  # noqa: F401 - BatchRange re-exported (artifact.BatchRange)
from ..lanedet.decode_params import DecodeParams, DecodeParamsError, ScoreNmsDecodeParams
from ..lanedet.entry_points import LEGACY_FAMILY
from ..lanedet.lane_family import family_for_outputs, get_family
from ..lanedet.tensor_spec import TensorSpec
from ..lanedet.preprocess import PreprocessSpec, PreprocessSpecError
from ..lanedet.model_source import EXTERNAL_KINDS, ModelSource
from ..detect.record import DetectionRecord
from .precision import Precision
from .records import (EvaluationRecord, ExportReport, Fp16OnnxRecord, Fp16Report,
                      FusedPreprocessRecord, ParityReport, PlanVerify, Record, RecordError, json_value, kind_of, read_ints)

MANIFEST_NAME = "manifest.json"
ONNX_NAME = "model.onnx"
PLAN_NAME = "model.plan"
FP16_ONNX_NAME = "model_fp16.onnx"  # the FP16 graph (the FP16 report's nodes kept FP32), built strongly typed

# ONNX TensorProto element type -> the Triton datatype name the manifest's `io` section uses.
ONNX_TRITON_DTYPES = {
    1: "FP32", 2: "UINT8", 3: "INT8", 4: "UINT16", 5: "INT16", 6: "INT32", 7: "INT64",
    9: "BOOL", 10: "FP16", 11: "FP64", 12: "UINT32", 13: "UINT64", 16: "BF16",
}

FORMAT = 2
_R = TypeVar("_R", bound=Record)


def _record(data: Mapping[str, object], key: str, kind: type[_R]) -> _R | None:
    """Section `key`, a stage report (edge_deploy.artifact.records), read as `kind`; None where the manifest has none."""
    section = data.get(key)
    return kind.from_dict(section, key) if isinstance(section, dict) else None


# --------------------------------------------------------------------------- typed sections


@dataclass(frozen=True)
class FileEntry:
    """The manifest's record of one file."""

    sha256: str
    bytes: int

    @classmethod
    def of(cls, path: Path) -> FileEntry:
        return cls(sha256_file(path), path.stat().st_size)

    def to_dict(self) -> dict[str, Any]:
        return {"sha256": self.sha256, "bytes": self.bytes}


def file_entry(path: Path) -> FileEntry:
    """The manifest's record of one file: sha256 and size."""
    return FileEntry.of(path)


@dataclass(frozen=True)
class FusedFrame:
    """The UINT8 camera frame a fused model (convert --fuse-preprocess) takes instead of the preprocessed image."""

    input: str
    height: int
    width: int
    color: str

    def to_dict(self) -> dict[str, Any]:
        return {"input": self.input, "height": self.height, "width": self.width, "color": self.color}


# --------------------------------------------------------------------------- the plan section


class PlanRecordError(ValueError):
    """A manifest's "plan" section with a value of the wrong type (the message names the field)."""


@dataclass(frozen=True, eq=False)
class ShapeRange(Record):
    """One input's shapes in a plan's optimisation profile: the smallest, the one TensorRT tunes for, the largest
    (the "plan" section's profile: input name -> {"min", "opt", "max"})."""

    min: tuple[int, ...] = ()
    opt: tuple[int, ...] = ()
    max: tuple[int, ...] = ()

    _SECTION = "plan.profile"
    _READERS = {"min": read_ints, "opt": read_ints, "max": read_ints}

    @classmethod
    def of(cls, low: Sequence[int], opt: Sequence[int], high: Sequence[int]) -> ShapeRange:
        return cls(min=tuple(low), opt=tuple(opt), max=tuple(high))

    @classmethod
    def from_dict(cls, data: Any, where: str | None = None) -> ShapeRange:
        """The typed range; RecordError naming the key that is missing or not a list of integers."""
        where = where or cls._SECTION
        missing = [key for key in ("min", "opt", "max") if isinstance(data, Mapping) and data.get(key) is None]
        if missing:
            raise RecordError(f"{where}.{missing[0]} is missing, not a list of integers")
        return super().from_dict(data, where)


def read_profile(value: Any, where: str) -> dict[str, ShapeRange]:
    """The "plan" section's profile: input name -> ShapeRange; RecordError naming what is malformed."""
    if not isinstance(value, Mapping):
        raise RecordError(f"{where} is {kind_of(value)}, not a mapping")
    return {str(name): ShapeRange.from_dict(ranges, f"{where}.{name}") for name, ranges in value.items()}


@dataclass(frozen=True)
class MachineFingerprint:
    """The machine a TensorRT plan was built on (or this machine): a plan runs only where these match.

    None: not recorded (a plan's) or not known (this machine's).
    """

    tensorrt: str | None = None
    cuda: str | None = None
    gpu: str | None = None
    compute_capability: str | None = None
    l4t: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """The fields in declaration order (the manifest's key order)."""
        return {f.name: json_value(getattr(self, f.name)) for f in fields(self)}


@dataclass(frozen=True)
class PlanFingerprint(MachineFingerprint):
    """What a plan depends on: the machine plus the ONNX file built, its sha256 and the build options."""

    onnx: str | None = None
    onnx_sha256: str | None = None
    typing: str | None = None  # "strong" | "weak"
    precision: Precision | None = None
    dla_core: int | None = None
    profile: Mapping[str, ShapeRange] | None = None  # input name -> its shapes
    optimization_level: int | None = None
    fp32_layers: list[str] | None = None
    calibration: str | None = None  # the INT8 calibration images' digest


@dataclass(frozen=True)
class PlanRecord(PlanFingerprint):
    """The manifest's "plan" section: the fingerprint the plan was built with and how the build went.

    `verify` is verify_plan's report (`PlanVerify`: skipped, I/O only, or the comparison with ONNX
    Runtime). Keys this version does not know are kept in `extra`, and `key_order` is the order the
    keys were read in, so `to_dict` writes back exactly the section that was read.
    """

    jetpack: str | None = None
    device: str | None = None
    nvpmodel: str | None = None
    workspace_bytes: int | None = None
    builder: str | None = None  # "python" | "trtexec"
    build_time: str | None = None
    build_seconds: float | None = None
    timing_cache: str | None = None
    verify: PlanVerify | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)
    key_order: tuple[str, ...] = field(default=(), compare=False)  # how it was read, not what it says

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> PlanRecord:
        """The typed section; PlanRecordError naming the field whose value has the wrong type."""
        known = {f.name: f for f in fields(cls) if f.name not in ("extra", "key_order")}
        for key, value in data.items():
            if key in known and value is not None and not _PLAN_TYPES[key][0](value):
                raise PlanRecordError(f"plan.{key} is {type(value).__name__} {value!r}, not {_PLAN_TYPES[key][1]}")
        values = {k: v for k, v in data.items() if k in known}
        if values.get("precision") is not None:
            values["precision"] = Precision(values["precision"])  # checked above: one of its values
        try:
            if values.get("verify") is not None:
                values["verify"] = PlanVerify.from_dict(values["verify"])
            if values.get("profile") is not None:
                values["profile"] = read_profile(values["profile"], "plan.profile")
        except RecordError as exc:
            raise PlanRecordError(str(exc)) from None
        return cls(**values, extra={k: v for k, v in data.items() if k not in known}, key_order=tuple(data))

    def to_dict(self) -> dict[str, Any]:
        """The section as read (same keys, same order), with the fields set since then after them."""
        data = {key: self.extra[key] if key in self.extra else json_value(getattr(self, key)) for key in self.key_order}
        for f in fields(self):
            if f.name not in data and f.name not in ("extra", "key_order") and getattr(self, f.name) is not None:
                data[f.name] = json_value(getattr(self, f.name))
        return data

    def __bool__(self) -> bool:
        """False for an empty section ({}), which records nothing, as the mapping it was read from."""
        return bool(self.to_dict())


def _is_str(value: Any) -> bool:
    return isinstance(value, str)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _is_mapping(value: Any) -> bool:
    return isinstance(value, Mapping)


def _is_names(value: Any) -> bool:
    return isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value)


def _is_precision(value: Any) -> bool:
    return isinstance(value, str) and value in {p.value for p in Precision}


_STRING = (_is_str, "a string")
# field -> (check of a non-null value, what it must be)
_PLAN_TYPES = {
    **{key: _STRING for key in ("tensorrt", "cuda", "gpu", "compute_capability", "l4t", "onnx", "onnx_sha256",
                                "typing", "calibration", "jetpack", "device", "nvpmodel", "builder",
                                "build_time", "timing_cache")},
    **{key: (_is_int, "an integer") for key in ("dla_core", "optimization_level", "workspace_bytes")},
    "build_seconds": (_is_number, "a number"),
    "precision": (_is_precision, f"one of {', '.join(p.value for p in Precision)}"),
    "profile": (_is_mapping, "a mapping of input names to {min, opt, max} shapes"),
    "verify": (_is_mapping, "a mapping"),
    "fp32_layers": (_is_names, "a list of node names"),
}


# --------------------------------------------------------------------------- the manifest


def open_inside(path: Path) -> BinaryIO:
    """A file of an artifact (or of a version directory) opened for reading without following a link; ManifestError
    unless it is a regular file there. Every file edge-deploy reads or copies out of an artifact is opened so: a link
    may lead out of it (the artifact directory itself may be a link: what the operator named)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise ManifestError(
                f"{path} is a symbolic link, but every file a manifest lists must be a regular file inside the "
                "artifact (a link may lead out of it); put the file itself there, or re-run `edge-deploy convert`."
            ) from None
        if exc.errno == errno.ENOENT:
            raise ManifestError(f"{path} is listed in the manifest but missing; re-run `edge-deploy convert`.") from None
        raise
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)  # before fdopen, which refuses a directory with "Is a directory (N)"
        raise ManifestError(f"{path} is listed in the manifest as a file but is {file_kind(mode)}; every file a "
                            "manifest lists must be a regular file inside the artifact: put the file itself there, "
                            "or re-run `edge-deploy convert`.")
    os.set_blocking(fd, True)
    return os.fdopen(fd, "rb")


def file_kind(mode: int) -> str:
    """What a file that is not a regular one is ("a directory", "a FIFO (named pipe)", ...), from its st_mode."""
    for test, name in ((stat.S_ISDIR, "a directory"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
                       (stat.S_ISSOCK, "a socket"), (stat.S_ISLNK, "a symbolic link")):
        if test(mode):
            return name
    return "a regular file" if stat.S_ISREG(mode) else "not a regular file"


def not_a_file(path: Path) -> str | None:
    """Why `path` is not a regular file, in words ("does not exist", "is a directory", ...), or None when it is one
    (followed through a link)."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return "does not exist"
    except OSError as exc:
        return f"cannot be read ({exc.strerror or exc})"
    return None if stat.S_ISREG(mode) else f"is {file_kind(mode)}"


def _listed_file_sha256(path: Path) -> str:
    """The sha256 of a file a manifest lists, opened without following a link (`open_inside`)."""
    with open_inside(path) as fh:
        return sha256_stream(fh)


def _plain_file_name(name: str) -> bool:
    """A name with no directory part, so that artifact_dir / name stays inside the artifact."""
    return bool(name) and name not in (".", "..") and not any(c in name for c in "/\\\0")


@dataclass
class Manifest:
    """manifest.json as one object: the typed seams every stage reads, and the stages' reports as records.

    Typed: family, precision, io, preprocess, decode, files, source (`ModelSource`, or the family's own
    subclass of it), plan (`PlanRecord`: the repository, doctor and the rebuild decision read its fingerprint),
    and the stages' reports (edge_deploy.artifact.records: export, parity, fp16, evaluation, fused_preprocess).
    Free-form: tool, timings.
    """

    io: IOSignature
    preprocess: PreprocessSpec
    decode: DecodeParams  # the family's own DecodeParams class (ScoreNmsDecodeParams without a family)
    precision: Precision = Precision.FP32
    family: str | None = None
    source: ModelSource = field(default_factory=ModelSource)
    files: dict[str, FileEntry] = field(default_factory=dict)
    tool: dict[str, object] = field(default_factory=lambda: {"name": "edge-deploy", "version": __version__})
    created: str = field(default_factory=lambda: time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
    export: ExportReport | None = None
    parity: ParityReport | None = None
    fp16: Fp16Report | None = None
    plan: PlanRecord | None = None
    timings: dict[str, float] = field(default_factory=dict)
    evaluation: EvaluationRecord | None = None
    fused_preprocess: FusedPreprocessRecord | None = None
    detection: DetectionRecord | None = None  # an object detector's (convert MODEL.onnx): edge_deploy.detect

    # ----------------------------------------------------------------- reading and writing

    @classmethod
    def read(cls, artifact_dir: Path) -> Manifest:
        """Load DIR/manifest.json (any known format), raising a one-line ManifestError when it cannot."""
        path = Path(artifact_dir) / MANIFEST_NAME
        if path.is_symlink():
            raise ManifestError(
                f"{path} is a symbolic link, but an artifact's manifest must be a regular file inside it (a link may "
                "lead out of it); put the file itself there, or re-run `edge-deploy convert`."
            )
        kind = special_kind(path)
        if kind is not None:  # never opened: a FIFO would block
            raise ManifestError(f"{path} is {kind}, not a regular file; an artifact's manifest is the JSON file "
                                "`edge-deploy convert` writes: re-run it.")
        if not path.is_file():
            raise ManifestError(
                f"{artifact_dir} has no {MANIFEST_NAME}: it is not an edge-deploy artifact; "
                "create one with `edge-deploy convert`."
            )
        try:
            with open_inside(path) as fh:  # not followed, should it have become a link since
                data = json.loads(fh.read())
        except ManifestError:
            raise
        except (OSError, ValueError) as exc:
            raise ManifestError(f"cannot read {path}: {exc}; re-run `edge-deploy convert`.") from exc
        return cls.from_dict(data, where=str(path))

    @classmethod
    def from_dict(cls, data: Any, where: str = MANIFEST_NAME) -> Manifest:
        """Validate a manifest mapping of any known format (migrated to this one)."""
        if not isinstance(data, dict) or data.get("format") not in MIGRATIONS:
            found = data.get("format") if isinstance(data, dict) else None
            newer = isinstance(found, int) and found > FORMAT
            raise ManifestError(
                f"{where} is not an edge-deploy manifest of a known format (format {found!r}; this edge-deploy "
                f"reads 1 to {FORMAT}): "
                + ("it was written by a newer edge-deploy; upgrade edge-deploy." if newer
                   else "re-run `edge-deploy convert`.")
            )
        data = migrate(data)
        try:
            _check_section_types(data)
        except (KeyError, TypeError) as exc:
            raise ManifestError(f"{where} is damaged ({type(exc).__name__}: {exc}); re-run `edge-deploy convert`.") \
                from None
        _check_family(data, where)
        try:
            decode = _decode_params_type(data.get("family")).from_dict(data["decode"])
            preprocess = PreprocessSpec.from_dict(data["preprocess"])
            plan = PlanRecord.from_dict(data["plan"]) if data.get("plan") is not None else None
            if not _is_precision(data["precision"]):
                raise TypeError(f"precision is {data['precision']!r}, not {_PLAN_TYPES['precision'][1]}")
            precision = Precision(data["precision"])
            io = IOSignature.from_dict(data["io"])
            files = {name: FileEntry(str(e["sha256"]), int(e["bytes"])) for name, e in (data.get("files") or {}).items()}
            export, parity, fp16, evaluation, fused_preprocess, detection = (
                _record(data, "export", ExportReport), _record(data, "parity", ParityReport),
                _record(data, "fp16", Fp16Report), _record(data, "evaluation", EvaluationRecord),
                _record(data, "fused_preprocess", FusedPreprocessRecord), _record(data, "detection", DetectionRecord))
            source = _source_type(data).from_dict(data.get("source") or {}, "source")
        except RecordError as exc:
            raise ManifestError(f"{where} is damaged: {exc}; re-run `edge-deploy convert`.") from None
        except (KeyError, TypeError, ValueError, DecodeParamsError, PreprocessSpecError) as exc:
            raise ManifestError(f"{where} is damaged ({type(exc).__name__}: {exc}); re-run `edge-deploy convert`.") \
                from None
        for name in files:
            if not _plain_file_name(name):
                raise ManifestError(f"{where} lists the file {name!r}, which is not a plain file name inside the "
                                    "artifact (a manifest names only files beside it); re-run `edge-deploy convert`.")
        return cls(io=io, preprocess=preprocess, decode=decode, precision=precision, family=data.get("family"),
                   plan=plan, source=source, files=files, tool=dict(data.get("tool") or {}),
                   created=str(data.get("created", "")), timings=dict(data.get("timings") or {}), export=export,
                   parity=parity, fp16=fp16, evaluation=evaluation, fused_preprocess=fused_preprocess,
                   detection=detection)

    def to_dict(self) -> dict[str, Any]:
        """The manifest.json form (format 2)."""
        data: dict[str, object] = {
            "format": FORMAT,
            "tool": self.tool,
            "created": self.created,
            "family": self.family,
            "precision": self.precision.value,
            "source": self.source.to_dict(),
            "files": {name: entry.to_dict() for name, entry in self.files.items()},
            "io": self.io.to_dict(),
            "export": json_value(self.export),
            "preprocess": self.preprocess.to_dict(),
            "decode": self.decode.to_dict(),
            "parity": json_value(self.parity),
            "fp16": json_value(self.fp16),
            "plan": self.plan.to_dict() if self.plan is not None else None,
            "timings": self.timings,
        }
        for key in ("evaluation", "fused_preprocess", "detection"):
            if getattr(self, key) is not None:
                data[key] = json_value(getattr(self, key))
        return data

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=False) + "\n"

    def write(self, artifact_dir: Path) -> Path:
        """Write DIR/manifest.json atomically and return its path."""
        path = Path(artifact_dir) / MANIFEST_NAME
        write_json_atomic(path, self.to_dict())
        return path

    def verify_files(self, artifact_dir: Path, names: tuple[str, ...] | None = None) -> None:
        """Check that the listed files (all, or `names` among them) are regular files inside the artifact with the
        recorded sha256. A listed symbolic link is refused unread (never followed out of the artifact, never hashed);
        the artifact directory itself may be a link (what the operator named)."""
        for name, entry in self.files.items():
            if names is not None and name not in names:
                continue
            path = Path(artifact_dir) / name
            actual = _listed_file_sha256(path)
            if actual != entry.sha256:
                raise ManifestError(
                    f"{path} does not match its manifest (sha256 {actual[:12]}… != {entry.sha256[:12]}…): "
                    "the file was changed after convert; re-run `edge-deploy convert`."
                )

    def listed(self, artifact_dir: Path, name: str) -> Path:
        """DIR/NAME for a file this manifest lists; ManifestError when it does not list it (every file a stage takes
        out of an artifact is listed, so verify_files has checked it: an unlisted one is a damaged manifest)."""
        if name not in self.files:
            raise ManifestError(
                f"{Path(artifact_dir) / MANIFEST_NAME} is damaged: it does not list {name}, which this artifact needs "
                f"here (every file of an artifact is listed with its sha256); re-run `edge-deploy convert`."
            )
        return Path(artifact_dir) / name

    # ----------------------------------------------------------------- derived views

    @property
    def fp16_onnx(self) -> Fp16OnnxRecord | None:
        """The record of model_fp16.onnx (fp16.onnx), or None when the artifact has none."""
        return self.fp16.onnx if self.fp16 is not None else None

    def io_of(self, onnx_name: str) -> IOSignature:
        """The I/O signature of one of the artifact's ONNX files (model_fp16.onnx may have FP16 I/O)."""
        record = self.fp16_onnx
        if onnx_name == FP16_ONNX_NAME and record is not None and record.io is not None:
            return record.io
        return self.io

    @property
    def plan_io(self) -> IOSignature:
        """The I/O of model.plan: that of the ONNX file it was built from."""
        return self.io_of((self.plan.onnx if self.plan else None) or ONNX_NAME)

    @property
    def input_size(self) -> tuple[int, int]:
        """The model input's (height, width) from the preprocessing spec."""
        return self.preprocess.height, self.preprocess.width

    @property
    def fused_frame(self) -> FusedFrame | None:
        """The camera frame a fused model takes, or None when the preprocessing is not fused in."""
        section = self.fused_preprocess
        if not section:
            return None
        frame = section.frame
        if frame is None or frame.height is None or frame.width is None:
            raise ManifestError("the manifest's fused_preprocess.frame has no height and width; "
                                "re-run `edge-deploy convert --fuse-preprocess`.")
        return FusedFrame(section.input or "FRAME", frame.height, frame.width, frame.color or "bgr")

    def lane_family(self) -> Any:
        """The LaneFamily this artifact's outputs belong to (edge_deploy.lanedet.family), or None."""
        return get_family(self.family) if self.family else None

    def with_io(self, io: IOSignature) -> Manifest:
        return replace(self, io=io)


def _check_section_types(data: Mapping[str, Any]) -> None:
    """TypeError/KeyError (read as a damaged manifest) for a section of the wrong type or an unknown family."""
    for key, kind in (("files", dict), ("plan", dict), ("family", str)):
        value = data.get(key)
        if value is not None and not isinstance(value, kind):
            raise TypeError(f"{key} is {type(value).__name__} {value!r:.40}, not {'an object' if kind is dict else 'a string'}")


def _check_family(data: Mapping[str, Any], where: str) -> None:
    """ManifestError when the manifest's family is not one this installation has: the manifest is fine (a plug-in
    family's package is missing here, or it was written with one), so the line says what to install."""
    family = data.get("family")
    if not isinstance(family, str):
        return
    try:
        get_family(family)
    except KeyError as exc:
        source = data["source"] if isinstance(data.get("source"), Mapping) else {}
        package = source.get("family_package") if isinstance(source.get("family_package"), str) else None
        if isinstance(exc, EdgeDeployError):  # its package is here but broken: that line says whose bug it is
            raise ManifestError(f"{where} is of the lane-model family {family!r}: {exc}") from None
        provider = f"install {package} (the package convert took it from) beside edge-deploy" if package else \
            "install the package that provides it (the one convert had) beside edge-deploy"
        raise ManifestError(f"{where} is of the lane-model family {family!r}, which this installation does not have "
                            f"({exc}): {provider}, or re-run `edge-deploy convert` with a family it has.") from None


def _source_type(data: Mapping[str, Any]) -> type[ModelSource]:
    """How a manifest's "source" is read: with its family's source type when the source is that family's model
    (kind = family), `ExternalSource` for a TorchScript file or a factory; else the common fields, the rest kept."""
    source, family = data.get("source"), data.get("family")
    kind = source.get("kind") if isinstance(source, Mapping) else None
    if not isinstance(kind, str):
        return ModelSource
    if kind in EXTERNAL_KINDS:
        return EXTERNAL_KINDS[kind]
    try:
        return get_family(kind).source_type if kind == family else ModelSource
    except KeyError:
        return ModelSource


def _decode_params_type(family: str | None) -> type[DecodeParams]:
    """How a manifest's "decode" is read: with its family's parameter class (score/NMS/top-k without one,
    or for a family this process does not know)."""
    try:
        return get_family(family).decode_params_type() if family else ScoreNmsDecodeParams
    except KeyError:
        return ScoreNmsDecodeParams


def read_manifest(artifact_dir: Path) -> Manifest:
    """Load DIR/manifest.json (see `Manifest.read`)."""
    return Manifest.read(artifact_dir)


# --------------------------------------------------------------------------- migrations


# A migration takes and gives manifest.json's raw JSON: Manifest.from_dict checks it once, after the last one.
def _migrate_1(data: dict[str, Any]) -> dict[str, Any]:
    """Format 1 -> 2: add "family" and "precision", and complete "decode" and "preprocess".

    - family: "laneatt" for a built-in LaneATT source; otherwise the family whose outputs the io
      section has (format 1 served any model with N x 77 rows as LaneATT); null when none fits.
    - precision: "fp16" when model_fp16.onnx was made (convert's default); else the plan's; else "fp32"
      (format 1 did not record --precision int8 without a plan: fp32 serves the same model.onnx).
    - decode / preprocess: format-1 readers filled missing keys with LaneATT's CULane values; the
      family's defaults do the same here, once.
    """
    out = dict(data, io=data.get("io") or {})  # a plan-only manifest of another tool: doctor still reads its plan
    source = data.get("source") or {}
    outputs = [TensorSpec.from_dict(t) for t in (data.get("io") or {}).get("outputs") or ()]
    dynamic = bool(((data.get("io") or {}).get("batch") or {}).get("dynamic", True))
    family = get_family(LEGACY_FAMILY) if source.get("kind") == LEGACY_FAMILY else family_for_outputs(outputs, dynamic)
    out["family"] = family.name if family else None
    fp16 = data["fp16"] if isinstance(data.get("fp16"), dict) else {}
    plan = data["plan"] if isinstance(data.get("plan"), dict) else {}
    if isinstance(fp16.get("onnx"), dict):
        out["precision"] = "fp16"
    else:
        out["precision"] = str(plan.get("precision") or "fp32")
    base_decode = family.decode_defaults if family else get_family(LEGACY_FAMILY).decode_defaults
    base_pre = family.preprocess if family else get_family(LEGACY_FAMILY).preprocess
    out["decode"] = {**base_decode.to_dict(), **(data.get("decode") or {})}
    out["preprocess"] = {**base_pre.to_dict(), **(data.get("preprocess") or {})}
    out["format"] = 2
    return out


# format N -> the function that turns it into format N + 1 (raw JSON to raw JSON, checked after: see _migrate_1)
MIGRATIONS: dict[object, Callable[[dict[str, Any]], dict[str, Any]] | None] = {1: _migrate_1, 2: None}


def migrate(data: dict[str, Any]) -> dict[str, Any]:
    """A manifest mapping of any known format, brought to the current one (raw JSON: from_dict checks it after)."""
    while (step := MIGRATIONS.get(data.get("format"))) is not None:
        data = step(data)
    return data
