"""LaneDetClient against the real bundled tritonserver (nvidia-pytriton), models installed by `install`.

Two lane models are served, each raw (pre/post on the client) and as
NAME_pipeline (pre/post on the server):

- ``lanedet``: LaneATT-R18 with the CULane top-1000 anchors, converted by the real
  `convert` from the checkpoint of tests/conftest.py's `laneatt_checkpoint` (biased so
  that real lanes come out and the comparisons below are not vacuous).
- ``tiny``: tests/support/small_artifact.py, LaneATT's I/O with negligible compute, for the
  tests that only exercise the transport (restart, concurrency, shared memory, batching);
  ``tiny_fixed3`` is the same weights with a fixed batch of 3 (max_batch_size 0).
"""
from __future__ import annotations

import asyncio
import os
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from needs import torch_or_skip
from edge_deploy.artifact.manifest import Manifest
from manifest_files import manifest_json, write_manifest_json
from conftest import free_port

from edge_deploy.client.async_client import AsyncLaneDetClient
from edge_deploy.client.shm import NAME_PREFIX, leftover_regions
from edge_deploy.client.sync_client import LaneDetClient
from edge_deploy.errors import ModelChangedError, ModelMismatchError, ModelNotReadyError
from edge_deploy.lanedet.laneatt.decode import decode_lanes
from edge_deploy.synthetic.roads import road_scene

pytestmark = pytest.mark.triton

SIZE = (590, 1640)


def frames(*seeds: int) -> list[np.ndarray]:
    return [road_scene(SIZE[1], SIZE[0], seed=s)[0] for s in seeds]


def same_lanes(a, b, *, atol: float = 0.0, score_tol: float = 1e-6) -> bool:
    """Same number of lanes, same point counts, points within atol px, scores within score_tol."""
    return len(a) == len(b) and all(
        x.points.shape == y.points.shape
        and np.allclose(x.points, y.points, atol=atol, rtol=0)
        and abs(x.score - y.score) <= score_tol
        for x, y in zip(a, b)
    )


def our_shm() -> list[str]:
    return leftover_regions(os.getpid())


# --- fixtures ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def laneatt(laneatt_artifact, laneatt_checkpoint):
    """(artifact dir, checkpoint) of the LaneATT-R18 top-1000 model described in the module docstring."""
    return laneatt_artifact, laneatt_checkpoint


@pytest.fixture(scope="module")
def tiny_artifact(tmp_path_factory, laneatt_data):
    from small_artifact import make_artifact

    return make_artifact(tmp_path_factory.mktemp("tiny") / "artifact", laneatt_data / "anchors_2784x77.npy")


@pytest.fixture(scope="module")
def tiny_fixed3_artifact(tmp_path_factory, laneatt_data):
    """`tiny`'s weights with a fixed batch of 3: every request carries exactly 3 frames."""
    from small_artifact import make_artifact

    return make_artifact(tmp_path_factory.mktemp("tiny_fixed3") / "artifact", laneatt_data / "anchors_2784x77.npy",
                         dynamic=False, fixed_batch=3)


def with_fp16_input(src: Path, out: Path, output: bool = False) -> Path:
    """A copy of artifact `src` whose model takes FP16 input (a Cast to float32 in front), as a model converted for
    FP16 input; with `output`, its output is FP16 too (a Cast at the end)."""
    import shutil

    import onnx
    from onnx import TensorProto, helper

    from edge_deploy.artifact.manifest import file_entry

    shutil.copytree(src, out)
    model = onnx.load(str(out / "model.onnx"))
    graph = model.graph
    for node in graph.node:
        node.input[:] = ["input_fp32" if name == "input" else name for name in node.input]
    graph.node.insert(0, helper.make_node("Cast", ["input"], ["input_fp32"], to=TensorProto.FLOAT))
    graph.input[0].type.tensor_type.elem_type = TensorProto.FLOAT16
    if output:
        name = graph.output[0].name
        for node in graph.node:
            node.output[:] = [f"{name}_fp32" if o == name else o for o in node.output]
        graph.node.append(helper.make_node("Cast", [f"{name}_fp32"], [name], to=TensorProto.FLOAT16))
        graph.output[0].type.tensor_type.elem_type = TensorProto.FLOAT16
    onnx.checker.check_model(model)
    onnx.save(model, str(out / "model.onnx"))
    manifest = manifest_json(out)
    manifest["io"]["inputs"][0]["datatype"] = "FP16"
    if output:
        manifest["io"]["outputs"][0]["datatype"] = "FP16"
    manifest["files"]["model.onnx"] = file_entry(out / "model.onnx").to_dict()
    write_manifest_json(out, manifest)
    return out


