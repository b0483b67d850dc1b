"""install.json read and checked once (`InstallRecord`): what install writes, what older versions wrote, and keys
from a newer edge-deploy kept, because rollback rebuilds a version's config from this file."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from edge_deploy.artifact.precision import Precision
from edge_deploy.repository.install_record import INSTALL_RECORD, InstallRecord
from edge_deploy.repository.model_config import ConfigOptions
from edge_deploy.repository.pipeline_kind import PipelineKind


def _write(vdir: Path, data: object) -> Path:
    vdir.mkdir(parents=True, exist_ok=True)
    (vdir / INSTALL_RECORD).write_text(json.dumps(data))
    return vdir


def test_what_install_writes_reads_back_equal_with_the_keys_of_before(tmp_path) -> None:
    options = ConfigOptions(max_queue_delay_us=100, instances=2, warmup=True, precision=Precision.FP16)
    record = InstallRecord.new("onnxruntime", "model", options, tmp_path / "art")
    vdir = tmp_path / "lanedet" / "1"
    vdir.mkdir(parents=True)
    (vdir / INSTALL_RECORD).write_bytes(record.to_json())
    assert InstallRecord.read(vdir) == record
    data = json.loads((vdir / INSTALL_RECORD).read_text())
    assert list(data) == ["tool", "installed", "artifact", "role", "runtime", "options"]  # no "pipeline" for a model
    assert data["options"]["fp16"] is True and data["options"]["precision"] == "fp16"  # older readers: the bool
    assert data["tool"]["name"] == "edge-deploy"


def test_a_bls_pipeline_record_and_one_written_before_pipeline_kinds(tmp_path) -> None:
    bls = InstallRecord.new("python", "pipeline", ConfigOptions(), tmp_path, PipelineKind.BLS)
    assert json.loads(bls.to_json())["pipeline"] == "bls" and bls.is_bls_pipeline
    old = InstallRecord.read(_write(tmp_path / "old", {"role": "pipeline", "runtime": "ensemble", "options": {}}))
    assert old is not None and old.pipeline is None and old.kind is PipelineKind.ENSEMBLE
    assert not old.is_bls_pipeline
    assert "pipeline" not in json.loads(old.to_json())  # written back as it was read


def test_options_of_an_earlier_edge_deploy_keep_the_served_file(tmp_path) -> None:
    vdir = _write(tmp_path / "v", {"role": "model", "runtime": "onnxruntime",
                                   "options": {"instances": 3, "fp16": True}})
    record = InstallRecord.read(vdir)
    assert record is not None and record.options.precision is Precision.FP16 and record.options.instances == 3


def test_keys_of_a_newer_edge_deploy_are_kept(tmp_path) -> None:
    vdir = _write(tmp_path / "v", {"role": "model", "runtime": "tensorrt", "options": {}, "signed_by": "ci"})
    record = InstallRecord.read(vdir)
    assert record is not None and record.extra == {"signed_by": "ci"}
    assert json.loads(record.to_json())["signed_by"] == "ci"


@pytest.mark.parametrize("content", ["not json", "[1, 2]", json.dumps({"role": "teapot"}),
                                     json.dumps({"role": "model", "options": [1]})])
def test_a_file_install_did_not_write_is_no_record(tmp_path, content) -> None:
    vdir = tmp_path / "v"
    vdir.mkdir()
    (vdir / INSTALL_RECORD).write_text(content)
    assert InstallRecord.read(vdir) is None
    assert InstallRecord.read(tmp_path / "missing") is None
