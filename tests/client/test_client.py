"""LaneDetClient parts that need no server: model description, frame checks, transport, shared memory, errors.

Model descriptions are built from the configs `edge-deploy install` generates
(edge_deploy.repository.model_config) turned into the metadata Triton derives from them,
so the client is checked against the real parameter keys and tensor names.
"""
from __future__ import annotations

import grp
import os
import stat
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from conftest import free_port

from edge_deploy.artifact.manifest import Manifest
from edge_deploy.client.base import is_local_url, resolve_transport
from edge_deploy.client.frames import check_frame
from edge_deploy.client.served_model import decode_params, describe_model
from edge_deploy.lanedet.family import ScoreNmsDecodeParams
from edge_deploy.client.shm import GROUP_ENV, ShmRegion, leftover_regions
from edge_deploy.client.sync_client import LaneDetClient
from edge_deploy.errors import (
    ClientError,
    FrameError,
    ModelMismatchError,
    ServerTimeoutError,
    ServerUnavailableError,
)
from edge_deploy.lanedet.laneatt import FAMILY as LANEATT
LANEATT_DECODE = LANEATT.decode_defaults.to_dict()
LANEATT_PREPROCESS = LANEATT.preprocess.to_dict()


def _manifest(*, dtype: str = "FP32", rows: int = 1000, dynamic: bool = True, hw=(360, 640), decode=None, preprocess=None):
    lead = -1 if dynamic else 1
    return Manifest.from_dict({
        "format": 1,  # the released format, migrated: family laneatt from the N x 77 output
        "io": {
            "inputs": [{"name": "input", "datatype": dtype, "shape": [lead, 3, *hw]}],
            "outputs": [{"name": "predict_lanes", "datatype": "FP32", "shape": [lead, rows, 77]}],
            "batch": {"min": 1, "opt": 1, "max": 4 if dynamic else 1, "dynamic": dynamic},
        },
        "preprocess": preprocess or dict(LANEATT_PREPROCESS, height=hw[0], width=hw[1]),
        "decode": decode or dict(LANEATT_DECODE),
    })


def _metadata(config):
    """The ModelMetadataResponse Triton derives from a ModelConfig (batch dim -1 when max_batch_size > 0)."""
    from tritonclient.grpc import model_config_pb2, service_pb2

    md = service_pb2.ModelMetadataResponse(name=config.name, versions=["1"], platform="python")
    lead = [-1] if config.max_batch_size > 0 else []
    for src, dst in ((config.input, md.inputs), (config.output, md.outputs)):
        for t in src:
            dtype = model_config_pb2.DataType.Name(t.data_type).replace("TYPE_", "")
            dst.add(name=t.name, datatype=dtype, shape=[*lead, *t.dims])
    return md


def _describe(config):
    return describe_model(_metadata(config), config)


def _lane_config(**kw):
    from edge_deploy.repository import model_config as mc

    return mc.model_config(_manifest(**kw), name="lanedet", runtime="python")


# --- model description ----------------------------------------------------------------------


def test_raw_model_from_generated_config():
    model = _describe(_lane_config(decode={"conf_threshold": 0.3, "nms_threshold": 40.0, "top_k": 2}))
    assert model.kind == "raw"
    assert (model.input_name, model.input_datatype, model.output_name) == ("input", "FP32", "predict_lanes")
    assert model.input_size == (360, 640) and model.num_rows == 1000
    assert model.batch_capacity == 4
    assert model.decode == ScoreNmsDecodeParams(0.3, 40.0, 2)
    assert model.preprocess.interpolation == "bicubic"


def test_fp16_and_fixed_batch_models():
    fp16 = _describe(_lane_config(dtype="FP16"))
    assert fp16.input_datatype == "FP16"
    fixed = _describe(_lane_config(dynamic=False))
    assert fixed.max_batch_size == 0 and fixed.input_shape == (1, 3, 360, 640) and fixed.batch_capacity == 1


def test_other_input_size_is_taken_from_the_model():
    model = _describe(_lane_config(hw=(288, 800)))
    assert model.input_size == (288, 800) and model.preprocess.height == 288


