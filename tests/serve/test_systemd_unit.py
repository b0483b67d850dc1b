"""The rendered unit: what systemd itself says about it (verify, security), and what it contains.

Rendering uses the real tritonserver discovery (the nvidia-pytriton bundle here);
`systemd-analyze` is the real one. A fake /dev directory stands in for a Jetson's
GPU device nodes, which do not exist on this machine.
"""
from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from xdist_shared import exclusive

from edge_deploy.serve import systemd as su
from edge_deploy.serve.argv import KEY_ENV, ServerOptions, tritonserver_argv
from edge_deploy.serve.discovery import TritonInstall, find_tritonserver

REPO_ROOT = Path(__file__).resolve().parents[2]
# `systemd-analyze security --offline=true` of the system unit (systemd 252, Debian 12): 1.5 (1.6 before
# PrivateMounts=yes), on loopback and with mutual TLS beyond it (its non-localhost IPAddressAllow= costs
# what PrivateMounts= saved). Every accepted weakness is listed in ACCEPTED_EXPOSURE; a new one fails
# before the score moves.
MAX_EXPOSURE = 1.5
ACCEPTED_EXPOSURE = {
    "SystemCallFilter=~@resources",  # @system-service includes it (Triton sets thread priorities and limits)
    "RootDirectory=/RootImage=",  # tritonserver, its backends and the repository live in the host's tree
    "SupplementaryGroups=",  # video: the Jetson GPU device nodes
    "PrivateDevices=",  # the GPU device nodes and /dev/shm are needed (DevicePolicy=closed + DeviceAllow=)
    "MemoryDenyWriteExecute=",  # the CUDA driver JIT-compiles PTX into W+X pages
    "RestrictAddressFamilies=~AF_UNIX",
    "RestrictAddressFamilies=~AF_(INET|INET6)",  # gRPC on 127.0.0.1
    "ProcSubset=",
    "PrivateNetwork=",  # gRPC clients connect over loopback
    "PrivateUsers=",  # clients' shared memory regions belong to their own users
    "ProtectHome=",  # tmpfs with bound-back paths when the interpreter or repository live under /home
    "DeviceAllow=",  # the GPU device nodes
    "IPAddressDeny=",  # an allow list: localhost, plus the --allow-from networks beyond loopback
}

needs_analyze = pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze is not installed")


@pytest.fixture(scope="module")
def install(tmp_path_factory) -> TritonInstall:
    return find_tritonserver(cache_dir=tmp_path_factory.mktemp("cache"))


def config_for(scope: str, install: TritonInstall, tmp_path: Path, **kw) -> su.UnitConfig:
    repo = tmp_path / "repo"
    repo.mkdir(exist_ok=True)
    defaults = dict(
        scope=scope,
        install=install,
        options=ServerOptions(model_repository=repo),
        environment_file=tmp_path / "triton.env",
    )
    defaults.update(kw)
    return su.UnitConfig(**defaults)


# `systemd-analyze` (system mode) touches this stamp file; remove it when it was not there before.
UNITS_LOAD_STAMP = Path("/run/systemd/systemd-units-load")


@pytest.fixture(autouse=True, scope="module")
def _no_stamp_left_behind(tmp_path_factory):
    # xdist: never beside tests/serve/test_serve_systemd.py, which creates /run/systemd/system (and this stamp)
    with exclusive(tmp_path_factory, "host-systemd"):
        existed = UNITS_LOAD_STAMP.exists()
        yield
        if not existed:
            UNITS_LOAD_STAMP.unlink(missing_ok=True)


def analyze(*args: str, cwd: Path, user: bool) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    if user:
        # `systemd-analyze --user` wants a runtime dir; a private one keeps it off the real one.
        runtime = cwd / "runtime"
        runtime.mkdir(mode=0o700, exist_ok=True)
        env.update(XDG_RUNTIME_DIR=str(runtime), HOME=str(cwd))
    argv = ["systemd-analyze", *(["--user"] if user else []), *args]
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=60)


def write_unit(text: str, directory: Path) -> Path:
    path = directory / su.UNIT_NAME
    path.write_text(text)
    return path


