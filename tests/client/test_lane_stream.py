"""Issue 42: per-call deadlines and LaneStream against the real bundled tritonserver, killed with SIGKILL.

Models (installed by the real `install`, Python-backend ONNX Runtime):
- ``tiny``: tests/support/small_artifact.py, LaneATT's I/O with negligible compute (what remains is the client's
  and the server's own overhead);
- ``slow``: the same model with a 50 ms sleep written into its installed model.py: slower than a 30 frames/s
  camera, so a stream must drop frames.

The frame source is a camera stand-in: a thread that pushes 1640x590 frames at 30 frames/s (the stream reads them
as they come). Bounds asserted here are contracts with generous margins (a loaded CI machine), never tight
times: the figures are in BENCHMARKS.md (benchmarks/bench_stream.py).
"""
from __future__ import annotations

import asyncio
import contextlib
import math
import os
import signal
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from camera_stub import FPS, SIZE, Camera
from stream_server import SLOW_S, install_models, our_shm, serve, sigkill, tiny_artifact  # noqa: F401 (a fixture)

from edge_deploy.client.async_client import AsyncLaneDetClient
from edge_deploy.client.shm import leftover_regions
from edge_deploy.client.sync_client import LaneDetClient
from edge_deploy.errors import ClientError, LanesUnavailable
from edge_deploy.media.stream import LaneStream
from edge_deploy.synthetic.roads import road_scene

pytestmark = pytest.mark.triton


@pytest.fixture(scope="module")
def server(tmp_path_factory, tiny_artifact):
    """One server for the tests that never stop it: tiny and slow."""
    work = tmp_path_factory.mktemp("served")
    install_models(work / "repo", tiny_artifact)
    proc = serve(work / "repo", work / "triton.log")
    yield proc
    proc.stop(timeout=15)


@pytest.fixture
def own_server(tmp_path, tiny_artifact):
    """A server of the test's own, to kill."""
    install_models(tmp_path / "repo", tiny_artifact)
    proc = serve(tmp_path / "repo", tmp_path / "triton.log")
    yield proc
    proc.stop(timeout=15)


def timed(call):
    start = time.monotonic()
    try:
        return call(), time.monotonic() - start
    except LanesUnavailable as exc:
        return exc, time.monotonic() - start


# --- deadlines ----------------------------------------------------------------------------------------------


def test_detect_with_a_deadline_against_a_killed_server_is_told_at_once_and_carries_on(own_server):
    frame = road_scene(SIZE[1], SIZE[0], seed=60)[0]
    with LaneDetClient(own_server.url, "tiny") as client:
        want = client.detect(frame)
        regions = list(client.shm_regions)
        sigkill(own_server)
        times = []
        for _ in range(5):
            error, seconds = timed(lambda: client.detect(frame, deadline=0.05))
            assert isinstance(error, LanesUnavailable) and error.reason == "unreachable", error
            assert "\n" not in str(error) and "deadline of 50 ms" in str(error)
            times.append(seconds)
        # the contract is "within the deadline plus a few ms"; generous here for a loaded machine (the p99 is in
        # BENCHMARKS.md); without the deadline this call retries for retry_deadline (30 s)
        assert max(times) < 0.5, times
        own_server.start().wait_ready(120)
        # the next call picks up where the failed ones stopped: reconnects, registers the same regions again
        assert [lane.score for lane in client.detect(frame)] == [lane.score for lane in want]
        assert client.shm_regions == regions and our_shm() == sorted(regions)
    assert our_shm() == []


def test_a_deadline_shorter_than_the_model_says_slow_and_the_next_call_is_right(server):
    frames = [road_scene(SIZE[1], SIZE[0], seed=s)[0] for s in (61, 62)]
    with LaneDetClient(server.url, "slow") as client, LaneDetClient(server.url, "tiny") as reference:
        want = [reference.detect(f) for f in frames]
        error, seconds = timed(lambda: client.detect(frames[0], deadline=SLOW_S / 5))
        assert isinstance(error, LanesUnavailable) and error.reason == "slow", error
        assert seconds < 0.5
        # the late answer to frame 0 must not leak into the answer to frame 1
        got = client.detect(frames[1], deadline=5.0)
        assert [lane.score for lane in got] == [lane.score for lane in want[1]]
        assert [lane.score for lane in client.detect(frames[0])] == [lane.score for lane in want[0]]


