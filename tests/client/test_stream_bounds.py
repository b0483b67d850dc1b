"""Issue 54, class 1: nothing the package starts blocks past its bound, beside a hung (SIGSTOPped) server as beside a
killed one. The real bundled tritonserver (tests/support/stream_server.py), the real clients and streams.

Each bound is the contract itself (edge_deploy/runtime/threads.py, docs/failures.md); the margin beside it is only
for a loaded machine's scheduling, never the size of the thing bounded.
"""
from __future__ import annotations

import threading
import time
import warnings

import numpy as np
import pytest
from camera_stub import SIZE, Camera
from stream_server import (  # noqa: F401 (tiny_artifact: a fixture)
    install_models, our_shm, registered_regions, serve, sigcont, sigstop, tiny_artifact)

from edge_deploy.client.base import CLOSE_WITHIN
from edge_deploy.client.sync_client import LaneDetClient
from edge_deploy.errors import ClientError
from edge_deploy.media.perception import PerceptionStream
from edge_deploy.media.stream import STOP_MARGIN, LaneStream

pytestmark = pytest.mark.triton

SCHEDULING = 0.15  # what a loaded 2-core machine may add to a bound before the call returns to the test
MAX_AGE = 0.1
BUSY_S = 0.5  # each request of the `busy` model: far longer than any bound below
CLOSE_BOUND = 1.0  # what docs/failures.md promises for close() (CLOSE_WITHIN)
FRAME = np.zeros((SIZE[0], SIZE[1], 3), np.uint8)


@pytest.fixture(scope="module")
def hangable(tmp_path_factory, tiny_artifact):
    """One server for the module, SIGSTOPped by each test and always SIGCONTinued after it."""
    work = tmp_path_factory.mktemp("hangable")
    install_models(work / "repo", tiny_artifact, slow={"busy": BUSY_S})
    proc = serve(work / "repo", work / "triton.log")
    yield proc
    sigcont(proc)
    proc.stop(timeout=15)


@pytest.fixture
def server(hangable):
    yield hangable
    sigcont(hangable)  # a test that failed half way leaves no hung server to the next


def wait_for(condition, within: float) -> bool:
    end = time.monotonic() + within
    while time.monotonic() < end:
        if condition():
            return True
        time.sleep(0.05)
    return condition()


def stream_until_ok(stream: LaneStream, within: float = 30.0) -> None:
    assert wait_for(lambda: stream.latest().state == "ok", within), stream.latest()


def test_stop_beside_a_hung_server_returns_within_max_age_and_leaves_no_registration(server):
    """Plant `self._threads.stop(within=self.deadline + 1.0)` in LaneStream.stop (or a release on the caller's
    thread, which waits for the hung call's lock) and the time fails; plant `self._unregister_later.update(...)` away
    in ModelClient.release and the registrations stay."""
    with LaneDetClient(server.url, "tiny", connect=False) as client:
        stops = []
        for _ in range(3):  # repeated stops must not pile registrations up on the server
            camera = Camera()
            try:
                stream = LaneStream(client, camera, max_age=MAX_AGE, deadline=5.0).start()
                stream_until_ok(stream)
                sigstop(server)
                time.sleep(MAX_AGE)  # a call is now in flight, hung
                started = time.monotonic()
                stream.stop()
                stops.append(time.monotonic() - started)
                assert all(t.daemon for t in threading.enumerate() if t.name.startswith("lanestream"))
            finally:
                sigcont(server)
                camera.close()
        assert max(stops) < MAX_AGE + STOP_MARGIN + SCHEDULING, stops
        # the server is back: what it held is dropped without another call of the app's
        assert wait_for(lambda: registered_regions(server.url) == [], 15), registered_regions(server.url)
        assert wait_for(lambda: our_shm() == [], 10), our_shm()
        assert client.detect(FRAME, deadline=10.0) is not None  # the client stays usable
    assert wait_for(lambda: registered_regions(server.url) == [], 15)


def test_stop_beside_a_busy_server_returns_within_max_age(server):
    """The `busy` model answers after BUSY_S each, far slower than max_age: stop() still returns within max_age.
    Plant a join without a timeout in Threads.stop and this fails."""
    camera = Camera()
    try:
        with LaneDetClient(server.url, "busy", connect=False) as client:
            stream = LaneStream(client, camera, max_age=MAX_AGE, deadline=5.0).start()
            assert wait_for(lambda: stream.stats().frames_processed >= 1, 30)
            assert wait_for(lambda: stream._worker.call_started is not None, 5)  # noqa: SLF001 - a call in flight
            started = time.monotonic()
            stream.stop()
            assert time.monotonic() - started < MAX_AGE + STOP_MARGIN + SCHEDULING
    finally:
        camera.close()


