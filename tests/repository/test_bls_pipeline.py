"""`install --pipeline bls`: NAME_pipeline as one Python-backend model calling NAME through BLS, on the real
tritonserver (Python backend), through LaneDetClient.

What it must be: indistinguishable from the ensemble for the client (same tensors, same description), the same
lanes as client-side pre/post for both families, fused and FP16 models; one-line errors naming the pipeline, its
version and NAME when NAME is missing or serves other dims; and the version of NAME the server serves, followed
without reloading the pipeline, while a client streams.
"""
from __future__ import annotations

import json
import os
import shutil
import threading
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from small_artifact import make_artifact, make_fused_artifact, make_ufldv2_artifact
from triton_helpers import failed_loads, run_cli

from edge_deploy.client.sync_client import LaneDetClient
from edge_deploy.errors import ClientError, ModelNotReadyError, RepositoryError
from edge_deploy.deploy.install import install
from edge_deploy.deploy.options import InstallOptions
from edge_deploy.artifact.precision import Precision
from edge_deploy.repository.model_config import BLS_INSTANCES
from edge_deploy.deploy.rollback import rollback
from edge_deploy.synthetic.roads import road_scene

KEY_NAME = "edge-deploy-key"
SIZE = (590, 1640)


def frames(*seeds: int) -> list[np.ndarray]:
    return [road_scene(SIZE[1], SIZE[0], seed=s)[0] for s in seeds]


def lanes_of(client: LaneDetClient, frame: np.ndarray) -> list[tuple[bytes, float]]:
    """A frame's lanes as comparable values: points exactly, scores at the pipeline's float32."""
    return [(lane.points.astype(np.float32).tobytes(), float(np.float32(lane.score))) for lane in client.detect(frame)]


def same_lanes(url: str, name: str, images: list[np.ndarray]) -> int:
    """NAME_pipeline's lanes equal client-side pre/post's on NAME, frame by frame; returns the lanes seen."""
    seen = 0
    with LaneDetClient(url, f"{name}_pipeline") as server_side, LaneDetClient(url, name) as client_side:
        assert server_side.model.kind == "pipeline"
        for frame in images:
            want = lanes_of(client_side, frame)
            assert lanes_of(server_side, frame) == want, name
            seen += len(want)
    return seen


@pytest.fixture(scope="module")
def anchors(laneatt_data) -> Path:
    return laneatt_data / "anchors_2784x77.npy"


# ------------------------------------------------------------------ no server: the option, the records, the copies


def test_pipeline_kind_option_records_and_copies(tmp_path, anchors) -> None:
    from edge_deploy.lanedet.laneatt import FAMILY as LANEATT
    from edge_deploy.repository.pipeline_kind import PipelineKind
    from edge_deploy.deploy.server import load_order
    from edge_deploy.repository.triton_models import source
    from edge_deploy.repository.versions import read_config

    art = make_artifact(tmp_path / "a", anchors, n=100)
    repo = tmp_path / "repo"
    with pytest.raises(RepositoryError, match="unknown pipeline 'blss'"):
        install(InstallOptions(art, repo, "lane", runtime="python", pipeline="blss"))
    assert install(InstallOptions(art, repo, "lane", runtime="python", pipeline="bls")).models == ["lane", "lane_pipeline"]
    v1 = repo / "lane_pipeline" / "1"
    # The copies beside model.py are the package's own files (one place, triton_models.model_files, makes them).
    assert (v1 / "model.py").read_bytes() == source("bls_model.py")
    assert (v1 / "pipeline_steps.py").read_bytes() == source("pipeline_steps.py")
    assert (v1 / "decode.py").read_bytes() == LANEATT.decoder_sources()["decode.py"]
    assert json.loads((v1 / "install.json").read_text())["pipeline"] == "bls"
    assert json.loads((v1 / "pipeline.json").read_text())["model"] == "lane"
    bls_config = read_config(repo, "lane_pipeline")
    assert bls_config.backend == "python" and bls_config.parameters["edge_deploy.pipeline"].string_value == "bls"

    # Without --pipeline the kind NAME has is kept; True is the ensemble, as before kinds.
    assert install(InstallOptions(art, repo, "lane", runtime="python")).models == ["lane", "lane_pipeline"]
    assert install(InstallOptions(art, repo, "lane", runtime="python", pipeline=True)).models == [
        "lane", "lane_preprocess", "lane_postprocess", "lane_pipeline"]
    assert read_config(repo, "lane_pipeline").platform == "ensemble"
    # Rollback rebuilds each version's own kind from its install record.
    rollback(repo, "lane", to=2)
    assert read_config(repo, "lane_pipeline").backend == "python"
    assert list(read_config(repo, "lane_pipeline").version_policy.specific.versions) == [2]
    rollback(repo, "lane", to=3)
    assert read_config(repo, "lane_pipeline").platform == "ensemble"

    # The server loads an ensemble alone (it brings its steps), a BLS pipeline after the model it calls.
    assert load_order(["lane", "lane_preprocess", "lane_postprocess", "lane_pipeline"]) == ["lane_pipeline"]
    assert load_order(["lane_pipeline", "lane"]) == ["lane", "lane_pipeline"]
    assert PipelineKind("bls") is PipelineKind.BLS


