"""Facts about this machine that decide how (and whether) a TensorRT plan is built.

Everything is read from files under a root directory (``/`` on a real device;
tests pass a fake root of real-looking Jetson files): the L4T release from
/etc/nv_tegra_release, the board from /proc/device-tree/model, memory from
/proc/meminfo, the power mode from ``nvpmodel -q``, the clock state from
cpufreq, the CUDA toolkit from /usr/local/cuda, and tritonserver processes
from /proc. GPU name, compute capability and DLA count come from TensorRT /
pycuda when they import (edge_deploy.machine.tensorrt_api), otherwise from the SoC.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from . import tensorrt_api

ROOT_ENV = "EDGE_DEPLOY_ROOT"

# Jetson Linux (L4T) release -> JetPack. From NVIDIA's JetPack archive
# (developer.nvidia.com/embedded/jetpack-archive), as jetson-stats transcribes it
# (rbonghi/jetson_stats jtop/core/jetson_variables.py, NVIDIA_JETPACK, commit f41d5ca, 2026-07).
# tests/machine/test_facts.py checks every row from an nv_tegra_release line.
JETPACK_FOR_L4T = {
    "35.1.0": "5.0.2",
    "35.2.1": "5.1",
    "35.3.1": "5.1.1",
    "35.4.1": "5.1.2",
    "35.5.0": "5.1.3",
    "35.6.0": "5.1.4",
    "35.6.1": "5.1.5",
    "35.6.2": "5.1.5",
    "35.6.3": "5.1.5",
    "35.6.4": "5.1.6",
    "36.2.0": "6.0 DP",
    "36.3.0": "6.0",
    "36.4.0": "6.1",
    "36.4.2": "6.1 (rev1)",
    "36.4.3": "6.2",
    "36.4.4": "6.2.1",
    "36.4.7": "6.2.1",
    "36.5.0": "6.2.2",
    "38.2.0": "7.0",
    "38.2.1": "7.0",
    "38.2.2": "7.0",
    "38.4.0": "7.1",
    "39.0.0": "7.2 EA",
    "39.2.0": "7.2",
}
_JETPACK_MAJOR = {"32": "4.x", "34": "5.0 DP", "35": "5.x", "36": "6.x", "38": "7.x", "39": "7.x"}

# DLA engines per Orin module, by the part number in /proc/device-tree/compatible
# ("nvidia,p3768-0000+p3767-0001"). NVIDIA's module specifications: AGX Orin (p3701) and
# Orin NX 16GB (p3767-0000) have 2 NVDLA v2 engines, Orin NX 8GB (p3767-0001) has 1, Orin Nano
# (p3767-0003/0004/0005) has none; part numbers as in jetson-stats' MODULE_NAME_TABLE.
_DLA_BY_MODULE = {"p3767-0000": 2, "p3767-0001": 1, "p3767-0003": 0, "p3767-0004": 0, "p3767-0005": 0}
_MODULE = re.compile(r"\b(p\d{4}-\d{4})")

# SoC (from /proc/device-tree/compatible) -> (GPU name as CUDA reports it, compute capability).
_SOC_GPU = {
    "tegra234": ("Orin", "8.7"),
    "tegra194": ("Xavier", "7.2"),
    "tegra186": ("NVIDIA Tegra X2", "6.2"),
    "tegra210": ("NVIDIA Tegra X1", "5.3"),
    "tegra264": ("Thor", "11.0"),
}

_L4T_LINE = re.compile(r"#\s*R(\d+)\s*\(release\),\s*REVISION:\s*([\d.]+)")
_NVP_MODE = re.compile(r"NV Power Mode\s*:\s*(\S+)")
_NVP_CONF_MODEL = re.compile(r"<\s*POWER_MODEL\s+ID=(\d+)\s+NAME=(\S+)\s*>")
_NVP_STATUS = re.compile(r"pmode:(\d+)")
_WATTS = re.compile(r"(\d+)W", re.IGNORECASE)


@dataclass
class PowerMode:
    """The nvpmodel power mode: its id, its name and whether it is the fastest mode of this board."""

    id: int | None
    name: str | None
    is_max: bool | None
    max_id: int | None = None  # the board's fastest mode, when /etc/nvpmodel.conf tells

    def describe(self) -> str:
        label = f"{self.name or '?'} (mode {self.id if self.id is not None else '?'})"
        if self.is_max is False:
            label += ", not maximum performance"
        return label


@dataclass
class TritonProc:
    """A running tritonserver and how much memory it holds (RSS; CPU and GPU share RAM on a Jetson)."""

    pid: int
    rss_bytes: int


@dataclass
class DeviceFacts:
    """What this machine is, as far as building and serving a plan is concerned."""

    root: str
    is_jetson: bool
    model: str | None = None
    module: str | None = None  # the module's part number, e.g. p3701-0005 (AGX Orin 64GB)
    soc: str | None = None
    l4t: str | None = None
    jetpack: str | None = None
    cuda: str | None = None
    tensorrt: str | None = None
    tensorrt_source: str | None = None
    gpu: str | None = None
    compute_capability: str | None = None
    dla_cores: int | None = None
    mem_total: int | None = None
    mem_available: int | None = None
    swap_total: int | None = None
    power_mode: PowerMode | None = None
    jetson_clocks: bool | None = None
    tritonservers: list[TritonProc] = field(default_factory=list)


def default_root() -> Path:
    """The root directory facts are read from: $EDGE_DEPLOY_ROOT (tests, diagnostics) or /."""
    return Path(os.environ.get(ROOT_ENV) or "/")


def _read(path: Path) -> str | None:
    try:
        return path.read_bytes().decode("utf-8", "replace")
    except OSError:
        return None


def read_l4t_release(root: Path) -> str | None:
    """'36.3.0' from the first line of /etc/nv_tegra_release, or None off a Jetson."""
    text = _read(root / "etc" / "nv_tegra_release")
    if not text:
        return None
    match = _L4T_LINE.search(text)
    if not match:
        return None
    major, revision = match.groups()
    parts = revision.split(".")
    while len(parts) < 2:
        parts.append("0")
    return ".".join([major, *parts])


def jetpack_for_l4t(l4t: str | None) -> str | None:
    """JetPack version for an L4T release ('36.3.0' -> '6.0'); the major line ('6.x') for an unknown revision."""
    if not l4t:
        return None
    if l4t in JETPACK_FOR_L4T:
        return JETPACK_FOR_L4T[l4t]
    major = l4t.split(".")[0]
    return _JETPACK_MAJOR.get(major)


def read_model(root: Path) -> str | None:
    """The board name from /proc/device-tree/model (NUL-terminated in the device tree)."""
    text = _read(root / "proc" / "device-tree" / "model")
    if text is None:
        return None
    return text.replace("\x00", "").strip() or None


def read_soc(root: Path) -> str | None:
    """'tegra234' etc. from /proc/device-tree/compatible (NUL-separated strings)."""
    text = _read(root / "proc" / "device-tree" / "compatible")
    if not text:
        return None
    for entry in text.split("\x00"):
        entry = entry.strip()
        if entry.startswith("nvidia,tegra"):
            return entry.split(",", 1)[1]
    return None


def read_module(root: Path) -> str | None:
    """The module part number ('p3767-0001') from /proc/device-tree/compatible, or None.

    The compatible list names carrier+module first ("nvidia,p3768-0000+p3767-0005-super"), then the
    module ("nvidia,p3767-0005"), then the SoC; the module is the last p-number of the first entry.
    """
    text = _read(root / "proc" / "device-tree" / "compatible")
    for entry in (text or "").split("\x00"):
        found = _MODULE.findall(entry)
        if found:
            return found[-1]
    return None


def read_meminfo(root: Path) -> dict[str, int]:
    """/proc/meminfo in bytes: {'MemTotal': ..., 'MemAvailable': ..., 'SwapTotal': ...}."""
    text = _read(root / "proc" / "meminfo") or ""
    values: dict[str, int] = {}
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        fields = rest.split()
        if not fields or not fields[0].isdigit():
            continue
        factor = 1024 if len(fields) > 1 and fields[1].lower() == "kb" else 1
        values[key.strip()] = int(fields[0]) * factor
    return values


def parse_nvpmodel_conf(text: str) -> dict[int, str]:
    """Power modes {id: name} from an nvpmodel .conf (`< POWER_MODEL ID=0 NAME=MAXN >`)."""
    return {int(i): name for i, name in _NVP_CONF_MODEL.findall(text)}


def fastest_mode(modes: dict[int, str]) -> int | None:
    """The id of a board's maximum-performance mode: MAXN* if it has one, else the most watts."""
    maxn = [i for i, n in modes.items() if "MAXN" in n.upper()]
    if maxn:
        return min(maxn)
    watts = {i: int(m.group(1)) for i, n in modes.items() if (m := _WATTS.search(n))}
    return max(watts, key=lambda i: watts[i]) if watts else None