def test_close_beside_a_hung_server_returns_within_its_bound_and_cleans_up_once_it_is_back(server):
    """Plant `CLOSE_WITHIN = 30.0` (or one client_timeout per region, as before) and close() takes client_timeout."""
    client = LaneDetClient(server.url, "tiny")
    client.detect(FRAME)
    assert registered_regions(server.url)
    sigstop(server)
    try:
        started = time.monotonic()
        client.close()
        took = time.monotonic() - started
    finally:
        sigcont(server)
    assert CLOSE_WITHIN == CLOSE_BOUND and took < CLOSE_BOUND + SCHEDULING, took
    assert our_shm() == []  # unlinked here at once
    assert wait_for(lambda: registered_regions(server.url) == [], 15), registered_regions(server.url)


FIRST_CALL = """
import asyncio, sys, time
import numpy as np
from edge_deploy.client.async_client import AsyncLaneDetClient
from edge_deploy.errors import LanesUnavailable

async def main():
    client = AsyncLaneDetClient(sys.argv[1], "tiny", connect=False, max_in_flight=2)
    started = time.monotonic()
    try:
        await client.detect(np.zeros((590, 1640, 3), np.uint8), deadline=0.05)
        print("answered", time.monotonic() - started)
    except LanesUnavailable as exc:
        print(exc.reason, time.monotonic() - started)

asyncio.run(main())
"""


def test_the_async_clients_first_call_keeps_its_deadline(server):
    """A fresh process's first AsyncLaneDetClient call (the gRPC modules, the channel, the model, the regions)
    against a hung server ends within its deadline, as the sync client's does. A subprocess, because what the first
    call may not pay for is a fresh interpreter's: plant the `import tritonclient.grpc.aio` back inside
    `AsyncLaneDetClient._client` (the first call's), and the call takes the import's second or so."""
    import subprocess
    import sys

    sigstop(server)
    try:
        out = subprocess.run([sys.executable, "-c", FIRST_CALL, server.url], capture_output=True, text=True,
                             timeout=120, check=True).stdout.split()
    finally:
        sigcont(server)
    reason, took = out[0], float(out[1])
    assert reason in ("slow", "unreachable"), out
    assert took < 0.05 + SCHEDULING, out


def test_a_callable_source_with_nothing_new_is_polled_at_its_rate_and_stopped(server):
    """A camera callable that returns None is asked once a frame period, and not at all after stop(). Plant the
    old `self._stop.wait(self.period)` whose answer was ignored and the calls go on after stop()."""
    calls = []

    def nothing_yet():
        calls.append(time.monotonic())
        return None

    with LaneDetClient(server.url, "tiny", connect=False) as client:
        stream = LaneStream(client, nothing_yet, fps=20).start()
        time.sleep(0.5)
        stream.stop()
        stopped_at = len(calls)
        time.sleep(0.3)
    assert 3 <= stopped_at <= 0.5 * 20 + 3, stopped_at  # about 10, never thousands
    assert len(calls) == stopped_at
    assert not stream.running


@pytest.mark.parametrize("raised", [SystemExit, KeyboardInterrupt, RuntimeError])
def test_an_on_result_that_raises_anything_is_reported_and_the_stream_goes_on(server, raised):
    """Plant `except Exception` back in runtime.call_app and SystemExit ends the worker: iteration never ends."""
    frames = [FRAME] * 5
    seen = []

    def on_result(result):
        seen.append(result.seq)
        raise raised("the app's bug")

    with LaneDetClient(server.url, "tiny", connect=False) as client, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        stream = LaneStream(client, frames, fps=50, on_result=on_result, deadline=10.0).start()
        results = []
        done = threading.Event()

        def consume():
            results.extend(stream)
            done.set()

        threading.Thread(target=consume, daemon=True).start()
        assert done.wait(30), "iteration never ended"
        stream.stop()
    assert [r.seq for r in results if r.seq] and seen, (results, seen)
    assert sorted(set(seen)) == sorted({r.seq for r in results if r.seq})
    assert any(raised.__name__ in str(w.message) and "on_result" in str(w.message) for w in caught)


def test_a_perception_stream_stops_within_max_age_beside_a_hung_server(server):
    """PerceptionStream shares LaneStream's bound (runtime.Threads)."""
    camera = Camera()
    try:
        with LaneDetClient(server.url, "tiny", connect=False) as lanes:
            stream = PerceptionStream(camera, {"lanes": lanes}, max_age=MAX_AGE, deadline=5.0).start()
            assert wait_for(lambda: stream.latest()["lanes"].state == "ok", 30), stream.latest()
            sigstop(server)
            time.sleep(MAX_AGE)
            assert wait_for(lambda: stream.latest()["lanes"].state == "unavailable", 2)
            assert "no answer for" in (stream.latest()["lanes"].error or "")
            started = time.monotonic()
            stream.stop()
            took = time.monotonic() - started
            sigcont(server)
        assert took < MAX_AGE + STOP_MARGIN + SCHEDULING, took
        assert wait_for(lambda: registered_regions(server.url) == [], 15), registered_regions(server.url)
    finally:
        camera.close()
        sigcont(server)