def test_pipeline_from_generated_config():
    from edge_deploy.lanedet import contract
    from edge_deploy.repository import model_config as mc

    config = mc.pipeline_config(_manifest(), name="lanedet_pipeline", model="lanedet",
                                preprocess="lanedet_preprocess", postprocess="lanedet_postprocess")
    model = _describe(config)
    assert model.kind == "pipeline" and model.input_name == contract.FRAME and model.batch_capacity == 1


@pytest.mark.parametrize("role", ["preprocess", "postprocess"])
def test_pipeline_parts_are_not_lane_models(role):
    from edge_deploy.repository import model_config as mc

    make = mc.preprocess_config if role == "preprocess" else mc.postprocess_config
    with pytest.raises(ModelMismatchError) as info:
        _describe(make(_manifest(), name=f"lanedet_{role}"))
    assert "\n" not in str(info.value) and f"lanedet_{role}" in str(info.value)


def _custom(inputs, outputs, max_batch=4, params=None):
    from tritonclient.grpc import model_config_pb2 as pb

    config = pb.ModelConfig(name="odd", max_batch_size=max_batch)
    for name, dtype, dims in inputs:
        config.input.add(name=name, data_type=pb.DataType.Value(f"TYPE_{dtype}"), dims=dims)
    for name, dtype, dims in outputs:
        config.output.add(name=name, data_type=pb.DataType.Value(f"TYPE_{dtype}"), dims=dims)
    for key, value in (params or {}).items():
        config.parameters[key].string_value = value
    return config


LANES_OUT = [("predict_lanes", "FP32", [1000, 77])]
IMAGE_IN = [("input", "FP32", [3, 360, 640])]


@pytest.mark.parametrize(
    "config, words",
    [
        (_custom(IMAGE_IN + [("extra", "FP32", [1])], LANES_OUT), "2 inputs"),
        (_custom([("input", "FP32", [1, 360, 640])], LANES_OUT), "3 x H x W"),
        (_custom([("input", "FP32", [3, -1, -1])], LANES_OUT), "fixed H and W"),
        (_custom([("input", "INT64", [3, 360, 640])], LANES_OUT), "INT64"),
        (_custom(IMAGE_IN, [("logits", "FP32", [1000])]), "N x 77"),
        (_custom(IMAGE_IN, [("predict_lanes", "FP32", [1000, 76])]), "N x 77"),
        (_custom(IMAGE_IN, [("predict_lanes", "FP32", [-1, 77])]), "fixed number"),
        (_custom([("FRAME", "UINT8", [-1, -1, 3])], LANES_OUT, max_batch=0), "install --pipeline"),
        (_custom(IMAGE_IN, LANES_OUT, params={"edge_deploy.preprocess": "{not json"}), "unreadable"),
        (_custom(IMAGE_IN, LANES_OUT, params={"edge_deploy.preprocess": '{"height": 288, "width": 800}'}), "288x800"),
    ],
)
def test_models_that_do_not_fit_are_refused(config, words):
    with pytest.raises(ModelMismatchError) as info:
        _describe(config)
    message = str(info.value)
    assert words in message and "\n" not in message


def test_seed_style_model_with_two_outputs_picks_the_lane_tensor():
    config = _custom(IMAGE_IN, [("914", "FP32", [1000, 2]), ("predict_lanes", "FP16", [2784, 77])], max_batch=1)
    model = _describe(config)
    assert model.output_name == "predict_lanes" and model.num_rows == 2784 and model.output_datatype == "FP16"


def _lanes_of_one_vertical_lane(model, x: float, frame_size=(590, 1640)):
    """build_request + read_lanes on a real InferResult holding one confident full-height lane at model-input x."""
    from tritonclient.grpc import InferResult, service_pb2

    from edge_deploy.client.buffers import Slot
    from edge_deploy.client.request import build_request, read_lanes

    slot = Slot(model, use_shm=False)
    request, _ = build_request(slot, [np.zeros((*frame_size, 3), np.uint8)], "bgr")
    raw = np.zeros((1, model.num_rows, 77), np.float32)
    raw[0, 0, 1], raw[0, 0, 4], raw[0, 0, 5:] = 3.0, 72.0, x
    response = service_pb2.ModelInferResponse(model_name=model.name, raw_output_contents=[raw.tobytes()])
    response.outputs.add(name=model.output_name, datatype="FP32", shape=list(raw.shape))
    [lanes] = read_lanes(slot, request, InferResult(response), model.decode)
    assert len(lanes) == 1 and len(lanes[0].points) == 72
    return lanes[0].points