def _power_mode(name: str | None, mode_id: int | None, modes: dict[int, str]) -> PowerMode:
    best = fastest_mode(modes)
    if name and "MAXN" in name.upper():
        is_max: bool | None = True
    elif best is None:
        is_max = None
    elif mode_id is not None:
        is_max = mode_id == best
    else:
        is_max = name == modes[best]
    return PowerMode(id=mode_id, name=name, is_max=is_max, max_id=best)


def parse_nvpmodel_query(output: str, modes: dict[int, str] | None = None) -> PowerMode | None:
    """Parse `nvpmodel -q` output ('NV Power Mode: MAXN' then the mode id; NVPM WARN lines ignored)."""
    name: str | None = None
    mode_id: int | None = None
    lines = [line.strip() for line in output.splitlines()]
    for i, line in enumerate(lines):
        match = _NVP_MODE.search(line)
        if match:
            name = match.group(1)
            for after in lines[i + 1 :]:
                if after.isdigit():
                    mode_id = int(after)
                    break
                if after and not after.startswith("NVPM"):
                    break
            break
    if name is None and mode_id is None:
        return None
    modes = modes or {}
    if name is None and mode_id in modes:
        name = modes[mode_id]
    return _power_mode(name, mode_id, modes)


def _nvpmodel_binary(root: Path) -> Path | None:
    for candidate in (root / "usr" / "sbin" / "nvpmodel", root / "usr" / "bin" / "nvpmodel"):
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate
    if root == Path("/"):
        found = shutil.which("nvpmodel")
        return Path(found) if found else None
    return None