@pytest.fixture(scope="module")
def laneatt16io(tmp_path_factory, laneatt):
    """The LaneATT artifact with model_fp16.onnx remade with FP16 inputs/outputs (`convert --fp16-io`)."""
    import shutil


    from edge_deploy.export.fp16_onnx import make_fp16_onnx

    out = tmp_path_factory.mktemp("laneatt16io") / "artifact"
    shutil.copytree(laneatt[0], out)
    manifest = Manifest.read(out)
    make_fp16_onnx(out, manifest, fp16_io=True)
    manifest.write(out)
    return out


@pytest.fixture(scope="module")
def tiny16_artifact(tmp_path_factory, tiny_artifact):
    """The tiny model with an FP16 input."""
    return with_fp16_input(tiny_artifact, tmp_path_factory.mktemp("tiny16") / "artifact")


def _serve(repo: Path, log: Path):
    from edge_deploy.serve.argv import ServerOptions
    from edge_deploy.serve.discovery import find_tritonserver
    from edge_deploy.serve.process import TritonProcess

    options = ServerOptions(model_repository=repo, grpc_port=free_port())
    proc = TritonProcess(find_tritonserver(cache_dir=log.parent / "cache"), options, log)
    proc.start()
    try:
        proc.wait_ready(120)
    except Exception:
        proc.stop(timeout=15)
        raise
    return proc


@pytest.fixture(scope="module")
def server(tmp_path_factory, laneatt, laneatt16io, tiny_artifact, tiny16_artifact, tiny_fixed3_artifact):
    """One tritonserver for the module: lanedet(+_pipeline), its model_fp16.onnx with FP32 I/O (lanedet16)
    and with FP16 I/O (lanedet16io), tiny(+_pipeline), tiny16 and tiny_fixed3."""
    from edge_deploy.deploy.install import install
    from edge_deploy.deploy.options import InstallOptions
    from edge_deploy.artifact.precision import Precision

    work = tmp_path_factory.mktemp("served")
    repo = work / "repo"
    # --no-fp16: these tests compare with the FP32 torch model (the FP16 model is lanedet16).
    install(InstallOptions(laneatt[0], repo, "lanedet", runtime="python", pipeline=True, precision=Precision.FP32))
    install(InstallOptions(laneatt[0], repo, "lanedet16", runtime="python", precision=Precision.FP16))
    install(InstallOptions(laneatt16io, repo, "lanedet16io", runtime="python", precision=Precision.FP16))
    install(InstallOptions(tiny_artifact, repo, "tiny", runtime="python", pipeline=True))
    install(InstallOptions(tiny16_artifact, repo, "tiny16", runtime="python"))
    install(InstallOptions(tiny_fixed3_artifact, repo, "tiny_fixed3", runtime="python"))
    proc = _serve(repo, work / "triton.log")
    yield proc
    proc.stop(timeout=15)


# --- results --------------------------------------------------------------------------------------


def test_served_lanes_equal_torch_model_plus_local_decode(server, laneatt, laneatt_data):
    torch = torch_or_skip()
    from edge_deploy.lanedet.laneatt.model import build_laneatt
    from edge_deploy.lanedet.preprocess import Preprocessor

    model = build_laneatt("resnet18", checkpoint=laneatt[1], anchors_freq=laneatt_data / "culane_anchors_freq.pt",
                          topk_anchors=1000)
    pre = Preprocessor()
    with LaneDetClient(server.url, "lanedet") as client:
        assert client.transport == "shm" and client.model.kind == "raw" and client.model.num_rows == 1000
        for frame in frames(0, 1, 2):
            served = client.detect(frame)
            with torch.no_grad():
                raw = model(torch.from_numpy(pre(frame).copy())).numpy()[0]
            local = decode_lanes(raw, conf_threshold=0.5, nms_threshold=50.0, top_k=4, image_size=frame.shape[:2])
            assert len(served) > 0
            # ONNX Runtime vs torch differ by ~1e-4 in the raw output: a few 1e-3 px after scaling.
            assert same_lanes(served, local, atol=0.05, score_tol=1e-4), (served, local)


