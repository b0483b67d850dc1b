"""The results live over the Foxglove WebSocket protocol (`foxglove-sdk`): the same channels, schemas and CDR
messages as the MCAP file. Loopback unless another address is spelled out; the protocol has no authentication."""
from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import Any

from ..errors import ClientError
from .messages import Message
from .types import schema
from .._deps import require

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8765


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


def unauthenticated_warning(address: ListenAddress) -> str:
    return (f"warning: the Foxglove WebSocket server listens on {address}, beyond loopback; the protocol is "
            "unauthenticated: anyone who reaches this address sees the camera and the lanes.")


class FoxgloveLive:
    """A Foxglove WebSocket server on `address` publishing each `write`n message on its channel (a channel is
    advertised when its first message comes)."""

    def __init__(self, address: ListenAddress) -> None:
        foxglove = require("foxglove", "publishing live to Foxglove (--foxglove)")
        self._foxglove = foxglove
        self.address = address
        self._context = foxglove.Context()
        try:
            self._server = foxglove.start_server(name="edge-deploy", host=address.host, port=address.port,
                                                 context=self._context)
        except (RuntimeError, OSError) as exc:  # the SDK's FoxgloveError is a RuntimeError ("Failed to bind port")
            raise ClientError(f"--foxglove: cannot listen on {address} ({' '.join(str(exc).split())}); pass a free "
                              "port.") from None
        self._channels: dict[str, Any] = {}

    @property
    def port(self) -> int:
        return int(self._server.port)

    @property
    def subscribed(self) -> bool:
        """Whether a client subscribed to every channel advertised so far."""
        return all(channel.has_sinks() for channel in self._channels.values())

    def write(self, message: Message) -> None:
        channel = self._channels.get(message.topic)
        if channel is None:
            fox_schema = self._foxglove.Schema(name=message.msgtype, encoding="ros2msg", data=schema(message.msgtype))
            channel = self._foxglove.Channel(message.topic, schema=fox_schema, message_encoding="cdr",
                                             context=self._context)
            self._channels[message.topic] = channel
        channel.log(message.data, log_time=message.log_time_ns)

    def close(self, keep: bool = True) -> None:
        for channel in self._channels.values():
            channel.close()
        self._server.stop()
