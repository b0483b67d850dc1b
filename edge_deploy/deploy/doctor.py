"""`edge-deploy doctor`: what this machine has for each stage, and whether the stages are ready.

Each check is a `Check` (name, status, detail, the stages it blocks). A stage
is ready when none of the checks it needs has status "fail"; "warn" is worth
reading but not blocking, "info" just describes the machine. Checks never
raise: a check that crashes reports itself as failed, so doctor never shows a
traceback.
"""
from __future__ import annotations

import importlib
import os
import platform
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable

from ..artifact.manifest import MANIFEST_NAME, PLAN_NAME, Manifest, PlanRecord
from ..core.json_record import Record
from ..machine import facts as machine_facts
from ..errors import EdgeDeployError, EngineError, one_line
from ..tls.certs import EXPIRY_WARN_DAYS, CertificateAuthority, expiring
from ..engine import plan as engine, trtexec
from ..machine import plan_fit as fp, tensorrt_api
from ..machine.plan_fit import plan_mismatch
from ..machine.tensorrt_api import OP_MIN_TENSORRT, op_refusal
from ..serve.addresses import is_loopback
from ..serve.jetson_triton import LAST_GITHUB_JETSON_NOTE, release_warning, triton_for_l4t
from ..serve.server_record import find_record
from ..serve.server_tensorrt import plan_refusal, server_tensorrt
from ..serve.systemd import read_installed_unit
from ..core.state import state_dir

STAGES = ("convert", "serve")
OK, WARN, FAIL, INFO = "ok", "warn", "fail", "info"
LOW_MEMORY = 2 << 30
LOW_DISK = 2 << 30


@dataclass
class Check:
    """One row of the doctor table."""

    name: str
    status: str  # ok | warn | fail | info
    detail: str
    needed_for: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "status": self.status, "detail": self.detail, "needed_for": list(self.needed_for)}


@dataclass(frozen=True, eq=False)
class StageVerdict(Record):
    """One judged stage: ready, or the names of the failed checks that block it (each once, in table order)."""

    ready: bool
    blockers: tuple[str, ...] = ()


@dataclass(frozen=True, eq=False)
class DoctorReport(Record):
    """`doctor --json` (also read by the fleet's Ansible role): whether every judged stage is ready, each stage's
    verdict, this machine's fingerprint (None when it cannot be read), the plan builder (None: no plan can be built
    here) and the checks."""

    ready: bool
    stages: Mapping[str, StageVerdict]
    fingerprint: fp.HostFingerprint | None = None
    plan_builder: str | None = None
    checks: tuple[Check, ...] = ()

    _SECTION = "doctor report"
    _ALWAYS = frozenset({"fingerprint", "plan_builder"})


def stages_for(choice: str) -> tuple[str, ...]:
    """'convert' | 'serve' | 'all', or a comma list such as 'convert,serve' -> the stages to judge."""
    names = [part.strip() for part in str(choice).split(",") if part.strip()]
    if "all" in names:
        return STAGES
    wrong = [n for n in names if n not in STAGES]
    if not names or wrong:
        raise EdgeDeployError(f"--for must be convert, serve, all or a comma list of them (got {choice!r}).")
    return tuple(dict.fromkeys(names))


def ready(checks: Iterable[Check], stages: Iterable[str]) -> bool:
    """True when no check needed by `stages` failed."""
    wanted = set(stages)
    return not any(c.status == FAIL and wanted & set(c.needed_for) for c in checks)


_DISTRIBUTIONS = {"onnxruntime": ("onnxruntime", "onnxruntime-gpu"), "pycuda": ("pycuda",)}


def _module_version(name: str) -> str | None:
    """Installed version of a top-level package, without importing it (torch takes seconds to import)."""
    import importlib.metadata
    import importlib.util
    import sys

    if name in sys.modules and sys.modules[name] is None:
        return None  # import of it is blocked
    try:
        if importlib.util.find_spec(name) is None:
            return None
    except (ImportError, ValueError):
        return None
    for dist in _DISTRIBUTIONS.get(name, (name,)):
        try:
            return importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
    return "installed"


def _gib(n: int | None) -> str:
    return "?" if n is None else f"{n / (1 << 30):.1f} GiB"


