"""Serving beyond loopback with mutual TLS: the real tritonserver in one network namespace, the real client in another.

`edge-deploy serve --foreground --grpc-address 10.77.0.1` runs inside the server namespace
with the certificates `edge-deploy certs init` made (found in the state directory); every
client call runs in the client namespace across a veth pair (tests/support/netns.py,
tests/support/tls_probe.py). Both namespaces are made per test module with the PID in their
names and removed at teardown.

What the client can tell apart (grpc 1.6x): a wrong server name and a server certificate from
another CA are detected by the client itself and named exactly. A refusal by the server (no
client certificate, one from another CA, an expired one) reaches the client only as a closed
socket; the client names the likely cause from its own files (none sent; its certificate's
expiry; its issuer against the CA it trusts), and the server's log has the exact reason.
"""
from __future__ import annotations

import datetime as dt
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from netns import SERVER_IP, SUBNET, netns_unavailable, probe, veth_link
from triton_helpers import stop_process_group

pytestmark = pytest.mark.triton
WHY_NOT = netns_unavailable()
PORT = 8001
URL = f"{SERVER_IP}:{PORT}"


@pytest.fixture(scope="module")
def link():
    if WHY_NOT:
        pytest.skip(WHY_NOT)
    with veth_link("edt") as made:
        yield made


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    """The vehicle CA (in a state dir, as `certs init` leaves it), an app's certificate, an expired one,
    and a second CA with its own client."""
    from edge_deploy.tls.certs import CertificateAuthority

    state = tmp_path_factory.mktemp("state")
    ca = CertificateAuthority(state / "tls")
    ca.init(dns=["orin"], ips=[SERVER_IP])
    ca.issue("lane-consumer")
    ca.issue("old-app", not_before=dt.datetime.now(dt.timezone.utc) - dt.timedelta(days=10), days=2)
    other = CertificateAuthority(tmp_path_factory.mktemp("other") / "tls")
    other.init(dns=["orin"], ips=[SERVER_IP])
    other.issue("intruder")
    return state, ca, other


_stop = stop_process_group