def test_a_deadline_must_be_positive_and_a_busy_client_is_told_so(server):
    frame = road_scene(SIZE[1], SIZE[0], seed=63)[0]
    with LaneDetClient(server.url, "slow") as client:
        for bad in (0, -1.0, float("nan"), float("inf")):
            with pytest.raises(ClientError, match="deadline must be a positive number"):
                client.detect(frame, deadline=bad)
        worker = threading.Thread(target=client.detect, args=(frame,))
        worker.start()
        time.sleep(0.01)
        error, seconds = timed(lambda: client.detect(frame, deadline=0.005))
        worker.join()
        assert isinstance(error, LanesUnavailable) and error.reason == "busy" and seconds < 0.5


def test_the_async_client_keeps_its_deadline_too(own_server):
    frame = road_scene(SIZE[1], SIZE[0], seed=64)[0]

    async def run() -> tuple[list, list[float]]:
        async with AsyncLaneDetClient(own_server.url, "tiny", max_in_flight=2) as client:
            want = await client.detect(frame)
            await asyncio.to_thread(sigkill, own_server)
            times = []
            for _ in range(3):
                start = time.monotonic()
                with pytest.raises(LanesUnavailable) as caught:
                    await client.detect(frame, deadline=0.05)
                times.append(time.monotonic() - start)
                # refused (unreachable), or on a busy machine cut by the 50 ms deadline inside the attempt (slow):
                # both are true of a server that was just killed
                assert caught.value.reason in ("unreachable", "slow")
            await asyncio.to_thread(lambda: own_server.start().wait_ready(120))
            got = await client.detect(frame)
            assert [lane.score for lane in got] == [lane.score for lane in want]
            return times

    times = asyncio.run(run())
    assert max(times) < 0.5, times
    assert our_shm() == []


# --- LaneStream ---------------------------------------------------------------------------------------------


def test_a_stream_on_a_model_slower_than_the_camera_drops_frames_and_latency_stays_bounded(server):
    camera = Camera(count=int(FPS * 2.5))
    latest_calls: list[float] = []
    results = []
    with LaneDetClient(server.url, "slow") as client:
        stream = LaneStream(client, camera, max_age=0.5, on_result=results.append).start()
        try:
            while stream.running and len(latest_calls) < 5000:
                start = time.monotonic()
                stream.latest()
                latest_calls.append(time.monotonic() - start)
                time.sleep(0.002)
        finally:
            stats = stream.stop()
            camera.close()
    assert stats.frames_read == camera.pushed
    assert stats.frames_dropped > stats.frames_read / 4  # the model takes ~1.5 frame periods: many dropped
    # every frame is read, then detected, failed or dropped unseen; the results' own counts agree
    assert stats.frames_read == stats.frames_processed + stats.frames_failed + stats.frames_dropped
    assert sum(r.dropped for r in results) == stats.frames_dropped
    assert [r.seq for r in results] == sorted({r.seq for r in results})
    # latency does not grow: the last results are no older at their answer than the first ones (a stream that
    # queued frames would lag further behind with every frame: ~0.6 s by the end)
    latencies = [r.latency_s for r in results if r.latency_s is not None]
    third = len(latencies) // 3
    assert np.median(latencies[-third:]) < np.median(latencies[:third]) + 0.1, latencies
    assert np.percentile(latencies, 90) < 0.5, latencies  # (a single call may be late on a loaded machine)
    # latest() never waits for the worker (which is inside a 50 ms call most of the time): a latest() that did would
    # take ~50 ms in most calls; a loaded machine may deschedule the test's thread for a few of them
    assert np.percentile(latest_calls, 99) < 0.03, sorted(latest_calls)[-10:]


def test_iteration_yields_each_result_once_with_its_age_and_state(server):
    with LaneDetClient(server.url, "tiny") as client, LaneStream(client, Camera(count=20), max_age=1.0) as stream:
        seen = list(stream)
    fresh = [r for r in seen if r.state == "ok"]
    assert len({r.seq for r in fresh}) == len(fresh) and len(fresh) >= 5
    assert all(r.lanes and r.latency_s is not None and 0 <= r.latency_s <= r.age_s for r in fresh)
    assert stream.stats().frames_processed == len(fresh)