def test_raw_output_is_scaled_by_the_served_model_width():
    """x offsets are in model-input pixels: a lane at x = 400 of an 800-wide model is mid-frame."""
    points = _lanes_of_one_vertical_lane(_describe(_lane_config(hw=(288, 800))), 400.0)
    assert np.allclose(points[:, 0], 820.0)


def test_raw_output_of_a_cropping_model_is_in_frame_pixels():
    """With a crop in the preprocessing spec, lanes are decoded in the crop box and shifted back."""
    crop = {"top": 100, "bottom": 0, "left": 40, "right": 0}
    model = _describe(_lane_config(preprocess=dict(LANEATT_PREPROCESS, crop=crop)))
    points = _lanes_of_one_vertical_lane(model, 320.0)
    assert np.allclose(points[:, 0], 40 + 1600 / 2)
    assert points[0, 1] == pytest.approx(100.0) and points[-1, 1] == pytest.approx(590.0)


# --- decode parameters ------------------------------------------------------------------------


def test_per_call_overrides_and_pipeline_limits():
    raw = _describe(_lane_config())
    defaults = ScoreNmsDecodeParams(0.5, 50.0, 4)
    assert decode_params(raw, 0.2, None, 10, defaults) == ScoreNmsDecodeParams(0.2, 50.0, 10)
    with pytest.raises(ClientError, match="top_k"):
        decode_params(raw, None, None, 0, defaults)
    with pytest.raises(ClientError, match="nms_threshold"):
        decode_params(raw, None, -1.0, None, defaults)

    from edge_deploy.repository import model_config as mc

    pipe = _describe(mc.pipeline_config(_manifest(), name="p", model="m", preprocess="a", postprocess="b"))
    assert decode_params(pipe, 0.7, None, 2, defaults) == ScoreNmsDecodeParams(0.7, 50.0, 2)  # stricter: filtered here
    for looser in ({"conf": 0.3}, {"top_k": 8}, {"nms": 20.0}):
        with pytest.raises(ClientError, match="decodes on the server"):
            decode_params(pipe, looser.get("conf"), looser.get("nms"), looser.get("top_k"), defaults)


# --- frames -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "frame, words",
    [
        ([[1, 2, 3]], "not a numpy array"),
        (np.zeros((10, 10), np.uint8), "HxWx3"),
        (np.zeros((10, 10, 4), np.uint8), "HxWx3"),
        (np.zeros((0, 10, 3), np.uint8), "empty"),
        (np.zeros((10, 10, 3), np.int16), "dtype int16"),
        (np.full((10, 10, 3), np.nan, np.float32), "NaN"),
        (np.full((10, 10, 3), np.inf, np.float64), "NaN or infinite"),
    ],
)
def test_bad_frames(frame, words):
    with pytest.raises(FrameError) as info:
        check_frame(frame)
    assert words in str(info.value) and "\n" not in str(info.value)


def test_good_frames():
    frame = np.random.default_rng(0).integers(0, 256, (20, 30, 3), dtype=np.uint8)
    assert check_frame(frame) is frame
    as_float = check_frame(frame.astype(np.float32) + 0.2)
    assert as_float.dtype == np.uint8 and np.array_equal(as_float, frame)
    # float frames are rounded to the nearest level and clipped to 0..255, not truncated or wrapped
    floats = np.array([[[-3.0, 0.4, 0.6], [127.5, 254.6, 300.0]]], np.float64)
    assert check_frame(floats).tolist() == [[[0, 0, 1], [128, 255, 255]]]


def test_backoff_doubles_up_to_its_cap_and_ends_at_the_deadline():
    from edge_deploy.client.base import Backoff

    long = Backoff(60.0, cap=0.3)
    assert [long.next() for _ in range(5)] == [0.05, 0.1, 0.2, 0.3, 0.3] and long.retried
    assert long.rpc_timeout(5.0) == 5.0
    short = Backoff(0.12, cap=1.0)
    assert not short.retried
    assert [short.next(), short.next(), short.next()] == [0.05, 0.1, None]  # 0.2 s more would end past it
    assert Backoff(0.0, cap=1.0).rpc_timeout(5.0) == 0.05


