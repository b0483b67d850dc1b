"""Every Foxglove client gets the live run from frame 0 (issue 54, class 6): real WebSocket clients (the
`websockets` package) that each offer ONE subprotocol, as Foxglove's own clients do: `foxglove.websocket.v1`
(@foxglove/ws-protocol, Lichtblick, older Foxglove builds; foxglove-sdk's server answered it HTTP 400) and
`foxglove.sdk.v1` (Foxglove today). Each is advertised every channel of the run before frame 0, subscribes, and
receives frame 0 and every later frame, byte for byte; `infer VIDEO --realtime --camera --foxglove` delivers its
images every time (5 runs); an address beyond loopback is refused without --foxglove-insecure, before anything
binds. The messages follow the ws-protocol spec (serverInfo, advertise, subscribe, binary messageData = opcode 1,
subscription id u32, log time u64, payload)."""
from __future__ import annotations

import asyncio
import json
import socket
import struct
import threading
import time
from pathlib import Path

import pytest

websockets = pytest.importorskip("websockets")
pytest.importorskip("mcap_ros2")

from cli_process import run_cli  # noqa: E402
from conftest import free_port  # noqa: E402
from ros_results import road_results  # noqa: E402

from edge_deploy.errors import ClientError  # noqa: E402
from edge_deploy.ros import Publisher  # noqa: E402
from edge_deploy.ros.live import FoxgloveLive, ListenAddress, parse_listen  # noqa: E402
from edge_deploy.ros.messages import IMAGE, LANES, frame_messages, run_channels  # noqa: E402

V1, SDK_V1 = "foxglove.websocket.v1", "foxglove.sdk.v1"
RECV_S = 10  # one message from a server on this machine (generous: a loaded 2-core machine)


async def connect(port: int, subprotocol: str, deadline_s: float = RECV_S):
    """A client offering only `subprotocol`; retried until the server listens (a command still starting)."""
    deadline = time.monotonic() + deadline_s
    while True:
        try:
            return await websockets.connect(f"ws://127.0.0.1:{port}", subprotocols=[subprotocol],
                                            max_size=2**24)
        except OSError:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.05)


async def advertised_and_subscribed(ws) -> tuple[list[str], dict[int, str]]:
    """The ops before the first frame (serverInfo, then advertise: nothing is written yet) and the subscription
    ids -> topic of a subscription to every advertised channel."""
    try:
        ops = [json.loads(await asyncio.wait_for(ws.recv(), RECV_S)) for _ in range(2)]
    except asyncio.TimeoutError:
        pytest.fail(f"no serverInfo and advertise within {RECV_S} s of connecting, before any frame: the channels "
                    "must be advertised before frame 0")
    assert [op["op"] for op in ops] == ["serverInfo", "advertise"], ops
    channels = ops[1]["channels"]
    assert all((c["encoding"], c["schemaEncoding"]) == ("cdr", "ros2msg") and c["schema"] for c in channels)
    topics = {i: c["topic"] for i, c in enumerate(channels, 1)}
    await ws.send(json.dumps({"op": "subscribe", "subscriptions": [
        {"id": i, "channelId": c["id"]} for i, c in enumerate(channels, 1)]}))
    return [c["topic"] for c in channels], topics


async def received(ws, topics: dict[int, str]) -> dict[str, list[tuple[int, bytes]]]:
    """Every message until the server closes: topic -> [(log time, CDR bytes), ...] in order of arrival."""
    got: dict[str, list[tuple[int, bytes]]] = {topic: [] for topic in topics.values()}
    try:
        while True:
            data = await asyncio.wait_for(ws.recv(), RECV_S)
            if isinstance(data, bytes):
                assert data[0] == 0x01, data[:1]
                subscription, log_time = struct.unpack_from("<IQ", data, 1)
                got[topics[subscription]].append((log_time, data[13:]))
    except websockets.ConnectionClosed:
        return got


