"""Option groups more than one command takes, defined once: a client's TLS files (`--tls-ca/--tls-cert/--tls-key`),
the server's gRPC address (`--url`), the decode parameters (`--conf/--nms/--top-k`) and the precision vocabulary
(`--precision fp16|fp32|int8`, of which install takes what it serves).

Each is the typer parameter info a command's options dataclass puts in its field's `Annotated[...]` (the type stays
in the field, so a type checker reads it), and the one function that turns the group's values into the library's
object (`client_tls`, `precision_of`)."""
from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Any, Iterable

import typer

from ..serve.status import DEFAULT_URL  # noqa: F401 - the commands' default --url (groups.DEFAULT_URL), serve/ being loaded already
from ..core.numbers import Range, whole
from ..tls.config import TLSConfig
from ..artifact.precision import Precision
from .numeric import number

TLS_CA_HELP = "Connect over TLS: the CA that signed the server's certificate."
TLS_CERT_HELP = "This client's certificate (for a mutual-TLS server)."
TLS_KEY_HELP = "Its private key."


def tls_ca(default: str = "") -> Any:
    """--tls-ca; `default` says where it comes from when not given (health: the server record)."""
    return typer.Option(help=TLS_CA_HELP if not default else f"{TLS_CA_HELP[:-1]} (default: {default}).")


def tls_cert() -> Any:
    return typer.Option(help=TLS_CERT_HELP)


def tls_key() -> Any:
    return typer.Option(help=TLS_KEY_HELP)


def client_tls(ca: Path | None, cert: Path | None, key: Path | None) -> TLSConfig | None:
    """The TLSConfig that --tls-ca/--tls-cert/--tls-key ask for, or None when none is given (plaintext, or what a
    server record says)."""
    if ca is None and cert is None and key is None:
        return None
    return TLSConfig(ca=ca, cert=cert, key=key)


def url(help: str) -> Any:  # noqa: A002 - typer's own keyword
    """--url: a Triton server's gRPC address (HOST:PORT)."""
    return typer.Option(help=help)


# The decode parameters' ranges (the families' own checks, lanedet/decode_params.py, refuse less: these bound them).
CONF = Range(0, 1, "", noun="a score threshold")
NMS = Range(0, 10000, "pixels")
TOP_K = whole(1, 1000, "lanes")

# Where a command that dials a server finds it without --url (edge_deploy.serve.locate), in --help.
FOUND_URL_HELP = ("Triton gRPC address (default: the server `edge-deploy status` shows: that of --repository, else of "
                  f"./model_repository, the installed unit's, or the one `serve --foreground` here; else {DEFAULT_URL}).")


def found_server(url: str | None, repository: Path | None = None, *, user: bool = False) -> Any:
    """The server (edge_deploy.serve.locate.FoundServer) a command dials: --url, else the one `status` shows; says
    which on one line of stderr when it was not given."""
    from ..serve.locate import locate_server

    found = locate_server(url, repository, user=user)
    if not found.given:
        typer.echo(found.line(), err=True)
    return found


def conf(panel: str, default: str | None = None) -> Any:
    """--conf; `default`: where the value comes from when not given (None: not said)."""
    return number(CONF, help=_help("Score threshold", default), rich_help_panel=panel, show_default=False)


def nms(panel: str, default: str | None = None, unit: str = "pixels at 640 wide") -> Any:
    return number(NMS, help=_help(f"NMS threshold, {unit}", default), rich_help_panel=panel, show_default=False)


def top_k(panel: str, default: str | None = None, note: str = "") -> Any:
    return number(TOP_K, help=_help("At most this many lanes", default, note), rich_help_panel=panel,
                  show_default=False)


def _help(what: str, default: str | None, note: str = "") -> str:
    return what + ("" if default is None else f" (default: {default})") + note + "."


def precision_choice(allowed: Iterable[Precision]) -> type[Enum]:
    """The choice typer shows and checks for a --precision that takes only `allowed` (Precision itself when it
    takes every precision: convert); `precision_of` turns the choice into a Precision."""
    allowed = tuple(allowed)
    if allowed == tuple(Precision):
        return Precision
    return Enum("Precision", {p.name: p.value for p in allowed}, type=str)  # type: ignore[return-value]


def precision_of(value: Enum | str | None) -> Precision | None:
    """The Precision a --precision choice (or its text) names; None for none given."""
    if value is None:
        return None
    return Precision(value.value if isinstance(value, Enum) else value)


PRECISION_ALIASES = {"--fp16": "--precision=fp16", "--no-fp16": "--precision=fp32"}


def precision_aliases(args: list[str]) -> list[str]:
    """`--fp16` / `--no-fp16` (install's options before --precision) as the `--precision fp16|fp32` they mean, so
    they are parsed as --precision is."""
    out = list(args)
    for i, arg in enumerate(out):
        if arg == "--":
            break
        out[i] = PRECISION_ALIASES.get(arg, arg)
    return out
