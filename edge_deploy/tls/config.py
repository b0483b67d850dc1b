"""TLS for the lane clients: which files to present, and what a refused handshake means.

`TLSConfig(ca=..., cert=..., key=...)` makes the client speak gRPC over TLS
(tritonclient's ssl=True, root_certificates, private_key, certificate_chain): `ca`
is the CA that signed the server's certificate, `cert`/`key` this client's own
certificate for a server that requires mutual TLS (`edge-deploy serve --tls-ca`).
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypedDict

from ..errors import ClientError

ChannelArgs = list[tuple[str, Any]]  # gRPC channel options: (name, value), values of gRPC's types


class TLSKwargs(TypedDict):
    """tritonclient InferenceServerClient's TLS keyword arguments (grpc and grpc.aio): PEM file paths."""

    ssl: bool
    root_certificates: str | None
    private_key: str | None
    certificate_chain: str | None


class _Channel(TypedDict):
    channel_args: ChannelArgs


class ClientOptions(_Channel, total=False):
    """InferenceServerClient's keyword arguments for a connection: channel_args always, the TLS ones with TLS."""

    ssl: bool
    root_certificates: str | None
    private_key: str | None
    certificate_chain: str | None


@dataclass(frozen=True)
class TLSConfig:
    """Files for a TLS connection (PEM): the CA to trust, and this client's certificate and key.

    server_name: the name checked against the server's certificate when it is not the host
    in the URL (e.g. dialing 10.0.0.5 when the certificate names the Orin's host name).
    """

    ca: str | Path | None = None
    cert: str | Path | None = None
    key: str | Path | None = None
    server_name: str | None = None

    def __post_init__(self) -> None:
        if (self.cert is None) != (self.key is None):
            raise ClientError("TLSConfig needs both cert and key (this client's certificate and its private key), "
                              "or neither.")
        for what, path in (("ca", self.ca), ("cert", self.cert), ("key", self.key)):
            if path is not None and not os.access(path, os.R_OK):
                why = "does not exist" if not Path(path).exists() else "is not readable by this user"
                raise ClientError(f"TLS {what} file {path} {why}; pass the files `edge-deploy certs issue` wrote.")
            if path is not None:
                _check_pem(what, Path(path))

    def client_kwargs(self) -> TLSKwargs:
        """Keyword arguments for tritonclient's InferenceServerClient (grpc and grpc.aio)."""
        return {
            "ssl": True,
            "root_certificates": str(self.ca) if self.ca is not None else None,
            "private_key": str(self.key) if self.key is not None else None,
            "certificate_chain": str(self.cert) if self.cert is not None else None,
        }

    def channel_args(self, base: ChannelArgs) -> ChannelArgs:
        """`base` plus the server-name override, when one is set."""
        if self.server_name:
            return [*base, ("grpc.ssl_target_name_override", self.server_name)]
        return list(base)


def _check_pem(what: str, path: Path) -> None:
    """ClientError when a TLS file is not PEM of its kind: gRPC would only fail the handshake later, which reads as an
    unreachable server (`bench --tls-ca notes.txt`)."""
    from ..core.bounded_read import open_regular  # a FIFO given as a certificate would block the open forever

    hint = "pass the files `edge-deploy certs issue` wrote."
    try:
        with open_regular(path, f"TLS {what} file", ClientError, hint) as fh:
            head = fh.read(1 << 20)
    except OSError as exc:
        raise ClientError(f"TLS {what} file {path} cannot be read ({exc.strerror or exc}); pass the files "
                          "`edge-deploy certs issue` wrote.") from None
    kind, marker = ("private key", b"PRIVATE KEY-----") if what == "key" else \
        ("certificate", b"-----BEGIN CERTIFICATE-----")
    if marker not in head:
        raise ClientError(f"TLS {what} file {path} is not a PEM {kind} (no {marker.decode().strip('-')} block); pass "
                          "the files `edge-deploy certs issue` wrote (ca.pem, NAME.pem, NAME.key).")


