"""`edge-deploy certs init | issue NAME | list | revoke NAME`: the CA for serving beyond loopback with mutual TLS."""
from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from .typer_app import HELP_MARKUP, app
from ..errors import CertificateError
from ..core.numbers import whole
from .numeric import number

DAYS = whole(1, 36500, "days")  # a hundred years: past it, a date the certificate library cannot write

certs_app = typer.Typer(help="A small CA for mutual TLS: the server certificate and one client certificate per app.",
                        no_args_is_help=True, rich_markup_mode=HELP_MARKUP)
app.add_typer(certs_app, name="certs")

DirOpt = Annotated[Optional[Path], typer.Option("--dir", help="Certificates directory (default: /etc/edge-deploy/tls as root, else ~/.config/edge-deploy/tls).")]


def _authority(directory: Path | None):  # noqa: ANN202
    from ..tls.certs import CertificateAuthority, default_dir

    return CertificateAuthority(directory or default_dir())


def _line(item) -> str:  # noqa: ANN001
    left = item.days_left()
    state = "REVOKED" if item.revoked else ("EXPIRED" if left < 0 else f"{left:.0f} days left")
    return f"  {item.name:<20} {item.kind:<7} expires {item.not_after:%Y-%m-%d} ({state})  {item.cert}"


@certs_app.command("init")
def init(
    directory: DirOpt = None,
    name: Annotated[Optional[list[str]], typer.Option("--name", help="DNS name clients dial the server by (repeatable; default: this host's name).")] = None,
    ip: Annotated[Optional[list[str]], typer.Option("--ip", help="IP address clients dial the server at (repeatable; default: this host's addresses).")] = None,
    days: Annotated[int, number(DAYS, help="Lifetime of the server and client certificates, in days.")] = 730,
    ca_days: Annotated[int, number(DAYS, help="Lifetime of the CA, in days.")] = 3650,
    force: Annotated[bool, typer.Option(help="Replace an existing CA (every certificate it issued stops working).")] = False,
) -> None:
    """Make the CA, the server certificate (this host's names and addresses) and edge-deploy's own client certificate."""
    import socket

    from ..tls.certs import host_addresses

    authority = _authority(directory)
    names = list(name) if name else [socket.gethostname()]
    ips = list(ip) if ip else host_addresses()
    issued = authority.init(dns=names, ips=ips, days=ca_days, leaf_days=days, force=force)
    typer.echo(f"CA in {authority.dir} (server names: {', '.join(names + ['localhost'])}; "
               f"addresses: {', '.join(ips + ['127.0.0.1'])})")
    for item in issued:
        typer.echo(_line(item))
    typer.echo("next: `edge-deploy serve --grpc-address ADDRESS` serves with these; "
               "`edge-deploy certs issue APP` makes a client certificate per consuming app.")


@certs_app.command("issue")
def issue(
    name: Annotated[str, typer.Argument(help="The app (or, with --server, the server) the certificate is for.")],
    directory: DirOpt = None,
    server: Annotated[bool, typer.Option("--server", help="A server certificate (another Orin of the fleet) instead of a client one.")] = False,
    dns: Annotated[Optional[list[str]], typer.Option("--name", help="With --server: DNS name (repeatable).")] = None,
    ip: Annotated[Optional[list[str]], typer.Option("--ip", help="With --server: IP address (repeatable).")] = None,
    days: Annotated[int, number(DAYS, help="Lifetime in days.")] = 730,
) -> None:
    """Issue a client certificate for one consuming app (or a server certificate with --server)."""
    authority = _authority(directory)
    item = authority.issue(name, kind="server" if server else "client", dns=list(dns or []), ips=list(ip or []),
                           days=days)
    typer.echo(_line(item))
    typer.echo(f"give the app {item.cert}, {item.key} and {authority.ca_cert}: "
               f"TLSConfig(ca=..., cert=..., key=...) or `--tls-ca/--tls-cert/--tls-key`")


@certs_app.command("list")
def list_(directory: DirOpt = None) -> None:
    """The CA and every certificate it issued, with their expiry."""
    authority = _authority(directory)
    if not authority.exists():
        raise CertificateError(f"no CA in {authority.dir}; make one with `edge-deploy certs init`.")
    typer.echo(f"certificates in {authority.dir}:")
    for item in authority.issued():
        typer.echo(_line(item))


@certs_app.command("revoke")
def revoke(name: Annotated[str, typer.Argument(help="The certificate to revoke.")], directory: DirOpt = None) -> None:
    """Revoke a certificate: tritonserver checks no revocation list, so the CA is rotated and the others re-issued."""
    authority = _authority(directory)
    redone = authority.revoke(name)
    typer.echo(f"revoked {name}: new CA {authority.ca_cert}; re-issued with their own keys:")
    for item in redone:
        typer.echo(_line(item))
    typer.echo("now run `edge-deploy serve` again (it copies the new files) and give every remaining app its new "
               "certificate and ca.pem; until then the server still trusts the old CA.")
