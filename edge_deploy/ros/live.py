"""The results live over the Foxglove WebSocket protocol: the same channels, schemas and CDR messages as the MCAP
file. Loopback unless another address is spelled out, and beyond loopback only when asked for as insecure: the
protocol has no authentication.

The server is edge-deploy's own, on the `websockets` package: the subset of the Foxglove WebSocket protocol v1
(github.com/foxglove/ws-protocol, docs/spec.md before its removal; the same messages as foxglove-sdk's server) a
viewer needs: serverInfo, advertise, status, subscribe / unsubscribe, and binary messageData (opcode 1, the
subscription id as u32 and the log time as u64, little-endian, then the CDR bytes). It accepts a client that
offers `foxglove.websocket.v1` (@foxglove/ws-protocol, Lichtblick, older Foxglove builds) or `foxglove.sdk.v1`
(Foxglove today): foxglove-sdk's server answers the first with HTTP 400. Every channel of the run is advertised
to a client as it connects, before anything it sends is read, so a subscription never names a channel the server
has not yet taken (foxglove-sdk since 0.9.1 sends a channel's advertise before it records the channel as
advertised to that client, and a subscription read in between is refused as "unknown channel").

One event loop on a daemon thread serves every client; `write` (from the publishing thread) hands each message
to it. A client gets each channel's newest message when it subscribes, then every later one; one that reads
slower than frames come loses messages past QUEUE_BYTES queued for it (told once in a status message), never
the publishing thread's time.
"""
from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import ipaddress
import json
import logging
import struct
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypedDict

from ..core.deps import require
from ..errors import ClientError
from .messages import CHANNELS, Message
from .types import schema

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8765
SUBPROTOCOLS = ("foxglove.websocket.v1", "foxglove.sdk.v1")  # the same protocol v1 under either name
QUEUE_BYTES = 32 * 2**20  # what may wait for one client (about 100 camera frames as JPEG) before its messages drop
START_S = 10.0  # binding the port
FLUSH_S = 2.0  # close: what was written still goes out to each client, for at most this long
CLOSE_S = 1.0  # close: then each connection's closing handshake, for at most this long
_MESSAGE_DATA = 0x01
_LOG = logging.getLogger("edge_deploy.foxglove")
_LOG.addHandler(logging.NullHandler())
_LOG.propagate = False  # the websockets package's handshake and connection errors: each client is told instead


