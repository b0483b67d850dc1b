"""The base of the manifest's typed sections: a frozen dataclass read and checked once from JSON, written back
the same (key order as read, unknown keys kept), and the readers that check one value each.

edge_deploy.artifact.records (the stage reports) and edge_deploy.lanedet.model_source (the "source" section) build on it; this
module imports nothing of edge_deploy, so that the lane-model families (which the client imports) can use it.
See edge_deploy.artifact.records for the rules every record follows.
"""
from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, fields
from enum import Enum
from typing import Any, ClassVar, TypeAlias, TypeVar, Union


class RecordError(ValueError):
    """A manifest section with a value of the wrong type (the message names the field)."""


# A JSON document as json.loads gives it: what passes through edge-deploy to an outside tool unread (Ansible's
# extra vars), or is read here into a typed object at once.
JsonValue: TypeAlias = Union[str, int, float, bool, None, list["JsonValue"], dict[str, "JsonValue"]]
JsonObject: TypeAlias = dict[str, JsonValue]

R = TypeVar("R", bound="Record")
Reader = Callable[[Any, str], Any]


def json_value(value: Any) -> Any:
    """The JSON form of a field value."""
    if isinstance(value, Record):
        return value.to_dict()
    if hasattr(value, "to_dict"):
        return value.to_dict()
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, (list, tuple)):
        return [json_value(v) for v in value]
    if isinstance(value, Mapping):
        return {k: json_value(v) for k, v in value.items()}
    return value


@dataclass(frozen=True, eq=False)
class Record(Mapping[str, Any]):
    """Base of the stage reports (see the module's docstring)."""

    extra: Mapping[str, Any] = field(default_factory=dict, kw_only=True, repr=False)
    key_order: tuple[str, ...] = field(default=(), kw_only=True, repr=False)

    _SECTION: ClassVar[str] = "record"
    _READERS: ClassVar[Mapping[str, Reader]] = {}
    _ALWAYS: ClassVar[frozenset[str]] = frozenset()  # written as null when None (a built record)

    @classmethod
    def _names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in fields(cls) if f.name not in ("extra", "key_order"))

    @classmethod
    def from_dict(cls: type[R], data: Any, where: str | None = None) -> R:
        """The typed report; RecordError naming the field whose value has the wrong type."""
        where = where or cls._SECTION
        if not isinstance(data, Mapping):
            raise RecordError(f"{where} is {kind_of(data)}, not an object")
        names = cls._names()
        values = {}
        for key, value in data.items():
            if key in names:
                reader = cls._READERS.get(key)
                values[key] = value if value is None or reader is None else reader(value, f"{where}.{key}")
        return cls(**values, extra={k: v for k, v in data.items() if k not in names}, key_order=tuple(data))

    def to_dict(self) -> dict[str, Any]:
        """The JSON form (see the module's docstring)."""
        names = self._names()
        out: dict[str, object] = {}
        for key in self.key_order:
            if key in names:
                out[key] = json_value(getattr(self, key))
            elif key in self.extra:
                out[key] = self.extra[key]
        for name in names:
            value = getattr(self, name)
            if name not in out and (value is not None or (not self.key_order and name in self._ALWAYS)):
                out[name] = json_value(value)
        for key, value in self.extra.items():
            out.setdefault(key, value)
        return out

    # the read-only mapping view (the sections' API as plain dicts)
    def __getitem__(self, key: str) -> Any:
        return self.to_dict()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.to_dict())

    def __len__(self) -> int:
        return len(self.to_dict())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Record):
            return type(self) is type(other) and self.to_dict() == other.to_dict()
        if isinstance(other, Mapping):
            return self.to_dict() == dict(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]


# --------------------------------------------------------------------------- readers: (value, where) -> typed value


def kind_of(value: Any) -> str:
    return f"{type(value).__name__} {value!r:.40}"


def check(test: Callable[[Any], bool], what: str, convert: Callable[[Any], Any] = lambda v: v) -> Reader:
    def read(value: Any, where: str) -> Any:
        if not test(value):
            raise RecordError(f"{where} is {kind_of(value)}, not {what}")
        return convert(value)
    return read


read_str = check(lambda v: isinstance(v, str), "a string")
read_int = check(lambda v: isinstance(v, int) and not isinstance(v, bool), "an integer")
read_number = check(lambda v: isinstance(v, (int, float)) and not isinstance(v, bool), "a number")
read_bool = check(lambda v: isinstance(v, bool), "true or false")
read_ints = check(lambda v: isinstance(v, (list, tuple)) and all(isinstance(i, int) and not isinstance(i, bool)
                                                              for i in v), "a list of integers", tuple)
read_strs = check(lambda v: isinstance(v, (list, tuple)) and all(isinstance(i, str) for i in v), "a list of strings",
               tuple)


def read_record(cls: type[Record]) -> Reader:
    return cls.from_dict


def map_of(reader: Reader) -> Reader:
    def read(value: Any, where: str) -> dict[str, object]:
        if not isinstance(value, Mapping):
            raise RecordError(f"{where} is {kind_of(value)}, not an object")
        return {str(k): v if v is None else reader(v, f"{where}.{k}") for k, v in value.items()}
    return read


def list_of(reader: Reader) -> Reader:
    def read(value: Any, where: str) -> tuple[Any, ...]:
        if not isinstance(value, (list, tuple)):
            raise RecordError(f"{where} is {kind_of(value)}, not a list")
        return tuple(reader(v, f"{where}[{i}]") for i, v in enumerate(value))
    return read