def _machine_checks(facts: machine_facts.DeviceFacts) -> list[Check]:
    checks = []
    if facts.is_jetson:
        checks.append(Check("Jetson", OK, f"{facts.model or 'unknown board'} ({facts.soc or 'unknown SoC'})"))
        release = f"R{facts.l4t}" if facts.l4t else "unknown L4T"
        checks.append(Check("L4T / JetPack", OK if facts.jetpack else WARN,
                            f"{release} / JetPack {facts.jetpack or 'unknown'}"))
    else:
        checks.append(Check("Jetson", INFO, f"not a Jetson ({platform.machine()} {platform.system()})"))
    checks.append(Check("CUDA", OK if facts.cuda else INFO, facts.cuda or "not found (/usr/local/cuda)"))
    if facts.gpu:
        checks.append(Check("GPU", OK, f"{facts.gpu}, compute capability {facts.compute_capability}, "
                                       f"{facts.dla_cores or 0} DLA core(s)"))
    return checks


def _tensorrt_checks(facts: machine_facts.DeviceFacts) -> list[Check]:
    checks = []
    module = tensorrt_api.module_version()
    checks.append(Check("TensorRT (Python)", OK if module else INFO,
                        module or "the tensorrt module does not import in this Python"))
    tool = trtexec.find_trtexec()
    tool_version, broken = None, None
    if tool:
        probe = trtexec.probe_trtexec(tool)  # run, not only found: a file named trtexec may not work
        tool_version, broken = probe.version, probe.problem
        if broken is None:
            checks.append(Check("trtexec", OK, f"{tool} (TensorRT {tool_version or 'unknown version'})"))
        else:
            checks.append(Check("trtexec", WARN, f"{broken}; fix or reinstall it (`libnvinfer-bin` on JetPack), or "
                                                 f"point ${trtexec.TRTEXEC_ENV} at a working trtexec"))
    else:
        checks.append(Check("trtexec", INFO, "not found (/usr/src/tensorrt/bin, PATH, $TRTEXEC)"))
    if facts.tensorrt and facts.tensorrt_source == "libnvinfer" and not module:
        checks.append(Check("TensorRT (library)", INFO, f"libnvinfer {facts.tensorrt}"))
    builder = engine.available_builder("auto")
    if builder == "trtexec" and broken is not None:
        checks.append(Check("plan builder", FAIL, f"trtexec, the only builder here, does not work: {broken}; fix "
                            f"or reinstall it, or point ${trtexec.TRTEXEC_ENV} at a working trtexec",
                            ("convert",)))
    elif builder:
        try:
            tensorrt_api.check_supported(module if builder == "python" else tool_version)
            checks.append(Check("plan builder", OK, f"{builder}", ("convert",)))
        except EngineError as exc:
            checks.append(Check("plan builder", FAIL, str(exc), ("convert",)))
        checks.append(onnx_op_check(module if builder == "python" else tool_version))
    else:
        checks.append(Check("plan builder", FAIL, engine.tensorrt_missing_message(), ("convert",)))
    pycuda = _module_version("pycuda")
    checks.append(Check("pycuda", OK if pycuda else WARN,
                        pycuda or "missing: plans are built but not run for verification "
                                  "(pip install 'edge-deploy[jetson]')", ("convert",)))
    return checks


def onnx_op_check(version: str | None) -> Check:
    """Whether the plan builder's TensorRT parses every ONNX op that needs a newer TensorRT
    (machine/tensorrt_api.py OP_MIN_TENSORRT); FAIL names the op, the version it needs and the source."""
    ops = ", ".join(f"{op} (from {a}.{b})" for op, ((a, b), _) in sorted(OP_MIN_TENSORRT.items()))
    refusal = op_refusal(OP_MIN_TENSORRT, version)
    if refusal:
        return Check("ONNX ops", FAIL, refusal, ("convert",))
    return Check("ONNX ops", OK if version else INFO,
                 f"TensorRT {version} parses {ops}" if version else f"TensorRT version unknown; {ops} need those",
                 ("convert",))


def _python_checks() -> list[Check]:
    checks = []
    for name, why in (("torch", "exporting from PyTorch"), ("onnx", "checking ONNX models"),
                      ("onnxruntime", "parity checks and the CPU fallback")):
        version = _module_version(name)
        checks.append(Check(name, OK if version else FAIL,
                            version or f"missing: needed for {why} (pip install {name})", ("convert",)))
    return checks