@dataclass(frozen=True)
class ListenAddress:
    host: str
    port: int

    @property
    def loopback(self) -> bool:
        if self.host == "localhost":
            return True
        try:
            return ipaddress.ip_address(self.host).is_loopback
        except ValueError:
            return False

    def __str__(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


def parse_listen(text: str) -> ListenAddress:
    """`PORT` (on 127.0.0.1) or `HOST:PORT` (`[V6]:PORT`), or a one-line ClientError."""
    text = text.strip()
    host, sep, port_text = text.rpartition(":")
    host = host.strip("[]") if sep else DEFAULT_HOST
    port_text = port_text if sep else text
    if not port_text.isdigit() or not 0 < int(port_text) < 65536 or (sep and not host):
        raise ClientError(f"--foxglove {text!r} is not [HOST:]PORT; pass e.g. 8765 (loopback) or 0.0.0.0:8765.")
    if host != "localhost":
        try:
            ipaddress.ip_address(host)
        except ValueError:
            raise ClientError(f"--foxglove {text!r}: {host} is not an IP address; pass one (127.0.0.1, 0.0.0.0, a "
                              "local interface's address).") from None
    return ListenAddress(host, int(port_text))


def check_exposure(address: ListenAddress, insecure: bool) -> None:
    """A one-line ClientError for an address beyond loopback unless `insecure` (--foxglove-insecure) says that
    publishing the camera there unauthenticated is meant, as `serve` asks --insecure for plaintext gRPC."""
    if not address.loopback and not insecure:
        raise ClientError(f"--foxglove {address} listens beyond loopback, and the Foxglove WebSocket protocol has no "
                          "authentication: anyone who reaches the address would see the camera and the lanes; keep "
                          f"127.0.0.1 and reach it through an SSH tunnel (ssh -L {address.port}:127.0.0.1:"
                          f"{address.port} VEHICLE), or add --foxglove-insecure to publish there anyway.")


def unauthenticated_warning(address: ListenAddress) -> str:
    return (f"warning: --foxglove-insecure: the Foxglove WebSocket server listens on {address}, beyond loopback; the "
            "protocol is unauthenticated: anyone who reaches this address sees the camera and the lanes.")


class _Advertisement(TypedDict):
    """One channel of a Foxglove `advertise` message, as sent."""

    id: int
    topic: str
    encoding: str
    schemaName: str
    schema: str
    schemaEncoding: str


@dataclass(frozen=True)
class _Channel:
    id: int
    topic: str
    msgtype: str

    def advertisement(self) -> _Advertisement:
        return {"id": self.id, "topic": self.topic, "encoding": "cdr", "schemaName": self.msgtype,
                "schema": schema(self.msgtype).decode(), "schemaEncoding": "ros2msg"}


class _Client:
    """One connection: its subscriptions (channel id -> subscription id) and what waits to be sent to it."""

    def __init__(self, ws: Any) -> None:
        self.ws = ws
        self.subscriptions: dict[int, int] = {}
        self.subscribed = False  # ever
        self.queue: collections.deque[str | bytes] = collections.deque()
        self.queued_bytes = 0
        self.dropping = False
        self.wake = asyncio.Event()
        self.drained = asyncio.Event()
        self.drained.set()

    def put(self, data: str | bytes, capped: bool = False) -> None:
        """Queue `data`; a `capped` message (message data) is dropped while QUEUE_BYTES wait for this client."""
        if capped:
            if self.queued_bytes + len(data) > QUEUE_BYTES:
                if not self.dropping:  # once per run of drops: the client is told, the publisher never waits
                    self.dropping = True
                    self.put(_status(1, "edge-deploy: this client reads slower than the frames come; messages "
                                        "are dropped until it catches up."))
                return
            self.dropping = False
        self.queue.append(data)
        self.queued_bytes += len(data)
        self.drained.clear()
        self.wake.set()

    async def send_loop(self) -> None:
        while True:
            while self.queue:
                data = self.queue.popleft()
                self.queued_bytes -= len(data)
                await self.ws.send(data)
            self.drained.set()
            self.wake.clear()
            await self.wake.wait()


def _status(level: int, message: str) -> str:
    return json.dumps({"op": "status", "level": level, "message": message})


class FoxgloveLive:
    """A Foxglove WebSocket server on `address` publishing each `write`n message on its channel. Every channel in
    `channels` (topic -> message type; those a run publishes) is advertised from the start; a message on any other
    topic advertises its channel when it comes. Beyond loopback only with `insecure` (a one-line ClientError
    before anything binds)."""

    def __init__(self, address: ListenAddress, channels: Mapping[str, str] = CHANNELS, *,
                 insecure: bool = False) -> None:
        check_exposure(address, insecure)
        require("websockets", "publishing live to Foxglove (--foxglove)")
        from websockets.asyncio.server import serve

        self.address = address
        self._channels: dict[str, _Channel] = {}
        for topic, msgtype in channels.items():
            self._channels[topic] = _Channel(len(self._channels) + 1, topic, msgtype)
        self._advertised = {c.id: c for c in self._channels.values()}
        self._latest: dict[int, tuple[int, bytes]] = {}  # channel id -> (log time, data) of its newest message
        self._clients: set[_Client] = set()
        self._session = str(time.time_ns())
        self._subscribers = 0  # clients that subscribed to a channel, since the start
        self._subscribed = threading.Condition()
        self._loop = asyncio.new_event_loop()
        self._stop: asyncio.Event | None = None
        started: concurrent.futures.Future[int] = concurrent.futures.Future()
        self._thread = threading.Thread(target=self._run, args=(serve, started), name="edge-deploy-foxglove",
                                        daemon=True)
        self._thread.start()
        try:
            self._port = started.result(timeout=START_S)
        except OSError as exc:
            self._thread.join(START_S)
            raise ClientError(f"--foxglove: cannot listen on {address} ({' '.join(str(exc).split())}); pass a free "
                              "port.") from None

    @property
    def port(self) -> int:
        return self._port

    def wait_for_subscriber(self, timeout: float, clients: int = 1) -> bool:
        """Whether `clients` clients have subscribed to a channel (since the start) within `timeout` seconds."""
        with self._subscribed:
            return self._subscribed.wait_for(lambda: self._subscribers >= clients, timeout)

    def write(self, message: Message) -> None:
        """Hand `message` to the server's loop (never waits for a client)."""
        self._loop.call_soon_threadsafe(self._publish, message)

    def close(self, keep: bool = True) -> None:
        """Send what was written (at most FLUSH_S), close every connection (at most CLOSE_S more) and the port."""
        if self._thread.is_alive() and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(FLUSH_S + CLOSE_S + 2)

    # --- on the server's loop ------------------------------------------------------------------------------

    def _run(self, serve: Any, started: concurrent.futures.Future[int]) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            self._loop.run_until_complete(self._main(serve, started))
        finally:
            if not started.done():  # it ended before it listened: said at once, not after START_S
                started.set_exception(RuntimeError("the Foxglove server's thread ended before it listened"))
            left = asyncio.all_tasks(self._loop)
            for task in left:
                task.cancel()
            if left:
                self._loop.run_until_complete(asyncio.wait(left, timeout=CLOSE_S))
            self._loop.close()

    async def _main(self, serve: Any, started: concurrent.futures.Future[int]) -> None:
        self._stop = asyncio.Event()
        try:
            server = await serve(self._serve_client, self.address.host, self.address.port,
                                 subprotocols=list(SUBPROTOCOLS), compression=None, close_timeout=CLOSE_S,
                                 server_header="edge-deploy", logger=_LOG)
        except OSError as exc:
            started.set_exception(exc)
            return
        started.set_result(next(iter(server.sockets)).getsockname()[1])
        await self._stop.wait()
        if self._clients:
            flushed = [asyncio.ensure_future(c.drained.wait()) for c in self._clients]
            await asyncio.wait(flushed, timeout=FLUSH_S)
            for waiter in flushed:
                waiter.cancel()
            for client in self._clients:
                if not client.drained.is_set():  # a client that stopped reading: no close handshake gets through
                    client.ws.transport.abort()
        server.close()
        try:
            await asyncio.wait_for(server.wait_closed(), CLOSE_S + 1)
        except asyncio.TimeoutError:
            pass  # what is left is cancelled as the loop ends (_run)

    async def _serve_client(self, ws: Any) -> None:
        client = _Client(ws)
        client.put(json.dumps({"op": "serverInfo", "name": "edge-deploy", "capabilities": [],
                               "sessionId": self._session}))
        if self._advertised:
            client.put(json.dumps({"op": "advertise",
                                   "channels": [c.advertisement() for c in self._advertised.values()]}))
        self._clients.add(client)
        sender = asyncio.ensure_future(client.send_loop())
        try:
            async for data in ws:
                self._on_client_message(client, data)
        except Exception:  # noqa: BLE001 - a connection that broke ends that client only
            pass
        finally:
            self._clients.discard(client)
            client.drained.set()
            sender.cancel()

    def _on_client_message(self, client: _Client, data: str | bytes) -> None:
        if isinstance(data, bytes):
            client.put(_status(1, "edge-deploy takes no binary messages from clients (clientPublish is not offered)."))
            return
        try:
            op = json.loads(data)
            kind = op["op"]
            if kind == "subscribe":
                for subscription in op["subscriptions"]:
                    self._subscribe(client, int(subscription["id"]), int(subscription["channelId"]))
            elif kind == "unsubscribe":
                gone = {int(i) for i in op["subscriptionIds"]}
                client.subscriptions = {c: s for c, s in client.subscriptions.items() if s not in gone}
            else:
                client.put(_status(1, f"edge-deploy does not handle op {str(kind)[:40]!r} (only subscribe and "
                                      "unsubscribe)."))
        except (ValueError, KeyError, TypeError) as exc:
            client.put(_status(2, f"edge-deploy could not read this message ({type(exc).__name__}: "
                                  f"{str(exc)[:80]}): {data[:80]!r}"))

    def _subscribe(self, client: _Client, subscription: int, channel_id: int) -> None:
        if not 0 <= subscription < 2**32:
            client.put(_status(2, f"subscription id {subscription} is not a uint32; ignored."))
            return
        if channel_id not in self._advertised:
            client.put(_status(2, f"edge-deploy has no channel {channel_id}; subscribe to an advertised one."))
            return
        if channel_id in client.subscriptions or subscription in client.subscriptions.values():
            client.put(_status(1, f"subscription {subscription} to channel {channel_id}: the channel or the "
                                  "subscription id is already in use; ignored."))
            return
        first = not client.subscribed
        client.subscriptions[channel_id] = subscription
        client.subscribed = True
        latest = self._latest.get(channel_id)
        if latest is not None:
            client.put(_message_data(subscription, *latest), capped=True)
        if first:
            with self._subscribed:
                self._subscribers += 1
                self._subscribed.notify_all()

    def _publish(self, message: Message) -> None:
        channel = self._channels.get(message.topic)
        if channel is None:  # a topic the run did not announce: advertised now, before its first message
            channel = _Channel(len(self._channels) + 1, message.topic, message.msgtype)
            self._channels[message.topic] = channel
            self._advertised[channel.id] = channel
            advertise = json.dumps({"op": "advertise", "channels": [channel.advertisement()]})
            for client in self._clients:
                client.put(advertise)
        self._latest[channel.id] = (message.log_time_ns, message.data)
        for client in self._clients:
            subscription = client.subscriptions.get(channel.id)
            if subscription is not None:
                client.put(_message_data(subscription, message.log_time_ns, message.data), capped=True)


def _message_data(subscription: int, log_time_ns: int, data: bytes) -> bytes:
    return struct.pack("<BIQ", _MESSAGE_DATA, subscription, min(max(0, log_time_ns), 2**64 - 1)) + data
