"""What `edge-deploy families` shows of a family (`LaneFamily.describe`): one typed row, JSON by `to_dict`."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from .decode_params import DecodeParams
from .source import _OPTION_TYPES, FamilyOption


@dataclass(frozen=True)
class FamilyDescription:
    """A family as `families` lists it: names, where it comes from, what `convert NAME` takes, its defaults."""

    name: str
    title: str
    origin: str  # "built-in" or "package DIST"
    backbones: tuple[str, ...]
    default_backbone: str | None
    datasets: Mapping[str, tuple[int, int] | None]  # data set -> its frames' (H, W), when its preset gives them
    options: tuple[FamilyOption, ...]
    input: tuple[int, int]  # the model input's (H, W)
    decode: DecodeParams | Mapping[str, Any]  # a mapping: a plug-in's, as its probe described it (plugin_probe.py)

    def to_dict(self) -> dict[str, Any]:
        """`families --json`'s object (its keys are a contract)."""
        return {
            "name": self.name, "title": self.title, "origin": self.origin,
            "backbones": list(self.backbones), "default_backbone": self.default_backbone,
            "datasets": {name: {"image_size": list(size) if size else None} for name, size in self.datasets.items()},
            "options": [{"flag": o.flag, "type": o.type.__name__, "choices": list(o.choices) if o.choices else None,
                         "help": o.help} for o in self.options],
            "input": list(self.input),
            "decode": self.decode.to_dict() if isinstance(self.decode, DecodeParams) else dict(self.decode),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> FamilyDescription:
        """The description `to_dict` gave (a plug-in's, from the process that probed it)."""
        options = tuple(FamilyOption(str(entry["flag"])[2:].replace("-", "_"), _OPTION_TYPES[entry["type"]],
                                     str(entry["help"]), tuple(entry["choices"]) if entry["choices"] else None)
                        for entry in data["options"])
        datasets = {str(name): tuple(preset["image_size"]) if preset["image_size"] else None
                    for name, preset in data["datasets"].items()}
        return cls(name=str(data["name"]), title=str(data["title"]), origin=str(data["origin"]),
                   backbones=tuple(data["backbones"]), default_backbone=data["default_backbone"],
                   datasets=datasets, options=options, input=tuple(data["input"]),
                   decode=dict(data["decode"]))