# --- transport ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "url, local",
    [("127.0.0.1:8001", True), ("localhost:8001", True), ("[::1]:8001", True), ("127.0.0.2:9", True),
     ("unix:///run/triton.sock", True), ("10.0.0.2:8001", False), ("orin.local:8001", False)],
)
def test_local_urls(url, local):
    assert is_local_url(url) is local
    assert resolve_transport("auto", url) == ("shm" if local else "grpc")


def test_transport_choices():
    assert resolve_transport("grpc", "127.0.0.1:8001") == "grpc"
    with pytest.raises(ClientError, match="loopback"):
        resolve_transport("shm", "10.0.0.2:8001")
    with pytest.raises(ClientError, match="unknown transport"):
        resolve_transport("tcp", "127.0.0.1:8001")


# --- shared memory ------------------------------------------------------------------------------


def test_region_is_mapped_and_unlinked():
    region = ShmRegion(4096, "test")
    try:
        assert region.name.startswith(f"edge_deploy_{os.getpid()}_")
        assert os.path.exists(f"/dev/shm/{region.name}")
        view = region.array(np.float32, (2, 8), offset=64)
        view[:] = 7.0
        with open(f"/dev/shm/{region.name}", "rb") as fh:  # another mapping of the same memory sees the write
            data = np.frombuffer(fh.read(), np.float32)
        assert (data[16:32] == 7.0).all() and (data[:16] == 0).all()
        with pytest.raises(ValueError):
            region.array(np.float32, (2000,))
        del view
    finally:
        region.close()
    assert not os.path.exists(f"/dev/shm/{region.name}") and region.closed
    region.close()  # idempotent


def test_region_name_goes_even_with_a_live_view():
    region = ShmRegion(1024, "test")
    view = region.array(np.uint8, (1024,))
    region.close()
    assert not os.path.exists(f"/dev/shm/{region.name}")
    view[:] = 1  # the mapping itself lives until the view dies
    assert view.sum() == 1024


def test_two_regions_never_share_a_name():
    a, b = ShmRegion(64, "in"), ShmRegion(64, "in")
    try:
        assert a.name != b.name
    finally:
        a.close()
        b.close()


def _gid_and_mode(name: str) -> tuple[int, int]:
    st = os.stat(f"/dev/shm/{name}")
    return st.st_gid, stat.S_IMODE(st.st_mode)


def _group_not_ours() -> grp.struct_group:
    ours = {os.getegid(), *os.getgroups()}
    return next(g for g in grp.getgrall() if g.gr_gid not in ours)


def test_region_is_group_read_write_and_keeps_its_group_by_default(monkeypatch):
    # A group that does not exist, and a real group this process is not in: mode 0660, group untouched.
    for group in ("edge_deploy_no_such_group", _group_not_ours().gr_name):
        monkeypatch.setenv(GROUP_ENV, group)
        region = ShmRegion(64, "perm")
        try:
            assert _gid_and_mode(region.name) == (os.getegid(), 0o660), group
        finally:
            region.close()


def test_region_takes_the_shm_group_when_the_process_is_in_it(monkeypatch):
    monkeypatch.setenv(GROUP_ENV, grp.getgrgid(os.getegid()).gr_name)  # our primary group
    region = ShmRegion(64, "perm")
    try:
        assert _gid_and_mode(region.name) == (os.getegid(), 0o660)
    finally:
        region.close()


@pytest.mark.skipif(os.geteuid() != 0, reason="joining groups and switching users (setgroups/setuid) needs root")
def test_another_user_of_the_shm_group_can_open_the_region():
    # As on a Jetson: the app has the supplementary group video, the server runs as another user
    # (edge-deploy) in that group. A child process joins a real group of this machine it is not in
    # yet and makes a region; grandchildren switch to another uid and open it read-write, as
    # tritonserver does when the region is registered: one in the group, one not.
    group = _group_not_ours()
    script = textwrap.dedent(
        f"""
        import os
        from edge_deploy.client.shm import ShmRegion

        os.setgroups([{group.gr_gid}])
        region = ShmRegion(64, "perm")
        path = "/dev/shm/" + region.name

        def opens_as_other_user(groups):
            pid = os.fork()
            if pid == 0:
                os.setgroups(groups)
                os.setgid(65534)
                os.setuid(65534)
                try:
                    os.close(os.open(path, os.O_RDWR))
                except PermissionError:
                    os._exit(1)
                os._exit(0)
            return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0

        st = os.stat(path)
        print(st.st_gid, oct(st.st_mode & 0o777), opens_as_other_user([{group.gr_gid}]), opens_as_other_user([]))
        region.close()
        """
    )
    env = dict(os.environ, **{GROUP_ENV: group.gr_name})
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True, env=env)
    assert out.stdout.split() == [str(group.gr_gid), "0o660", "True", "False"]


