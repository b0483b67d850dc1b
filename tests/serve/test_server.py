"""tritonserver discovery, the argv builder, port and repository checks, health, and the log's reason.

Discovery of $TRITONSERVER / PATH uses small executable stand-ins (only their
path and executability are checked; /opt/tritonserver does not exist here).
Everything that talks to a server uses the real bundled tritonserver.
"""
from __future__ import annotations

import os
import socket
from pathlib import Path

import numpy as np
import pytest
from cli_process import run_cli
from triton_helpers import BROKEN, write_model

from edge_deploy.errors import ServerError
from edge_deploy.serve import admin
from edge_deploy.serve import discovery
from edge_deploy.serve.argv import GRPC_KEY_HEADER, RESTRICTED_KEY_NAME, ServerOptions, generate_key, tritonserver_argv
from edge_deploy.serve.checks import check_ports_free, check_repository, port_in_use
from edge_deploy.serve.log_reason import last_error_line


def fake_binary(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\nexit 0\n")
    path.chmod(0o755)
    return path


# ------------------------------------------------------------------ discovery


def test_discovery_order_explicit_then_env_then_path(tmp_path, monkeypatch) -> None:
    explicit = fake_binary(tmp_path / "a" / "bin" / "tritonserver")
    from_env = fake_binary(tmp_path / "b" / "bin" / "tritonserver")
    on_path = fake_binary(tmp_path / "c" / "bin" / "tritonserver")
    monkeypatch.setenv("TRITONSERVER", str(from_env))
    monkeypatch.setenv("PATH", str(on_path.parent))
    assert discovery.find_tritonserver(explicit).binary == explicit
    assert discovery.find_tritonserver().source == "$TRITONSERVER"
    monkeypatch.delenv("TRITONSERVER")
    found = discovery.find_tritonserver()
    assert (found.source, found.binary) == ("PATH", on_path)
    assert str(on_path) in found.describe() and "PATH" in found.describe()


def test_bundle_is_the_last_resort_and_says_so(tmp_path, monkeypatch) -> None:
    monkeypatch.delenv("TRITONSERVER", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    found = discovery.find_tritonserver(cache_dir=tmp_path / "cache")
    assert found.source == "nvidia-pytriton bundle"
    assert "nvidia-pytriton" in found.describe()
    stub_dir = found.backend_dir / "python"
    assert {p.name for p in stub_dir.iterdir()} >= {"libtriton_python.so", "triton_python_backend_stub"}
    assert found.env["PATH"].split(os.pathsep)[0] == str(Path(os.sys.executable).parent)


def test_no_tritonserver_says_where_it_looked_and_how_to_install(tmp_path, monkeypatch) -> None:
    monkeypatch.delenv("TRITONSERVER", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(discovery, "_bundle_install", lambda *args, **kwargs: None)
    with pytest.raises(ServerError) as err:
        discovery.find_tritonserver()
    message = str(err.value)
    assert "/opt/tritonserver" in message and "nvidia-pytriton" in message and "JetPack" in message
    assert "\n" not in message


def test_explicit_path_that_is_not_a_binary_is_an_error(tmp_path) -> None:
    with pytest.raises(ServerError, match="--tritonserver .*not an executable"):
        discovery.find_tritonserver(tmp_path / "nope")


# ------------------------------------------------------------------ argv


def argv_dict(argv: list[str]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for word in argv[1:]:
        key, _, value = word.partition("=")
        out.setdefault(key, []).append(value)
    return out


def test_default_argv_is_safe_for_a_vehicle(tmp_path) -> None:
    install = discovery.TritonInstall(binary=tmp_path / "tritonserver", backend_dir=tmp_path / "backends", source="test")
    options = ServerOptions(model_repository=tmp_path / "repo", restricted_key=("edge-deploy-key", "k"))
    argv = tritonserver_argv(install, options)
    a = argv_dict(argv)
    assert argv[0] == str(install.binary)
    assert a["--grpc-address"] == ["127.0.0.1"] and a["--grpc-port"] == ["8001"]
    assert a["--allow-http"] == ["false"] and a["--allow-metrics"] == ["false"]
    assert a["--model-control-mode"] == ["explicit"] and a["--load-model"] == ["*"]
    assert a["--grpc-restricted-protocol"] == ["model-repository:edge-deploy-key=k"]
    assert a["--strict-readiness"] == ["true"] and a["--exit-timeout-secs"] == ["30"]
    assert a["--log-verbose"] == ["0"] and a["--backend-directory"] == [str(tmp_path / "backends")]
    assert "--http-address" not in a and "--http-restricted-api" not in a


def _triton_tarball(tmp_path: Path, version: str) -> discovery.TritonInstall:
    """An /opt/tritonserver-like layout whose TRITON_VERSION says `version` (the binary is never run)."""
    root = tmp_path / f"tritonserver-{version}"
    (root / "bin").mkdir(parents=True)
    (root / "TRITON_VERSION").write_text(version + "\n")
    return discovery.TritonInstall(binary=root / "bin" / "tritonserver", backend_dir=None, source="test")


def test_http_and_metrics_listen_on_loopback_and_http_is_restricted_too(tmp_path) -> None:
    install = _triton_tarball(tmp_path, "2.51.0")
    options = ServerOptions(
        model_repository=tmp_path, http=True, metrics=True, restricted_key=("edge-deploy-key", "k"), log_verbose=2
    )
    a = argv_dict(tritonserver_argv(install, options))
    assert a["--allow-http"] == ["true"] and a["--http-address"] == ["127.0.0.1"]
    assert a["--metrics-address"] == ["127.0.0.1"] and a["--allow-metrics"] == ["true"]
    assert a["--http-restricted-api"] == ["model-repository:edge-deploy-key=k"]
    assert a["--log-verbose"] == ["2"] and "--backend-directory" not in a
    assert [p[0] for p in options.ports()] == ["gRPC", "HTTP", "metrics"]


@pytest.mark.parametrize(("version", "restricted"), [("2.34.0", False), ("2.35.0", False), ("2.39.0", False),
                                                     ("2.40.0", True), ("2.51.0", True)])
def test_http_restricted_api_only_where_the_server_has_it(tmp_path, version: str, restricted: bool) -> None:
    # JetPack 5's tarballs (2.34/2.35, r23.05/r23.06) exit on --http-restricted-api: it came with r23.11 (2.40).
    options = ServerOptions(model_repository=tmp_path, http=True, restricted_key=("edge-deploy-key", "k"))
    a = argv_dict(tritonserver_argv(_triton_tarball(tmp_path, version), options))
    assert ("--http-restricted-api" in a) is restricted
    assert a["--grpc-restricted-protocol"] == ["model-repository:edge-deploy-key=k"]


@pytest.mark.parametrize(("version", "warned"), [("2.35.0", True), ("2.51.0", False)])
def test_serve_warns_that_an_old_servers_http_repository_api_is_open(tmp_path, version: str, warned: bool) -> None:
    install = _triton_tarball(tmp_path, version)
    install.binary.write_text("#!/bin/sh\nexit 1\n")
    install.binary.chmod(0o755)
    (tmp_path / "repo").mkdir()
    done = run_cli(["serve", "--print-unit", "--user", "--http", "--tritonserver", str(install.binary),
                    "--repository", str(tmp_path / "repo")], timeout=120)
    assert done.returncode == 0, done.stderr
    assert ("cannot restrict its HTTP model-repository API" in " ".join(done.stderr.split())) is warned, done.stderr


def test_without_a_version_file_the_servers_help_decides(tmp_path) -> None:
    options = ServerOptions(model_repository=tmp_path, http=True, restricted_key=("edge-deploy-key", "k"))
    for name, listed in (("old", ""), ("new", "  --http-restricted-api <string>:<string>=<string>\n")):
        binary = tmp_path / name / "tritonserver"
        binary.parent.mkdir()
        binary.write_text(f"#!/bin/sh\nprintf 'Usage: tritonserver [options]\\n  --grpc-restricted-protocol x\\n{listed}'\n"
                          "exit 1\n")
        binary.chmod(0o755)
        install = discovery.TritonInstall(binary=binary, backend_dir=None, source="test")
        assert ("--http-restricted-api" in argv_dict(tritonserver_argv(install, options))) is bool(listed)


def test_the_bundled_server_has_http_restricted_api(tmp_path) -> None:
    # The real nvidia-pytriton tritonserver (2.51) answers --help; it lists the option.
    install = discovery.find_tritonserver(cache_dir=tmp_path / "cache")
    assert install.has_option("--http-restricted-api") and not install.has_option("--no-such-option")


# ------------------------------------------------------------------ checks


def test_port_in_use_is_a_bind_test() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        assert port_in_use("127.0.0.1", port)
        with pytest.raises(ServerError, match=f"gRPC port 127.0.0.1:{port} is already in use"):
            check_ports_free(ServerOptions(model_repository=Path("."), grpc_port=port))
    assert not port_in_use("127.0.0.1", port)


def test_missing_and_empty_repositories_are_errors(tmp_path) -> None:
    with pytest.raises(ServerError, match="does not exist"):
        check_repository(tmp_path / "missing")
    (tmp_path / "empty" / "not_a_model").mkdir(parents=True)
    with pytest.raises(ServerError, match="has no models"):
        check_repository(tmp_path / "empty")
    write_model(tmp_path / "ok", "b")
    write_model(tmp_path / "ok", "a")
    assert check_repository(tmp_path / "ok") == ["a", "b"]


def test_health_of_nothing_listening_is_not_ready_and_times_out(tmp_path) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    health = admin.check_health(f"127.0.0.1:{port}", ["m"])
    assert not health.live and not health.all_ready and "connection refused" in health.error
    with pytest.raises(ServerError, match="not ready after"):
        admin.wait_healthy(f"127.0.0.1:{port}", timeout=0.5)
    with pytest.raises(ServerError, match="it died"):
        admin.wait_healthy(f"127.0.0.1:{port}", timeout=30, alive=lambda: "it died")


# ------------------------------------------------------------------ real server


@pytest.mark.triton
def test_model_repository_protocol_needs_the_key_and_health_reports_versions(tmp_path, start_triton) -> None:
    import tritonclient.grpc as grpcclient

    write_model(tmp_path / "repo", "add_one", versions=(1, 2))
    key = generate_key()
    server = start_triton(tmp_path / "repo", restricted_key=(RESTRICTED_KEY_NAME, key))
    health = admin.check_health(server.url, ["add_one"])
    assert health.all_ready and health.models[0].versions == ["2"]  # Triton's default policy: latest
    client = grpcclient.InferenceServerClient(server.url)
    try:
        with pytest.raises(Exception, match="restricted"):
            client.load_model("add_one")
        with pytest.raises(Exception, match="restricted"):
            client.load_model("add_one", headers={GRPC_KEY_HEADER: "wrong"})
        client.load_model("add_one", headers={GRPC_KEY_HEADER: key})
        inp = grpcclient.InferInput("X", [4], "FP32")
        inp.set_data_from_numpy(np.zeros(4, np.float32))
        np.testing.assert_array_equal(client.infer("add_one", [inp]).as_numpy("Y"), np.ones(4, np.float32))
    finally:
        client.close()
    assert server.stop(timeout=30) == 0


@pytest.mark.triton
def test_a_model_that_fails_to_load_is_reported_with_the_servers_reason(tmp_path, start_triton) -> None:
    write_model(tmp_path / "repo", "add_one")
    write_model(tmp_path / "repo", "broken", code=BROKEN)
    server = start_triton(tmp_path / "repo", wait=False)
    with pytest.raises(ServerError) as err:
        server.wait_ready(60, ["add_one", "broken"])
    assert "weights file is corrupt" in str(err.value) and "broken" in str(err.value)
    assert "\n" not in str(err.value)
    assert "weights file is corrupt" in last_error_line(server.log_path)


@pytest.mark.triton
def test_the_reason_comes_from_this_run_not_from_an_earlier_one_in_the_same_log(tmp_path, start_triton) -> None:
    stale = 'E1122 06:00:00.000000 1 model_lifecycle.cc:654] "failed to load \'old\': stale reason from an earlier run"\n'
    (tmp_path / "triton0.log").write_text(stale)  # start_triton's first log file, appended to
    server = start_triton(tmp_path / "no-such-repo", wait=False)
    with pytest.raises(ServerError) as err:
        server.wait_ready(60)
    assert "stale reason" not in str(err.value)
    assert "no-such-repo" in str(err.value)
    assert "stale reason" not in server.reason()
