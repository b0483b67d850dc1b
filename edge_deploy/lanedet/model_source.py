"""The manifest's "source" section as one typed record: where the exported torch model came from.

`ModelSource` holds what every source says and what the stages read (`kind`, `spec`, `backbone`,
`dataset`, `checkpoint`, `parameters`, `trained`, `seed`, `family_package`). A family with keys of its own
subclasses it and names the subclass as its `LaneFamily.source_type` (LaneATT's anchors, CLRNet's frame
size); a TorchScript file or a package.module:factory is an `ExternalSource`. The JSON stays flat, as it was
(every key at the top of "source"):

- `from_dict` checks each known key's type (RecordError naming it, e.g. ``source.trained``) and keeps keys
  this version does not know (a plug-in family's own, a newer edge-deploy's) in `extra`;
- `to_dict` of a section that was read writes its keys in the order read; a section a loader built writes
  its class's `LAYOUT` (the keys in the order that loader has always written them, `NULLS` even when None),
  then its other set fields, its `extra` keys and last `family_package` (added once the family is known).

Light (the standard library, edge_deploy.core.json_record and fsutil): lanedet/lane_family.py, which the client imports,
uses it.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any, ClassVar, TypeVar

from ..core.fsutil import sha256_file
from ..core.json_record import Reader, Record, read_bool, read_int, read_record, read_str

__all__ = ["ExternalSource", "ModelSource", "SourceFile", "source_fields"]

S = TypeVar("S", bound="ModelSource")


@dataclass(frozen=True, eq=False)
class SourceFile(Record):
    """A file a model was made from (a checkpoint, a TorchScript file, LaneATT's anchor frequencies): its absolute
    path and sha256; `dropped`: what of a checkpoint was left out of the model (a training-only head)."""

    path: str | None = None
    sha256: str | None = None
    dropped: str | None = None

    _SECTION = "source.file"
    _READERS = {"path": read_str, "sha256": read_str, "dropped": read_str}

    @classmethod
    def of(cls, path: str | Path, dropped: str | None = None) -> SourceFile:
        """The record of the file at `path` (hashed now)."""
        return cls(str(Path(path).resolve()), sha256_file(Path(path)), dropped)


@dataclass(frozen=True, eq=False)
class ModelSource(Record):
    """The manifest's "source" section (see the module's docstring); a family's own keys are its subclass's
    fields. Every field is optional when read (a format-1 manifest may have no source at all); a loader sets
    `kind`, `spec` and `trained`."""

    kind: str | None = None  # the family's name, "torchscript" or "factory"
    spec: str | None = None  # MODEL as convert was given it
    backbone: str | None = None
    dataset: str | None = None  # the data set whose preset the model was built for
    checkpoint: SourceFile | None = None  # None: seeded weights (`seed`) or not a family's model
    parameters: int | None = None
    trained: bool | None = None  # False: seeded random weights (convert's lane checks only note what they find)
    seed: int | None = None  # the seed of untrained weights
    family_package: str | None = None  # the distribution of a plug-in family: what to install where it is missing

    _SECTION = "source"
    _READERS: ClassVar[Mapping[str, Reader]] = {
        "kind": read_str, "spec": read_str, "backbone": read_str, "dataset": read_str,
        "checkpoint": read_record(SourceFile), "parameters": read_int, "trained": read_bool, "seed": read_int,
        "family_package": read_str}
    # what LaneFamily.source_section has always written, in its order (null included)
    LAYOUT: ClassVar[tuple[str, ...]] = ("kind", "spec", "backbone", "dataset", "checkpoint", "parameters",
                                         "trained", "seed")
    NULLS: ClassVar[frozenset[str]] = frozenset(LAYOUT)

    @classmethod
    def own_fields(cls) -> tuple[str, ...]:
        """The fields a subclass adds (a family's own keys)."""
        return tuple(name for name in cls._names() if name not in _COMMON)

    def to_dict(self) -> dict[str, Any]:
        """The JSON form: as read, or the loader's layout (see the module's docstring)."""
        if self.key_order or self.kind is None:
            return super().to_dict()
        layout = [key for key in self.LAYOUT if getattr(self, key) is not None or key in self.NULLS]
        rest = [name for name in self._names() if name not in layout and name != "family_package"
                and getattr(self, name) is not None]
        order = (*layout, *rest, *(key for key in self.extra if key not in layout and key not in rest),
                 *(("family_package",) if self.family_package is not None else ()))
        return Record.to_dict(replace(self, key_order=order))


_COMMON = frozenset(f.name for f in fields(ModelSource))


@dataclass(frozen=True, eq=False)
class ExternalSource(ModelSource):
    """The source of a model edge-deploy did not build: a TorchScript `file` (kind "torchscript"), a
    package.module:factory (kind "factory") or an ONNX `file` (kind "onnx", e.g. an object detector's export)."""

    file: SourceFile | None = None  # the TorchScript or ONNX file
    num_anchors: int | None = None  # always null: the key LaneATT's sources have, written as it always was

    _READERS = {**ModelSource._READERS, "file": read_record(SourceFile), "num_anchors": read_int}
    LAYOUT = ("kind", "spec", "file", "backbone", "checkpoint", "num_anchors", "trained")
    NULLS = frozenset({"kind", "spec", "backbone", "checkpoint", "num_anchors", "trained"})


# source kinds that are not a family's name -> their record
EXTERNAL_KINDS: Mapping[str, type[ModelSource]] = {"torchscript": ExternalSource, "factory": ExternalSource,
                                                   "onnx": ExternalSource}


def source_fields(source_type: type[S], values: Mapping[str, Any]) -> S:
    """A `source_type` record of `values` (keyword arguments a loader gave): its fields set, the other keys kept in
    `extra` (a plug-in family's own keys without a source type of its own)."""
    names = set(source_type._names())
    return source_type(**{k: v for k, v in values.items() if k in names},
                       extra={k: v for k, v in values.items() if k not in names})
