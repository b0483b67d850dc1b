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

from edge_deploy.serve import systemd as su
from edge_deploy.serve.tritonserver import (
    KEY_ENV,
    ServerOptions,
    TritonInstall,
    find_tritonserver,
    tritonserver_argv,
)

REPO_ROOT = Path(__file__).resolve().parents[2]
MAX_EXPOSURE = 3.0

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
def _no_stamp_left_behind():
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
    shipped = (REPO_ROOT / "edge_deploy" / "serve" / "templates" / su.UNIT_NAME).read_bytes()
    assert (REPO_ROOT / "systemd" / su.UNIT_NAME).read_bytes() == shipped
    assert su.template_text().encode() == shipped


@needs_analyze
@pytest.mark.parametrize("scope", ["system", "user"])
def test_rendered_unit_passes_systemd_analyze_verify(scope, install, tmp_path) -> None:
    nodes = su.gpu_device_nodes(fake_jetson_root(tmp_path / "root")) if scope == "system" else []
    unit = write_unit(su.render_unit(config_for(scope, install, tmp_path, device_nodes=nodes)), tmp_path)
    result = analyze("verify", str(unit), cwd=tmp_path, user=scope == "user")
    assert result.returncode == 0, result.stderr
    assert "edge-deploy-triton" not in result.stderr, result.stderr


def exposure(unit: Path, *, user: bool) -> float:
    result = analyze("security", "--offline=true", str(unit), cwd=unit.parent, user=user)
    match = re.search(r"Overall exposure level for \S+: (\d+(?:\.\d+)?)", result.stdout)
    assert match, result.stdout + result.stderr
    return float(match.group(1))


@needs_analyze
def test_system_unit_exposure_is_at_most_3(install, tmp_path) -> None:
    nodes = su.gpu_device_nodes(fake_jetson_root(tmp_path / "root"))
    unit = write_unit(su.render_unit(config_for("system", install, tmp_path, device_nodes=nodes)), tmp_path)
    score = exposure(unit, user=False)
    print(f"systemd-analyze security --offline=true: system unit exposure {score}")
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
    assert "IPAddressDeny" not in d  # remote clients were asked for; the key still guards model loading


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