def _server_checks(root: Path, facts: machine_facts.DeviceFacts | None = None,
                   found: list[Any] | None = None) -> list[Check]:
    """tritonserver, its backends and TensorRT, and which releases fit this Jetson's JetPack.

    `found` receives the tritonserver install (for the repository checks)."""
    checks = []
    try:
        server = importlib.import_module("edge_deploy.serve.discovery")
    except ImportError as exc:
        return [Check("tritonserver", FAIL, f"edge_deploy.serve.discovery is not available ({exc})", ("serve",))]
    install = None
    try:
        install = server.find_tritonserver()
    except Exception as exc:  # noqa: BLE001 - ServerError, or anything a broken install raises
        checks.append(Check("tritonserver", FAIL, one_line(exc, 400), ("serve",)))
    else:
        if found is not None:
            found.append(install)
        version = install.version() if hasattr(install, "version") else None
        checks.append(Check("tritonserver", OK, f"{install.binary} ({install.source}; {version or 'version unknown'})",
                            ("serve",)))
        backends = install.backends() if hasattr(install, "backends") else []
        detail = ", ".join(backends) or "none found"
        status = OK if backends else WARN
        if backends and "tensorrt" not in backends:
            detail += " (no tensorrt backend: plans cannot be served, ONNX models run on the CPU)"
        checks.append(Check("Triton backends", status, detail))
        if "tensorrt" in backends:
            checks.append(_server_tensorrt_check(install, root))
    if facts is not None and facts.is_jetson:
        checks += _jetson_triton_checks(facts, install)
    systemd = (root / "run" / "systemd" / "system").is_dir() and shutil.which("systemctl") is not None
    checks.append(Check("systemd", OK if systemd else WARN,
                        "running (serve installs a unit)" if systemd
                        else "not running here: use `edge-deploy serve --foreground`"))
    return checks


def _server_tensorrt_check(install: Any, root: Path) -> Check:
    found = server_tensorrt(install, root)
    if found is None or found.version is None:
        where = found.describe() if found is not None else "no libtriton_tensorrt.so"
        return Check("Triton TensorRT", WARN, f"unknown: {where}; plans are checked against it only when found")
    return Check("Triton TensorRT", OK, f"{found.describe()}: plans must be built with TensorRT {found.version}")


def _jetson_triton_checks(facts: machine_facts.DeviceFacts, install: Any) -> list[Check]:
    fit = triton_for_l4t(facts.l4t)
    if fit is None:
        return [Check("Triton for JetPack", INFO, f"no known Triton build for L4T {facts.l4t or 'unknown'}; "
                                                  f"{LAST_GITHUB_JETSON_NOTE}")]
    checks = [Check("Triton for JetPack", OK if fit.supported else WARN, f"{fit.describe()}; {LAST_GITHUB_JETSON_NOTE}")]
    release = install.release() if install is not None and hasattr(install, "release") else None
    warning = release_warning(fit, release)
    if warning:
        checks.append(Check("Triton for JetPack", WARN, warning))
    return checks


def _resource_checks(facts: machine_facts.DeviceFacts, disk_path: Path) -> list[Check]:
    checks = []
    avail = facts.mem_available
    status = WARN if avail is not None and avail < LOW_MEMORY else OK if avail is not None else INFO
    swap = "none" if facts.swap_total == 0 else _gib(facts.swap_total)
    checks.append(Check("memory", status, f"{_gib(avail)} available of {_gib(facts.mem_total)}, swap {swap}"))
    for proc in facts.tritonservers:
        checks.append(Check("memory", WARN, f"tritonserver pid {proc.pid} holds {proc.rss_bytes / 2**20:.0f} MiB"))
    try:
        usage = shutil.disk_usage(disk_path)
        checks.append(Check("disk", WARN if usage.free < LOW_DISK else OK,
                            f"{_gib(usage.free)} free at {disk_path}"))
    except OSError as exc:
        checks.append(Check("disk", INFO, f"cannot read {disk_path}: {exc.strerror}"))
    if facts.is_jetson:
        mode = facts.power_mode
        if mode is None:
            checks.append(Check("power mode", INFO, "nvpmodel not found"))
        else:
            checks.append(Check("power mode", OK if mode.is_max else WARN if mode.is_max is False else INFO,
                                mode.describe()
                                + (f"; `sudo nvpmodel -m {mode.max_id}` for maximum" if mode.is_max is False
                                   and mode.max_id is not None else "")))
        clocks = facts.jetson_clocks
        checks.append(Check("jetson_clocks", OK if clocks else WARN if clocks is False else INFO,
                            {True: "on", False: "off (`sudo jetson_clocks`)", None: "unknown"}[clocks]))
    return checks


