"""The vehicle CA (`edge-deploy certs`): files and modes, names, lifetimes, revocation, expiry warnings, doctor."""
from __future__ import annotations

import datetime as dt
import grp
import os
import stat
from pathlib import Path

import pytest

pytest.importorskip("cryptography")
from cli_process import run_cli  # noqa: E402
from cryptography import x509  # noqa: E402
from cryptography.x509.oid import ExtendedKeyUsageOID  # noqa: E402

from edge_deploy.tls.certs import ADMIN_CLIENT, SERVER, CertificateAuthority, expiring  # noqa: E402
from edge_deploy.errors import CertificateError  # noqa: E402

NOW = dt.datetime.now(dt.timezone.utc)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def load(path: Path) -> x509.Certificate:
    return x509.load_pem_x509_certificate(path.read_bytes())


@pytest.fixture
def ca(tmp_path) -> CertificateAuthority:
    authority = CertificateAuthority(tmp_path / "tls")
    authority.init(dns=["orin-lane"], ips=["10.11.17.124"])
    return authority


def test_init_writes_the_ca_the_server_and_edge_deploys_client_with_private_keys(ca) -> None:
    assert mode(ca.ca_key) == 0o600 and mode(ca.ca_cert) == 0o644
    for name in (SERVER, ADMIN_CLIENT):
        assert mode(ca.key_path(name)) == 0o600
        assert mode(ca.cert_path(name)) == 0o644
        load(ca.cert_path(name)).verify_directly_issued_by(load(ca.ca_cert))
    server = load(ca.cert_path(SERVER))
    san = server.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert set(san.get_values_for_type(x509.DNSName)) == {"orin-lane", "localhost"}
    assert {str(i) for i in san.get_values_for_type(x509.IPAddress)} == {"10.11.17.124", "127.0.0.1"}
    usage = server.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(usage) == [ExtendedKeyUsageOID.SERVER_AUTH]
    client = load(ca.cert_path(ADMIN_CLIENT))
    assert list(client.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value) == [ExtendedKeyUsageOID.CLIENT_AUTH]
    # Lifetimes: the CA 10 years, the certificates 2.
    assert 3649 <= (load(ca.ca_cert).not_valid_after_utc - NOW).days <= 3650
    assert 729 <= (server.not_valid_after_utc - NOW).days <= 730
    assert load(ca.ca_cert).extensions.get_extension_for_class(x509.BasicConstraints).value.ca


def test_init_refuses_to_replace_a_ca_without_force(ca) -> None:
    with pytest.raises(CertificateError, match="already exists"):
        ca.init(dns=["x"], ips=[])


def test_issue_checks_names_and_addresses(ca) -> None:
    with pytest.raises(CertificateError, match="not usable"):
        ca.issue("../evil")
    with pytest.raises(CertificateError, match="not an IP address"):
        ca.issue("srv2", kind="server", ips=["10.0.0.300"])


def test_issue_refuses_names_or_addresses_for_a_client_certificate(ca) -> None:
    # the rule `certs issue` enforces (--name/--ip only with --server) is issue()'s, for library callers too
    line = "--name/--ip are for server certificates (--server); a client certificate names only the app."
    for sans in ({"dns": ["app.local"]}, {"ips": ["10.0.0.5"]}, {"dns": ["a"], "ips": ["10.0.0.5"]}):
        with pytest.raises(CertificateError) as refused:
            ca.issue("lane-consumer", kind="client", **sans)
        assert str(refused.value) == line
        with pytest.raises(CertificateError, match="a client certificate names only the app"):
            ca.issue("lane-consumer", **sans)  # client is the default kind
    assert not ca.cert_path("lane-consumer").exists()
    issued = ca.issue("lane-consumer")  # no SANs: fine, and a server may have them
    assert issued.kind == "client" and ca.issue("srv2", kind="server", dns=["orin2"], ips=["10.0.0.6"]).kind == "server"


def test_revoke_rotates_the_ca_so_the_revoked_certificate_no_longer_verifies(ca) -> None:
    app = ca.issue("camera-app")
    keep = ca.issue("planner")
    revoked_cert = load(app.cert)
    old_key = ca.key_path("planner").read_bytes()
    redone = ca.revoke("camera-app")
    assert {i.name for i in redone} == {SERVER, ADMIN_CLIENT, "planner"}
    new_ca = load(ca.ca_cert)
    # A new CA key, so the revoked certificate's signature no longer checks out (whatever the names say).
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives.asymmetric import ec

    with pytest.raises(InvalidSignature):
        new_ca.public_key().verify(revoked_cert.signature, revoked_cert.tbs_certificate_bytes,
                                   ec.ECDSA(revoked_cert.signature_hash_algorithm))
    load(ca.cert_path("planner")).verify_directly_issued_by(new_ca)
    assert ca.key_path("planner").read_bytes() == old_key  # same key: only the certificate is redeployed
    assert load(ca.cert_path("planner")).serial_number != keep.serial
    assert not app.cert.exists() and not app.key.exists()
    assert [i.revoked for i in ca.issued() if i.name == "camera-app"] == [True]


