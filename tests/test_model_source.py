"""The manifest's "source" section as a typed record (issue 47 item 2): each loader's JSON, byte for byte, read back
into the family's own type and written again the same; wrong types are a damaged manifest naming the key; a
format-1 manifest's source reads as it was written."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from edge_deploy.artifact.manifest import Manifest
from edge_deploy.errors import ManifestError
from edge_deploy.core.json_record import RecordError
from edge_deploy.lanedet.clrnet import CLRNetSource
from edge_deploy.lanedet.family import get_family
from edge_deploy.lanedet.lane_family import LoadedModel
from edge_deploy.lanedet.laneatt import AnchorOrder, LaneATTSource
from edge_deploy.lanedet.source import SourceSpec
from edge_deploy.lanedet.model_source import ExternalSource, ModelSource, SourceFile

FORMAT1 = Path(__file__).parent / "data" / "format1"
CHECKPOINT = {"path": "/models/laneatt_r18_culane.pt", "sha256": "c" * 64}

# What each loader has always written (edge-deploy before the typed record), key order included.
LANEATT = {"kind": "laneatt", "spec": "laneatt", "backbone": "resnet18", "checkpoint": CHECKPOINT,
           "anchors_freq": {"path": "/models/culane_anchors_freq.pt", "sha256": "f" * 64}, "dataset": "culane",
           "topk_anchors": 1000, "anchor_order": {"rule": "torch16", "description": "as PyTorch 1.6 sorts"},
           "num_anchors": 1000, "trained": True, "seed": None}
LANEATT_SEEDED = {"kind": "laneatt", "spec": "laneatt", "backbone": "resnet34", "checkpoint": None, "anchors_freq": None,
                  "dataset": None, "topk_anchors": None, "anchor_order": None, "num_anchors": 2784, "trained": False,
                  "seed": 0, "untrained_lanes": "reg_layer.bias[0] = 30 strips"}
UFLDV2 = {"kind": "ufldv2", "spec": "ufldv2", "backbone": "resnet18", "dataset": "tusimple",
          "checkpoint": {**CHECKPOINT, "dropped": "12 seg_head.* keys (training-only auxiliary head)"},
          "parameters": 96369888, "trained": True, "seed": None}
CLRNET = {"kind": "clrnet", "spec": "clrnet", "backbone": "resnet18", "dataset": "culane", "checkpoint": None,
          "parameters": 11773422, "trained": False, "seed": 0, "image_size": [590, 1640],
          "untrained": "class branch set to one score for every prior"}
TORCHSCRIPT = {"kind": "torchscript", "spec": "model.pt", "file": {"path": "/work/model.pt", "sha256": "d" * 64},
               "backbone": None, "checkpoint": None, "num_anchors": None, "trained": True}
FACTORY = {"kind": "factory", "spec": "pkg.mod:make", "backbone": None, "checkpoint": None, "num_anchors": None,
           "trained": True}
PLUGIN = {"kind": "mylane", "spec": "mylane", "backbone": None, "dataset": None, "checkpoint": None, "parameters": 64,
          "trained": True, "seed": None, "stripes": 3, "family_package": "mylane-edge"}


def _manifest(family: str | None, source: dict) -> dict:
    """A format-2 manifest of `family` around `source`, as JSON text would give it."""
    data = Manifest.from_dict({"format": 1, "io": {"inputs": [{"name": "input", "datatype": "FP32",
                                                               "shape": [-1, 3, 360, 640]}],
                                                    "outputs": [{"name": "predict_lanes", "datatype": "FP32",
                                                                 "shape": [-1, 1000, 77]}],
                                                    "batch": {"min": 1, "max": 4}}}).to_dict()
    return json.loads(json.dumps({**data, "family": family, "source": source}))


@pytest.mark.parametrize("family, source, kind", [
    ("laneatt", LANEATT, LaneATTSource), ("laneatt", LANEATT_SEEDED, LaneATTSource), (None, UFLDV2, ModelSource),
    (None, CLRNET, ModelSource), ("laneatt", TORCHSCRIPT, ExternalSource), ("laneatt", FACTORY, ExternalSource),
    (None, PLUGIN, ModelSource), (None, {}, ModelSource),
], ids=["laneatt", "laneatt-seeded", "ufldv2", "clrnet-no-family", "torchscript", "factory", "plugin", "empty"])
def test_a_source_reads_into_its_type_and_writes_back_byte_for_byte(family, source, kind) -> None:
    data = _manifest(family, source)
    manifest = Manifest.from_dict(data)
    assert type(manifest.source) is kind
    assert json.dumps(manifest.to_dict()["source"]) == json.dumps(source)  # same keys, same order, same values
    assert Manifest.from_dict(manifest.to_dict()).source == manifest.source


def test_the_fields_are_typed() -> None:
    laneatt = Manifest.from_dict(_manifest("laneatt", LANEATT)).source
    assert isinstance(laneatt, LaneATTSource) and laneatt.trained is True and laneatt.dataset == "culane"
    assert laneatt.checkpoint == SourceFile("/models/laneatt_r18_culane.pt", "c" * 64)
    assert laneatt.anchor_order == AnchorOrder("torch16", "as PyTorch 1.6 sorts") and laneatt.topk_anchors == 1000
    plugin = Manifest.from_dict(_manifest(None, PLUGIN)).source
    assert plugin.family_package == "mylane-edge" and plugin.extra == {"stripes": 3}  # a key no type declares: kept
    clrnet = CLRNetSource.from_dict(CLRNET)
    assert clrnet.image_size == (590, 1640) and clrnet.untrained.startswith("class branch")
    assert ExternalSource.from_dict(TORCHSCRIPT).file.sha256 == "d" * 64


@pytest.mark.parametrize("family, source, words", [
    ("laneatt", {**LANEATT, "trained": "yes"}, "source.trained is str 'yes', not true or false"),
    ("laneatt", {**LANEATT, "topk_anchors": "many"}, "source.topk_anchors is str 'many', not an integer"),
    ("laneatt", {**LANEATT, "anchor_order": "torch16"}, "source.anchor_order is str 'torch16', not an object"),
    ("laneatt", {**LANEATT, "checkpoint": {"path": 7}}, "source.checkpoint.path is int 7, not a string"),
    ("laneatt", {**TORCHSCRIPT, "file": "model.pt"}, "source.file is str 'model.pt', not an object"),
    (None, {**PLUGIN, "family_package": ["a"]}, "source.family_package is list ['a'], not a string"),
    (None, "laneatt", "source is str 'laneatt', not an object"),
])
def test_a_source_of_the_wrong_type_is_a_damaged_manifest_naming_the_key(family, source, words) -> None:
    with pytest.raises(ManifestError) as info:
        Manifest.from_dict(_manifest(family, source))
    assert "manifest.json is damaged: " in str(info.value) and words in str(info.value), info.value
    assert "\n" not in str(info.value)


def test_each_loader_builds_the_layout_it_always_wrote() -> None:
    built = LaneATTSource(kind="laneatt", spec="laneatt", backbone="resnet18", checkpoint=SourceFile(**CHECKPOINT),
                          anchors_freq=SourceFile("/models/culane_anchors_freq.pt", "f" * 64), dataset="culane",
                          topk_anchors=1000, anchor_order=AnchorOrder("torch16", "as PyTorch 1.6 sorts"),
                          num_anchors=1000, trained=True)
    assert json.dumps(built.to_dict()) == json.dumps(LANEATT)
    assert json.dumps(ExternalSource(kind="factory", spec="pkg.mod:make", trained=True).to_dict()) == json.dumps(FACTORY)
    clrnet = CLRNetSource(kind="clrnet", spec="clrnet", backbone="resnet18", dataset="culane", parameters=11773422,
                          trained=False, seed=0, image_size=(590, 1640), untrained=CLRNET["untrained"])
    assert json.dumps(clrnet.to_dict()) == json.dumps(CLRNET)
    # a plug-in's own keys (no source type of its own) after the common ones, the package added last
    plugin = ModelSource(kind="mylane", spec="mylane", parameters=64, trained=True, extra={"stripes": 3},
                         family_package="mylane-edge")
    assert json.dumps(plugin.to_dict()) == json.dumps(PLUGIN)


class _Weights:
    """Stands in for a torch module (source_section counts its parameters' numel()): the Python 3.10 run has no
    torch, and this test is about the record, not the model."""

    class _Tensor:
        def __init__(self, count: int) -> None:
            self.count = count

        def numel(self) -> int:
            return self.count

    def parameters(self) -> list[_Tensor]:
        return [self._Tensor(6), self._Tensor(3)]


def test_source_section_builds_the_familys_source_type(tmp_path) -> None:
    checkpoint = tmp_path / "weights.pt"
    checkpoint.write_bytes(b"weights")
    module = _Weights()
    clrnet = get_family("clrnet").source_section(SourceSpec("clrnet", checkpoint=checkpoint), module,
                                                 backbone="resnet18", dataset="culane", dropped="2 keys",
                                                 image_size=(590, 1640))
    assert type(clrnet) is CLRNetSource and clrnet.image_size == (590, 1640) and clrnet.parameters == 9
    assert clrnet.checkpoint == SourceFile(str(checkpoint.resolve()), clrnet.checkpoint.sha256, "2 keys")
    assert (clrnet.trained, clrnet.seed) == (True, None)


def test_a_loaded_model_reads_a_mapping_into_its_familys_source_type() -> None:
    """What a plug-in family's load() may give (docs/families.md: `{**source, "trained": True}`), typed once."""
    laneatt = get_family("laneatt")
    loaded = LoadedModel(None, (3, 360, 640), dict(LANEATT_SEEDED), laneatt)
    assert type(loaded.source) is LaneATTSource and loaded.source.num_anchors == 2784
    assert json.dumps(loaded.source.to_dict()) == json.dumps(LANEATT_SEEDED)
    assert type(LoadedModel(None, (3, 8, 8), {"kind": "x", "spec": "x", "trained": True}).source) is ModelSource
    with pytest.raises(RecordError, match="source.num_anchors is str"):
        LoadedModel(None, (3, 360, 640), {**LANEATT_SEEDED, "num_anchors": "all"}, laneatt)
    with pytest.raises(TypeError, match="says nothing of trained"):
        LoadedModel(None, (3, 8, 8), {"kind": "x", "spec": "x"})
    with pytest.raises(TypeError, match="LoadedModel.source is list"):
        LoadedModel(None, (3, 8, 8), [("kind", "x")])  # type: ignore[arg-type]


def test_a_format1_manifests_source_reads_as_written(tmp_path) -> None:
    """tests/data/format1 holds artifacts written by the released code: their factory source, typed, is written
    back byte for byte in the format-2 manifest."""
    written = json.loads((FORMAT1 / "tiny_fp16" / "manifest.json").read_text())["source"]
    manifest = Manifest.read(FORMAT1 / "tiny_fp16")
    assert type(manifest.source) is ExternalSource
    assert (manifest.source.kind, manifest.source.spec, manifest.source.trained) == ("factory", "tiny_lane:make_model",
                                                                                   True)
    manifest.write(tmp_path)
    assert json.dumps(json.loads((tmp_path / "manifest.json").read_text())["source"]) == json.dumps(written)
