"""edge_deploy.ros.live: the Foxglove WebSocket server, checked by a client written here with `websockets` from
the published ws-protocol spec (github.com/foxglove/ws-protocol: serverInfo, advertise, subscribe, binary
messageData = opcode 1, subscription id u32, log time u64, payload); loopback unless an address is spelled out."""
from __future__ import annotations

import asyncio
import json
import struct
from pathlib import Path

import pytest

websockets = pytest.importorskip("websockets")

from conftest import free_port  # noqa: E402
from ros_results import road_results  # noqa: E402
from mcap_ros2.decoder import DecoderFactory  # noqa: E402

from edge_deploy.errors import ClientError  # noqa: E402
from edge_deploy.ros.live import FoxgloveLive, parse_listen, unauthenticated_warning  # noqa: E402
from edge_deploy.ros.messages import CHANNELS, frame_messages, run_channels  # noqa: E402

SUBPROTOCOLS = ["foxglove.sdk.v1", "foxglove.websocket.v1"]


def listening_on(port: int) -> list[str]:
    """The local addresses (hex, as /proc/net/tcp writes them) with a socket listening on `port`."""
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            address, port_hex = local.rsplit(":", 1)
            if state == "0A" and int(port_hex, 16) == port:
                found.append(address)
    return found


def test_a_client_is_advertised_the_channels_subscribes_and_receives_a_frames_messages():
    results = road_results(2)
    live = FoxgloveLive(parse_listen(str(free_port())), run_channels(camera=True))
    try:
        for message in frame_messages(results[0]):  # no one subscribed yet: the newest of each is kept
            live.write(message)
        received = asyncio.run(_client(live, results[1]))
    finally:
        live.close()
    advertised, latched, messages = received
    published = {m.topic: m.msgtype for m in frame_messages(results[0])}  # no detector: no detection channels
    assert {c["topic"]: (c["schemaName"], c["schemaEncoding"], c["encoding"]) for c in advertised} == {
        topic: (msgtype, "ros2msg", "cdr") for topic, msgtype in published.items()}
    assert set(messages) == set(published) and set(published) <= set(CHANNELS)
    assert {log_time for log_time, _ in messages.values()} == {results[1].frame.stamp_ns}
    assert set(latched) == set(published)  # a client subscribing mid-run gets each channel's newest at once
    assert {log_time for log_time, _ in latched.values()} == {results[0].frame.stamp_ns}
    decoders = {c["topic"]: DecoderFactory().decoder_for("cdr", _schema(c)) for c in advertised}
    marker = decoders["/edge_deploy/lanes"](messages["/edge_deploy/lanes"][1])
    want = [(float(x), float(y)) for lane in results[1].lanes for a, b in zip(lane.points, lane.points[1:])
            for x, y in (a, b)]
    assert [(p.x, p.y) for p in marker.points] == want
    lane_markers = decoders["/edge_deploy/lane_markers"](messages["/edge_deploy/lane_markers"][1])
    assert lane_markers.ego_left.c0 == results[1].found.markers.ego_left.c0


def _schema(channel: dict):
    from mcap.records import Schema

    return Schema(id=1, name=channel["schemaName"], encoding=channel["schemaEncoding"],
                  data=channel["schema"].encode())


async def _client(live: FoxgloveLive, result) -> tuple[list[dict], dict[str, tuple[int, bytes]],
                                                       dict[str, tuple[int, bytes]]]:
    async with websockets.connect(f"ws://127.0.0.1:{live.port}", subprotocols=SUBPROTOCOLS) as ws:
        advertised: list[dict] = []
        while len(advertised) < len(frame_messages(result)):
            op = json.loads(await asyncio.wait_for(ws.recv(), 10))
            if op["op"] == "advertise":
                advertised += op["channels"]
        by_subscription = {i: c["topic"] for i, c in enumerate(advertised, 1)}
        await ws.send(json.dumps({"op": "subscribe", "subscriptions": [
            {"id": i, "channelId": c["id"]} for i, c in enumerate(advertised, 1)]}))
        assert await asyncio.get_running_loop().run_in_executor(None, live.wait_for_subscriber, 10)
        latched = await _one_each(ws, by_subscription)  # each channel's newest message, sent on subscribing
        for message in frame_messages(result):
            live.write(message)
        return advertised, latched, await _one_each(ws, by_subscription)


async def _one_each(ws, by_subscription: dict[int, str]) -> dict[str, tuple[int, bytes]]:
    """A message on each subscribed channel: topic -> (log time, CDR bytes)."""
    messages: dict[str, tuple[int, bytes]] = {}
    while len(messages) < len(by_subscription):
        data = await asyncio.wait_for(ws.recv(), 10)
        if isinstance(data, bytes) and data[0] == 0x01:
            subscription, log_time = struct.unpack_from("<IQ", data, 1)
            messages[by_subscription[subscription]] = (log_time, data[13:])
    return messages


def test_it_listens_on_loopback_unless_an_address_is_spelled_out():
    port = free_port()
    address = parse_listen(str(port))
    assert (address.host, address.port, address.loopback) == ("127.0.0.1", port, True)
    live = FoxgloveLive(address)
    try:
        assert listening_on(port) == ["0100007F"]  # 127.0.0.1 only
    finally:
        live.close()
    wide = parse_listen(f"0.0.0.0:{free_port()}")
    assert not wide.loopback and "unauthenticated" in unauthenticated_warning(wide)
    assert "\n" not in unauthenticated_warning(wide)
    live = FoxgloveLive(wide, insecure=True)
    try:
        assert listening_on(wide.port) == ["00000000"]
    finally:
        live.close()


@pytest.mark.parametrize("text", ["", "host", "127.0.0.1:", "127.0.0.1:99999", "example.com:8765", ":8765x"])
def test_bad_addresses_are_one_line(text):
    with pytest.raises(ClientError) as exc:
        parse_listen(text)
    assert "\n" not in str(exc.value)


def test_a_port_in_use_is_one_line():
    live = FoxgloveLive(parse_listen(str(free_port())))
    try:
        with pytest.raises(ClientError, match="cannot listen on 127.0.0.1"):
            FoxgloveLive(parse_listen(str(live.port)))
    finally:
        live.close()


def test_the_documented_ipv6_form_is_accepted():
    """`--foxglove [::1]:8765` (docs/recordings.md): the brackets come off, the port stays (issue 55 item 15; plant
    `host = host if sep else DEFAULT_HOST` in ros/live.py and this fails)."""
    address = parse_listen("[::1]:8765")
    assert (address.host, address.port) == ("::1", 8765)
    assert parse_listen("[::]:8765").host == "::"