def test_a_model_slower_than_max_age_gives_stale_lanes_and_says_so_once(server):
    """Issue 56 item 5: the `busy` model answers after BUSY_S, far later than max_age: its lanes come "stale", not
    "unavailable" (the default deadline is longer than max_age), and the stream warns once what to pass. Plant
    `return self.max_age` in default_deadline and every call is cut: "unavailable", no lanes."""
    camera = Camera()
    with LaneDetClient(server.url, "busy", connect=False) as client, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            stream = LaneStream(client, camera, max_age=MAX_AGE).start()
            assert wait_for(lambda: stream.stats().frames_processed >= 4, 30), stream.stats()
            stream.stop()
        finally:
            camera.close()
    stats = stream.stats()
    assert stats.states.get("stale", 0) >= 4 and stats.frames_failed == 0, stats
    late = [w for w in caught if "later than max_age=0.1 s" in str(w.message)]
    assert len(late) == 1 and "pass a max_age above its latency" in str(late[0].message)


# --- process=True: the stream in a child process --------------------------------------------------------------


@pytest.fixture(scope="module")
def drive_video(tmp_path_factory):
    """A 10 s video at 30 frames/s of synthetic roads (a file the child process opens itself)."""
    import cv2

    from edge_deploy.synthetic.roads import road_scene

    path = tmp_path_factory.mktemp("video") / "drive.mp4"
    writer = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"mp4v"), 30.0, (SIZE[1], SIZE[0]))
    frames = [road_scene(SIZE[1], SIZE[0], seed=seed)[0] for seed in range(5)]
    for index in range(300):
        writer.write(frames[index % len(frames)])
    writer.release()
    return path


def test_a_process_stream_hands_out_lanes_and_stops_within_its_bound(server, drive_video):
    """The reader and the worker in a child process: latest() gets the child's results through shared memory, with
    their state computed here; stop() keeps LaneStream's bound and the child releases its regions. Plant
    `return None` in ResultBoard.read and latest() never leaves 'no frame detected yet'."""
    with LaneDetClient(server.url, "tiny", connect=False) as client:
        stream = LaneStream(client, str(drive_video), max_age=0.5, process=True).start()
        try:
            assert wait_for(lambda: stream.latest().state == "ok", 60), stream.latest()
            result = stream.latest()
            assert result.seq > 0 and result.latency_s is not None and result.frame is None
            seqs = {stream.latest().seq for _ in range(3) if time.sleep(0.2) is None}
            assert len(seqs) > 1  # new results keep coming
            sigstop(server)
            assert wait_for(lambda: stream.latest().state == "unavailable", 5), stream.latest()
            assert "no answer for" in (stream.latest().error or "")
            started = time.monotonic()
            stats = stream.stop()
            took = time.monotonic() - started
        finally:
            sigcont(server)
            stream.stop()
    assert took < 0.5 + STOP_MARGIN + SCHEDULING, took
    assert stats.frames_processed > 0 and stats.frames_read >= stats.frames_processed, stats
    assert wait_for(lambda: not stream.running, 30)
    assert wait_for(lambda: registered_regions(server.url) == [], 15), registered_regions(server.url)


def test_a_process_stream_refuses_what_cannot_cross_a_process(server):
    with LaneDetClient(server.url, "tiny", connect=False) as client:
        for source, kwargs, words in (([FRAME], {}, "give a camera, GStreamer pipeline or video file by name"),
                                      ("x.mp4", {"on_result": print}, "where on_result= cannot run")):
            with pytest.raises(ClientError, match=words) as info:
                LaneStream(client, source, process=True, **kwargs)
            assert "\n" not in str(info.value)
        stream = LaneStream(client, "missing.mp4", process=True)
        with pytest.raises(ClientError, match="child process failed: .*missing.mp4"):
            stream.start()
        with pytest.raises(ClientError, match="latest\\(\\) only"):
            next(iter(stream))


def test_the_result_board_never_hands_out_a_torn_result():
    """A slot caught half-written (its bytes changed under its digest) is passed over for the other, whole one.
    Plant `continue` away after the digest check in ResultBoard.read and the torn bytes are unpickled."""
    from edge_deploy.media.stream_process import _HEADER, ResultBoard

    board = ResultBoard.create()
    reader = ResultBoard.attach(board.name)
    try:
        assert reader.read() is None
        board.write({"seq": 1, "lanes": list(range(100))})
        board.write({"seq": 2, "lanes": list(range(100))})
        assert reader.read()["seq"] == 2
        newest = board._slot(0)  # noqa: SLF001 - the second write went to slot 0
        board._buf[newest + _HEADER.size + 40] ^= 0xFF  # noqa: SLF001 - a byte rewritten under the reader
        assert reader.read()["seq"] == 1
        board.set_call(123.5)
        assert reader.call_started() == 123.5
        board.set_call(None)
        assert reader.call_started() is None
    finally:
        reader.close()
        board.close()