def test_regions_are_unlinked_at_interpreter_exit_not_in_forked_children():
    script = textwrap.dedent(
        """
        import os, sys
        from edge_deploy.client.shm import ShmRegion
        keep = ShmRegion(4096, "exit")
        print(keep.name, flush=True)
        pid = os.fork()
        if pid == 0:
            sys.exit(0)  # the child exits through normal interpreter shutdown (finalizers run)
        os.waitpid(pid, 0)
        print(os.path.exists("/dev/shm/" + keep.name), flush=True)
        # no close(): the finalizer must unlink at exit
        """
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True)
    name, alive_after_child = out.stdout.split()
    assert alive_after_child == "True"  # the forked child did not unlink its parent's region
    assert not os.path.exists(f"/dev/shm/{name}")


# --- no server ----------------------------------------------------------------------------------


def test_unreachable_server_is_one_line_error():
    port = free_port()
    with pytest.raises(ServerUnavailableError) as info:
        LaneDetClient(f"127.0.0.1:{port}", client_timeout=2.0)
    assert "refused the connection" in str(info.value) and "\n" not in str(info.value)
    assert not isinstance(info.value, ServerTimeoutError)


@pytest.fixture
def silent_server():
    """A port that takes connections and never answers: a server too busy to reply (issue 45 #13). A plain socket,
    not tritonserver: a real server cannot be made to stall on demand."""
    import socket
    import threading

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    taken: list[socket.socket] = []

    def accept() -> None:
        while True:
            try:
                taken.append(listener.accept()[0])
            except OSError:
                return

    threading.Thread(target=accept, daemon=True).start()
    yield f"127.0.0.1:{listener.getsockname()[1]}"
    listener.close()
    for conn in taken:
        conn.close()


def test_a_server_that_does_not_answer_in_time_is_not_called_unreachable(silent_server):
    with pytest.raises(ServerTimeoutError) as info:
        LaneDetClient(silent_server, client_timeout=0.5, retry_deadline=0)
    message = str(info.value)
    assert "did not answer in time" in message and "client_timeout=0.5 s" in message and "busy or hung" in message, \
        message
    assert "unreachable" not in message and "start it with" not in message and "\n" not in message
    with LaneDetClient(silent_server, connect=False, client_timeout=0.3) as client:
        with pytest.raises(ServerTimeoutError, match="did not answer within 0.6 s"):
            client.wait_until_ready(0.6)


def test_unreachable_server_retries_until_the_deadline():
    port = free_port()
    with LaneDetClient(f"127.0.0.1:{port}", connect=False, client_timeout=1.0, retry_deadline=0.5) as client:
        with pytest.raises(ServerUnavailableError, match=r"retried for 0.5 s"):
            client.detect(np.zeros((20, 20, 3), np.uint8))
        with pytest.raises(ServerUnavailableError, match="not reachable within"):
            client.wait_until_ready(0.3)
        with pytest.raises(FrameError):  # frames are checked before any request
            client.detect(np.zeros((20, 20), np.uint8))
    assert leftover_regions(os.getpid()) == []
    with pytest.raises(ClientError, match="closed"):
        client.detect(np.zeros((20, 20, 3), np.uint8))


def test_async_client_unreachable_server_and_bad_arguments():
    import asyncio

    from edge_deploy.client.async_client import AsyncLaneDetClient

    async def run():
        client = AsyncLaneDetClient(f"127.0.0.1:{free_port()}", client_timeout=1.0, retry_deadline=0.3)
        with pytest.raises(ServerUnavailableError) as info:
            await client.connect()
        with pytest.raises(ServerUnavailableError, match="not reachable within"):
            await client.wait_until_ready(0.3)
        with pytest.raises(FrameError):
            await client.detect(np.zeros((5, 5), np.uint8))
        await client.close()
        return str(info.value)

    message = asyncio.run(run())
    assert "refused the connection" in message and "\n" not in message
    with pytest.raises(ClientError, match="max_in_flight"):
        AsyncLaneDetClient(max_in_flight=0)
    assert leftover_regions(os.getpid()) == []


