"""Listen addresses: loopback or not, how to dial one from this host, and the subnets it faces."""
from __future__ import annotations

import errno
import ipaddress
import json
import socket
import subprocess

from ..errors import ServerError


def is_loopback(address: str) -> bool:
    """Whether a listen address is reachable from this host only."""
    if address in ("localhost", "ip6-localhost"):
        return True
    try:
        return ipaddress.ip_address(address.strip("[]")).is_loopback
    except ValueError:
        return False


def dial_url(url: str) -> str:
    """The URL to dial a server listening on `url` from this host (0.0.0.0 / :: become loopback)."""
    host, _, port = url.rpartition(":")
    if host in ("0.0.0.0", ""):
        return f"127.0.0.1:{port}"
    if host in ("[::]", "::"):
        return f"[::1]:{port}"
    return url


def _interfaces() -> list[dict]:
    try:
        out = subprocess.run(["ip", "-j", "addr", "show"], capture_output=True, text=True, timeout=10).stdout
        return json.loads(out or "[]")
    except (OSError, subprocess.SubprocessError, ValueError):
        return []


def local_subnets(address: str) -> list[str]:
    """The networks (CIDR) of this host's interfaces that `address` listens on; all of them for 0.0.0.0 / ::.

    ServerError when the address is on no interface here (then --allow-from must say who may connect).
    """
    wildcard = address in ("0.0.0.0", "::", "[::]")
    found: list[str] = []
    for iface in _interfaces():
        for info in iface.get("addr_info", []):
            local, prefix = info.get("local"), info.get("prefixlen")
            if not local or prefix is None:
                continue
            ip = ipaddress.ip_address(local)
            if ip.is_loopback or ip.is_link_local:
                continue
            if (wildcard and (ip.version == 4) == (address == "0.0.0.0")) or local == address.strip("[]"):
                found.append(str(ipaddress.ip_interface(f"{local}/{prefix}").network))
    if not found:
        if not_on_this_host(address):
            raise ServerError(not_on_this_host_message(address))
        raise ServerError(f"no network interface here has the address {address}, so its subnet is unknown; "
                          "pass --allow-from CIDR (who may connect, e.g. 192.168.1.0/24).")
    return list(dict.fromkeys(found))


def check_cidrs(cidrs: list[str]) -> list[str]:
    """--allow-from values as normalised networks; ServerError for one that is not a CIDR."""
    out = []
    for cidr in cidrs:
        try:
            out.append(str(ipaddress.ip_network(cidr, strict=False)))
        except ValueError:
            raise ServerError(f"--allow-from {cidr!r} is not an address or network (write it like 10.11.17.0/24).") from None
    return out


def not_on_this_host(address: str) -> bool:
    """True when `address` is no address of this host: binding it fails with EADDRNOTAVAIL (a wildcard or a name
    that does not resolve is never "not on this host" here; other bind errors are the port's, not the address's)."""
    try:
        ip = ipaddress.ip_address(address.strip("[]"))
    except ValueError:
        return False
    if ip.is_unspecified:
        return False
    with socket.socket(socket.AF_INET6 if ip.version == 6 else socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((str(ip), 0))
        except OSError as exc:
            return exc.errno == errno.EADDRNOTAVAIL
    return False


def host_addresses() -> list[str]:
    """This host's own addresses beyond loopback and link-local (from `ip -j addr`; [] without it)."""
    found = []
    for iface in _interfaces():
        for info in iface.get("addr_info", []):
            local = info.get("local")
            if not local:
                continue
            ip = ipaddress.ip_address(local)
            if not (ip.is_loopback or ip.is_link_local):
                found.append(local)
    return list(dict.fromkeys(found))


def not_on_this_host_message(address: str) -> str:
    """What to do when a server is asked to listen on an address this host does not have."""
    own = host_addresses()
    mine = f"one of this host's ({', '.join(own)})" if own else "one this host has (`ip addr`)"
    return (f"{address} is not an address of this host, so no server can listen on it here: run `edge-deploy serve` "
            f"on the machine whose address it is (the vehicle), or pass --grpc-address with {mine}, 127.0.0.1 "
            "(this host only) or 0.0.0.0 (every interface).")