def test_template_in_systemd_dir_is_the_packaged_one() -> None:
    # systemd/ holds a link, so the two cannot differ; the rendered unit is pinned below.
    shipped = REPO_ROOT / "edge_deploy" / "serve" / "templates" / su.UNIT_NAME
    link = REPO_ROOT / "systemd" / su.UNIT_NAME
    assert link.is_symlink() and link.resolve() == shipped.resolve()
    assert su.template_text() == shipped.read_text()


@needs_analyze
@pytest.mark.parametrize("scope", ["system", "user"])
def test_rendered_unit_passes_systemd_analyze_verify(scope, install, tmp_path) -> None:
    nodes = su.gpu_device_nodes(fake_jetson_root(tmp_path / "root")) if scope == "system" else []
    unit = write_unit(su.render_unit(config_for(scope, install, tmp_path, device_nodes=nodes)), tmp_path)
    result = analyze("verify", str(unit), cwd=tmp_path, user=scope == "user")
    assert result.returncode == 0, result.stderr
    assert "edge-deploy-triton" not in result.stderr, result.stderr


def security(unit: Path, *, user: bool) -> tuple[float, set[str]]:
    """(overall exposure, names of the failed checks) from `systemd-analyze security`."""
    result = analyze("security", "--offline=true", str(unit), cwd=unit.parent, user=user)
    match = re.search(r"Overall exposure level for \S+: (\d+(?:\.\d+)?)", result.stdout)
    assert match, result.stdout + result.stderr
    failed = {line.split()[1] for line in result.stdout.splitlines() if line.startswith("\u2717 ")}
    return float(match.group(1)), failed


def exposure(unit: Path, *, user: bool) -> float:
    return security(unit, user=user)[0]


@needs_analyze
def test_system_unit_exposure_stays_where_it_is(install, tmp_path) -> None:
    nodes = su.gpu_device_nodes(fake_jetson_root(tmp_path / "root"))
    unit = write_unit(su.render_unit(config_for("system", install, tmp_path, device_nodes=nodes)), tmp_path)
    score, failed = security(unit, user=False)
    print(f"systemd-analyze security --offline=true: system unit exposure {score}")
    assert failed - ACCEPTED_EXPOSURE == set()
    assert {"PrivateNetwork=", "MemoryDenyWriteExecute="} <= failed  # the table was read
    assert score <= MAX_EXPOSURE


@needs_analyze
def test_user_unit_keeps_what_a_user_manager_applies(install, tmp_path) -> None:
    system = exposure(write_unit(su.render_unit(config_for("system", install, tmp_path)), tmp_path), user=False)
    user_dir = tmp_path / "user"
    user_dir.mkdir()
    user = exposure(write_unit(su.render_unit(config_for("user", install, tmp_path)), user_dir), user=True)
    print(f"exposure: system unit {system}, user unit {user}")
    assert system < user  # the system unit is the hardened one


def fake_jetson_root(root: Path) -> Path:
    """A fake root whose dev/ holds files named like an Orin's GPU device nodes (this machine has none)."""
    for name in ("nvmap", "nvhost-ctrl-gpu", "nvhost-gpu", "nvgpu/igpu0/ctrl", "nvgpu/igpu0/as", "null", "sda"):
        (root / "dev" / name).parent.mkdir(parents=True, exist_ok=True)
        (root / "dev" / name).touch()
    return root


def directives(text: str) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for line in text.splitlines():
        if "=" in line and not line.startswith("#") and not line.startswith("["):
            key, value = line.split("=", 1)
            found.setdefault(key, []).append(value)
    return found


