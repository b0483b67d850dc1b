"""`serve` and a stack of plans that does not fit the board's memory together (serve/memory_fit.py).

The plans are sparse files of the sizes a real stack has (TensorRT cannot run here; the size is what is counted),
each version with a manifest whose plan record says the execution context's device memory, as convert records it
on the device. The boards are the fake Jetson roots of tests/data/jetson_root (their /proc/meminfo): a double for
the Orin's /proc, which cannot exist here.
"""
from __future__ import annotations

from pathlib import Path

import pytest

import cli_process
from triton_helpers import cli_env

from edge_deploy.errors import ServerError
from edge_deploy.machine.facts import device_facts
from edge_deploy.serve.memory_fit import RESERVE_BYTES, check_stack_fits, served_plans

ROOTS = Path(__file__).resolve().parents[1] / "data" / "jetson_root"
MiB = 2**20


def add_plan_model(repo: Path, name: str, plan_mib: int, device_mib: int | None, instances: int,
                   versions: tuple[int, ...] = (1,)) -> None:
    from tritonclient.grpc import model_config_pb2 as pb
    from google.protobuf import text_format

    config = pb.ModelConfig(name=name, platform="tensorrt_plan", max_batch_size=1,
                            default_model_filename="model.plan")
    config.instance_group.add(count=instances, kind=pb.ModelInstanceGroup.KIND_GPU)
    config.version_policy.latest.num_versions = 1
    (repo / name).mkdir(parents=True)
    (repo / name / "config.pbtxt").write_text(text_format.MessageToString(config))
    for version in versions:
        directory = repo / name / str(version)
        directory.mkdir()
        with open(directory / "model.plan", "wb") as fh:
            fh.truncate(plan_mib * MiB)  # sparse: the size counts, not the bytes
        verify = {"status": "passed", "io": "ok"}
        if device_mib is not None:
            verify["device_memory_bytes"] = device_mib * MiB
        _write_manifest(directory, verify)


def _write_manifest(directory: Path, verify: dict) -> None:
    from edge_deploy.artifact.manifest import IOSignature, Manifest, PlanRecord
    from edge_deploy.lanedet.decode_params import ScoreNmsDecodeParams
    from edge_deploy.lanedet.preprocess import PreprocessSpec
    from edge_deploy.artifact.records import PlanVerify

    manifest = Manifest(io=IOSignature.from_dict({"inputs": [], "outputs": [], "batch": {"min": 1, "opt": 1,
                                                                                          "max": 1, "dynamic": False}}),
                        preprocess=PreprocessSpec(), decode=ScoreNmsDecodeParams(0.5, 50.0, 4),
                        plan=PlanRecord(tensorrt="10.3.0", verify=PlanVerify.from_dict(verify, "plan.verify")))
    manifest.write(directory)


@pytest.fixture
def stack_repo(tmp_path: Path) -> Path:
    """A lane model (300 MiB plan, 2 instances of 100 MiB) and a detector (900 MiB, 1 instance of 400 MiB): 1.8 GiB."""
    repo = tmp_path / "repo"
    add_plan_model(repo, "a_lanedet", 300, 100, 2)
    add_plan_model(repo, "b_objects", 900, 400, 1, versions=(1, 2))  # latest 1: only version 2 counts
    return repo


def test_the_plans_a_config_selects_are_counted_with_their_instances(stack_repo):
    plans = served_plans(stack_repo)
    assert [(p.model, p.version, p.need_bytes // MiB) for p in plans] == [("a_lanedet", 1, 500), ("b_objects", 2, 1300)]


def test_a_stack_that_does_not_fit_an_orin_nano_is_refused_naming_the_model(stack_repo):
    facts = device_facts(ROOTS / "orin_nano_jp62", probe_gpu=False)
    assert facts.is_jetson and facts.mem_available - RESERVE_BYTES < 1800 * MiB
    with pytest.raises(ServerError) as caught:
        check_stack_fits(stack_repo, facts)
    message = str(caught.value)
    assert message.startswith("b_objects version 2: plan 900 MiB + 1 x 400 MiB device memory does not fit beside "
                              "a_lanedet") and "\n" not in message


def test_the_same_stack_fits_an_agx_orin(stack_repo):
    assert len(check_stack_fits(stack_repo, device_facts(ROOTS / "agx_orin_jp60", probe_gpu=False))) == 2


def test_off_a_jetson_it_only_warns(stack_repo):
    facts = device_facts(ROOTS / "x86_desktop", probe_gpu=False)
    warnings: list[str] = []
    facts.mem_available = 1500 * MiB + RESERVE_BYTES  # 1.5 GiB for plans: the detector does not fit
    check_stack_fits(stack_repo, facts, warnings.append)
    assert len(warnings) == 1 and "b_objects" in warnings[0] and "only a warning" in warnings[0]


def test_serve_refuses_the_stack_in_one_line_and_starts_nothing(stack_repo, tmp_path):
    """The CLI on the fake Orin Nano root: one line, a non-zero exit, no server record written."""
    env = {**cli_env(tmp_path), "EDGE_DEPLOY_ROOT": str(ROOTS / "orin_nano_jp62")}
    done = cli_process.run_cli(["serve", "--foreground", "--repository", str(stack_repo), "--grpc-port", "65001"], env=env,
                               timeout=120)
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]  # after "using tritonserver ..."
    assert done.returncode != 0 and len(errors) == 1 and "does not fit beside a_lanedet" in errors[0], done.stderr
    assert "Traceback" not in done.stderr
    assert not list((tmp_path / "state").glob("**/*.json"))