def client_options(tls: TLSConfig | None, base: ChannelArgs) -> ClientOptions:
    """InferenceServerClient keyword arguments for plaintext (tls None) or TLS."""
    if tls is None:
        return ClientOptions(channel_args=list(base))
    return ClientOptions(**tls.client_kwargs(), channel_args=tls.channel_args(base))


# What gRPC's handshake errors say (grpc 1.6x with BoringSSL), and what they mean. A refusal by the
# server reaches the client only as "Socket closed": with TLS 1.3 the server checks the client's
# certificate after the client has finished its side and just closes the connection, so no
# certificate, one from another CA, an expired one and a plaintext client all look the same.
# `explain_refusal` narrows that down with what the client knows of its own files.
_CLIENT_SIDE = (
    ("hostname verification", "the server's certificate does not name the address dialed (wrong server name): "
                              "dial a name or address the certificate holds, or set TLSConfig(server_name=...)"),
    ("peer name", "the server's certificate does not name the address dialed (wrong server name): "
                  "dial a name or address the certificate holds, or set TLSConfig(server_name=...)"),
    ("certificate_verify_failed", "the server's certificate is not signed by the CA in TLSConfig(ca=...) "
                                  "(another vehicle's server, or the wrong ca.pem)"),
    ("wrong_version_number", "the server does not speak TLS on this port; connect without TLSConfig"),
    ("handshake failed", "the TLS handshake failed"),
)
SOCKET_CLOSED = "socket closed"


class _DecodedCert(TypedDict, total=False):
    """The keys of the standard library's decoded certificate read here (as ssl.SSLSocket.getpeercert gives)."""

    subject: tuple[tuple[tuple[str, str], ...], ...]
    issuer: tuple[tuple[tuple[str, str], ...], ...]
    notAfter: str


def _decode_cert(path: str | Path) -> _DecodedCert | None:
    """subject, issuer, notAfter of a PEM certificate through the standard library (None if it cannot tell)."""
    import ssl

    try:
        decoded: _DecodedCert = ssl._ssl._test_decode_cert(str(path))  # type: ignore[attr-defined]  # stdlib's own
        return decoded
    except Exception:  # noqa: BLE001 - private API or unreadable: no diagnosis
        return None


def handshake_failure(message: str) -> bool:
    """Whether a gRPC error message is a TLS handshake failure the client itself detected."""
    lowered = message.lower()
    return any(fragment in lowered for fragment, _ in _CLIENT_SIDE)


def explain_refusal(tls: TLSConfig | None, message: str) -> str | None:
    """Why a connection failed at the TLS layer, in words; None when the message is not about TLS."""
    import time

    lowered = message.lower()
    for fragment, meaning in _CLIENT_SIDE:
        if fragment in lowered:
            return meaning
    if SOCKET_CLOSED not in lowered:
        return None
    if tls is None:
        return ("the server closed the connection at once: it serves TLS on this port (`serve --tls-*`); "
                "connect with tls=TLSConfig(ca=..., cert=..., key=...)")
    if tls.cert is None:
        return ("the server closed the connection during the TLS handshake: it requires a client certificate "
                "(mutual TLS) and none was sent; pass TLSConfig(cert=..., key=...) from `edge-deploy certs issue`")
    mine, ca = _decode_cert(tls.cert), _decode_cert(tls.ca) if tls.ca is not None else None
    if mine is not None:
        import ssl

        try:
            expired = ssl.cert_time_to_seconds(mine["notAfter"]) < time.time()
        except (KeyError, ValueError):
            expired = False
        if expired:
            return (f"the server refused this client's certificate {tls.cert}: it expired on {mine['notAfter']}; "
                    "issue a new one with `edge-deploy certs issue NAME`")
        if ca is not None and mine.get("issuer") != ca.get("subject"):
            return (f"the server refused this client's certificate {tls.cert}: it is not signed by the CA that "
                    "signed the server's certificate; issue one from the server's CA (`edge-deploy certs issue NAME`)")
    return (f"the server refused this client's certificate {tls.cert} (not signed by the CA it trusts, "
            "or revoked); its log says which")