def test_a_client_of_either_subprotocol_gets_every_channel_before_frame_0_and_every_frame():
    """Both clients at once on one run: each is answered with the name it offered, sees every channel of the run
    advertised before frame 0, and receives frames 0-3 on every channel, byte for byte as published (planted:
    SUBPROTOCOLS without foxglove.websocket.v1 -> HTTP 400; the channels advertised with their first message
    -> no advertise before frame 0)."""
    results = road_results(4)
    channels = run_channels(camera=True)
    publisher = Publisher.open(foxglove=ListenAddress("127.0.0.1", free_port()), channels=channels)

    def run() -> None:
        for result in results:
            publisher(result)
        publisher.close()

    async def main():
        loop = asyncio.get_running_loop()
        clients = {name: await connect(publisher.sinks[0].port, name) for name in (V1, SDK_V1)}
        try:
            before = {name: await advertised_and_subscribed(ws) for name, ws in clients.items()}
            assert await loop.run_in_executor(None, publisher.wait_for_subscriber, RECV_S, 2)
            collectors = {name: asyncio.ensure_future(received(ws, before[name][1])) for name, ws in clients.items()}
            await loop.run_in_executor(None, run)
            return ({name: ws.subprotocol for name, ws in clients.items()},
                    {name: topics for name, (topics, _) in before.items()},
                    {name: await collector for name, collector in collectors.items()})
        finally:
            for ws in clients.values():
                await ws.close()

    chosen, advertised, got = asyncio.run(main())
    assert chosen == {V1: V1, SDK_V1: SDK_V1}
    assert advertised == {V1: list(channels), SDK_V1: list(channels)}
    want: dict[str, list[tuple[int, bytes]]] = {topic: [] for topic in channels}
    for result in results:
        for message in frame_messages(result):
            want[message.topic].append((message.log_time_ns, message.data))
    assert all(len(messages) == len(results) for messages in want.values())
    for name in (V1, SDK_V1):
        assert got[name] == want, name  # frame 0 first, then every frame, on every channel


def test_a_client_offering_neither_name_is_refused_in_the_handshake():
    live = FoxgloveLive(ListenAddress("127.0.0.1", free_port()), run_channels(camera=False))
    try:
        for offered in (["foxglove.websocket.v2"], None):
            with pytest.raises(websockets.InvalidHandshake, match="400"):
                asyncio.run(_open(f"ws://127.0.0.1:{live.port}", offered))
    finally:
        live.close()


async def _open(url: str, offered: list[str] | None) -> None:
    ws = await websockets.connect(url, subprotocols=offered)
    await ws.close()


def test_beyond_loopback_is_refused_without_foxglove_insecure_before_anything_binds(tmp_path):
    """A port held by another socket on 0.0.0.0: the refusal is the exposure, not "cannot listen" (it comes first),
    and the CLI refuses before any request (nothing listens at --url) and writes nothing (planted: check_exposure
    that returns at once -> no ClientError / exit 0 or another line)."""
    with socket.socket() as busy:
        busy.bind(("0.0.0.0", 0))
        busy.listen()
        port = busy.getsockname()[1]
        for text in (f"0.0.0.0:{port}", f"[::]:{port}"):
            with pytest.raises(ClientError, match="beyond loopback.*--foxglove-insecure") as exc:
                FoxgloveLive(parse_listen(text))
            assert "\n" not in str(exc.value)
        with pytest.raises(ClientError, match="cannot listen"):  # with it, the bind itself is tried
            FoxgloveLive(parse_listen(f"0.0.0.0:{port}"), insecure=True)
    (tmp_path / "drive.mp4").write_bytes(b"")  # never opened: the options are checked first
    url = f"127.0.0.1:{free_port()}"
    out = tmp_path / "out"
    for extra, words in ((("--foxglove", f"0.0.0.0:{free_port()}"), "beyond loopback"),
                         (("--foxglove-insecure",), "goes with --foxglove"),
                         (("--foxglove", "8765", "--foxglove-wait", "nan"), "seconds in [0, 3600]")):
        result = run_cli(["infer", str(tmp_path / "drive.mp4"), "--url", url, "--out", str(out), *extra],
                         timeout=60)
        lines = result.stderr.strip().splitlines()
        assert result.returncode == 2 and len(lines) == 1 and lines[0].startswith("error: "), result
        assert words in lines[0], lines[0]
        assert not out.exists()


# --- the realtime + camera path, through the command (a real tritonserver) -------------------------------------


@pytest.fixture(scope="module")
def tiny_server(tmp_path_factory, laneatt_data):
    from small_artifact import make_artifact
    from triton_helpers import serving

    from edge_deploy.deploy.install import install
    from edge_deploy.deploy.options import InstallOptions

    work = tmp_path_factory.mktemp("foxglove_clients")
    install(InstallOptions(make_artifact(work / "artifact", laneatt_data / "anchors_2784x77.npy"), work / "repo",
                           "tiny", runtime="python", pipeline=True))
    with serving(work / "repo", work) as proc:
        yield proc