def _env(state: Path) -> dict[str, str]:
    root = str(Path(__file__).resolve().parents[2])
    return {**os.environ, "EDGE_DEPLOY_STATE_DIR": str(state), "PYTHONPATH": os.pathsep.join(
        [root, os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)}


@pytest.fixture(scope="module")
def tiny_artifact(tmp_path_factory, laneatt_data):
    from small_artifact import make_artifact

    return make_artifact(tmp_path_factory.mktemp("tiny") / "artifact", laneatt_data / "anchors_2784x77.npy")


def tls_of(authority, name: str, **extra) -> dict:  # noqa: ANN001
    """TLSConfig fields for certificate `name` of `authority` (its CA trusted), with `extra` overriding."""
    return {"ca": str(authority.ca_cert), "cert": str(authority.cert_path(name)), "key": str(authority.key_path(name)),
            **extra}


@pytest.fixture(scope="module")
def served(link, pki, tmp_path_factory, tiny_artifact):
    """`edge-deploy serve --foreground` on 10.77.0.1 in the server namespace (TLS from the state dir)."""
    from edge_deploy.deploy.install import install
    from edge_deploy.deploy.options import InstallOptions

    state, ca, _ = pki
    work = tmp_path_factory.mktemp("tls-served")
    repo = work / "repo"
    install(InstallOptions(tiny_artifact, repo, "tiny", runtime="python"))
    log = work / "serve.out"
    argv = link.exec_argv(link.server_ns, [
        sys.executable, "-m", "edge_deploy", "serve", "--foreground", "--repository", str(repo),
        "--grpc-address", SERVER_IP, "--grpc-port", str(PORT), "--wait", "120",
        "--log-file", str(work / "triton.log"),
    ])
    with open(log, "wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=_env(state), start_new_session=True)
    try:
        deadline = time.monotonic() + 150
        while "serving" not in log.read_text(errors="replace"):
            assert proc.poll() is None, log.read_text(errors="replace")
            assert time.monotonic() < deadline, log.read_text(errors="replace")
            time.sleep(0.5)
        yield work, log
    finally:
        _stop(proc)


def test_serve_found_the_certificates_and_says_so(served) -> None:
    _, log = served
    text = log.read_text()
    assert "mutual TLS with the certificates in" in text
    assert "serving" in text and URL in text


def test_status_shows_when_the_foreground_servers_certificate_expires(served, pki) -> None:
    """docs/tls.md: "`status` show[s] expiry" (issue 34 item 17: only the unit's did)."""
    state, ca, _ = pki
    shown = subprocess.run([sys.executable, "-m", "edge_deploy", "status"], capture_output=True, text=True,
                           env=_env(state), timeout=120)
    assert f"TLS: server certificate {ca.cert_path('server')} expires " in shown.stdout, (shown.stdout, shown.stderr)


def test_a_trusted_client_gets_lanes_across_the_link(served, link, pki) -> None:
    _, ca, _ = pki
    sync, async_ = probe(link, [
        {"url": URL, "model": "tiny", "tls": tls_of(ca, "lane-consumer"), "action": "detect"},
        {"url": URL, "model": "tiny", "tls": tls_of(ca, "lane-consumer"), "action": "async_detect"},
    ])
    assert sync["ok"], sync
    assert sync["lanes"] > 0
    assert async_["ok"], async_
    assert len(async_["lanes_per_frame"]) == 3 and min(async_["lanes_per_frame"]) > 0


def test_refused_clients_get_one_line_saying_which(served, link, pki) -> None:
    work, _ = served
    _, ca, other = pki
    cases = {
        "no certificate": {"ca": str(ca.ca_cert)},
        "another CA": tls_of(other, "intruder", ca=str(ca.ca_cert)),
        "expired": tls_of(ca, "old-app"),
        "wrong server name": tls_of(ca, "lane-consumer", server_name="not-the-orin"),
        "server of another CA": tls_of(ca, "lane-consumer", ca=str(other.ca_cert)),
        "plaintext": None,
    }
    results = probe(link, [{"url": URL, "model": "tiny", "tls": tls, "action": "detect", "retry": 30.0}
                           for tls in cases.values()])
    got = dict(zip(cases, results))
    expect = {
        "no certificate": "requires a client certificate (mutual TLS) and none was sent",
        "another CA": "not signed by the CA that signed the server's certificate",
        "expired": "expired on",
        "wrong server name": "wrong server name",
        "server of another CA": "not signed by the CA in TLSConfig(ca=...)",
        "plaintext": "it serves TLS on this port",
    }
    for label, result in got.items():
        assert not result["ok"], (label, result)
        assert result["type"] == "TLSRefusedError", (label, result)
        assert "\n" not in result["error"], (label, result)
        assert expect[label] in result["error"], (label, result["error"])
        assert result["seconds"] < 10, (label, "a refusal must not be retried for the 30 s deadline", result)
    # The server's log has the exact reason for the refusals it made.
    log = (work / "triton.log").read_text(errors="replace")
    assert "peer did not return a certificate" in log
    assert "certificate verify failed" in log
    assert "wrong version number" in log


def test_health_cli_over_tls_from_the_other_namespace(served, link, pki, tmp_path) -> None:
    state, ca, _ = pki
    base = [sys.executable, "-m", "edge_deploy", "health", "--url", URL, "--model", "tiny"]
    ok = subprocess.run(link.exec_argv(link.client_ns, base + [
        "--tls-ca", str(ca.ca_cert), "--tls-cert", str(ca.cert_path("lane-consumer")),
        "--tls-key", str(ca.key_path("lane-consumer"))]), capture_output=True, text=True, env=_env(state), timeout=60)
    assert ok.returncode == 0, ok.stderr
    assert f"ready: {URL}" in ok.stdout
    # no TLS options: beyond loopback, `edge-deploy certs`' own client identity is tried first (issue 26) ...
    own = subprocess.run(link.exec_argv(link.client_ns, base), capture_output=True, text=True, env=_env(state),
                         timeout=60)
    assert own.returncode == 0 and f"ready: {URL}" in own.stdout, own.stderr
    # ... and on a machine without one, the plaintext attempt gets one line saying the server speaks TLS
    plain = subprocess.run(link.exec_argv(link.client_ns, base), capture_output=True, text=True,
                           env=_env(tmp_path / "no-certs"), timeout=60)
    assert plain.returncode != 0
    assert len(plain.stderr.strip().splitlines()) == 1, plain.stderr
    assert "TLS handshake failed" in plain.stderr


def test_serve_refuses_plaintext_beyond_loopback_and_insecure_warns(link, tmp_path) -> None:
    repo = tmp_path / "repo"
    (repo / "m").mkdir(parents=True)
    (repo / "m" / "config.pbtxt").write_text('name: "m"\n')
    env = _env(tmp_path / "empty-state")
    serve = [sys.executable, "-m", "edge_deploy", "serve", "--print-unit", "--repository", str(repo),
             "--grpc-address", SERVER_IP]
    refused = subprocess.run(link.exec_argv(link.server_ns, serve), capture_output=True, text=True, env=env, timeout=60)
    assert refused.returncode == 2
    assert "needs TLS" in refused.stderr and "certs init" in refused.stderr and "--insecure" in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1, refused.stderr

    insecure = subprocess.run(link.exec_argv(link.server_ns, serve + ["--insecure"]), capture_output=True,
                              text=True, env=env, timeout=60)
    assert insecure.returncode == 0, insecure.stderr
    assert "--insecure: gRPC on 10.77.0.1 is plaintext" in insecure.stderr
    assert "model-repository key" in insecure.stderr
    # The default IPAddressAllow= is the address's own subnet, found inside the server namespace.
    assert f"IPAddressAllow=localhost {SUBNET}" in insecure.stdout
    assert "--grpc-use-ssl" not in insecure.stdout


def test_unit_serves_the_service_copies_with_mutual_tls(link, pki, tmp_path) -> None:
    state, _, _ = pki
    repo = tmp_path / "repo"
    (repo / "m").mkdir(parents=True)
    (repo / "m" / "config.pbtxt").write_text('name: "m"\n')
    argv = [sys.executable, "-m", "edge_deploy", "serve", "--print-unit", "--repository", str(repo),
            "--grpc-address", SERVER_IP, "--allow-from", "10.77.0.0/28"]
    done = subprocess.run(link.exec_argv(link.server_ns, argv), capture_output=True, text=True, env=_env(state),
                          timeout=60)
    assert done.returncode == 0, done.stderr
    unit = done.stdout
    copies = state / "triton-tls"
    for flag in ("--grpc-use-ssl-mutual=true", f"--grpc-server-cert={copies / 'server.pem'}",
                 f"--grpc-server-key={copies / 'server.key'}", f"--grpc-root-cert={copies / 'ca.pem'}",
                 "IPAddressAllow=localhost 10.77.0.0/28"):
        assert flag in unit, flag
    post = next(line for line in unit.splitlines() if line.startswith("ExecStartPost="))
    assert f"--tls-cert {copies / 'client.pem'}" in post and f"--tls-ca {copies / 'ca.pem'}" in post


def test_install_loads_over_tls_and_infer_evaluate_use_it(served, link, pki, tiny_artifact) -> None:
    """install (in the server namespace) reaches the TLS server through its record's client identity;
    infer and evaluate (in the client namespace) take --tls-*."""
    work, _ = served
    state, ca, _ = pki
    env = _env(state)
    installed = subprocess.run(link.exec_argv(link.server_ns, [
        sys.executable, "-m", "edge_deploy", "install", str(tiny_artifact), "--repository", str(work / "repo"),
        "--name", "tiny", "--runtime", "python"]), capture_output=True, text=True, env=env, timeout=180)
    assert installed.returncode == 0, installed.stderr
    served_now = probe(link, [{"url": URL, "model": "tiny", "tls": tls_of(ca, "lane-consumer"), "action": "detect"}])
    assert served_now[0]["ok"]
    models = subprocess.run(link.exec_argv(link.server_ns, [
        sys.executable, "-m", "edge_deploy", "models", "--repository", str(work / "repo"), "--json"]),
        capture_output=True, text=True, env=env, timeout=60)
    assert models.returncode == 0, models.stderr
    import json

    assert json.loads(models.stdout)[0]["served"] == [2]  # the new version, loaded by install over TLS

    tls_args = ["--tls-ca", str(ca.ca_cert), "--tls-cert", str(ca.cert_path("lane-consumer")),
                "--tls-key", str(ca.key_path("lane-consumer"))]
    infer = subprocess.run(link.exec_argv(link.client_ns, [
        sys.executable, "-m", "edge_deploy", "infer", "--synthetic", "1", "--url", URL, "--model", "tiny",
        "--out", str(work / "lanes"), "--json", "--no-png", *tls_args]), capture_output=True, text=True, env=env,
        timeout=120)
    assert infer.returncode == 0, infer.stderr
    assert list((work / "lanes").glob("*.lanes.json"))
    evaluate = subprocess.run(link.exec_argv(link.client_ns, [
        sys.executable, "-m", "edge_deploy", "evaluate", "--url", URL, "--model", "tiny", "--synthetic", "2",
        *tls_args]),
        capture_output=True, text=True, env=env, timeout=180)
    assert evaluate.returncode == 0, evaluate.stderr


def test_bench_finds_the_tls_server_by_its_repository_and_by_url(served, link, pki) -> None:
    """Issue 36's `bench --repository` (the running `serve`'s record gives the address and the TLS identity, no
    --url) in the server namespace, and `bench --url --tls-*` from the client namespace across the link."""
    import json

    work, _ = served
    state, ca, _ = pki
    env = _env(state)
    short = ["--model", "tiny", "--seconds", "0.5", "--warmup", "0.1", "--concurrency", "1", "--max-frames", "2",
             "--json"]
    tls_args = ["--tls-ca", str(ca.ca_cert), "--tls-cert", str(ca.cert_path("lane-consumer")),
                "--tls-key", str(ca.key_path("lane-consumer"))]
    runs = {
        "by repository": link.exec_argv(link.server_ns, [
            sys.executable, "-m", "edge_deploy", "bench", "--repository", str(work / "repo"), *short]),
        "by url": link.exec_argv(link.client_ns, [
            sys.executable, "-m", "edge_deploy", "bench", "--url", URL, *tls_args, *short]),
    }
    for how, argv in runs.items():
        run = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=120)
        assert run.returncode == 0, (how, run.stderr)
        report = json.loads(run.stdout)
        assert report["url"] == URL, how
        (cell,) = report["cells"]
        assert (cell["model"], cell["pipeline"], cell["concurrency"]) == ("tiny", "client-side", 1), how
        assert cell["frames"] > 0 and cell["server"]["tiny"]["requests"] == cell["frames"], (how, cell)
    # Without --tls-*: on the server's own machine bench finds the server's record by its URL and takes its TLS
    # identity from it (issue 45 #1, as `status` does); where no record is (another machine: an empty state
    # directory), a plaintext bench against the mutual-TLS server is one line naming TLS.
    found = subprocess.run(link.exec_argv(link.client_ns, [
        sys.executable, "-m", "edge_deploy", "bench", "--url", URL, *short]), capture_output=True, text=True, env=env,
        timeout=120)
    assert found.returncode == 0 and json.loads(found.stdout)["url"] == URL, found.stderr
    elsewhere = work / "another-machine-state"
    elsewhere.mkdir(exist_ok=True)
    plain = subprocess.run(link.exec_argv(link.client_ns, [
        sys.executable, "-m", "edge_deploy", "bench", "--url", URL, *short]), capture_output=True, text=True,
        env={**env, "EDGE_DEPLOY_STATE_DIR": str(elsewhere)}, timeout=120)
    assert plain.returncode != 0 and "Traceback" not in plain.stderr, plain.stderr
    assert len(plain.stderr.strip().splitlines()) == 1 and "TLS" in plain.stderr, plain.stderr


def test_health_finds_a_starting_foreground_tls_server_and_its_address(link, pki, tmp_path, tiny_artifact) -> None:
    """Issue 26: `health --url IP:PORT --wait` started right after `serve --foreground --grpc-address IP` dialed
    plaintext for the whole wait (the server record, with its TLS identity, is written once the server is ready);
    `health --repository R` without --url dialed 127.0.0.1:8001 instead of the address in the record; and the
    foreground server claimed IPAddressAllow= that only the unit enforces."""
    from edge_deploy.deploy.install import install
    from edge_deploy.deploy.options import InstallOptions

    state, _, _ = pki
    env = _env(state)
    repo = tmp_path / "repo"
    install(InstallOptions(tiny_artifact, repo, "tiny", runtime="python"))
    url = f"{SERVER_IP}:{PORT + 10}"
    log = tmp_path / "serve.out"
    serve = link.exec_argv(link.server_ns, [
        sys.executable, "-m", "edge_deploy", "serve", "--foreground", "--repository", str(repo),
        "--grpc-address", SERVER_IP, "--grpc-port", str(PORT + 10), "--wait", "120",
        "--log-file", str(tmp_path / "triton.log")])
    health = [sys.executable, "-m", "edge_deploy", "health", "--model", "tiny", "--repository", str(repo)]
    # the issue's exact command, no --repository, started before the server (so this server has no record yet;
    # the module's other server has one, for another port): only the identity in the certs directory (state/tls)
    # tells it to dial mutual TLS
    bare = subprocess.Popen(link.exec_argv(link.server_ns, [
        sys.executable, "-m", "edge_deploy", "health", "--model", "tiny", "--url", url, "--wait", "60"]),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    proc = None
    try:
        with open(log, "wb") as out:
            proc = subprocess.Popen(serve, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        waited = subprocess.run(link.exec_argv(link.server_ns, [*health, "--url", url, "--wait", "60"]),
                                capture_output=True, text=True, env=env, timeout=120)
        assert waited.returncode == 0, waited.stderr + log.read_text(errors="replace")
        assert f"ready: {url}" in waited.stdout
        bare_out, bare_err = bare.communicate(timeout=120)
        assert bare.returncode == 0 and f"ready: {url}" in bare_out, bare_err
        found = subprocess.run(link.exec_argv(link.server_ns, health), capture_output=True, text=True, env=env,
                               timeout=60)
        assert found.returncode == 0, found.stderr
        assert f"ready: {url}" in found.stdout
        said = " ".join(log.read_text(errors="replace").split())
        assert "only the systemd unit enforces the allowed networks" in said and SUBNET in said
        assert "mutual TLS still refuses clients without a certificate of this CA" in said
        assert "accepting connections from" not in said
    finally:
        if bare.poll() is None:
            bare.kill()
            bare.wait()
        if proc is not None:
            _stop(proc)