# The system unit `serve` renders on an Orin (Triton in /opt/tritonserver), every directive.
# A change to the template or its rendering must change this too, on purpose.
# Left out, and checked after: ExecStart (tritonserver_argv), ProtectHome and
# BindReadOnlyPaths (they follow where this interpreter lives).
ORIN_SYSTEM_UNIT = {
    "Description": ["edge-deploy Triton Inference Server (/var/lib/edge-deploy/model_repository)"],
    "Documentation": ["https://github.com/triton-inference-server/server"],
    "After": ["network.target"],
    "StartLimitIntervalSec": ["600"],
    "StartLimitBurst": ["5"],
    "Type": ["exec"],
    "User": ["edge-deploy"],
    "Group": ["edge-deploy"],
    "SupplementaryGroups": ["video"],
    "EnvironmentFile": ["/etc/edge-deploy/triton.env"],
    "Environment": ["CUDA_CACHE_PATH=%C/edge-deploy-triton"],
    "CacheDirectory": ["edge-deploy-triton"],
    "ExecStartPost": ["/usr/bin/python3 -m edge_deploy health --wait 300 --url 127.0.0.1:8001 "
                      "--repository /var/lib/edge-deploy/model_repository"],
    "TimeoutStartSec": ["330"],
    "TimeoutStopSec": ["45"],
    "KillMode": ["mixed"],
    "Restart": ["on-failure"],
    "RestartSec": ["2"],
    "StandardOutput": ["journal"],
    "StandardError": ["inherit"],
    "SyslogIdentifier": ["edge-deploy-triton"],
    "NoNewPrivileges": ["yes"],
    "CapabilityBoundingSet": [""],
    "AmbientCapabilities": [""],
    "ProtectSystem": ["strict"],
    "PrivateMounts": ["yes"],
    "PrivateTmp": ["yes"],
    "ProtectKernelTunables": ["yes"],
    "ProtectKernelModules": ["yes"],
    "ProtectKernelLogs": ["yes"],
    "ProtectControlGroups": ["yes"],
    "ProtectClock": ["yes"],
    "ProtectHostname": ["yes"],
    "ProtectProc": ["invisible"],
    "RestrictNamespaces": ["yes"],
    "RestrictRealtime": ["yes"],
    "RestrictSUIDSGID": ["yes"],
    "LockPersonality": ["yes"],
    "SystemCallArchitectures": ["native"],
    "SystemCallFilter": ["@system-service", "~@privileged"],
    "SystemCallErrorNumber": ["EPERM"],
    "RestrictAddressFamilies": ["AF_UNIX AF_INET AF_INET6"],
    "IPAddressDeny": ["any"],
    "IPAddressAllow": ["localhost"],
    "UMask": ["0077"],
    "RemoveIPC": ["yes"],
    "DevicePolicy": ["closed"],
    "DeviceAllow": ["/dev/nvgpu/igpu0/as rw", "/dev/nvgpu/igpu0/ctrl rw", "/dev/nvhost-ctrl-gpu rw",
                    "/dev/nvhost-gpu rw", "/dev/nvmap rw"],
    "WantedBy": ["multi-user.target"],
}


# What a user manager cannot apply, so the --user unit leaves out (privileges, mount namespaces, BPF).
NOT_IN_USER_UNIT = {
    "User", "Group", "SupplementaryGroups", "CapabilityBoundingSet", "AmbientCapabilities", "ProtectSystem",
    "PrivateMounts", "PrivateTmp", "ProtectKernelTunables", "ProtectKernelModules", "ProtectKernelLogs", "ProtectControlGroups",
    "ProtectClock", "ProtectHostname", "ProtectProc", "DevicePolicy", "DeviceAllow", "IPAddressDeny",
    "IPAddressAllow", "RemoveIPC",
}


def orin_config(scope: str, tmp_path: Path) -> su.UnitConfig:
    triton = TritonInstall(binary=Path("/opt/tritonserver/bin/tritonserver"),
                           backend_dir=Path("/opt/tritonserver/backends"), source="test")
    return su.UnitConfig(
        scope=scope, install=triton,
        options=ServerOptions(model_repository=Path("/var/lib/edge-deploy/model_repository")),
        environment_file=Path("/etc/edge-deploy/triton.env"), python="/usr/bin/python3",
        device_nodes=su.gpu_device_nodes(fake_jetson_root(tmp_path / "root")),
    )


@pytest.mark.parametrize("scope", ["system", "user"])
def test_unit_directives_are_pinned(scope, tmp_path) -> None:
    config = orin_config(scope, tmp_path)
    text = su.render_unit(config)
    d = directives(text)
    assert shlex.split(d.pop("ExecStart")[0]) == tritonserver_argv(config.install, config.server_options())
    expected = dict(ORIN_SYSTEM_UNIT)
    if scope == "system":
        home = [p for p in su.readable_paths(config) if any(p == t or t in p.parents for t in su.HOME_TREES)]
        assert d.pop("ProtectHome") == ["tmpfs" if home else "yes"]
        assert d.pop("BindReadOnlyPaths", []) == [str(p) for p in home]
    else:
        expected = {k: v for k, v in expected.items() if k not in NOT_IN_USER_UNIT}
        expected["WantedBy"] = ["default.target"]
        # the user unit's health check reads the user's state dir (the unit's key while it starts)
        expected["ExecStartPost"] = [expected["ExecStartPost"][0] + " --user"]
    assert d == expected
    assert [line for line in text.splitlines() if line.startswith("[")] == ["[Unit]", "[Service]", "[Install]"]


