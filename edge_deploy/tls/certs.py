"""A small certificate authority for one vehicle (or a fleet): the served model's mutual TLS.

Made with the `cryptography` library (no openssl command). A certificates directory holds:

    ca.pem, ca.key               the CA (EC P-256, 10 years; the key 0600)
    issued/NAME.pem, NAME.key    certificates the CA issued (2 years; keys 0600, certificates 0644)
    index.json                   name -> kind (server | client), serial, expiry, revoked

`init` makes the CA, the server certificate ("server", with the Orin's names and addresses,
localhost and 127.0.0.1 included) and the client certificate edge-deploy itself uses for
health checks and loading models ("edge-deploy"). `issue NAME` adds a client certificate per
consuming app (or, with server names, another server's certificate).

Revocation: tritonserver (2.34 to 2.51) has no option for a certificate revocation list,
so a revoked certificate signed by a trusted CA would still be accepted. `revoke` therefore
rotates the CA: a new CA key, and every certificate that is not revoked re-issued with its
own key and names; the server must be restarted with the new files and the remaining
clients given their new certificate and ca.pem.
"""
from __future__ import annotations

import datetime as dt
import ipaddress
import json
import os
import re
import socket
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypedDict

from ..errors import CertificateError
from ..core.bounded_read import read_regular
from ..core.fsutil import write_bytes_atomic, write_json_atomic
from ..core.state import state_dir
from ..core.deps import require

CA_DAYS = 3650
LEAF_DAYS = 730
EXPIRY_WARN_DAYS = 30
SERVER = "server"
ADMIN_CLIENT = "edge-deploy"  # the client edge-deploy itself uses (health, install's load, status)
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")

PEM_LIMIT = 1 << 20  # a certificate or key file: a few KiB; the cap where a PEM file cannot be one
INDEX_LIMIT = 16 << 20  # the CA's index.json: a line per certificate ever issued


@dataclass(frozen=True)
class Issued:
    """One certificate the CA issued, as the index and the certificate file tell it."""

    name: str
    kind: str  # "server" | "client"
    serial: int
    not_after: dt.datetime
    revoked: bool
    cert: Path
    key: Path

    def days_left(self, now: dt.datetime | None = None) -> float:
        """Days until it expires (negative once expired)."""
        now = now or dt.datetime.now(dt.timezone.utc)
        return (self.not_after - now).total_seconds() / 86400


def _x509():
    require("cryptography", "the vehicle CA (`edge-deploy certs`) and TLS certificate checks")
    from cryptography import x509

    return x509


def default_dir() -> Path:
    """Where `certs` keeps the CA: <state dir>/tls (/etc/edge-deploy/tls as root, else ~/.config/edge-deploy/tls)."""
    return state_dir("system" if os.geteuid() == 0 else "user") / "tls"


def check_name(name: str) -> str:
    """A certificate name usable as a file name; CertificateError otherwise."""
    if not _NAME.match(name):
        raise CertificateError(f"certificate name {name!r} is not usable: use letters, digits, '.', '_' and '-' "
                               "(at most 64, starting with a letter or digit).")
    return name


def host_addresses() -> list[str]:
    """This machine's non-loopback IP addresses (from `ip -j addr`; [] when it cannot be asked)."""
    try:
        out = subprocess.run(["ip", "-j", "addr", "show"], capture_output=True, text=True, timeout=10).stdout
        interfaces = json.loads(out or "[]")
    except (OSError, subprocess.SubprocessError, ValueError):
        return []
    found = []
    for iface in interfaces:
        for info in iface.get("addr_info", []):
            address = info.get("local")
            if address and not ipaddress.ip_address(address).is_loopback and not address.startswith("fe80"):
                found.append(address)
    return found


# --------------------------------------------------------------------------- key and certificate files


def _new_key():
    from cryptography.hazmat.primitives.asymmetric import ec

    return ec.generate_private_key(ec.SECP256R1())