def test_cli_pipeline_option(tmp_path, anchors) -> None:
    art = make_artifact(tmp_path / "a", anchors, n=100)
    repo = str(tmp_path / "repo")
    base = ("install", "--repository", repo, "--runtime", "python")
    ok = run_cli(tmp_path, *base, "--name", "b", "--pipeline", "bls", str(art))
    assert ok.returncode == 0, ok.stderr
    assert "installed b, b_pipeline version 1" in ok.stdout
    # A bare --pipeline before the artifact still means the ensemble (the artifact is not taken for a kind).
    bare = run_cli(tmp_path, *base, "--name", "e", "--pipeline", str(art))
    assert bare.returncode == 0, bare.stderr
    assert "e_preprocess" in bare.stdout
    after = run_cli(tmp_path, *base, "--name", "e2", str(art), "--pipeline")
    assert after.returncode == 0 and "e2_postprocess" in after.stdout, after.stderr
    none = run_cli(tmp_path, *base, "--name", "b", "--no-pipeline", str(art))
    assert none.returncode == 0 and "installed b version 2" in none.stdout, none.stderr
    both = run_cli(tmp_path, *base, "--name", "x", "--pipeline", "bls", "--no-pipeline", str(art))
    assert both.returncode != 0
    assert both.stderr.strip().count("\n") == 0 and "contradict" in both.stderr and "Traceback" not in both.stderr
    bad = run_cli(tmp_path, *base, "--name", "x", "--pipeline=fast", str(art))
    assert bad.returncode != 0 and "Traceback" not in bad.stderr and "'fast' is not one of" in bad.stderr


# ------------------------------------------------------------------ served: lanes, and the client cannot tell


@pytest.mark.triton
@pytest.mark.slow
def test_bls_lanes_equal_client_side_and_the_ensemble(tmp_path, anchors, start_triton) -> None:
    """LaneATT, UFLDv2, a fused model and FP16 models of both families: BLS lanes equal client-side pre/post's; the
    BLS pipeline's answers and description equal the ensemble's."""
    import tritonclient.grpc as grpcclient

    from edge_deploy.artifact.manifest import Manifest
    from edge_deploy.export.fp16_onnx import make_fp16_onnx

    repo = tmp_path / "repo"
    art = make_artifact(tmp_path / "lat", anchors, n=1000, seed=3)
    install(InstallOptions(art, repo, "lat", runtime="python", pipeline="bls"))
    install(InstallOptions(art, repo, "ens", runtime="python", pipeline="ensemble"))
    install(InstallOptions(make_ufldv2_artifact(tmp_path / "ufl", "tusimple"), repo, "ufl", runtime="python", pipeline="bls"))
    install(InstallOptions(make_fused_artifact(tmp_path / "fus", anchors, seed=3), repo, "fus", runtime="python", pipeline="bls"))

    def half(art: Path) -> Path:
        manifest = Manifest.read(art)
        make_fp16_onnx(art, manifest)  # FP16 weights, FP32 I/O (what a pipeline serves)
        manifest.write(art)
        return art

    for name, art in (("f16", half(make_artifact(tmp_path / "f16", anchors, n=1000, seed=5))),
                      ("u16", half(make_ufldv2_artifact(tmp_path / "u16", "tusimple")))):
        install(InstallOptions(art, repo, name, runtime="python", pipeline="bls", precision=Precision.FP16))
        assert (repo / name / "1" / "model.onnx").read_bytes() == (art / "model_fp16.onnx").read_bytes()
    server = start_triton(repo)

    images = frames(1, 2, 3)
    assert same_lanes(server.url, "lat", images) > 0
    assert same_lanes(server.url, "ufl", images) > 0
    assert same_lanes(server.url, "fus", images[:2]) > 0
    assert same_lanes(server.url, "f16", images) > 0
    assert same_lanes(server.url, "u16", images) > 0

    # The ensemble and the BLS pipeline of the same model: the same tensors, and the same description.
    client = grpcclient.InferenceServerClient(server.url)
    try:
        for frame in images:
            inp = grpcclient.InferInput("FRAME", list(frame.shape), "UINT8")
            inp.set_data_from_numpy(frame)
            ens, bls = client.infer("ens_pipeline", [inp]), client.infer("lat_pipeline", [inp])
            for out in ("LANES", "SCORES", "NUM_POINTS", "NUM_LANES"):
                np.testing.assert_array_equal(bls.as_numpy(out), ens.as_numpy(out))
        meta = [client.get_model_metadata(m, as_json=True) for m in ("ens_pipeline", "lat_pipeline")]
        assert [(m["inputs"], m["outputs"]) for m in meta[:1]] == [(m["inputs"], m["outputs"]) for m in meta[1:]]
    finally:
        client.close()
    with LaneDetClient(server.url, "ens_pipeline") as ens, LaneDetClient(server.url, "lat_pipeline") as bls:
        assert replace(bls.model, name="ens_pipeline") == ens.model
    assert failed_loads(server.log_path) == []