def test_expiring_warns_within_30_days(ca) -> None:
    soon = ca.issue("soon", days=10)
    later = ca.issue("later", days=100)
    past = ca.issue("past", days=1, not_before=NOW - dt.timedelta(days=5))
    notes = expiring({"soon": soon.cert, "later": later.cert, "past": past.cert})
    assert len(notes) == 2
    assert "soon" in notes[0] and "days" in notes[0]
    assert "EXPIRED" in notes[1]


def test_doctor_warns_of_plaintext_beyond_loopback_and_of_expiring_certificates(tmp_path, monkeypatch) -> None:
    from edge_deploy.deploy.doctor import WARN, tls_checks

    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv("EDGE_DEPLOY_STATE_DIR", str(tmp_path / "state"))
    units = tmp_path / "config" / "systemd" / "user"
    units.mkdir(parents=True)
    unit = units / "edge-deploy-triton.service"
    unit.write_text("[Service]\nExecStart=/opt/tritonserver/bin/tritonserver --model-repository=/r "
                    "--grpc-address=0.0.0.0 --grpc-port=8001\n")
    checks = tls_checks(scopes=("user",))
    assert [c.status for c in checks if c.name == "gRPC exposure"] == [WARN]
    assert "plaintext gRPC on 0.0.0.0:8001" in checks[0].detail

    authority = CertificateAuthority(tmp_path / "state" / "tls")
    authority.init(dns=["orin"], ips=[], leaf_days=20)
    unit.write_text("[Service]\nExecStart=/opt/tritonserver/bin/tritonserver --grpc-address=0.0.0.0 "
                    f"--grpc-use-ssl-mutual=true --grpc-server-cert={authority.cert_path(SERVER)}\n")
    checks = tls_checks(scopes=("user",))
    statuses = {(c.name, c.status) for c in checks}
    assert ("gRPC exposure", "ok") in statuses
    expiring_rows = [c for c in checks if c.name == "TLS certificate"]
    assert expiring_rows and all(c.status == WARN for c in expiring_rows)
    assert any("expires on" in c.detail for c in expiring_rows)  # the served certificate
    assert any("edge-deploy certs issue server" in c.detail for c in expiring_rows)  # the CA's own list


def test_service_copies_are_0640_with_the_service_group(tmp_path) -> None:
    from edge_deploy.serve import systemd as su
    from edge_deploy.serve.argv import ServerTLS

    authority = CertificateAuthority(tmp_path / "tls")
    authority.init(dns=["orin"], ips=[])
    sources = ServerTLS(cert=authority.cert_path(SERVER), key=authority.key_path(SERVER), ca=authority.ca_cert,
                        client_cert=authority.cert_path(ADMIN_CLIENT), client_key=authority.key_path(ADMIN_CLIENT))
    copies = su.service_tls(sources, tmp_path / "state")
    group = grp.getgrgid(os.getgid()).gr_name
    su._copy_tls(sources, copies, group)
    for path in copies.files().values():
        assert mode(path) == 0o640 and path.stat().st_gid == os.getgid()
    assert copies.key.read_bytes() == authority.key_path(SERVER).read_bytes()


def test_certs_cli_init_issue_list(tmp_path) -> None:
    run = lambda *a: run_cli(["certs", *a, "--dir", str(tmp_path / "d")], timeout=60)  # noqa: E731
    made = run("init", "--name", "orin", "--ip", "192.168.7.2")
    assert made.returncode == 0, made.stderr
    assert "192.168.7.2" in made.stdout and "server" in made.stdout
    issued = run("issue", "lane-consumer")
    assert issued.returncode == 0, issued.stderr
    assert "lane-consumer.key" in issued.stdout
    listed = run("list")
    assert "lane-consumer" in listed.stdout and "730 days left" in listed.stdout
    again = run("init")
    assert again.returncode == 2 and len(again.stderr.strip().splitlines()) == 1 and "--force" in again.stderr


def test_a_damaged_index_is_one_line_naming_the_file(ca) -> None:
    """index.json is read into typed entries once: an entry without its facts is a CertificateError, no KeyError."""
    (ca.dir / "index.json").write_text('{"app": {"kind": "client"}}')
    with pytest.raises(CertificateError, match=r"index\.json is not edge-deploy's certificate index"):
        ca.issued()
    (ca.dir / "index.json").write_text('["app"]')
    with pytest.raises(CertificateError, match="certs init --force"):
        ca.issue("app")
