"""Plug-in lane families as installed distributions, written straight into a folder (what pip writes for a pure
wheel: the package and its *.dist-info with entry_points.txt), so a test can put well-behaved and broken plug-ins on
PYTHONPATH in milliseconds. importlib.metadata finds them there exactly as it finds pip-installed ones."""
from __future__ import annotations

from pathlib import Path

FAMILY_TEMPLATE = '''{future}
import sys
from dataclasses import dataclass, field
from edge_deploy.lanedet.family import DatasetPreset, DecodeDefaults, LaneFamily, LoadedModel, TensorSpec
from edge_deploy.lanedet.preprocess import PreprocessSpec
{before}


class Family(LaneFamily):
    name = {name!r}
    title = {title}
    preprocess = PreprocessSpec(height=40, width=64, color="rgb", scale=1 / 255, interpolation="bilinear")
    decode_defaults = DecodeDefaults(0.5, 0.0, 4)
    decoder_module = {decoder!r}
{attrs}

    def max_points(self, lane_outputs):
        return 2

    def lane_outputs(self, outputs, has_batch):
{lane_outputs}
        raise ValueError("returns no {name} output")
{methods}

FAMILY = {family}
'''

DECODER = '''from lane import Lane  # noqa: F401 - beside it on the server (install copies lane.py)


def decode_outputs(outputs, *, image_size, model_width, **params):
    return []
'''


def write_plugin(site: Path, case: str, *, family_name: str | None = None, future: bool = True, before: str = "",
                 title: str | None = None, attrs: str = "", methods: str = "", lane_outputs: str = "",
                 family: str = "Family()", entry: str | None = None, decoder: str | None = None) -> str:
    """Write distribution edp-CASE (package edp_CASE) providing family FAMILY_NAME (default CASE); its dist name."""
    name = family_name or case
    package = site / f"edp_{case}"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(FAMILY_TEMPLATE.format(
        future="from __future__ import annotations" if future else "", before=before, name=name,
        title=title if title is not None else repr(name.title()), decoder=decoder or f"edp_{case}.decode",
        attrs="\n".join("    " + line for line in attrs.splitlines()), methods="\n".join(
            "    " + line for line in methods.splitlines()),
        lane_outputs="\n".join("        " + line for line in lane_outputs.splitlines()) or "        pass",
        family=family))
    (package / "decode.py").write_text(DECODER)
    dist = f"edp-{case}"
    info = site / f"edp_{case}-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(f"[edge_deploy.families]\n{entry or f'{name} = edp_{case}:FAMILY'}\n")
    return dist