def _find_manifest(version_dir: Path) -> Manifest | str | None:
    """The manifest beside a version's plan; its one-line error when it cannot be read; None when there is none."""
    for directory in (version_dir, version_dir.parent):
        if (directory / MANIFEST_NAME).is_file():
            try:
                return Manifest.read(directory)
            except EdgeDeployError as exc:
                return one_line(exc)
    return None


def repository_checks(repository: Path, facts: machine_facts.DeviceFacts, install: Any = None,
                      root: Path | None = None) -> list[Check]:
    """For each model version holding a model.plan: does its fingerprint still match this machine, and can the
    found tritonserver's TensorRT (`install`) deserialize it?"""
    server = server_tensorrt(install, root) if install is not None else None

    repository = Path(repository)
    if not repository.is_dir():
        return [Check("repository", FAIL, f"{repository} is not a directory", ("serve",))]
    checks = []
    for model_dir in sorted(p for p in repository.iterdir() if p.is_dir() and not p.name.startswith(".")):
        versions = sorted((p for p in model_dir.iterdir() if p.is_dir() and p.name.isdigit()),
                          key=lambda p: int(p.name))
        for version_dir in versions:
            label = f"model {model_dir.name}/{version_dir.name}"
            if not (version_dir / PLAN_NAME).is_file():
                kinds = sorted(p.name for p in version_dir.iterdir() if p.is_file())
                checks.append(Check(label, INFO, f"no plan ({', '.join(kinds[:3]) or 'empty'})"))
                continue
            manifest = _find_manifest(version_dir)
            if manifest is None:
                checks.append(Check(label, WARN, "model.plan without manifest.json: cannot tell where it was built"))
                continue
            if isinstance(manifest, str):
                checks.append(Check(label, WARN, f"cannot tell where model.plan was built: {manifest}"))
                continue
            refusal = plan_refusal(label, manifest, server, install) if server is not None else None
            differences = plan_mismatch(manifest.plan, facts)
            if refusal:
                checks.append(Check(label, FAIL, refusal.split(": ", 1)[1], ("serve",)))
            elif differences:
                checks.append(Check(label, FAIL, "plan does not match this machine: " + "; ".join(differences),
                                    ("serve",)))
            else:
                plan = manifest.plan or PlanRecord()
                detail = f"plan matches (TensorRT {plan.tensorrt}, {plan.precision})"
                checks.append(Check(label, OK, detail, ("serve",)))
    if not checks:
        checks.append(Check("repository", INFO, f"{repository} holds no models yet"))
    return checks


