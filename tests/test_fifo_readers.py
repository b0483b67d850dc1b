"""The last readers that opened a file without asking what it is (issue 54, class 1: "a FIFO given as a recording
blocks forever", as a class): the CA's certificate, key and index, the TLS files serve copies for its unit, the unit
file status reads back, and a fleet artifact's smoke reference. Each, given a FIFO, is refused in one line naming it,
in a child with a timeout so that a reader that blocks fails here instead of hanging the suite."""
from __future__ import annotations

import os
from pathlib import Path

from reader_child import read_in_child

READ_EACH = """
from edge_deploy.tls.certs import CertificateAuthority, load_cert, _load_key
from edge_deploy.serve import systemd
from edge_deploy.serve.argv import ServerTLS
from edge_deploy.fleet.smoke import check_served
from edge_deploy.fleet.device import _last_rollout
d = P(sys.argv[1])
attempt("cert", lambda: load_cert(d / "ca" / "ca.pem"))
attempt("key", lambda: _load_key(d / "ca" / "ca.key"))
attempt("index", lambda: CertificateAuthority(d / "ca").issued())
tls = ServerTLS(cert=d / "server.pem", key=d / "server.key", ca=d / "ca.pem")
attempt("tls", lambda: systemd._copy_tls(tls, ServerTLS(cert=d / "out.pem", key=d / "out.key", ca=d / "out-ca.pem"), None))
attempt("unit", lambda: systemd.read_installed_unit("user"))
attempt("smoke", lambda: check_served(d / "smoke", "127.0.0.1:1", "m", timeout=1))
attempt("rollout", lambda: _last_rollout("user"))
"""


def test_a_fifo_where_a_file_is_read_is_refused_in_one_line(tmp_path: Path) -> None:
    """Plant: `Path(path).read_bytes()` back in tls/certs.py load_cert (or read_text in systemd._copy_tls,
    read_installed_unit, fleet/smoke.py, fleet/device.py's _last_rollout), and the child blocks until its timeout."""
    (tmp_path / "ca").mkdir()
    (tmp_path / "smoke").mkdir()
    unit_dir = tmp_path / "config" / "systemd" / "user"
    unit_dir.mkdir(parents=True)
    (tmp_path / "state" / "fleet").mkdir(parents=True)
    fifos = {"cert": tmp_path / "ca" / "ca.pem", "key": tmp_path / "ca" / "ca.key",
             "index": tmp_path / "ca" / "index.json", "tls": tmp_path / "server.pem",
             "unit": unit_dir / "edge-deploy-triton.service", "smoke": tmp_path / "smoke" / "reference.json",
             "rollout": tmp_path / "state" / "fleet" / "last-rollout.json"}
    for fifo in fifos.values():
        os.mkfifo(fifo)
    (tmp_path / "server.key").write_text("not read: the certificate comes first\n")
    env = {**os.environ, "XDG_CONFIG_HOME": str(tmp_path / "config"), "EDGE_DEPLOY_STATE_DIR": str(tmp_path / "state")}
    lines = read_in_child(READ_EACH, str(tmp_path), env=env, timeout=60)
    fifo = "is a FIFO (named pipe), not a regular file"
    assert lines["cert"].startswith(f"CertificateError certificate {fifos['cert']} {fifo}"), lines["cert"]
    assert lines["key"].startswith(f"CertificateError private key {fifos['key']} {fifo}"), lines["key"]
    assert lines["index"].startswith(f"CertificateError certificate index {fifos['index']} {fifo}"), lines["index"]
    assert lines["tls"].startswith(f"ServerError TLS server-cert file {fifos['tls']} {fifo}"), lines["tls"]
    assert lines["unit"] == f"ServerError the unit file {fifos['unit']} is a FIFO (named pipe), not a file; remove " \
                            "it and run `edge-deploy serve` again.", lines["unit"]
    assert lines["rollout"].startswith(f"FleetError last rollout {fifos['rollout']} {fifo}"), lines["rollout"]
    assert lines["smoke"].startswith(f"FleetError smoke reference {fifos['smoke']} {fifo}"), lines["smoke"]
