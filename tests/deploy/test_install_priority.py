"""`install --priority high|normal|low` and `--threads N`: what they write into the lane model's config.pbtxt, that
rollback rebuilds them from the install record, that bad values write nothing, and that `models` / `status` show a
model's priority, instances and placement read back from its config."""
from __future__ import annotations

import copy
import json
import subprocess
from pathlib import Path

import pytest
from small_artifact import LANEATT_DECODE, LANEATT_PREPROCESS, make_artifact
from triton_helpers import run_cli

from edge_deploy.artifact.manifest import Manifest
from edge_deploy.cli.serve import _print_models, scheduling_line
from edge_deploy.deploy.install import install
from edge_deploy.deploy.models import list_models
from edge_deploy.deploy.options import InstallOptions
from edge_deploy.deploy.rollback import rollback
from edge_deploy.errors import RepositoryError
from edge_deploy.repository import model_config as mc
from edge_deploy.repository.model_config import Priority
from edge_deploy.serve.admin import ModelHealth
from edge_deploy.core.triton_layout import config_pb2, parse_config, read_config, versions

ORT_PARAMS = ("intra_op_thread_count", "inter_op_thread_count")


@pytest.fixture(scope="module")
def artifact(tmp_path_factory, laneatt_data) -> Path:
    return make_artifact(tmp_path_factory.mktemp("art") / "a", laneatt_data / "anchors_2784x77.npy", n=50)