def test_a_stream_through_a_sigkill_and_a_restart(own_server):
    """The outage timeline: the app's thread polls latest() at 200 Hz through a SIGKILL and a restart of the
    server; states, time to "unavailable" and back to "ok", and what is left behind after stop()."""
    import tritonclient.grpc as grpcclient

    # max_age from this machine's speed now: the test is about the outage's timeline, not about how fast the
    # model is (before the kill, "ok" needs the lanes within max_age of capture)
    with LaneDetClient(own_server.url, "tiny") as probe:
        frame = np.zeros((SIZE[0], SIZE[1], 3), np.uint8)
        latency = sorted(timed(lambda: probe.detect(frame))[1] for _ in range(5))[2]
    max_age = max(0.1, 3 * latency)
    camera = Camera()
    timeline: list[tuple[float, str, int]] = []
    longest_call = 0.0
    killed_at = first_ok = None
    ready: list[float] = []
    restarted: list[float] = []
    answering: list[float] = []

    def restart_server() -> None:
        restarted.append(time.monotonic())
        own_server.start().wait_ready(120)
        ready.append(time.monotonic())
        # when the new server first answers a fresh client: the model's own warm-up (a Python-backend model loads
        # ONNX Runtime on its first request, seconds on a loaded machine) is the server's, not the stream's recovery
        # (connect=False: its first call retries, as gRPC may still hold the outage's refusal for this address)
        with LaneDetClient(own_server.url, "tiny", connect=False) as fresh:
            fresh.detect(frame)
        answering.append(time.monotonic())

    restart = threading.Thread(target=restart_server)
    with LaneDetClient(own_server.url, "tiny", connect=False) as client:
        stream = LaneStream(client, camera, max_age=max_age).start()
        threads = {t for t in threading.enumerate() if t.name.startswith("lanestream")}
        assert len(threads) == 2
        try:
            start = time.monotonic()
            while time.monotonic() - start < 60:
                now = time.monotonic()
                result = stream.latest()
                longest_call = max(longest_call, time.monotonic() - now)
                timeline.append((now, result.state, result.seq))
                if first_ok is None and result.state == "ok":
                    first_ok = now  # the first call connects (model, shared memory): the timeline starts here
                if killed_at is None and first_ok is not None and now - first_ok > 1.0:
                    sigkill(own_server)
                    killed_at = time.monotonic()
                if killed_at and not restart.is_alive() and not ready and now - killed_at > 1.0:
                    restart.start()  # in the background: this thread goes on polling, as an app's would
                if answering and (now - answering[0] > 10.0 or now - answering[0] > 2.0 and any(
                        t > ready[0] and s == "ok" for t, s, _ in timeline[-400:])):
                    break  # lanes again after the restart (up to 10 s on a loaded machine, for the assertion below)
                time.sleep(0.005)
        finally:
            stop_started = time.monotonic()
            stats = stream.stop()
            stopped_in = time.monotonic() - stop_started
            camera.close()
        regions_at_stop = client.shm_regions
        assert not {t for t in threading.enumerate() if t.name.startswith("lanestream")}
        assert our_shm() == [] and regions_at_stop == []
        status = grpcclient.InferenceServerClient(own_server.url).get_system_shared_memory_status(as_json=True)
        assert not status.get("regions")
    restart.join()
    assert killed_at and ready
    ready_at = ready[0]
    before = [s for t, s, _ in timeline if first_ok <= t < killed_at]
    assert before.count("ok") > len(before) / 2, before
    unavailable = next(t for t, s, _ in timeline if t > killed_at and s == "unavailable")
    # within max_age + one frame period by design; the margin is for a loaded machine
    assert unavailable - killed_at < max_age + 1 / FPS + 0.4
    # no lanes while no server runs (the stream may be ok again a moment before wait_ready notices the server is ready)
    assert all(s != "ok" for t, s, _ in timeline if killed_at + max_age + 1 / FPS + 0.4 < t < restarted[0])
    back = next((t for t, s, _ in timeline if t > ready_at and s == "ok"), math.inf)
    # target 1 s after the server answers (BENCHMARKS.md); +2 s for a loaded machine
    assert back - max(ready_at, answering[0]) < 1.0 + 2.0
    # the app's thread was never blocked, and stop() took at most about one deadline
    assert longest_call < max_age and stopped_in < max_age + 1.0
    assert stats.frames_failed > 0 and stats.states.get("unavailable", 0) > 0


def test_stream_arguments_are_checked_in_one_line(server):
    with LaneDetClient(server.url, "tiny") as client:
        for kwargs, match in (({"max_age": 0}, "max_age must be a positive number"),
                              ({"fps": -3}, "fps must be a positive number"),
                              ({"track": True}, "track=True follows lane markers")):
            with pytest.raises(ClientError, match=match):
                LaneStream(client, [], **kwargs)
        with pytest.raises(ClientError, match="source must be"):
            LaneStream(client, 42)
        with pytest.raises(ClientError, match="does not exist"):
            LaneStream(client, "/nonexistent/drive.mp4")
        with pytest.raises(ClientError, match="needs a client with detect"):
            LaneStream(object(), [])
