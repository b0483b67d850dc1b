"""Device facts read from fake Jetson roots.

There is no Jetson here: tests/data/jetson_root/<board>/ holds real-looking
copies of the files a board has (/etc/nv_tegra_release lines, NUL-terminated
device-tree strings, /proc/meminfo, /etc/nvpmodel.conf, cpufreq) and a stand-in
`nvpmodel` script that prints the saved output of `nvpmodel -q` of such a board.
"""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from edge_deploy.build import device

pytest_plugins = ["jetson_fixtures"]  # board: a copy of a fixture board that tests may change


@pytest.mark.parametrize(
    ("line", "l4t", "jetpack"),
    [
        ("# R35 (release), REVISION: 4.1, GCID: 33958178, BOARD: t186ref, EABI: aarch64, DATE: Tue Aug  1 19:57:35 UTC 2023", "35.4.1", "5.1.2"),
        ("# R36 (release), REVISION: 3.0, GCID: 36191598, BOARD: generic, EABI: aarch64, DATE: Mon May  6 17:34:21 UTC 2024", "36.3.0", "6.0"),
        ("# R36 (release), REVISION: 4.3, GCID: 38968081, BOARD: generic, EABI: aarch64, DATE: Wed Jan  8 01:49:37 UTC 2025", "36.4.3", "6.2"),
        ("# R36 (release), REVISION: 4.4, GCID: 41062509, BOARD: generic, EABI: aarch64, DATE: Mon Jun 16 16:07:13 UTC 2025", "36.4.4", "6.2.1"),
        ("# R36 (release), REVISION: 4, GCID: 1, BOARD: generic, EABI: aarch64, DATE: x", "36.4.0", "6.1"),
        ("# R36 (release), REVISION: 9.9, GCID: 1, BOARD: generic, EABI: aarch64, DATE: x", "36.9.9", "6.x"),
    ],
)
def test_l4t_release_and_jetpack(tmp_path: Path, line: str, l4t: str, jetpack: str) -> None:
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc" / "nv_tegra_release").write_text(line + "\nTARGET_USERSPACE_LIB_DIR=nvidia\n")
    assert device.read_l4t_release(tmp_path) == l4t
    assert device.jetpack_for_l4t(l4t) == jetpack


def test_no_tegra_release_is_not_a_jetson(board) -> None:
    facts = device.device_facts(board("x86_desktop"))
    assert not facts.is_jetson
    assert facts.l4t is None and facts.jetpack is None and facts.model is None
    assert facts.dla_cores == 0
    assert facts.mem_available == 20480000 * 1024


def test_agx_orin_jp60(board) -> None:
    facts = device.device_facts(board("agx_orin_jp60"))
    assert facts.is_jetson
    assert facts.model == "NVIDIA Jetson AGX Orin Developer Kit"  # trailing NUL stripped
    assert (facts.soc, facts.gpu, facts.compute_capability) == ("tegra234", "Orin", "8.7")
    assert (facts.l4t, facts.jetpack, facts.cuda, facts.tensorrt) == ("36.3.0", "6.0", "12.2.140", "8.6.2")
    assert facts.dla_cores == 2
    assert facts.power_mode is not None and facts.power_mode.name == "MAXN" and facts.power_mode.is_max
    assert facts.jetson_clocks is True
    assert device.small_device_warnings(facts) == []


def test_orin_nano_warnings(board) -> None:
    facts = device.device_facts(board("orin_nano_jp62"))
    assert (facts.l4t, facts.jetpack, facts.tensorrt) == ("36.4.3", "6.2", "10.3.0")
    assert facts.dla_cores == 0  # Orin Nano has no DLA
    mode = facts.power_mode
    assert mode is not None and (mode.id, mode.name, mode.is_max, mode.max_id) == (0, "15W", False, 2)
    assert facts.jetson_clocks is False
    assert [(p.pid, p.rss_bytes) for p in facts.tritonservers] == [(4242, 1843200 * 1024)]
    warnings = " | ".join(device.small_device_warnings(facts))
    assert "nvpmodel -m 2" in warnings
    assert "jetson_clocks is off" in warnings
    assert "tritonserver (pid 4242) holds 1800 MiB" in warnings
    assert "no swap" in warnings


def test_power_mode_from_status_file_when_nvpmodel_is_absent(board) -> None:
    facts = device.device_facts(board("agx_orin_jp512"))
    assert facts.model == "Jetson AGX Orin"
    assert (facts.l4t, facts.jetpack, facts.cuda) == ("35.4.1", "5.1.2", "11.4.315")
    mode = facts.power_mode
    assert mode is not None and (mode.id, mode.name, mode.is_max, mode.max_id) == (2, "MODE_30W", False, 0)


def test_power_mode_follows_the_nvpmodel_tool(board) -> None:
    root = board("orin_nano_jp62")
    (root / "usr" / "sbin" / "nvpmodel-q.txt").write_text("NV Power Mode: MAXN_SUPER\n2\n")
    mode = device.read_power_mode(root)
    assert mode is not None and (mode.id, mode.name, mode.is_max) == (2, "MAXN_SUPER", True)


@pytest.mark.parametrize(
    ("output", "expected"),
    [
        ("NV Power Mode: MAXN\n0\n", (0, "MAXN", True)),
        ("NV Fan Mode:quiet\nNV Power Mode: MODE_30W\n2\n", (2, "MODE_30W", False)),
        ("NVPM WARN: Golden image context is already created\nNV Power Mode: 15W\n0\n", (0, "15W", None)),
        ("garbage\n", None),
    ],
)
def test_parse_nvpmodel_query(board, output: str, expected) -> None:
    conf = (board("agx_orin_jp60") / "etc" / "nvpmodel.conf").read_text()
    modes = device.parse_nvpmodel_conf(conf) if "MODE_30W" in output else {}
    mode = device.parse_nvpmodel_query(output, modes)
    if expected is None:
        assert mode is None
    else:
        assert mode is not None and (mode.id, mode.name, mode.is_max) == expected


def test_fastest_mode_without_maxn_is_the_most_watts() -> None:
    assert device.fastest_mode({0: "15W", 1: "7W"}) == 0
    assert device.fastest_mode({0: "10W", 1: "MODE_25W"}) == 1
    assert device.fastest_mode({}) is None


def test_meminfo_units(tmp_path: Path) -> None:
    (tmp_path / "proc").mkdir()
    (tmp_path / "proc" / "meminfo").write_text("MemTotal: 1000 kB\nMemAvailable: 500 kB\nHugePages_Total: 0\n")
    assert device.read_meminfo(tmp_path) == {"MemTotal": 1024000, "MemAvailable": 512000, "HugePages_Total": 0}


def test_environment_root(board, monkeypatch) -> None:
    root = board("agx_orin_jp60")
    monkeypatch.setenv(device.ROOT_ENV, str(root))
    assert device.default_root() == root
    assert device.device_facts().l4t == "36.3.0"


def test_cuda_version_txt(tmp_path: Path) -> None:
    cuda = tmp_path / "usr" / "local" / "cuda"
    cuda.mkdir(parents=True)
    (cuda / "version.txt").write_text("CUDA Version 10.2.300\n")
    assert device.read_cuda_version(tmp_path) == "10.2.300"
    assert os.path.isdir(cuda)