# ------------------------------------------------------------------ served: versions and errors


def explicit_server(tmp_path: Path, repo: Path, start_triton, monkeypatch):
    """An explicit-mode server with a key and the record `install`/`rollback` find it by."""
    from edge_deploy.serve import server_record as control

    monkeypatch.setenv("EDGE_DEPLOY_STATE_DIR", str(tmp_path / "state"))
    key = "bls-key-0123456789"
    (tmp_path / "key").write_text(key)
    server = start_triton(repo, model_control="explicit", restricted_key=(KEY_NAME, key))
    control.save_record(control.ServerRecord(url=server.url, repository=repo, key_header=KEY_NAME,
                                             key_file=tmp_path / "key", scope="user"))
    return server, {f"triton-grpc-protocol-{KEY_NAME}": key}


class Stream(threading.Thread):
    """A client streaming one frame to NAME_pipeline until stopped: every answer's lanes, every error."""

    def __init__(self, url: str, model: str, frame: np.ndarray) -> None:
        super().__init__(daemon=True)
        self.client = LaneDetClient(url, model)
        self.frame = frame
        self.answers: list[list[tuple[bytes, float]]] = []
        self.errors: list[str] = []
        self.halt = threading.Event()

    def run(self) -> None:
        while not self.halt.is_set():
            try:
                self.answers.append(lanes_of(self.client, self.frame))
            except ClientError as exc:
                self.errors.append(str(exc))

    def stop(self) -> None:
        self.halt.set()
        self.join(60)
        self.client.close()


@pytest.mark.triton
@pytest.mark.slow
def test_bls_follows_the_served_version_while_a_client_streams(tmp_path, anchors, start_triton, monkeypatch) -> None:
    from edge_deploy.serve import admin

    repo = tmp_path / "repo"
    first, second = (make_artifact(tmp_path / f"v{s}", anchors, n=1000, seed=s) for s in (3, 4))
    install(InstallOptions(first, repo, "lane", runtime="python", pipeline="bls"))
    server, _ = explicit_server(tmp_path, repo, start_triton, monkeypatch)
    frame = frames(2)[0]
    with LaneDetClient(server.url, "lane") as raw:
        old = lanes_of(raw, frame)
        stream = Stream(server.url, "lane_pipeline", frame)
        stream.start()
        try:
            result = install(InstallOptions(second, repo, "lane", runtime="python"))  # the kind installed: bls
            assert result.served == {"lane": [2], "lane_pipeline": [1]}, "the unchanged pipeline was reloaded"
            new = lanes_of(raw, frame)
            assert new != old, "the two versions give the same lanes: the test could not see the change"
            count = len(stream.answers)
            stubs = stub_pids("lane_pipeline", server.proc.pid)
            assert len(stubs) == BLS_INSTANCES
            result = rollback(repo, "lane", to=1)
            assert lanes_of(raw, frame) == old
            assert admin.served_versions(server.url, "lane_pipeline") == [1]
            # Not reloaded: a load starts new stubs for its instances (and ends the old ones).
            assert stub_pids("lane_pipeline", server.proc.pid) == stubs, "rollback reloaded the unchanged BLS pipeline"
            assert result.served == {"lane": [1], "lane_pipeline": [1]}
            after_rollback = len(stream.answers)
            while len(stream.answers) < after_rollback + 3 and stream.is_alive():
                stream.halt.wait(0.05)
        finally:
            stream.stop()
    assert stream.errors == []
    answers = stream.answers
    assert answers[0] == old and new in answers[:after_rollback] and answers[-1] == old
    assert answers.index(new) <= count  # the pipeline answered with version 2 once install returned
    assert failed_loads(server.log_path) == []