def test_system_unit_is_hardened_and_keeps_what_triton_needs(install, tmp_path) -> None:
    root = fake_jetson_root(tmp_path / "root")
    config = config_for("system", install, tmp_path, device_nodes=su.gpu_device_nodes(root), health_wait=123)
    d = directives(su.render_unit(config))
    assert d["User"] == ["edge-deploy"] and d["SupplementaryGroups"] == ["video"]
    assert d["NoNewPrivileges"] == ["yes"] and d["CapabilityBoundingSet"] == [""]
    assert d["ProtectSystem"] == ["strict"] and d["PrivateTmp"] == ["yes"]
    assert d["RestrictAddressFamilies"] == ["AF_UNIX AF_INET AF_INET6"]
    assert "@system-service" in d["SystemCallFilter"]
    assert d["DevicePolicy"] == ["closed"]
    allowed = {v.split()[0] for v in d["DeviceAllow"]}
    assert allowed == {f"/dev/{n}" for n in ("nvmap", "nvhost-ctrl-gpu", "nvhost-gpu", "nvgpu/igpu0/ctrl", "nvgpu/igpu0/as")}
    # /dev/shm stays shared with clients, and CUDA's JIT needs W+X memory.
    for absent in ("PrivateIPC", "PrivateDevices", "MemoryDenyWriteExecute", "PrivateUsers"):
        assert absent not in d
    assert d["Restart"] == ["on-failure"] and "StartLimitBurst" in d and "StartLimitIntervalSec" in d
    assert int(d["TimeoutStartSec"][0]) > 123
    assert d["IPAddressAllow"] == ["localhost"]
    assert d["WantedBy"] == ["multi-user.target"]


def test_user_unit_drops_what_a_user_manager_cannot_apply(install, tmp_path) -> None:
    d = directives(su.render_unit(config_for("user", install, tmp_path)))
    assert not set(d) & su.USER_SCOPE_DROPS
    assert d["NoNewPrivileges"] == ["yes"] and d["Restart"] == ["on-failure"]
    assert d["WantedBy"] == ["default.target"]


def test_exec_start_is_the_one_argv_with_the_key_from_the_environment_file(install, tmp_path) -> None:
    config = config_for("system", install, tmp_path, health_wait=77)
    d = directives(su.render_unit(config))
    argv = shlex.split(d["ExecStart"][0])
    assert argv == tritonserver_argv(install, config.server_options())
    assert f"--grpc-restricted-protocol=model-repository:edge-deploy-key=${{{KEY_ENV}}}" in argv
    assert d["EnvironmentFile"] == [str(tmp_path / "triton.env")]
    post = shlex.split(d["ExecStartPost"][0])
    assert post[:4] == [sys.executable, "-m", "edge_deploy", "health"]
    assert post[post.index("--wait") + 1] == "77" and post[post.index("--url") + 1] == "127.0.0.1:8001"


def test_http_and_non_loopback_addresses_are_rendered_with_their_guards(install, tmp_path) -> None:
    options = ServerOptions(model_repository=tmp_path / "repo", grpc_address="0.0.0.0", http=True)
    d = directives(su.render_unit(config_for("system", install, tmp_path, options=options)))
    argv = shlex.split(d["ExecStart"][0])
    assert f"--http-restricted-api=model-repository:edge-deploy-key=${{{KEY_ENV}}}" in argv
    assert "--http-address=127.0.0.1" in argv
    # Beyond loopback, IPAddressAllow= admits the --allow-from networks (serve defaults them to the
    # address's own subnet); a config that names none admits localhost only.
    assert d["IPAddressDeny"] == ["any"] and d["IPAddressAllow"] == ["localhost"]
    config = config_for("system", install, tmp_path, options=options, allow_from=["10.1.0.0/16", "192.168.4.0/24"])
    assert directives(su.render_unit(config))["IPAddressAllow"] == ["localhost 10.1.0.0/16 192.168.4.0/24"]


