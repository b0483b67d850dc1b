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

from edge_deploy.machine import facts as device

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
    assert facts.model == "NVIDIA Jetson Orin Nano Engineering Reference Developer Kit Super"
    assert facts.module == "p3767-0005"  # from "nvidia,p3768-0000+p3767-0005-super"
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
    assert facts.model == "Jetson AGX Orin Developer Kit"  # JetPack 5's device tree has no "NVIDIA " prefix
    assert facts.module == "p3701-0000" and facts.dla_cores == 2
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


# Every row of device.JETPACK_FOR_L4T, as the /etc/nv_tegra_release line of that release reads
# (NVIDIA's JetPack archive; jetson-stats' NVIDIA_JETPACK table, which transcribes it).
L4T_ROWS = [
    ("35", "1.0", "5.0.2"), ("35", "2.1", "5.1"), ("35", "3.1", "5.1.1"), ("35", "4.1", "5.1.2"),
    ("35", "5.0", "5.1.3"), ("35", "6.0", "5.1.4"), ("35", "6.1", "5.1.5"), ("35", "6.2", "5.1.5"),
    ("35", "6.3", "5.1.5"), ("35", "6.4", "5.1.6"),
    ("36", "2.0", "6.0 DP"), ("36", "3.0", "6.0"), ("36", "4.0", "6.1"), ("36", "4.2", "6.1 (rev1)"),
    ("36", "4.3", "6.2"), ("36", "4.4", "6.2.1"), ("36", "4.7", "6.2.1"), ("36", "5.0", "6.2.2"),
    ("38", "2.0", "7.0"), ("38", "2.1", "7.0"), ("38", "2.2", "7.0"), ("38", "4.0", "7.1"),
    ("39", "0.0", "7.2 EA"), ("39", "2.0", "7.2"),
]


@pytest.mark.parametrize(("release", "revision", "jetpack"), L4T_ROWS)
def test_every_l4t_row_reads_from_its_release_line(tmp_path: Path, release: str, revision: str, jetpack: str) -> None:
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc" / "nv_tegra_release").write_text(
        f"# R{release} (release), REVISION: {revision}, GCID: 1, BOARD: generic, EABI: aarch64, DATE: x\n")
    assert device.jetpack_for_l4t(device.read_l4t_release(tmp_path)) == jetpack


def test_the_table_has_exactly_the_tested_rows_and_new_lines_fall_back() -> None:
    assert set(device.JETPACK_FOR_L4T) == {f"{r}.{v}" for r, v, _ in L4T_ROWS}
    assert device.jetpack_for_l4t("39.9.9") == "7.x" and device.jetpack_for_l4t("38.9.0") == "7.x"


@pytest.mark.parametrize(
    ("compatible", "model", "cores"),
    [
        ("nvidia,p3768-0000+p3767-0000", "NVIDIA Jetson Orin NX Engineering Reference Developer Kit", 2),
        ("nvidia,p3768-0000+p3767-0001", "NVIDIA Jetson Orin NX Engineering Reference Developer Kit", 1),
        ("nvidia,p3768-0000+p3767-0003", "NVIDIA Jetson Orin Nano Engineering Reference Developer Kit", 0),
        ("nvidia,p3768-0000+p3767-0004", "NVIDIA Jetson Orin Nano Engineering Reference Developer Kit", 0),
        ("nvidia,p3768-0000+p3767-0005-super", "NVIDIA Jetson Orin Nano Engineering Reference Developer Kit Super", 0),
        ("nvidia,p3737-0000+p3701-0005", "NVIDIA Jetson AGX Orin Developer Kit", 2),
        ("nvidia,p3509-0000+p3767-0001", "a carrier board that names no module", 1),
    ],
)
def test_dla_cores_follow_the_module_in_the_compatible_string(board, compatible: str, model: str, cores: int) -> None:
    # Orin NX 8GB has one DLA engine and the Orin Nano none: the model name cannot tell them apart.
    root = board("agx_orin_jp60")
    tree = root / "proc" / "device-tree"
    module = compatible.rsplit("+", 1)[1].removesuffix("-super")
    (tree / "compatible").write_bytes(f"{compatible}\0nvidia,{module}\0nvidia,tegra234\0".encode())
    (tree / "model").write_bytes(model.encode() + b"\0")
    facts = device.device_facts(root)
    assert (facts.module, facts.dla_cores) == (module, cores)


def _set_cpu(root: Path, cpu: int, low: int, high: int, online: str | None = None) -> None:
    path = root / "sys" / "devices" / "system" / "cpu" / f"cpu{cpu}"
    (path / "cpufreq" / "scaling_min_freq").write_text(f"{low}\n")
    (path / "cpufreq" / "scaling_max_freq").write_text(f"{high}\n")
    if online is not None:
        (path / "online").write_text(online + "\n")


def test_jetson_clocks_is_read_against_the_modes_maximum_over_online_cpus(board) -> None:
    # MODE_30W on an AGX Orin: 8 CPUs online capped at 1.728 GHz (cpuinfo_max_freq stays 2.2016 GHz),
    # cpu8-11 offline with stale limits. jetson_clocks pins min = max of the mode: that is "on".
    root = board("agx_orin_jp512")
    for cpu in range(8):
        _set_cpu(root, cpu, 1728000, 1728000, None if cpu == 0 else "1")
    for cpu in range(8, 12):
        _set_cpu(root, cpu, 115200, 2201600, "0")
    assert device.read_jetson_clocks(root) is True
    _set_cpu(root, 3, 115200, 1728000, "1")  # one online CPU scaling freely: off
    assert device.read_jetson_clocks(root) is False