def read_power_mode(root: Path) -> PowerMode | None:
    """The current nvpmodel mode: `nvpmodel -q` when present, else /var/lib/nvpmodel/status."""
    conf = _read(root / "etc" / "nvpmodel.conf") or ""
    modes = parse_nvpmodel_conf(conf)
    binary = _nvpmodel_binary(root)
    if binary is not None:
        try:
            done = subprocess.run([str(binary), "-q"], capture_output=True, text=True, timeout=10)
            parsed = parse_nvpmodel_query(done.stdout + "\n" + done.stderr, modes)
            if parsed is not None:
                return parsed
        except (OSError, subprocess.SubprocessError):
            pass
    status = _read(root / "var" / "lib" / "nvpmodel" / "status")
    if status and (match := _NVP_STATUS.search(status)):
        mode_id = int(match.group(1))
        return _power_mode(modes.get(mode_id), mode_id, modes)
    return None


def read_jetson_clocks(root: Path) -> bool | None:
    """True when every online CPU's scaling_min_freq equals its scaling_max_freq, None if unknown.

    jetson_clocks pins the clocks at the maximum of the current nvpmodel mode, not at the hardware
    maximum (cpuinfo_max_freq), and a mode may take CPUs offline; so, as jtop does
    (rbonghi/jetson_stats jtop/core/jetson_clocks.py, jetson_clocks_alive), only online CPUs count
    and each is compared with its own scaling maximum.
    """
    cpus = sorted((root / "sys" / "devices" / "system" / "cpu").glob("cpu[0-9]*"))
    seen = False
    for cpu in cpus:
        online = _read(cpu / "online")
        if online is not None and online.strip() != "1":
            continue  # cpu0 has no `online` file: always online
        freq = cpu / "cpufreq"
        low = _read(freq / "scaling_min_freq")
        top = _read(freq / "scaling_max_freq")
        if low is None or top is None:
            continue
        seen = True
        if low.strip() != top.strip():
            return False
    return True if seen else None


def read_cuda_version(root: Path) -> str | None:
    """CUDA toolkit version from /usr/local/cuda/version.json (11+) or version.txt (10.x)."""
    base = root / "usr" / "local" / "cuda"
    text = _read(base / "version.json")
    if text:
        try:
            return str(json.loads(text)["cuda"]["version"])
        except (ValueError, KeyError, TypeError):
            pass
    text = _read(base / "version.txt")
    if text and (match := re.search(r"CUDA Version\s+([\d.]+)", text)):
        return match.group(1)
    return None


def read_tensorrt_library_version(root: Path) -> str | None:
    """TensorRT version from the libnvinfer.so.X.Y.Z file name (when the Python module is absent)."""
    best: tuple[int, ...] | None = None
    for libdir in ("usr/lib/aarch64-linux-gnu", "usr/lib/x86_64-linux-gnu", "usr/lib", "usr/local/lib"):
        for lib in (root / libdir).glob("libnvinfer.so.*.*.*"):
            try:
                version = tuple(int(p) for p in lib.name.split(".so.", 1)[1].split("."))
            except ValueError:
                continue
            if best is None or version > best:
                best = version
    return ".".join(map(str, best)) if best else None