@pytest.mark.parametrize(("name", "datatype"), [("lanedet16", "FP32"), ("lanedet16io", "FP16")])
def test_served_fp16_onnx_gives_the_fp32_models_lanes(server, laneatt, name, datatype):
    # model_fp16.onnx in the Python-backend ONNX Runtime runner of the bundled server, through LaneDetClient.

    from edge_deploy.export.parity import lane_dx

    assert manifest_json(laneatt[0])["fp16"]["onnx"]["verify"]["passed"]  # convert made and verified it
    dxs = []
    with LaneDetClient(server.url, "lanedet") as fp32, LaneDetClient(server.url, name) as client:
        assert (client.model.input_datatype, client.model.output_datatype) == (datatype, datatype)
        for frame in frames(0, 1, 2):
            want, got = fp32.detect(frame), client.detect(frame)
            assert len(got) == len(want) > 0
            dxs += lane_dx(want, got)
    # The test checkpoint's lanes are weak: several rows score within FP16's step (~5e-4) of each other, so
    # FP16 output rounding can make NMS keep a neighbouring anchor (seen: one lane 22 px away, scores 0.5194 vs
    # 0.5193). The median over all points is robust to such a swap and still fails if FP16 moves lanes in general.
    median_dx_640 = float(np.median(dxs)) * 640 / SIZE[1]  # lanes come in frame pixels, 1640 wide
    assert median_dx_640 <= 1.0, median_dx_640


@pytest.mark.parametrize("name", ["lanedet", "tiny"])
def test_pipeline_and_both_transports_give_the_same_lanes(server, name):
    test_frames = frames(3, 4)
    results = {}
    for model in (name, f"{name}_pipeline"):
        for transport in ("shm", "grpc"):
            with LaneDetClient(server.url, model, transport=transport) as client:
                results[model, transport] = [client.detect(f) for f in test_frames]
    reference = results[name, "shm"]
    assert sum(len(lanes) for lanes in reference) > 0
    for key, got in results.items():
        for want, lanes in zip(reference, got):
            assert same_lanes(want, lanes), key  # server-side pipeline scores are float32


def test_pipeline_frame_region_grows_for_bigger_frames(server):
    small, big = road_scene(640, 360, seed=60)[0], road_scene(1920, 1080, seed=61)[0]
    with LaneDetClient(server.url, "tiny_pipeline", transport="grpc") as plain:
        want = [plain.detect(small), plain.detect(big)]
    with LaneDetClient(server.url, "tiny_pipeline") as client:
        assert same_lanes(client.detect(small), want[0])
        (first,) = client.shm_regions
        assert same_lanes(client.detect(big), want[1])
        (second,) = client.shm_regions
        assert second != first and our_shm() == [second]  # the old region was unregistered and unlinked
        assert same_lanes(client.detect(small), want[0])  # and the bigger one is reused for small frames
        assert client.shm_regions == [second]