def _key_pem(key) -> bytes:  # noqa: ANN001
    from cryptography.hazmat.primitives import serialization

    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def load_cert(path: Path):  # noqa: ANN201
    """The first certificate of a PEM file; CertificateError when it cannot be read."""
    x509 = _x509()
    try:
        return x509.load_pem_x509_certificate(read_regular(path, "certificate", CertificateError,
                                                           "give a PEM certificate file", PEM_LIMIT))
    except OSError as exc:
        raise CertificateError(f"cannot read certificate {path} ({exc.strerror or exc}).") from exc
    except ValueError as exc:
        raise CertificateError(f"{path} is not a PEM certificate ({exc}).") from exc


def _load_key(path: Path):  # noqa: ANN202
    from cryptography.hazmat.primitives import serialization

    try:
        return serialization.load_pem_private_key(read_regular(path, "private key", CertificateError,
                                                               "give a PEM private key file", PEM_LIMIT), password=None)
    except OSError as exc:
        raise CertificateError(f"cannot read private key {path} ({exc.strerror or exc}); run as root.") from exc
    except (ValueError, TypeError) as exc:
        raise CertificateError(f"{path} is not an unencrypted PEM private key ({exc}).") from exc


def cert_not_after(path: Path) -> dt.datetime:
    """When the certificate in `path` expires (UTC)."""
    return load_cert(path).not_valid_after_utc


def _sign(subject_cn: str, key, issuer_cert, issuer_key, *, days: int, kind: str,  # noqa: ANN001
          dns: Sequence[str] = (), ips: Sequence[str] = (), not_before: dt.datetime | None = None):
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    now = not_before or dt.datetime.now(dt.timezone.utc) - dt.timedelta(minutes=5)  # small clock skew
    name = x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "edge-deploy"),
                      x509.NameAttribute(NameOID.COMMON_NAME, subject_cn)])
    builder = (x509.CertificateBuilder()
               .subject_name(name)
               .issuer_name(issuer_cert.subject if issuer_cert is not None else name)
               .public_key(key.public_key())
               .serial_number(x509.random_serial_number())
               .not_valid_before(now)
               .not_valid_after(now + dt.timedelta(days=days))
               .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False))
    if kind == "ca":
        builder = (builder.add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
                   .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                                content_commitment=False, key_encipherment=False,
                                                data_encipherment=False, key_agreement=False,
                                                encipher_only=False, decipher_only=False), critical=True))
    else:
        usage = ExtendedKeyUsageOID.SERVER_AUTH if kind == "server" else ExtendedKeyUsageOID.CLIENT_AUTH
        builder = (builder.add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
                   .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=False, crl_sign=False,
                                                content_commitment=False, key_encipherment=False,
                                                data_encipherment=False, key_agreement=True,
                                                encipher_only=False, decipher_only=False), critical=True)
                   .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
                   .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(issuer_key.public_key()),
                                  critical=False))
        names: list[Any] = [x509.DNSName(d) for d in dns] + [x509.IPAddress(ipaddress.ip_address(i)) for i in ips]
        if names:
            builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    return builder.sign(issuer_key if issuer_key is not None else key, hashes.SHA256())


def _cert_pem(cert) -> bytes:  # noqa: ANN001
    from cryptography.hazmat.primitives import serialization

    return cert.public_bytes(serialization.Encoding.PEM)


def _san(cert) -> tuple[list[str], list[str]]:  # noqa: ANN001
    """(DNS names, IP addresses) of a certificate's subjectAltName."""
    from cryptography import x509

    try:
        ext = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return [], []
    return ext.get_values_for_type(x509.DNSName), [str(i) for i in ext.get_values_for_type(x509.IPAddress)]


# --------------------------------------------------------------------------- the CA


class _IndexFacts(TypedDict):
    kind: str  # "server" | "client"
    serial: str  # decimal: a serial has up to 159 bits
    not_after: str  # ISO 8601


class IndexEntry(_IndexFacts, total=False):
    """One certificate in index.json, as `issue` writes it (entries of older versions may lack days and revoked)."""

    days: int
    revoked: bool


def _is_index_entry(entry: object) -> bool:
    return isinstance(entry, dict) and all(isinstance(entry.get(key), str) for key in ("kind", "serial", "not_after"))