def test_paths_under_home_are_bound_read_only_behind_a_tmpfs(tmp_path) -> None:
    install = TritonInstall(binary=Path("/home/dev/triton/bin/tritonserver"), backend_dir=None, source="test")
    options = ServerOptions(model_repository=Path("/home/dev/my repo%1"))
    config = su.UnitConfig(scope="system", install=install, options=options, environment_file=tmp_path / "e.env")
    text = su.render_unit(config)
    d = directives(text)
    assert d["ProtectHome"] == ["tmpfs"]
    binds = [shlex.split(v)[0] for v in d["BindReadOnlyPaths"]]
    assert "/home/dev/triton" in binds and "/home/dev/my repo%%1" in binds
    assert '"--model-repository=/home/dev/my repo%%1"' in d["ExecStart"][0]


def test_systemd_quote_escapes_specifiers_and_variables() -> None:
    assert su.systemd_quote("a b") == '"a b"'
    assert su.systemd_quote("50%") == "50%%"
    assert su.systemd_quote("$HOME") == "$$HOME"
    assert su.systemd_quote(f"k=${{{KEY_ENV}}}") == f"k=${{{KEY_ENV}}}"


def test_environment_file_quotes_values() -> None:
    text = su.environment_file_text({"B": 'x "y"', "A": "1"})
    assert text == 'A="1"\nB="x \\"y\\""\n'


@needs_analyze
def test_tls_unit_beyond_loopback_keeps_the_exposure(install, tmp_path) -> None:
    """Serving 10.77.0.1 with mutual TLS: same exposure and failed checks as the loopback unit, allow-list set."""
    from edge_deploy.serve.argv import ServerTLS

    state = tmp_path / "state"
    tls = su.service_tls(ServerTLS(cert=tmp_path / "s.pem", key=tmp_path / "s.key", ca=tmp_path / "ca.pem",
                                   client_cert=tmp_path / "c.pem", client_key=tmp_path / "c.key"), state)
    nodes = su.gpu_device_nodes(fake_jetson_root(tmp_path / "root"))
    config = config_for("system", install, tmp_path, device_nodes=nodes, allow_from=["10.77.0.0/24"],
                        options=ServerOptions(model_repository=tmp_path / "repo", grpc_address="10.77.0.1", tls=tls))
    text = su.render_unit(config)
    assert "IPAddressDeny=any" in text and "IPAddressAllow=localhost 10.77.0.0/24" in text
    assert f"--grpc-server-key={state / 'triton-tls' / 'server.key'}" in text
    unit = write_unit(text, tmp_path)
    assert analyze("verify", str(unit), cwd=tmp_path, user=False).returncode == 0
    score, failed = security(unit, user=False)
    print(f"systemd-analyze security --offline=true: TLS unit on 10.77.0.1 exposure {score}")
    assert failed - ACCEPTED_EXPOSURE == set()
    assert score <= MAX_EXPOSURE


def test_a_failed_serve_puts_each_file_back_atomically(tmp_path) -> None:
    """What a failed `serve` put back is written the one way files are (fsutil, issue 54 class 3): a new file renamed
    over the path, with the original's bytes and mode, so a hard link to what serve wrote (anything else holding that
    inode) is never written through, and a file serve created is removed (plant: `file.write_bytes(kept.data)` in
    su._put_back, and the link sees the old key). systemctl --user answers nothing here: _restore ignores it."""
    key, env, unit = tmp_path / "model-repository.key", tmp_path / "triton.env", tmp_path / "new.service"
    key.write_text("the old key\n")
    key.chmod(0o640)
    env.write_text("OLD=1\n")
    saved = {key: su._kept(key), env: su._kept(env), unit: su._kept(unit)}
    su.write_private(key, "serve's key\n")
    su.write_private(env, "NEW=1\n")
    su.write_public(unit, "[Unit]\n")
    os.link(key, tmp_path / "other-holder")
    su._restore("user", saved, was_enabled=True)
    assert key.read_text() == "the old key\n" and (key.stat().st_mode & 0o777) == 0o640
    assert env.read_text() == "OLD=1\n" and not unit.exists()
    assert (tmp_path / "other-holder").read_text() == "serve's key\n"  # the inode serve wrote was replaced, not edited
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model-repository.key", "other-holder", "triton.env"]