def read_tritonservers(root: Path, uid: int | None = None) -> list[TritonProc]:
    """Running tritonserver processes (from /proc/<pid>/comm) with their resident memory: with `uid`, only those
    running as that user (a shared machine's other users' servers are not this user's to stop; a process whose
    status names no user is kept)."""
    procs: list[TritonProc] = []
    proc = root / "proc"
    try:
        entries = list(proc.iterdir())
    except OSError:
        return procs
    for entry in entries:
        if not entry.name.isdigit():
            continue
        comm = _read(entry / "comm")
        if comm is None or comm.strip() != "tritonserver":
            continue
        rss, owner = 0, None
        for line in (_read(entry / "status") or "").splitlines():
            fields = line.split()
            if line.startswith("VmRSS:"):
                rss = int(fields[1]) * 1024 if len(fields) > 1 and fields[1].isdigit() else 0
            elif line.startswith("Uid:") and len(fields) > 1 and fields[1].isdigit():
                owner = int(fields[1])  # the real user
        if uid is not None and owner is not None and owner != uid:
            continue
        procs.append(TritonProc(pid=int(entry.name), rss_bytes=rss))
    return sorted(procs, key=lambda p: p.pid)


def dla_cores_for_board(soc: str | None, model: str | None, module: str | None = None) -> int:
    """DLA engines when TensorRT cannot be asked: by the module's part number (_DLA_BY_MODULE) on Orin;
    AGX Orin and Xavier have 2; Thor and older SoCs none. The model name decides only for an unknown module."""
    if soc == "tegra234":
        if module in _DLA_BY_MODULE:
            return _DLA_BY_MODULE[module]
        if module and module.startswith("p3701"):
            return 2
        return 0 if model and "nano" in model.lower() else 2
    if soc == "tegra194":
        return 2
    return 0


def device_facts(root: Path | None = None, *, probe_gpu: bool = True) -> DeviceFacts:
    """Collect the facts of the machine under `root` (default: `default_root()`).

    With probe_gpu (and root == /), TensorRT and pycuda are asked for the TensorRT
    version, GPU name, compute capability and DLA count when they import.
    """
    root = Path(root) if root is not None else default_root()
    l4t = read_l4t_release(root)
    model = read_model(root)
    soc = read_soc(root)
    mem = read_meminfo(root)
    module = read_module(root)
    facts = DeviceFacts(
        root=str(root),
        is_jetson=l4t is not None or (soc or "").startswith("tegra"),
        model=model,
        module=module,
        soc=soc,
        l4t=l4t,
        jetpack=jetpack_for_l4t(l4t),
        cuda=read_cuda_version(root),
        mem_total=mem.get("MemTotal"),
        mem_available=mem.get("MemAvailable"),
        swap_total=mem.get("SwapTotal"),
        power_mode=read_power_mode(root),
        jetson_clocks=read_jetson_clocks(root),
        tritonservers=read_tritonservers(root, os.getuid()),
    )
    if soc in _SOC_GPU:
        facts.gpu, facts.compute_capability = _SOC_GPU[soc]
    facts.dla_cores = dla_cores_for_board(soc, model, module) if facts.is_jetson else 0
    library = read_tensorrt_library_version(root)
    if library:
        facts.tensorrt, facts.tensorrt_source = library, "libnvinfer"
    if probe_gpu and root == Path("/"):
        _probe_runtime(facts)
    return facts


def _probe_runtime(facts: DeviceFacts) -> None:
    version = tensorrt_api.module_version()
    if version:
        facts.tensorrt, facts.tensorrt_source = version, "python"
    gpu = tensorrt_api.gpu_info()
    if gpu is not None:
        facts.gpu, facts.compute_capability = gpu.name, gpu.compute_capability
        if gpu.cuda_driver and not facts.cuda:
            facts.cuda = gpu.cuda_driver
    dla = tensorrt_api.dla_core_count()
    if dla is not None:
        facts.dla_cores = dla


def small_device_warnings(facts: DeviceFacts) -> list[str]:
    """What to fix before building or serving on a small device (power mode, clocks, memory, swap)."""
    warnings: list[str] = []
    if facts.is_jetson:
        mode = facts.power_mode
        if mode is not None and mode.is_max is False:
            target = mode.max_id if mode.max_id is not None else "<fastest mode>"
            warnings.append(
                f"nvpmodel is at {mode.name} (mode {mode.id}), not maximum performance: plans built now are "
                f"tuned for slower clocks; run `sudo nvpmodel -m {target}` first"
            )
        if facts.jetson_clocks is False:
            warnings.append("jetson_clocks is off: clocks scale with load; `sudo jetson_clocks` pins them at maximum")
    for proc in facts.tritonservers:
        warnings.append(
            f"tritonserver (pid {proc.pid}) holds {proc.rss_bytes / 2**20:.0f} MiB of the memory a build needs; "
            "stop it while building (`systemctl stop edge-deploy-triton`)"
        )
    if facts.swap_total == 0:
        warnings.append("there is no swap: a large build can be killed by the OOM killer; add a swap file")
    return warnings
