"""Who may reach the gRPC endpoint: TLS and the allowed networks for a listen address.

On loopback nothing is required (TLS only when its files are given). Beyond loopback gRPC is
served only with mutual TLS (the files given, else `edge-deploy certs`' in `<state dir>/tls`)
unless `insecure`, and the unit's IPAddressAllow= names the networks that may connect
(`allow_from`, else the subnets of the listen address's interface).
"""
from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import ServerError
from .addresses import check_cidrs, is_loopback, local_subnets
from .argv import ServerTLS
from ..tls.certs import ADMIN_CLIENT, SERVER, CertificateAuthority, cert_not_after
from ..core.progress import Reporter
from ..core.state import state_dir



@dataclass(frozen=True)
class NetworkPolicy:
    """How a listen address is served: its TLS (None: plaintext) and the CIDRs allowed beyond loopback."""

    tls: ServerTLS | None = None
    allow_from: list[str] = field(default_factory=list)  # empty on loopback


def network_policy(
    scope: str,
    address: str,
    *,
    cert: Path | None = None,
    key: Path | None = None,
    ca: Path | None = None,
    client_cert: Path | None = None,
    client_key: Path | None = None,
    allow_from: list[str] | tuple[str, ...] = (),
    insecure: bool = False,
    reporter: Reporter | None = None,
    foreground: bool = False,
) -> NetworkPolicy:
    """The TLS and allowed networks for gRPC on `address`; ServerError for plaintext beyond loopback.

    cert/key/ca: the server's TLS files (all three or none); without them, beyond loopback, the
    certificates `edge-deploy certs` keeps in the scope's state dir. What is chosen is said through
    `reporter.info`; `insecure` beyond loopback is warned about. `foreground`: no unit, so nothing
    enforces the allowed networks (IPAddressAllow= is the unit's), and that is said instead.
    """
    reporter = reporter or Reporter()
    loopback = is_loopback(address)
    given = [p for p in (cert, key, ca) if p is not None]
    if insecure and given:
        raise ServerError("--insecure serves plaintext; it cannot go with --tls-cert/--tls-key/--tls-ca (drop one).")
    tls = None
    if given:
        if cert is None or key is None or ca is None:  # not all three
            raise ServerError("TLS needs all three of --tls-cert, --tls-key and --tls-ca (`edge-deploy certs init` "
                              "writes them: issued/server.pem, issued/server.key, ca.pem).")
        tls = server_tls(Path(cert), Path(key), Path(ca), client_cert, client_key)
    elif not loopback and not insecure:
        authority = CertificateAuthority(state_dir(scope) / "tls")
        if not authority.cert_path(SERVER).is_file():
            raise ServerError(
                f"serving gRPC on {address} (beyond loopback) needs TLS: run `edge-deploy certs init --ip {address}` "
                "and serve again, or pass --tls-cert/--tls-key/--tls-ca; --insecure serves plaintext to anyone "
                "who can reach the address."
            )
        reporter.info(f"mutual TLS with the certificates in {authority.dir}")
        tls = server_tls(authority.cert_path(SERVER), authority.key_path(SERVER), authority.ca_cert,
                         client_cert, client_key)
    if loopback:
        return NetworkPolicy(tls, [])
    if insecure:
        reporter.warn(f"--insecure: gRPC on {address} is plaintext and open to every host allowed to connect: they "
                      "can run inference, read its results, and read the model-repository key from request "
                      "headers (and then load models). Serve with TLS (`edge-deploy certs init`) instead.")
    allowed = check_cidrs(list(allow_from)) if allow_from else local_subnets(address)
    if foreground:
        guard = "mutual TLS still refuses clients without a certificate of this CA" if tls is not None else \
            "nothing else guards it"
        reporter.warn(f"only the systemd unit enforces the allowed networks ({', '.join(allowed) or 'none'} and "
                      f"localhost, IPAddressAllow=): `serve --foreground` accepts connections from any host that "
                      f"reaches {address} ({guard}); use a firewall, or `edge-deploy serve` (the unit).")
    else:
        reporter.info(f"accepting connections from {', '.join(allowed)} and localhost (IPAddressAllow=)")
    return NetworkPolicy(tls, allowed)


def server_tls(cert: Path, key: Path, ca: Path, client_cert: Path | None = None,
               client_key: Path | None = None) -> ServerTLS:
    """ServerTLS from the files given; the admin client identity defaults to the CA's `edge-deploy` certificate.

    ServerError when a file is missing, only one of client_cert/client_key is given, or the server
    certificate has expired.
    """
    cert, key, ca = cert.expanduser().absolute(), key.expanduser().absolute(), ca.expanduser().absolute()
    if (client_cert is None) != (client_key is None):
        raise ServerError("--tls-client-cert and --tls-client-key go together.")
    if client_cert is None or client_key is None:  # both or neither (above); `or` lets mypy see both
        guess = cert.parent / f"{ADMIN_CLIENT}.pem"
        if not guess.is_file():
            raise ServerError(
                f"no client certificate for edge-deploy's own health checks (looked for {guess}); pass "
                "--tls-client-cert/--tls-client-key (`edge-deploy certs issue edge-deploy` makes one)."
            )
        client_cert, client_key = guess, guess.with_suffix(".key")
    for what, path in (("--tls-cert", cert), ("--tls-key", key), ("--tls-ca", ca),
                       ("--tls-client-cert", client_cert), ("--tls-client-key", client_key)):
        if not Path(path).is_file():
            raise ServerError(f"{what} {path} does not exist; `edge-deploy certs init` writes the TLS files.")
    expires = cert_not_after(cert)
    if expires < dt.datetime.now(dt.timezone.utc):
        raise ServerError(f"the server certificate {cert} expired on {expires:%Y-%m-%d}; issue a new one "
                          "(`edge-deploy certs init --force` or `certs issue server --server`).")
    return ServerTLS(cert=cert, key=key, ca=ca, client_cert=Path(client_cert).expanduser().absolute(),
                     client_key=Path(client_key).expanduser().absolute())
