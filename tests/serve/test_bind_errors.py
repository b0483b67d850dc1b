"""`serve` asked to listen on an address this host does not have (issue 56, item 2).

The bind fails with EADDRNOTAVAIL, not because anything listens: `serve` must say the address is not this host's
and what to do (serve on the machine whose address it is, or pass one of this host's addresses), never "already in
use", and never only "--allow-from" (which does not help). The address is from the documentation networks (RFC 5737:
TEST-NET-1, -2, -3), the first one this host's kernel refuses to bind (this sandbox has 192.0.2.2 itself). The real
command line with the bundled tritonserver; it refuses before starting it.
"""
from __future__ import annotations

import errno
import socket
import subprocess

from conftest import free_port
from triton_helpers import run_cli, write_model

from edge_deploy.serve.addresses import not_on_this_host



def _not_here() -> str:
    for address in ("192.0.2.1", "198.51.100.7", "203.0.113.9", "192.0.2.201"):
        with socket.socket() as sock:
            try:
                sock.bind((address, 0))
            except OSError as exc:
                if exc.errno == errno.EADDRNOTAVAIL:
                    return address
    raise AssertionError("every TEST-NET address tried is this host's")


NOT_HERE = _not_here()


def one_line_error(result: subprocess.CompletedProcess[str]) -> str:
    lines = result.stderr.rstrip("\n").splitlines()
    assert result.returncode != 0 and lines and lines[-1].startswith("error: "), (result.stdout, result.stderr)
    assert "Traceback" not in result.stderr, result.stderr
    return lines[-1]


def test_an_address_of_another_host_is_said_to_be_so(tmp_path) -> None:
    assert not_on_this_host(NOT_HERE) and not not_on_this_host("127.0.0.1") and not not_on_this_host("0.0.0.0")
    repo = tmp_path / "repo"
    write_model(repo, "add_one")
    certs = run_cli(tmp_path, "certs", "init", "--ip", NOT_HERE)
    assert certs.returncode == 0, certs.stderr
    port = free_port()
    serve = ("serve", "--foreground", "--user", "--repository", str(repo), "--grpc-address", NOT_HERE,
             "--grpc-port", str(port))
    for extra in (("--allow-from", f"{NOT_HERE}/24"), ()):  # with --allow-from: the bind; without: the subnet lookup
        line = one_line_error(run_cli(tmp_path, *serve, *extra))
        assert f"{NOT_HERE} is not an address of this host" in line, line
        assert "run `edge-deploy serve` on the machine whose address it is" in line, line
        assert "or pass --grpc-address with" in line, line
        assert "already in use" not in line and "--allow-from" not in line, line


def test_a_name_that_does_not_resolve_is_no_port_in_use(tmp_path) -> None:
    repo = tmp_path / "repo"
    write_model(repo, "add_one")
    line = one_line_error(run_cli(
        tmp_path, "serve", "--foreground", "--user", "--repository", str(repo), "--grpc-address", "no-such-host.invalid",
        "--insecure", "--allow-from", "192.0.2.0/24", "--grpc-port", str(free_port())))
    assert "cannot listen on gRPC no-such-host.invalid:" in line and "already in use" not in line, line
