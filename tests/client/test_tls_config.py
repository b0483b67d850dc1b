"""TLSConfig: the files it is given are checked when it is made, in one line each."""
from __future__ import annotations

import pytest

from edge_deploy.tls.config import TLSConfig, client_options
from edge_deploy.errors import ClientError


def test_cert_and_key_go_together(tmp_path) -> None:
    cert = tmp_path / "c.pem"
    cert.write_text("x")
    with pytest.raises(ClientError, match="both cert and key"):
        TLSConfig(ca=cert, cert=cert)


def test_missing_files_are_named(tmp_path) -> None:
    with pytest.raises(ClientError, match=r"TLS ca file .*missing.pem does not exist"):
        TLSConfig(ca=tmp_path / "missing.pem")


def test_client_options_pass_files_and_server_name(tmp_path) -> None:
    for name in ("ca.pem", "c.pem"):
        (tmp_path / name).write_text("-----BEGIN CERTIFICATE-----\nx\n-----END CERTIFICATE-----\n")
    (tmp_path / "c.key").write_text("-----BEGIN PRIVATE KEY-----\nx\n-----END PRIVATE KEY-----\n")
    tls = TLSConfig(ca=tmp_path / "ca.pem", cert=tmp_path / "c.pem", key=tmp_path / "c.key", server_name="orin")
    options = client_options(tls, [("a", 1)])
    assert options["ssl"] is True and options["root_certificates"] == str(tmp_path / "ca.pem")
    assert options["certificate_chain"] == str(tmp_path / "c.pem") and options["private_key"] == str(tmp_path / "c.key")
    assert options["channel_args"] == [("a", 1), ("grpc.ssl_target_name_override", "orin")]
    assert client_options(None, [("a", 1)]) == {"channel_args": [("a", 1)]}


def test_the_client_refuses_a_tls_that_is_not_a_tlsconfig() -> None:
    from edge_deploy.client.sync_client import LaneDetClient

    with pytest.raises(ClientError, match="must be a TLSConfig"):
        LaneDetClient("10.0.0.1:8001", "m", tls={"ca": "ca.pem"}, connect=False)  # type: ignore[arg-type]


@pytest.mark.parametrize("what", ["ca", "cert", "key"])
def test_a_file_that_is_not_pem_of_its_kind_is_named(tmp_path, what) -> None:
    # issue 44 item 12: `bench --tls-ca notes.txt` said the server was unreachable (the handshake failed later)
    cert, key = tmp_path / "c.pem", tmp_path / "c.key"
    cert.write_text("-----BEGIN CERTIFICATE-----\nx\n-----END CERTIFICATE-----\n")
    key.write_text("-----BEGIN EC PRIVATE KEY-----\nx\n-----END EC PRIVATE KEY-----\n")
    notes = tmp_path / "notes.txt"
    notes.write_text("not a certificate\n")
    files = {"ca": cert, "cert": cert, "key": key, what: notes}
    kind = "private key" if what == "key" else "certificate"
    with pytest.raises(ClientError, match=f"TLS {what} file .*notes.txt is not a PEM {kind}"):
        TLSConfig(**files)