def stubs_of(model: str, server: int) -> dict[int, list[bytes]]:
    """The Python-backend stubs that run `model` (of the tritonserver with pid `server`): pid -> argv."""
    stubs = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            parent = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        if (len(argv) > 2 and argv[0].endswith(b"triton_python_backend_stub") and f"/{model}/".encode() in argv[1]
                and parent == server):  # not another test's server (pytest-xdist runs two at a time)
            stubs[int(pid)] = argv
    return stubs


def stub_pids(model: str, server: int) -> set[int]:
    return set(stubs_of(model, server))


def stub_shm_sizes(model: str, server: int) -> list[int]:
    """Sizes of the shared memory regions of the Python-backend stubs that run `model` (of the server with pid
    `server`)."""
    sizes = []
    for argv in stubs_of(model, server).values():
        try:
            sizes.append(os.stat(f"/dev/shm/{argv[2].decode()}").st_size)
        except FileNotFoundError:  # a stub on its way out
            continue
    return sizes


@pytest.mark.triton
@pytest.mark.slow
def test_bls_errors_name_the_pipeline_and_model_in_one_line(tmp_path, anchors, start_triton, monkeypatch) -> None:
    import tritonclient.grpc as grpcclient

    repo = tmp_path / "repo"
    install(InstallOptions(make_artifact(tmp_path / "v1", anchors, n=1000, seed=3), repo, "lane", runtime="python", pipeline="bls"))
    server, headers = explicit_server(tmp_path, repo, start_triton, monkeypatch)
    frame = frames(2)[0]
    client = LaneDetClient(server.url, "lane_pipeline")

    def refused() -> str:
        with pytest.raises(ClientError) as info:
            client.detect(frame)
        message = str(info.value)
        assert "\n" not in message and "lane_pipeline version 1" in message and "retried" not in message, message
        assert not isinstance(info.value, ModelNotReadyError), message  # the pipeline is ready: no retrying
        return message

    try:
        good = client.detect(frame)
        assert good, "no lanes: the comparisons below would be vacuous"
        # A version with other output dims (the pipeline is not reinstalled with it: --no-pipeline).
        install(InstallOptions(make_artifact(tmp_path / "v2", anchors, n=500, seed=3), repo, "lane", runtime="python", pipeline=False))
        message = refused()
        assert "lane returns predict_lanes [500, 77] per frame, not the [1000, 77]" in message
        # A version with other input dims.
        install(InstallOptions(make_artifact(tmp_path / "v3", anchors, n=1000, seed=3, hw=(320, 640)), repo, "lane", runtime="python", pipeline=False))
        message = refused()
        assert "sends input [-1, 3, 360, 640], which the version of lane served now does not take" in message
        # Rolled back: the pipeline serves again.
        rollback(repo, "lane", to=1)
        assert [lane.points.tolist() for lane in client.detect(frame)] == [lane.points.tolist() for lane in good]
        for _ in range(20):  # the stub's shared memory grows to what a frame needs, once
            client.detect(frame)
        shm = stub_shm_sizes("lane_pipeline", server.proc.pid)
        for _ in range(50):  # the stubs the pinned config replaced may still be exiting
            if len(shm) == BLS_INSTANCES:
                break
            time.sleep(0.1)
            shm = stub_shm_sizes("lane_pipeline", server.proc.pid)
        assert len(shm) == BLS_INSTANCES
        # The model it calls is not loaded at all.
        admin = grpcclient.InferenceServerClient(server.url)
        try:
            admin.unload_model("lane", headers=headers)
            for _ in range(100):  # failures and answers leave the stubs' shared memory where it was
                message = refused()
            assert "calls lane, which this server does not serve now" in message
            admin.load_model("lane", headers=headers)
        finally:
            admin.close()
        for _ in range(200):
            assert len(client.detect(frame)) == len(good)
        after = stub_shm_sizes("lane_pipeline", server.proc.pid)
        # A stub's pool may grow once more by about a request's size (fragmentation); a response kept per request
        # (1000 x 77 floats: 0.3 MB) would add 60 MB over these 200 answers.
        request_bytes = frame.nbytes + 3 * 360 * 640 * 4
        assert len(after) == len(shm) and sum(after) - sum(shm) < 2 * request_bytes, (shm, after)
    finally:
        client.close()
    shutil.rmtree(tmp_path / "v2", ignore_errors=True)