@pytest.fixture(autouse=True)
def _no_server_records(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("EDGE_DEPLOY_STATE_DIR", str(tmp_path / "state"))


def written(repo: Path, model: str = "lane"):  # noqa: ANN201 - a ModelConfig
    """The model's config.pbtxt as written, parsed with text_format into a ModelConfig."""
    return parse_config((repo / model / "config.pbtxt").read_text())


def manifest(dynamic: bool = True, **sections) -> Manifest:
    lead = -1 if dynamic else 1
    return Manifest.from_dict({
        "format": 1,
        "io": {"inputs": [{"name": "input", "datatype": "FP32", "shape": [lead, 3, 360, 640]}],
               "outputs": [{"name": "predict_lanes", "datatype": "FP32", "shape": [lead, 1000, 77]}],
               "batch": {"min": 1, "opt": 2, "max": 8 if dynamic else 1, "dynamic": dynamic}},
        "preprocess": copy.deepcopy(LANEATT_PREPROCESS),
        "decode": dict(LANEATT_DECODE),
        **sections,
    })


@pytest.mark.parametrize("priority, name, level", [
    (None, "PRIORITY_DEFAULT", 2),  # the default is normal
    ("high", "PRIORITY_MAX", 1),
    ("normal", "PRIORITY_DEFAULT", 2),
    ("low", "PRIORITY_MIN", 3),
])
def test_priority_is_written_as_optimization_priority_and_batching_levels(
        tmp_path, artifact, priority, name, level) -> None:
    pb = config_pb2()
    extra = {} if priority is None else {"priority": priority}
    install(InstallOptions(artifact, tmp_path / "repo", "lane", runtime="python", pipeline=True, **extra))
    config = written(tmp_path / "repo")
    assert config.optimization.priority == pb.ModelOptimizationPolicy.ModelPriority.Value(name)
    assert config.dynamic_batching.priority_levels == 3
    assert config.dynamic_batching.default_priority_level == level
    record = json.loads((tmp_path / "repo" / "lane" / "1" / "install.json").read_text())
    assert record["options"]["priority"] == (priority or "normal")
    # only the model's own config: the pipeline models keep Triton's defaults
    for other in ("lane_preprocess", "lane_postprocess", "lane_pipeline"):
        config = written(tmp_path / "repo", other)
        assert not config.HasField("optimization") and not config.dynamic_batching.priority_levels, other


def test_a_fixed_batch_model_gets_the_priority_without_batching_levels() -> None:
    pb = config_pb2()
    config = mc.model_config(manifest(dynamic=False), name="lane", runtime="tensorrt",
                             options=mc.ConfigOptions(priority=Priority.HIGH))
    parsed = parse_config(mc.config_text(config))
    assert parsed.optimization.priority == pb.ModelOptimizationPolicy.PRIORITY_MAX
    assert not parsed.HasField("dynamic_batching")
    # normal prints no optimization section at all: the config as before --priority
    normal = mc.config_text(mc.model_config(manifest(dynamic=False), name="lane", runtime="tensorrt"))
    assert "optimization" not in normal and "priority" not in normal


def test_threads_are_written_for_each_onnx_runtime(tmp_path, artifact) -> None:
    repo = tmp_path / "repo"
    install(InstallOptions(artifact, repo, "lane", runtime="onnxruntime", threads=3, pipeline=True))
    params = written(repo).parameters
    assert {k: params[k].string_value for k in ORT_PARAMS} == {"intra_op_thread_count": "3",
                                                              "inter_op_thread_count": "3"}
    assert mc.PARAM_ORT_THREADS not in params
    for other in ("lane_preprocess", "lane_postprocess", "lane_pipeline"):
        assert not set(written(repo, other).parameters) & {*ORT_PARAMS, mc.PARAM_ORT_THREADS}, other

    install(InstallOptions(artifact, repo, "lane", runtime="python", threads=5))
    params = written(repo).parameters
    assert params[mc.PARAM_ORT_THREADS].string_value == "5" and not set(params) & set(ORT_PARAMS)

    install(InstallOptions(artifact, repo, "lane", runtime="python"))  # not set: ONNX Runtime's default
    assert not set(written(repo).parameters) & {*ORT_PARAMS, mc.PARAM_ORT_THREADS}


def test_threads_are_refused_for_a_tensorrt_plan_in_one_line() -> None:
    with pytest.raises(RepositoryError, match=r"--threads 4 .*TensorRT plan.*install without --threads") as caught:
        mc.model_config(manifest(), name="lane", runtime="tensorrt", options=mc.ConfigOptions(threads=4))
    assert "\n" not in str(caught.value)


def test_rollback_rebuilds_the_versions_priority_and_threads(tmp_path, artifact) -> None:
    repo = tmp_path / "repo"
    install(InstallOptions(artifact, repo, "lane", runtime="python", priority="high", threads=4, instances=2))
    install(InstallOptions(artifact, repo, "lane", runtime="onnxruntime", priority=Priority.LOW))
    assert written(repo).optimization.priority == config_pb2().ModelOptimizationPolicy.PRIORITY_MIN

    rollback(repo, "lane", 1)
    config = written(repo)
    assert list(config.version_policy.specific.versions) == [1]
    assert config.optimization.priority == config_pb2().ModelOptimizationPolicy.PRIORITY_MAX
    assert config.dynamic_batching.default_priority_level == 1
    assert config.parameters[mc.PARAM_ORT_THREADS].string_value == "4"
    assert config.instance_group[0].count == 2


def test_install_records_written_before_priority_and_threads_still_read() -> None:
    old = {"max_queue_delay_us": None, "instances": 1, "warmup": False, "precision": "fp32", "fp16": False}
    options = mc.ConfigOptions.from_dict(old)
    assert options.priority is Priority.NORMAL and options.threads is None
    new = mc.ConfigOptions(priority=Priority.LOW, threads=8)
    assert mc.ConfigOptions.from_dict(new.to_dict()) == new


@pytest.mark.parametrize("args, needle", [
    (("--priority", "urgent"), "--priority"),
    (("--threads", "0"), "in [1, 64], not 0"),
    (("--threads", "-1"), "in [1, 64], not -1"),
    (("--threads", "100000"), "in [1, 64], not 100000"),
])
def test_bad_priority_or_threads_is_one_line_and_writes_nothing(tmp_path, artifact, args, needle) -> None:
    repo = tmp_path / "repo"
    install(InstallOptions(artifact, repo, "lane", runtime="python"))
    before = sorted(p.name for p in (repo / "lane").iterdir())
    proc = run_cli(tmp_path, "install", str(artifact), "--repository", str(repo), "--name", "lane",
                   "--runtime", "python", *args)
    assert proc.returncode != 0
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and needle in lines[0], proc.stderr
    assert sorted(p.name for p in (repo / "lane").iterdir()) == before and versions(repo, "lane") == [1]


def test_the_cli_writes_priority_and_threads(tmp_path, artifact) -> None:
    repo = tmp_path / "repo"
    proc = run_cli(tmp_path, "install", str(artifact), "--repository", str(repo), "--name", "lane",
                   "--runtime", "onnxruntime", "--priority", "HIGH", "--threads", "2", "--instances", "2")
    assert proc.returncode == 0, proc.stderr
    config = written(repo)
    assert config.optimization.priority == config_pb2().ModelOptimizationPolicy.PRIORITY_MAX
    assert config.parameters["intra_op_thread_count"].string_value == "2"
    assert config.instance_group[0].count == 2


def _models(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    proc = run_cli(tmp_path, "models", "--repository", str(tmp_path / "repo"), *args)
    assert proc.returncode == 0, proc.stderr
    return proc


def test_models_shows_priority_instances_and_placement(tmp_path, artifact) -> None:
    repo = tmp_path / "repo"
    install(InstallOptions(artifact, repo, "lane", runtime="python", priority="high", instances=2, pipeline=True))
    infos = {i.name: i for i in list_models(repo)}
    assert (infos["lane"].priority, infos["lane"].instances, infos["lane"].placement) == ("high", 2, "CPU")
    assert (infos["lane_preprocess"].priority, infos["lane_preprocess"].instances) == ("normal", 1)
    assert infos["lane_pipeline"].instances is None  # an ensemble has no instances of its own

    shown = json.loads(_models(tmp_path, "--json").stdout)
    lane = next(m for m in shown if m["name"] == "lane")
    assert (lane["priority"], lane["instances"], lane["placement"]) == ("high", 2, "CPU")

    lines = _models(tmp_path).stdout.splitlines()
    head = next(i for i, line in enumerate(lines) if "placement" in line)
    serving = lines[head: head + 6]  # the header, its rule, one row per model (an ensemble's: "-")
    rows = [line.split() for line in serving[2:]]
    assert serving[0].split() == ["model", "role", "priority", "instances", "placement"], "\n".join(lines)
    assert rows == [["lane", "model", "high", "2", "CPU"], ["lane_pipeline", "pipeline", "-", "-", "-"],
                    ["lane_postprocess", "postprocess", "normal", "1", "CPU"],
                    ["lane_preprocess", "preprocess", "normal", "1", "CPU"]], "\n".join(lines)
    assert all(len(line) <= 80 for line in serving), "\n".join(serving)


def test_scheduling_reads_dla_gpu_and_auto_placement() -> None:
    dla = manifest(plan={"dla_core": 1, "precision": "fp16"})
    config = mc.model_config(dla, name="lane", runtime="tensorrt",
                             options=mc.ConfigOptions(priority=Priority.HIGH, instances=2))
    assert mc.scheduling(parse_config(mc.config_text(config))) == mc.Scheduling("high", 2, "DLA core 1")
    gpu = mc.model_config(manifest(), name="lane", runtime="tensorrt", options=mc.ConfigOptions(priority=Priority.LOW))
    assert mc.scheduling(gpu) == mc.Scheduling("low", 1, "GPU")
    assert mc.scheduling(mc.model_config(manifest(), name="lane", runtime="onnxruntime")) == \
        mc.Scheduling("normal", 1, "auto")


def test_status_shows_each_models_priority_instances_and_placement(tmp_path, artifact, capsys) -> None:
    repo = tmp_path / "repo"
    install(InstallOptions(artifact, repo, "lane", runtime="python", priority="low", instances=3, pipeline=True))
    assert scheduling_line(repo, "lane") == "priority low, 3 instances on CPU"
    assert scheduling_line(repo, "lane_pipeline") is None  # an ensemble
    assert scheduling_line(repo, "nothing") is None and scheduling_line(None, "lane") is None

    _print_models([ModelHealth("lane", True, ["1"]), ModelHealth("lane_pipeline", True, ["1"])], repo, scheduling=True)
    out = capsys.readouterr().out.splitlines()
    assert out == ["  lane: ready, versions served: 1", "    priority low, 3 instances on CPU",
                   "  lane_pipeline: ready, versions served: 1"]
    assert all(len(line) <= 80 for line in out)