def tls_checks(repository: Path | None = None, scopes: tuple[str, ...] = ("system", "user")) -> list[Check]:
    """Servers listening beyond loopback without TLS, and certificates that expire within 30 days."""
    checks: list[Check] = []
    served: list[tuple[str, str, Path | None, bool]] = []  # (who, url, server cert, tls)
    for scope in scopes:
        unit = read_installed_unit(scope)
        if unit is not None:
            served.append((f"the {scope} unit", unit.url, unit.server_cert, unit.server_cert is not None))
    record = find_record(Path(repository)) if repository is not None else None
    if record is not None and record.kind == "foreground":
        served.append((record.describe(), record.url, None, record.tls is not None))
    for who, url, cert, tls in served:
        host = url.rpartition(":")[0]
        if not is_loopback(host) and not tls:
            checks.append(Check("gRPC exposure", WARN,
                                f"{who} serves plaintext gRPC on {url}, beyond loopback: anyone allowed to connect "
                                "can run inference and read the model-repository key; serve with TLS "
                                "(`edge-deploy certs init`, then `edge-deploy serve` again)", ("serve",)))
        elif tls:
            checks.append(Check("gRPC exposure", OK, f"{who} serves {url} with TLS"))
        if cert is not None:
            notes = expiring({"the served server": cert})
            checks += [Check("TLS certificate", WARN, n, ("serve",)) for n in notes]
    seen: set[Path] = set()
    for scope in scopes:
        authority = CertificateAuthority(state_dir(scope) / "tls")
        if authority.dir in seen or not authority.exists():
            continue
        seen.add(authority.dir)
        try:
            items = [i for i in authority.issued() if not i.revoked]
        except EdgeDeployError as exc:
            checks.append(Check("TLS certificates", WARN, one_line(exc, 300)))
            continue
        soon = [i for i in items if i.days_left() < EXPIRY_WARN_DAYS]
        for item in soon:
            state = "EXPIRED" if item.days_left() < 0 else f"expires in {item.days_left():.0f} days"
            checks.append(Check("TLS certificate", WARN,
                                f"{item.name} ({item.kind}, {item.cert}) {state} ({item.not_after:%Y-%m-%d}); "
                                f"issue a new one with `edge-deploy certs issue {item.name}`", ("serve",)))
        if not soon and items:
            first = min(items, key=lambda i: i.not_after)
            checks.append(Check("TLS certificates", OK, f"{len(items)} in {authority.dir}; the first to expire: "
                                                        f"{first.name} on {first.not_after:%Y-%m-%d}"))
    return checks


def _guarded(name: str, stages: tuple[str, ...], make: Callable[[], list[Check]]) -> list[Check]:
    try:
        return make()
    except Exception as exc:  # noqa: BLE001 - doctor reports, it never crashes
        return [Check(name, FAIL, f"the check itself failed: {one_line(exc)}",
                      stages)]


def run_checks(root: Path | None = None, repository: Path | None = None) -> list[Check]:
    """All checks, machine first, then convert's, serve's and the repository's."""
    root = Path(root) if root is not None else machine_facts.default_root()
    facts_holder: list[machine_facts.DeviceFacts] = []

    def machine() -> list[Check]:
        facts_holder.append(machine_facts.device_facts(root))
        return _machine_checks(facts_holder[0])

    checks = _guarded("device", STAGES, machine)
    facts = facts_holder[0] if facts_holder else machine_facts.DeviceFacts(root=str(root), is_jetson=False)
    checks += _guarded("TensorRT", ("convert",), lambda: _tensorrt_checks(facts))
    checks += _guarded("Python packages", ("convert",), _python_checks)
    found: list[Any] = []
    checks += _guarded("tritonserver", ("serve",), lambda: _server_checks(root, facts, found))
    disk = Path(repository) if repository is not None and Path(repository).exists() else Path(os.getcwd())
    checks += _guarded("resources", (), lambda: _resource_checks(facts, disk))
    if repository is not None:
        install = found[0] if found else None
        checks += _guarded("repository", ("serve",),
                           lambda: repository_checks(Path(repository), facts, install, root))
    checks += _guarded("TLS", (), lambda: tls_checks(repository))
    return checks


def report(checks: list[Check], stages: Iterable[str], root: Path | None = None) -> DoctorReport:
    """`doctor --json`: the checks, each judged stage's readiness and blockers, and this machine's plan fingerprint.

    "fingerprint" is what a TensorRT plan built here depends on (machine/plan_fit.py's machine part,
    plus JetPack); "plan_builder" says whether a plan can be built here at all (None: no TensorRT, the
    models are served with ONNX Runtime). Fleet rollouts read this to decide where a plan may be reused.
    """
    verdicts = {}
    for stage in tuple(stages):
        blockers = [c.name for c in checks if c.status == FAIL and stage in c.needed_for]
        verdicts[stage] = StageVerdict(not blockers, tuple(dict.fromkeys(blockers)))
    try:
        facts = machine_facts.device_facts(Path(root) if root is not None else machine_facts.default_root())
        machine: fp.HostFingerprint | None = fp.host_fingerprint(facts)
    except Exception:  # noqa: BLE001 - doctor reports, it never crashes
        machine = None
    builder = next((c for c in checks if c.name == "plan builder"), None)
    return DoctorReport(all(v.ready for v in verdicts.values()), verdicts, machine,
                        builder.detail if builder is not None and builder.status == OK else None, tuple(checks))