def test_what_is_retried_depends_on_whether_the_model_was_ever_served():
    """A model that was never ready is an install problem (fail now); one that was served and is gone is a
    restart or a reload (retry). A dead server is retried either way."""
    from tritonclient.utils import InferenceServerException

    from edge_deploy.client.base import is_retryable
    from edge_deploy.errors import ModelChangedError, ModelNotReadyError

    def grpc(status: str, msg: str) -> InferenceServerException:
        return InferenceServerException(msg=msg, status=f"StatusCode.{status}")

    only_after_served = [
        ModelNotReadyError("model 'x' is not ready"),
        ModelChangedError("model 'x' now returns other tensors"),
        grpc("INVALID_ARGUMENT", "unexpected shape for input 'input' for model 'x'"),
        grpc("NOT_FOUND", "Request for unknown model: 'x' is not found"),
    ]
    always = [
        grpc("UNAVAILABLE", "failed to connect to all addresses"),
        grpc("INVALID_ARGUMENT", "Unable to find system shared memory region: 'edge-deploy-1'"),
    ]
    never = [grpc("INVALID_ARGUMENT", "input 'input' has no data"), ValueError("not a gRPC error")]
    for exc in only_after_served:
        assert (is_retryable(exc, was_ready=True), is_retryable(exc, was_ready=False)) == (True, False), exc
    for exc in always:
        assert is_retryable(exc, was_ready=True) and is_retryable(exc, was_ready=False), exc
    for exc in never:
        assert not is_retryable(exc, was_ready=True) and not is_retryable(exc, was_ready=False), exc


def test_fit_frame_resizes_as_the_spec_says_antialiased_bilinear_included():
    """A fused model's frame of another size is resized here with the manifest's interpolation."""
    import cv2

    from edge_deploy.client.frames import fit_frame
    from edge_deploy.errors import FrameError
    from edge_deploy.lanedet.preprocess import resize

    frame = np.random.default_rng(0).integers(0, 256, (300, 500, 3), dtype=np.uint8)
    assert fit_frame(frame, (300, 500), "antialiased_bilinear", True) is frame
    np.testing.assert_array_equal(fit_frame(frame, (200, 320), "antialiased_bilinear", False),
                                  resize(frame, (200, 320), "antialiased_bilinear"))
    np.testing.assert_array_equal(fit_frame(frame, (200, 320), "area", False),
                                  cv2.resize(frame, (320, 200), interpolation=cv2.INTER_AREA))
    with pytest.raises(FrameError, match="500x300"):
        fit_frame(frame, (200, 320), "antialiased_bilinear", True)



def test_a_pipeline_of_a_family_this_client_lacks_takes_the_configs_settings():
    from edge_deploy.lanedet import contract

    outputs = [(name, "FP32", [-1]) for name in (contract.LANES, contract.SCORES, contract.NUM_POINTS,
                                                 contract.NUM_LANES)]
    params = {contract.PARAM_FAMILY: "stripes", contract.PARAM_PREPROCESS: '{"height": 200, "width": 320}',
              contract.PARAM_DECODE: '{"stripe_gap": 0.5, "top_k": 3}'}
    model = _describe(_custom([(contract.FRAME, "UINT8", [-1, -1, 3])], outputs, max_batch=0, params=params))
    assert model.kind == "pipeline" and model.family.name == "stripes"
    assert (model.family.preprocess.height, model.family.preprocess.width) == (200, 320)
    assert model.decode.to_dict() == {"stripe_gap": 0.5, "top_k": 3}
    with pytest.raises(ModelMismatchError, match="decode settings are not usable") as info:
        _describe(_custom([(contract.FRAME, "UINT8", [-1, -1, 3])], outputs, max_batch=0,
                          params={**params, contract.PARAM_DECODE: '{"stripe_gap": 0.5}'}))  # no top_k
    assert "\n" not in str(info.value)
    fused = {**params, contract.PARAM_FUSED: '{"height": 288}'}  # a frame size without its width
    with pytest.raises(ModelMismatchError, match="gives no frame size") as info:
        _describe(_custom([(contract.FRAME, "UINT8", [-1, -1, 3])], outputs, max_batch=0, params=fused))