# The lane model's model.py (the ONNX Runtime runner), made to stall or fail while a file exists.
MISBEHAVING = """

import os as _os
import time as _time

_execute = TritonPythonModel.execute


def _misbehaving(self, requests):
    _until = _time.monotonic() + 60
    while _os.path.exists({stall!r}) and _time.monotonic() < _until:  # stalled until the test removes the file
        _time.sleep(0.05)
    if _os.path.exists({fail!r}):
        raise RuntimeError("the lane model's weights went bad")
    return _execute(self, requests)


TritonPythonModel.execute = _misbehaving
"""


@pytest.mark.triton
@pytest.mark.slow
def test_bls_call_that_stalls_or_fails_answers_in_one_line(tmp_path, anchors, start_triton) -> None:
    """A lane model that stalls: the client gets the pipeline's one-line error after call_timeout_s (pipeline.json),
    not when the model answers, and the pipeline serves once the model does. One that fails: the one-line error."""
    from edge_deploy.repository.model_config import BLS_CALL_THREADS, BLS_CALL_TIMEOUT_S

    repo = tmp_path / "repo"
    install(InstallOptions(make_artifact(tmp_path / "v1", anchors, n=1000, seed=3), repo, "lane", runtime="python", pipeline="bls"))
    spec_path = repo / "lane_pipeline" / "1" / "pipeline.json"
    spec = json.loads(spec_path.read_text())
    assert spec["call_timeout_s"] == BLS_CALL_TIMEOUT_S == 5.0  # the default docs/pipelines.md states
    assert spec["call_threads"] == BLS_CALL_THREADS == 4
    # Set in pipeline.json, as a user would: a 1 s timeout, and 2 calls per instance (each of the
    # BLS_INSTANCES * call_threads calls that fill the instances waits out the timeout; the limit is the
    # same mechanism at 2 as at 4, and the stub's refusal below names the number it read from the file).
    timeout, call_threads = 1.0, 2
    spec_path.write_text(json.dumps({**spec, "call_timeout_s": timeout, "call_threads": call_threads}))
    stall, fail = tmp_path / "stall", tmp_path / "fail"
    runner = repo / "lane" / "1" / "model.py"
    runner.write_text(runner.read_text() + MISBEHAVING.format(stall=str(stall), fail=str(fail)))
    server = start_triton(repo)
    frame = frames(2)[0]

    with LaneDetClient(server.url, "lane_pipeline") as client:
        def refused() -> tuple[str, float]:
            started = time.monotonic()
            with pytest.raises(ClientError) as info:
                client.detect(frame)
            message = str(info.value)
            assert "\n" not in message and "lane_pipeline version 1: " in message, message
            assert not isinstance(info.value, ModelNotReadyError) and "retried" not in message, message
            return message, time.monotonic() - started

        good = lanes_of(client, frame)
        assert good, "no lanes: the comparisons below would be vacuous"

        stall.touch()
        message, took = refused()
        # not when the model answers: it stalls until the file goes (60 s at most)
        assert 0.9 * timeout <= took < 20, f"answered after {took:.1f} s"
        assert f"lane did not answer within {timeout:g} s (call_timeout_s in lane_pipeline/1/pipeline.json)" in message
        assert "edge-deploy rollback lane" in message
        # While the model stays stalled, each instance holds at most call_threads unanswered calls (and their
        # tensors); past that a frame is refused at once instead of queueing in the stub's memory.
        for _ in range(2 * BLS_INSTANCES * call_threads):
            message, took = refused()
            if "still unanswered" in message:
                break
            assert "did not answer within" in message, message
        assert f"{call_threads} earlier calls to lane are still unanswered" in message, message
        assert took < 0.9 * timeout, f"refused after {took:.1f} s, not at once"
        stall.unlink()
        # The pipeline serves again once the lane model answers (meanwhile its calls queue behind the stalled one).
        deadline = time.monotonic() + 30
        while True:
            try:
                assert lanes_of(client, frame) == good
                break
            except ClientError as exc:
                assert ("did not answer within" in str(exc) or "still unanswered" in str(exc)) \
                    and time.monotonic() < deadline, str(exc)

        fail.touch()
        message, _ = refused()
        assert "lane_pipeline version 1: the call to lane failed: " in message and "weights went bad" in message
        fail.unlink()
        assert lanes_of(client, frame) == good