class CertificateAuthority:
    """The CA in a certificates directory (see the module docstring for its files)."""

    def __init__(self, directory: Path) -> None:
        self.dir = Path(directory)

    @property
    def ca_cert(self) -> Path:
        return self.dir / "ca.pem"

    @property
    def ca_key(self) -> Path:
        return self.dir / "ca.key"

    def cert_path(self, name: str) -> Path:
        return self.dir / "issued" / f"{check_name(name)}.pem"

    def key_path(self, name: str) -> Path:
        return self.dir / "issued" / f"{check_name(name)}.key"

    def exists(self) -> bool:
        return self.ca_cert.is_file()

    # -- index

    def _index(self) -> dict[str, IndexEntry]:
        path = self.dir / "index.json"
        if not os.path.lexists(path):
            return {}
        try:
            index = json.loads(read_regular(path, "certificate index", CertificateError, "restore it, or make a new CA "
                                            "with `edge-deploy certs init --force`", INDEX_LIMIT))
        except (OSError, ValueError) as exc:
            raise CertificateError(f"cannot read {path} ({exc}); run as root.") from exc
        if not isinstance(index, dict) or not all(_is_index_entry(entry) for entry in index.values()):
            raise CertificateError(f"{path} is not edge-deploy's certificate index (each name with its kind, serial "
                                   "and not_after); restore it, or make a new CA with `edge-deploy certs init --force`.")
        return index

    def _save_index(self, index: dict[str, IndexEntry]) -> None:
        write_json_atomic(self.dir / "index.json", index, 0o644)

    def issued(self) -> list[Issued]:
        """Every certificate in the index (the CA itself first, as kind "ca")."""
        out = []
        if self.exists():
            ca = load_cert(self.ca_cert)
            out.append(Issued("ca", "ca", ca.serial_number, ca.not_valid_after_utc, False, self.ca_cert, self.ca_key))
        for name, entry in sorted(self._index().items()):
            out.append(Issued(name, entry["kind"], int(entry["serial"]),
                              dt.datetime.fromisoformat(entry["not_after"]), bool(entry.get("revoked")),
                              self.cert_path(name), self.key_path(name)))
        return out

    # -- writing

    def _write_key(self, path: Path, key) -> None:  # noqa: ANN001
        path.parent.mkdir(parents=True, exist_ok=True)
        write_bytes_atomic(path, _key_pem(key), 0o600)

    def _write_cert(self, path: Path, cert) -> None:  # noqa: ANN001
        path.parent.mkdir(parents=True, exist_ok=True)
        write_bytes_atomic(path, _cert_pem(cert), 0o644)

    def init(self, *, dns: list[str], ips: list[str], days: int = CA_DAYS, leaf_days: int = LEAF_DAYS,
             force: bool = False, label: str | None = None) -> list[Issued]:
        """Make the CA, the server certificate and edge-deploy's own client certificate."""
        if self.exists() and not force:
            raise CertificateError(f"a CA already exists in {self.dir}; use it (`edge-deploy certs issue NAME`), "
                                   "or pass --force to replace it (every certificate it issued stops working).")
        self.dir.mkdir(parents=True, exist_ok=True)
        os.chmod(self.dir, 0o755)
        key = _new_key()
        # A random suffix keeps two CAs of one host name apart (clients compare issuer names).
        cn = f"edge-deploy CA {label or socket.gethostname()} {os.urandom(4).hex()}"
        cert = _sign(cn, key, None, None, days=days, kind="ca")
        self._write_key(self.ca_key, key)
        self._write_cert(self.ca_cert, cert)
        self._save_index({})
        self.issue(SERVER, kind="server", dns=dns, ips=ips, days=leaf_days)
        self.issue(ADMIN_CLIENT, kind="client", days=leaf_days)
        return self.issued()

    def issue(self, name: str, *, kind: str = "client", dns: Sequence[str] = (), ips: Sequence[str] = (),
              days: int = LEAF_DAYS, key=None, not_before: dt.datetime | None = None) -> Issued:  # noqa: ANN001
        """Issue (or re-issue) certificate `name`; a fresh key unless `key` is given."""
        check_name(name)
        if kind not in ("server", "client"):
            raise CertificateError(f"certificate kind must be server or client (got {kind!r}).")
        if kind == "client" and (dns or ips):
            raise CertificateError("--name/--ip are for server certificates (--server); a client certificate "
                                   "names only the app.")
        if days < 1:
            raise CertificateError(f"--days must be at least 1 (got {days}).")
        for address in ips:
            try:
                ipaddress.ip_address(address)
            except ValueError:
                raise CertificateError(f"{address!r} is not an IP address (--ip).") from None
        if not self.exists():
            raise CertificateError(f"no CA in {self.dir}; make one with `edge-deploy certs init`.")
        ca_cert, ca_key = load_cert(self.ca_cert), _load_key(self.ca_key)
        if kind == "server":
            dns = list(dict.fromkeys([*dns, "localhost"]))
            ips = list(dict.fromkeys([*ips, "127.0.0.1"]))
        key = key or _new_key()
        cert = _sign(name, key, ca_cert, ca_key, days=days, kind=kind, dns=list(dns), ips=list(ips),
                     not_before=not_before)
        self._write_key(self.key_path(name), key)
        self._write_cert(self.cert_path(name), cert)
        index = self._index()
        index[name] = {"kind": kind, "serial": str(cert.serial_number),
                       "not_after": cert.not_valid_after_utc.isoformat(), "days": days, "revoked": False}
        self._save_index(index)
        return next(i for i in self.issued() if i.name == name)

    def revoke(self, name: str) -> list[Issued]:
        """Revoke `name` by rotating the CA; returns the certificates re-issued (they must be redeployed)."""
        index = self._index()
        if name not in index:
            raise CertificateError(f"no certificate named {name!r} in {self.dir} (see `edge-deploy certs list`).")
        if name in (SERVER, ADMIN_CLIENT):
            raise CertificateError(f"{name!r} is the server's own certificate; re-run `edge-deploy certs init --force`.")
        old_ca = load_cert(self.ca_cert)
        keep = {n: e for n, e in index.items() if n != name and not e.get("revoked")}
        new_key = _new_key()
        base = old_ca.subject.rfc4514_string().split("CN=", 1)[-1].split(",", 1)[0].rsplit(" ", 1)[0]
        cn = f"{base} {os.urandom(4).hex()}"
        days = max(1, round((old_ca.not_valid_after_utc - old_ca.not_valid_before_utc).days))
        self._write_key(self.ca_key, new_key)
        self._write_cert(self.ca_cert, _sign(cn, new_key, None, None, days=days, kind="ca"))
        index[name]["revoked"] = True
        self._save_index(index)
        redone = []
        for other, entry in keep.items():
            dns, ips = _san(load_cert(self.cert_path(other)))
            server = entry["kind"] == "server"  # a client certificate has no names or addresses to keep
            redone.append(self.issue(other, kind=entry["kind"], dns=dns if server else [], ips=ips if server else [],
                                     days=int(entry.get("days", LEAF_DAYS)), key=_load_key(self.key_path(other))))
        self.cert_path(name).unlink(missing_ok=True)
        self.key_path(name).unlink(missing_ok=True)
        return redone


def expiring(paths: dict[str, Path], within_days: float = EXPIRY_WARN_DAYS) -> list[str]:
    """Warnings, one per certificate among `paths` (label -> file) that expires within `within_days` or has."""
    notes = []
    now = dt.datetime.now(dt.timezone.utc)
    for label, path in paths.items():
        try:
            not_after = cert_not_after(path)
        except CertificateError as exc:
            notes.append(str(exc))
            continue
        left = (not_after - now).total_seconds() / 86400
        if left < 0:
            notes.append(f"{label} certificate {path} EXPIRED on {not_after:%Y-%m-%d}; clients are refused: "
                         "issue a new one (`edge-deploy certs issue`).")
        elif left < within_days:
            notes.append(f"{label} certificate {path} expires on {not_after:%Y-%m-%d} ({left:.0f} days); "
                         "issue a new one (`edge-deploy certs issue`) before then.")
    return notes