def test_batches_colour_order_and_overrides(server):
    test_frames = frames(5, 6, 7, 8, 9, 10)  # tiny takes batches of 4: two requests
    with LaneDetClient(server.url, "tiny") as client:
        single = [client.detect(f) for f in test_frames]
        assert any(single) and client.model.batch_capacity == 4
        batched = client.detect_batch(test_frames)
        assert all(same_lanes(a, b) for a, b in zip(single, batched))
        rgb = client.detect(np.ascontiguousarray(test_frames[0][:, :, ::-1]), color="rgb")
        assert same_lanes(rgb, single[0])
        loose = client.detect(test_frames[0], conf_threshold=0.05, top_k=8)
        assert len(loose) >= len(single[0]) and all(lane.score > 0.05 for lane in loose)
        one = client.detect(test_frames[0], top_k=1)
        assert same_lanes(one, single[0][:1])
    with LaneDetClient(server.url, "tiny_pipeline") as pipe:  # stricter than the server: filtered here
        assert same_lanes(pipe.detect(np.ascontiguousarray(test_frames[0][:, :, ::-1]), color="rgb"), single[0])
        assert same_lanes(pipe.detect(test_frames[0], top_k=1), single[0][:1])
        scores = sorted({lane.score for lanes in single for lane in lanes})
        assert len(scores) >= 2
        cut = (scores[len(scores) // 2 - 1] + scores[len(scores) // 2]) / 2  # between two lanes: no ties
        for frame, lanes in zip(test_frames, single):
            assert same_lanes(pipe.detect(frame, conf_threshold=cut), [x for x in lanes if x.score > cut])


def inference_counts(url: str, model: str) -> dict[str, int]:
    """Triton's statistics of `model`: requests answered, frames inferred, model executions."""
    import tritonclient.grpc as grpcclient

    client = grpcclient.InferenceServerClient(url)
    try:
        (stats,) = client.get_inference_statistics(model, as_json=True)["model_stats"]
    finally:
        client.close()
    success = stats.get("inference_stats", {}).get("success", {})
    return {"requests": int(success.get("count", 0)), "frames": int(stats.get("inference_count", 0)),
            "executions": int(stats.get("execution_count", 0))}


def settled_counts(url: str, model: str, quiet_s: float = 0.3, limit_s: float = 10.0) -> dict[str, int]:
    """inference_counts once they stop changing: Triton records a request's statistics after it has
    sent the response, so a read right after the client got its answer can miss the last request."""
    counts, since, deadline = inference_counts(url, model), time.monotonic(), time.monotonic() + limit_s
    while time.monotonic() - since < quiet_s and time.monotonic() < deadline:
        time.sleep(0.05)
        latest = inference_counts(url, model)
        if latest != counts:
            counts, since = latest, time.monotonic()
    return counts


def counted(url: str, model: str, call):
    """(call(), how much each of inference_counts grew during it)."""
    before = settled_counts(url, model)
    result = call()
    after = settled_counts(url, model)
    return result, {k: after[k] - before[k] for k in after}


@pytest.mark.parametrize("transport", ["shm", "grpc"])
def test_detect_batch_sends_frames_in_batches_of_the_model_batch_size(server, transport):
    test_frames = frames(*range(70, 77))  # 7 frames
    with LaneDetClient(server.url, "tiny", transport=transport) as client:
        want = [client.detect(f) for f in test_frames]
        assert sum(len(lanes) for lanes in want) > 0
        got, grew = counted(server.url, "tiny", lambda: client.detect_batch(test_frames))
    # dynamic batch 1..4: two requests of 4 and 3 frames, one model execution each
    assert grew == {"requests": 2, "frames": 7, "executions": 2}
    assert all(same_lanes(a, b) for a, b in zip(want, got))

    with LaneDetClient(server.url, "tiny_fixed3", transport=transport) as fixed:
        assert (fixed.model.max_batch_size, fixed.model.batch_capacity) == (0, 3)
        got, grew = counted(server.url, "tiny_fixed3", lambda: fixed.detect_batch(test_frames))
        # 3 + 3 + 1 frames: three requests, the last one filled up to the model's fixed batch
        assert grew["requests"] == 3 and grew["executions"] == 3
        assert all(same_lanes(a, b) for a, b in zip(want, got))
        one, grew = counted(server.url, "tiny_fixed3", lambda: fixed.detect(test_frames[4]))
        assert grew["requests"] == 1 and same_lanes(one, want[4])


def test_async_detect_batch_sends_batches_too(server):
    test_frames = frames(*range(70, 77))
    with LaneDetClient(server.url, "tiny") as client:
        want = [client.detect(f) for f in test_frames]

    async def run(model: str):
        async with AsyncLaneDetClient(server.url, model, max_in_flight=4) as client:
            return await client.detect_batch(test_frames)

    got, grew = counted(server.url, "tiny", lambda: asyncio.run(run("tiny")))
    # two requests in flight at once: the server may run them as one execution
    assert grew["requests"] == 2 and grew["frames"] == 7 and grew["executions"] in (1, 2)
    assert all(same_lanes(a, b) for a, b in zip(want, got))
    got, grew = counted(server.url, "tiny_fixed3", lambda: asyncio.run(run("tiny_fixed3")))
    assert grew["requests"] == 3 and all(same_lanes(a, b) for a, b in zip(want, got))


def test_fp16_input_model(server):
    test_frames = frames(50, 51)
    with LaneDetClient(server.url, "tiny") as fp32, LaneDetClient(server.url, "tiny16") as fp16:
        assert fp16.model.input_datatype == "FP16"
        for frame in test_frames:
            want, got = fp32.detect(frame), fp16.detect(frame)
            assert len(want) > 0
            # the same model fed float16-rounded pixels: the same lanes, up to that rounding
            assert same_lanes(got, want, atol=0.5, score_tol=1e-3)
        (inp,) = [name for name in fp16.shm_regions if name.endswith("_in")]
        assert os.path.getsize(f"/dev/shm/{inp}") == 4 * 3 * 360 * 640 * 2  # batch 4 of float16 images


def test_async_client_with_frames_in_flight(server):
    test_frames = frames(*range(11, 19))
    with LaneDetClient(server.url, "tiny") as client:
        want = [client.detect(f) for f in test_frames]

    async def run(model: str):
        async with AsyncLaneDetClient(server.url, model, max_in_flight=4) as client:
            assert len(client.shm_regions) == (8 if model == "tiny" else 0)  # 4 slots x (in, out)
            tasks = [asyncio.create_task(client.detect(f)) for f in test_frames]
            got = await asyncio.gather(*tasks)
            batch = await client.detect_batch(test_frames[:5])
            return got, batch

    for model in ("tiny", "tiny_pipeline"):
        got, batch = asyncio.run(run(model))
        assert all(same_lanes(a, b) for a, b in zip(want, got)), model
        assert all(same_lanes(a, b) for a, b in zip(want, batch)), model
    assert our_shm() == []


def test_two_clients_in_parallel_do_not_interfere(server):
    a_frames, b_frames = frames(20, 21), frames(22, 23)
    with LaneDetClient(server.url, "tiny") as probe:
        want_a = [probe.detect(f, conf_threshold=0.2) for f in a_frames]
        want_b = [probe.detect(f, conf_threshold=0.2) for f in b_frames]
    assert not same_lanes(want_a[0], want_b[0])  # otherwise a mix-up could not show
    failures: list[str] = []

    def worker(fs, want, tag):
        try:
            with LaneDetClient(server.url, "tiny") as client:
                for i in range(15):
                    k = i % len(fs)
                    if not same_lanes(client.detect(fs[k], conf_threshold=0.2), want[k]):
                        failures.append(f"{tag} frame {k} round {i}")
        except Exception as exc:  # noqa: BLE001 - reported below
            failures.append(f"{tag}: {exc!r}")

    threads = [threading.Thread(target=worker, args=(a_frames, want_a, "a")),
               threading.Thread(target=worker, args=(b_frames, want_b, "b"))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert failures == []


def test_nothing_left_in_dev_shm_or_on_the_server_after_close(server):
    import tritonclient.grpc as grpcclient

    ours = f"{NAME_PREFIX}{os.getpid()}_"  # this process's regions: other test processes may run meanwhile (xdist)
    before = sorted(n for n in os.listdir("/dev/shm") if n.startswith(ours))
    frame = frames(30)[0]
    names = []
    for model in ("tiny", "tiny_pipeline", "lanedet"):
        client = LaneDetClient(server.url, model)
        client.detect(frame)
        names += client.shm_regions
        assert client.shm_regions and all(os.path.exists(f"/dev/shm/{n}") for n in client.shm_regions)
        # group read-write, so a server running as another user of the group can map them (shm.py)
        assert all(os.stat(f"/dev/shm/{n}").st_mode & 0o777 == 0o660 for n in client.shm_regions)
        client.close()
    assert len(names) == 2 + 1 + 2
    after = sorted(n for n in os.listdir("/dev/shm") if n.startswith(ours))
    assert after == before and not set(names) & set(after)
    status = grpcclient.InferenceServerClient(server.url).get_system_shared_memory_status(as_json=True)
    assert not set(names) & set(status.get("regions", {}))


def test_a_client_left_open_is_cleaned_up_at_interpreter_exit(server):
    import subprocess
    import sys

    import tritonclient.grpc as grpcclient

    script = (
        "from edge_deploy.client.sync_client import LaneDetClient\n"
        "from edge_deploy.synthetic.roads import road_scene\n"
        f"client = LaneDetClient({server.url!r}, 'tiny')\n"
        "client.detect(road_scene(seed=1)[0])\n"
        "print(' '.join(client.shm_regions), flush=True)\n"  # and exit without close()
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=True)
    names = out.stdout.split()
    assert len(names) == 2
    assert not any(os.path.exists(f"/dev/shm/{name}") for name in names)
    status = grpcclient.InferenceServerClient(server.url).get_system_shared_memory_status(as_json=True)
    assert not set(names) & set(status.get("regions", {}))


def test_errors_name_the_problem_in_one_line(server):
    with pytest.raises(ModelNotReadyError) as missing:
        LaneDetClient(server.url, "no_such_model")
    with pytest.raises(ModelMismatchError) as mismatch:
        LaneDetClient(server.url, "tiny_postprocess")
    for info in (missing, mismatch):
        assert "\n" not in str(info.value)
    assert "no_such_model" in str(missing.value) and "tiny_postprocess" in str(mismatch.value)
    assert our_shm() == []


# --- restarts -----------------------------------------------------------------------------------


def restart_in_background(proc) -> tuple[threading.Event, threading.Event]:
    """Stop the server, wait a moment, start it again on the same port; events for 'stopped' and 'started'."""
    stopped, started = threading.Event(), threading.Event()

    def restart():
        proc.stop(timeout=15)
        stopped.set()
        time.sleep(0.5)
        proc.start()
        started.set()

    threading.Thread(target=restart, daemon=True).start()
    assert stopped.wait(30)
    return stopped, started


@pytest.mark.parametrize("kind", ["ensemble", "bls"])
def test_a_pipeline_restarted_mid_stream_recovers_for_either_kind(tmp_path, tiny_artifact, kind):
    """Issue 24: the BLS pipeline (one Python model calling tiny) recovers from a server restart as the ensemble
    does: the client re-registers its regions and gets the same lanes, nothing leaked."""
    from edge_deploy.deploy.install import install
    from edge_deploy.deploy.options import InstallOptions

    repo = tmp_path / "repo"
    install(InstallOptions(tiny_artifact, repo, "tiny", runtime="python", pipeline=kind))
    proc = _serve(repo, tmp_path / "triton.log")
    try:
        stream = frames(43, 44)
        with LaneDetClient(proc.url, "tiny_pipeline", client_timeout=10, retry_deadline=90) as client:
            want = [client.detect(f) for f in stream]
            regions = list(client.shm_regions)
            got = []
            for i in range(8):
                if i == 3:
                    _, started = restart_in_background(proc)  # detect 3 is sent while the server is down
                got.append(client.detect(stream[i % 2]))
            assert started.is_set() and client.recoveries >= 1
            assert all(same_lanes(g, want[i % 2]) for i, g in enumerate(got))
            assert client.shm_regions == regions and our_shm() == sorted(regions)
        assert our_shm() == []
    finally:
        proc.stop(timeout=15)


def _wait_until(predicate, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


def test_server_restarted_mid_stream_the_clients_recover(tmp_path, tiny_artifact):
    import tritonclient.grpc as grpcclient

    from edge_deploy.deploy.install import install
    from edge_deploy.deploy.options import InstallOptions

    repo = tmp_path / "repo"
    install(InstallOptions(tiny_artifact, repo, "tiny", runtime="python", pipeline=True))
    proc = _serve(repo, tmp_path / "triton.log")
    try:
        stream = frames(40, 41, 42)
        with LaneDetClient(proc.url, "tiny", client_timeout=10, retry_deadline=90) as client:
            want = [client.detect(f) for f in stream]
            regions = list(client.shm_regions)
            got = []
            for i in range(12):
                if i == 4:
                    _, started = restart_in_background(proc)  # detect 4 is sent while the server is down
                got.append(client.detect(stream[i % 3]))
            assert started.is_set() and client.recoveries >= 1
            assert all(same_lanes(g, want[i % 3]) for i, g in enumerate(got))
            # the same regions, re-registered with the new server process: nothing new, nothing leaked
            assert client.shm_regions == regions and our_shm() == sorted(regions)
            status = grpcclient.InferenceServerClient(proc.url).get_system_shared_memory_status(as_json=True)
            assert set(regions) <= set(status.get("regions", {}))

            # restarted while the client is idle: the new server does not know its regions
            recoveries = client.recoveries
            proc.stop(timeout=15)
            proc.start().wait_ready(120)
            assert same_lanes(client.detect(stream[1]), want[1])
            assert client.recoveries == recoveries + 1 and client.shm_regions == regions

            # the same server unloads the model and loads it again a moment later (it keeps our regions)
            admin = grpcclient.InferenceServerClient(proc.url)
            admin.unload_model("tiny")
            _wait_until(lambda: not admin.is_model_ready("tiny"), 30)
            loader = threading.Timer(1.0, admin.load_model, args=("tiny",))
            loader.start()
            assert same_lanes(client.detect(stream[2]), want[2])
            loader.join()
            assert client.recoveries == recoveries + 2 and client.shm_regions == regions
            admin.close()
        assert our_shm() == []

        async def pipelined():
            async with AsyncLaneDetClient(proc.url, "tiny", retry_deadline=90, max_in_flight=3) as aclient:
                names = list(aclient.shm_regions)
                await aclient.detect(stream[0])
                _, started = await asyncio.to_thread(restart_in_background, proc)
                results = await asyncio.gather(*(aclient.detect(stream[i % 3]) for i in range(9)))
                assert started.is_set() and aclient.recoveries >= 1
                assert aclient.shm_regions == names and our_shm() == sorted(names)
                return results

        results = asyncio.run(pipelined())
        assert all(same_lanes(r, want[i % 3]) for i, r in enumerate(results))
        assert our_shm() == []
    finally:
        proc.stop(timeout=15)


def test_a_new_version_with_other_dims_loaded_while_clients_are_connected(tmp_path, tiny_artifact, laneatt_data):
    """install + load on a live server (no restart): the clients notice the row count changed and re-read the model."""
    import tritonclient.grpc as grpcclient
    from small_artifact import make_artifact

    from edge_deploy.deploy.install import install
    from edge_deploy.deploy.options import InstallOptions

    repo = tmp_path / "repo"
    install(InstallOptions(tiny_artifact, repo, "tiny", runtime="python"))  # 1000 rows
    proc = _serve(repo, tmp_path / "triton.log")
    anchors = laneatt_data / "anchors_2784x77.npy"
    admin = grpcclient.InferenceServerClient(proc.url)
    stream = frames(90, 91, 92)
    try:
        clients = {t: LaneDetClient(proc.url, "tiny", transport=t, retry_deadline=30) for t in ("shm", "grpc")}
        no_retries = {t: LaneDetClient(proc.url, "tiny", transport=t, retry_deadline=0) for t in ("shm", "grpc")}
        for client in [*clients.values(), *no_retries.values()]:
            client.detect(stream[0])
        # fewer rows, then more, then another input size, then FP16 input, then FP16 output with the same
        # rows (the answer fits the old FP32 output region: only its datatype tells)
        for n, seed, hw, dtype, out_dtype in ((500, 5, (360, 640), "FP32", "FP32"),
                                              (2000, 6, (360, 640), "FP32", "FP32"),
                                              (700, 7, (288, 800), "FP32", "FP32"),
                                              (700, 8, (288, 800), "FP16", "FP32"),
                                              (700, 9, (288, 800), "FP16", "FP16")):
            art = make_artifact(tmp_path / f"art{seed}", anchors, n=n, seed=seed, hw=hw)
            if dtype == "FP16":
                art = with_fp16_input(art, tmp_path / f"art16-{seed}", output=out_dtype == "FP16")
            install(InstallOptions(art, repo, "tiny", runtime="python"))
            admin.load_model("tiny")
            with LaneDetClient(proc.url, "tiny", transport="grpc") as fresh:
                want = [fresh.detect(f) for f in stream]
                want_batch = fresh.detect_batch(stream)
            assert sum(len(lanes) for lanes in want) > 0
            for transport, client in no_retries.items():  # the change is reported once, then read
                with pytest.raises(ModelChangedError) as info:
                    client.detect(stream[0])
                assert "\n" not in str(info.value) and "re-reads the model" in str(info.value)
                assert same_lanes(client.detect(stream[0]), want[0]), transport
            for transport, client in clients.items():
                got = [client.detect(f) for f in stream]
                assert (client.model.num_rows, client.model.input_size, client.model.input_datatype,
                        client.model.output_datatype) == (n, hw, dtype, out_dtype)
                assert all(same_lanes(a, b) for a, b in zip(want, got)), (transport, n)
                assert all(same_lanes(a, b) for a, b in zip(want_batch, client.detect_batch(stream))), (transport, n)

            async def pipelined():
                async with AsyncLaneDetClient(proc.url, "tiny", max_in_flight=2) as aclient:
                    return await asyncio.gather(*(aclient.detect(f) for f in stream))

            assert all(same_lanes(a, b) for a, b in zip(want, asyncio.run(pipelined())))
        # the regions of the replaced buffers were unregistered, not left mapped in the server
        status = admin.get_system_shared_memory_status(as_json=True).get("regions", {})
        assert set(status) == set(clients["shm"].shm_regions + no_retries["shm"].shm_regions)
        for client in [*clients.values(), *no_retries.values()]:
            client.close()
        assert our_shm() == []
    finally:
        admin.close()
        proc.stop(timeout=15)