@pytest.mark.slow
@pytest.mark.triton
def test_infer_realtime_with_a_camera_delivers_its_images_to_a_v1_client_every_time(tmp_path, tiny_server):
    """Issue 54: `infer VIDEO --realtime --camera CALIB --foxglove` delivered 0 images in 4 of 5 runs
    (foxglove-sdk refused the subscription as "unknown channel: 1"). 5 runs of 10 frames, each with a client
    offering only foxglove.websocket.v1 that subscribes to what it is advertised (--foxglove-wait holds frame 0
    for it): every run's channels are advertised before frame 0, and every frame the run detected (a JSON line)
    reaches the client on the image and lanes channels (planted: the camera left out of infer's channels ->
    the markers advertised late; the channels advertised with their first message -> no advertise, no images)."""
    made = run_cli(["sample", "--video", "--out", str(tmp_path), "-n", "10", "--width", "328", "--height", "120"])
    assert made.returncode == 0, made.stderr

    async def one_run(i: int) -> tuple[object, list[str], dict[str, list[tuple[int, bytes]]]]:
        port = free_port()
        loop = asyncio.get_running_loop()
        command = loop.run_in_executor(None, lambda: run_cli(
            ["infer", str(tmp_path / "drive.mp4"), "--url", tiny_server.url, "--model", "tiny", "--out",
             str(tmp_path / f"out{i}"), "--realtime", "--max-age", "1.0", "--camera",
             str(tmp_path / "drive.calib.yaml"), "--foxglove", str(port), "--foxglove-wait", "30"], timeout=120))
        try:
            ws = await connect(port, V1, deadline_s=60)
            try:
                advertised, topics = await advertised_and_subscribed(ws)
                got = await received(ws, topics)
            finally:
                await ws.close()
        finally:
            result = await command
        return result, advertised, got

    for i in range(5):
        result, advertised, got = asyncio.run(one_run(i))
        assert result.returncode == 0, result.stderr
        assert advertised == list(run_channels(camera=True)), i
        lines = (tmp_path / f"out{i}" / "drive.lanes.jsonl").read_text().splitlines()
        stamps = [t for t, _ in got[IMAGE]]
        assert len(lines) > 0 and len(stamps) == len(lines), (i, len(lines), len(stamps))
        assert stamps == sorted(stamps) and [t for t, _ in got[LANES]] == stamps, i
        assert Path(tmp_path / f"out{i}" / "drive.lanes.mp4").exists()


# --- closing: what was written goes out first; a client that stopped reading cannot hold the run ----------------

BIG = 1 << 20  # a message larger than what the loopback socket buffers hold in a few


def test_close_sends_every_message_written_before_it():
    """24 MB written, then close() while the client has not read any of it (more than the socket buffers hold):
    close waits for the client to read it all before the close frame (planted: close without waiting for each
    client's queue -> the messages still queued cut off)."""
    from edge_deploy.ros.messages import Message

    live = FoxgloveLive(ListenAddress("127.0.0.1", free_port()), {"/big": "std_msgs/msg/String"})
    payloads = [bytes([i]) * BIG for i in range(24)]
    closing = threading.Event()

    def write_all_then_close() -> None:
        for i, data in enumerate(payloads):
            live.write(Message("/big", "std_msgs/msg/String", data, i))
        closing.set()
        live.close()

    async def main():
        loop = asyncio.get_running_loop()
        ws = await connect(live.port, V1)
        try:
            _, topics = await advertised_and_subscribed(ws)
            assert await loop.run_in_executor(None, live.wait_for_subscriber, RECV_S)
            closed = loop.run_in_executor(None, write_all_then_close)
            assert await loop.run_in_executor(None, closing.wait, RECV_S)  # nothing read until close() is called
            got = await received(ws, topics)
            await closed
            return got
        finally:
            await ws.close()

    got = asyncio.run(main())
    assert [t for t, _ in got["/big"]] == list(range(24)) and [d for _, d in got["/big"]] == payloads


def test_close_is_bounded_beside_a_client_that_stopped_reading():
    """A client that completed the handshake, subscribed, then never reads again (a hung viewer): 32 MB written,
    close() still returns within FLUSH_S + CLOSE_S + 2 s (its bound), the server gone, and the publishing thread
    never waited (planted: the flush waited without its timeout -> the server still listens after close)."""
    from edge_deploy.ros.live import CLOSE_S, FLUSH_S
    from edge_deploy.ros.messages import Message

    live = FoxgloveLive(ListenAddress("127.0.0.1", free_port()), {"/big": "std_msgs/msg/String"})
    stalled = socket.create_connection(("127.0.0.1", live.port))
    try:
        stalled.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        stalled.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                        b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n"
                        b"Sec-WebSocket-Protocol: foxglove.websocket.v1\r\n\r\n")
        frame = json.dumps({"op": "subscribe", "subscriptions": [{"id": 1, "channelId": 1}]}).encode()
        mask = b"\x01\x02\x03\x04"
        stalled.sendall(bytes([0x81, 0x80 | len(frame)]) + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(frame)))
        assert live.wait_for_subscriber(RECV_S)
        started = time.monotonic()
        for i in range(32):
            live.write(Message("/big", "std_msgs/msg/String", b"x" * BIG, i))
        written = time.monotonic() - started
        live.close()
        closed = time.monotonic() - started
    finally:
        stalled.close()
    assert written < 1.0  # handing 32 MB to the loop: no client's pace in it (a bound of 1 s for a 2-core machine)
    assert closed < FLUSH_S + CLOSE_S + 2 + 1.0
    with pytest.raises(ConnectionRefusedError):  # the server is gone, not left behind on its thread
        socket.create_connection(("127.0.0.1", live.port), timeout=RECV_S).close()
