"""ONNX -> TensorRT plan on the device: the user's options, the builder, the build.

`build_plan` turns artifact_dir/model.onnx into artifact_dir/model.plan (the raw
serialized engine, as Triton's tensorrt_plan backend loads it). This module maps
`EngineOptions` to the version-neutral `tensorrt_api.BuildSettings`, picks the
builder and runs the stage; the steps live in their own modules:

- edge_deploy.machine.tensorrt_api: the "python" builder (the one module importing tensorrt/pycuda);
- edge_deploy.engine.trtexec: the "trtexec" builder (NVIDIA's command-line tool);
- edge_deploy.engine.calibration: the INT8 calibration feed;
- edge_deploy.engine.verify: deserialize, check the I/O, run and compare with ONNX Runtime;
- edge_deploy.engine.fingerprint: what a plan depends on, and whether it must be rebuilt
  (edge_deploy.machine.plan_fit: whether a recorded plan fits this machine).

The plan is written to a temporary file and renamed into place only after it
was built and verified, so an existing plan is never damaged by a failed build.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from ..artifact.manifest import FP16_ONNX_NAME, ONNX_NAME, PLAN_NAME, IOSignature, Manifest, PlanFingerprint, PlanRecord, sha256_file
from ..errors import EdgeDeployError, EngineError, one_line
from ..core.fsutil import AtomicOutput, write_bytes_atomic
from ..artifact.precision import Precision
from ..core.progress import Reporter
from ..artifact.records import PlanVerify
from ..machine import facts as machine_facts
from ..machine import tensorrt_api
from ..machine.plan_fit import plan_mismatch
from ..machine.plan_io import check_io
from ..core.sizes import MIN_WORKSPACE, GiB, MiB
from . import trtexec
from .calibration import calibration_digest, calibration_images, make_calibration
from .fingerprint import (
    plan_file_matches,
    plan_fingerprint,
    plan_is_current,
)
from .options import BUILDERS, EngineOptions
from .verify import verify_plan

DEFAULT_WORKSPACE_CAP = 4 * GiB  # more rarely helps and starves the rest of a shared-RAM Jetson
BUILD_RESERVE = 1 * GiB  # RAM left to the OS, the parser's weight copies and the builder itself




# --------------------------------------------------------------------------- builder selection


def available_builder(preference: str = "auto") -> str | None:
    """The builder to use: "python" (tensorrt module), "trtexec", or None when the asked one is absent."""
    if preference not in BUILDERS:
        raise EngineError(f"--builder must be one of {', '.join(BUILDERS)} (got {preference!r}).")
    if preference in ("auto", "python") and tensorrt_api.module_version() is not None:
        return "python"
    if preference in ("auto", "trtexec") and trtexec.find_trtexec() is not None:
        return "trtexec"
    return None


def tensorrt_missing_message(artifact: Path | None = None) -> str:
    """One line: no TensorRT here, and how to get it on a Jetson. `artifact`: the plan was asked of an artifact
    directory (`convert ART`), whose ONNX is made already: build it on the device, not `--target onnx` here."""
    elsewhere = (f"elsewhere copy {artifact} to the device and run `edge-deploy convert {artifact}` there (its ONNX "
                 "is made already)" if artifact is not None else
                 "elsewhere run `edge-deploy convert --target onnx` and build on the device")
    return (
        "building a TensorRT plan needs TensorRT, and neither its Python module nor trtexec is available here; "
        "on a Jetson it comes with JetPack (`sudo apt install nvidia-jetpack`, or just `python3-libnvinfer` "
        "and `libnvinfer-bin` for trtexec); in a venv, create it with `python3 -m venv --system-site-packages` "
        f"so the system TensorRT is visible; {elsewhere}."
    )


# --------------------------------------------------------------------------- options -> BuildSettings




def workspace_size(requested: int | None, facts: machine_facts.DeviceFacts, onnx_bytes: int) -> int:
    """The workspace limit in bytes: an explicit one validated, else derived from MemAvailable.

    A Jetson's GPU uses the same RAM as the CPU, so the default leaves
    BUILD_RESERVE plus three copies of the weights (ONNX parser, builder,
    serialized plan) free and takes half of the rest, at most DEFAULT_WORKSPACE_CAP.
    """
    total = facts.mem_total
    if requested is not None:
        if requested < MIN_WORKSPACE:
            raise EngineError(
                f"--workspace {requested / MiB:.0f} MiB is too small: TensorRT needs at least "
                f"{MIN_WORKSPACE // MiB} MiB to find kernels for this model; pass a larger --workspace or omit it."
            )
        if total is not None and requested > total:
            raise EngineError(
                f"--workspace {requested / MiB:.0f} MiB is more than this device's memory ({total / MiB:.0f} MiB); "
                "pass a smaller --workspace or omit it to size it from free memory."
            )
        return int(requested)
    available = facts.mem_available
    if available is None:
        return 1 * GiB
    spare = available - BUILD_RESERVE - 3 * onnx_bytes
    size = min(DEFAULT_WORKSPACE_CAP, spare // 2)
    if size < MIN_WORKSPACE:
        raise EngineError(
            f"only {available / MiB:.0f} MiB of memory is available, too little to build a plan "
            f"(the workspace alone needs {MIN_WORKSPACE // MiB} MiB beyond a {BUILD_RESERVE // MiB} MiB reserve); "
            "stop tritonserver and other GPU users, add swap, or pass --workspace."
        )
    return int(size // MiB * MiB)


def optimisation_profile(manifest: Manifest) -> dict[str, tuple[list[int], list[int], list[int]]]:
    """One profile from the manifest's batch range: {input: (min, opt, max)}; empty for a fixed batch."""
    batch = manifest.io.batch
    profile = {}
    for tensor in manifest.io.inputs:
        shape = list(tensor.shape)
        if any(d < 0 for d in shape[1:]):
            raise EngineError(
                f"input {tensor.name!r} has dynamic axes other than the batch ({shape}); "
                "re-export with a fixed image size (edge-deploy convert --input-shape)."
            )
        if shape and shape[0] < 0:
            lo, opt, hi = batch.min, batch.opt, batch.max
            profile[tensor.name] = ([lo, *shape[1:]], [opt, *shape[1:]], [hi, *shape[1:]])
    return profile


def fp32_pins(manifest: Manifest) -> list[tuple[str, str]]:
    """(node, output tensor) pairs the FP16 report says must stay FP32 (initializers are not layers)."""
    pins: list[tuple[str, str]] = []
    for entry in (manifest.fp16.nodes if manifest.fp16 else None) or ():
        if entry.op == "initializer" or not entry.node:
            continue
        pair = (entry.node, entry.output or "")
        if pair not in pins:
            pins.append(pair)
    return pins


DLA_FROM_11 = (11, 4)  # TensorRT 11.0-11.3 have no DLA; 11.4.1 restores it on AGX Orin with JetPack 7.2.2+


def check_dla(dla_core: int | None, facts: machine_facts.DeviceFacts, tensorrt_version: str | None = None,
              precision: Precision = Precision.FP16,
              profile: dict[str, tuple[list[int], list[int], list[int]]] | None = None) -> None:
    """A DLA build that cannot run on the DLA: one-line EngineError.

    With GPU fallback on, TensorRT quietly runs on the GPU what the DLA cannot (an FP32 network, or
    dynamic shapes: DLA needs min = opt = max), while the manifest would say dla_core; so those are
    refused. So are a device without DLA, a core it does not have, and TensorRT 11 before 11.4 or on
    another board than AGX Orin (TensorRT 11.4.1 "Working with DLA", docs.nvidia.com).
    """
    if dla_core is None:
        return
    cores = facts.dla_cores or 0
    board = facts.model or "this machine"
    if cores == 0:
        raise EngineError(
            f"--dla-core {dla_core} asked, but {board} has no DLA (only Jetson AGX Orin, Orin NX and Xavier do); "
            "omit --dla-core to build for the GPU."
        )
    if not 0 <= dla_core < cores:
        raise EngineError(f"--dla-core {dla_core} does not exist: {board} has DLA cores 0..{cores - 1}.")
    if precision == Precision.FP32:
        raise EngineError(
            "--dla-core needs --precision fp16 or int8: the DLA has no FP32 mode, so an FP32 build would run on "
            "the GPU through GPU fallback; use --precision fp16, or omit --dla-core."
        )
    dynamic = sorted(name for name, (low, opt, high) in (profile or {}).items()
                     if not list(low) == list(opt) == list(high))
    if dynamic:
        raise EngineError(
            f"--dla-core needs one input shape (min = opt = max), but {', '.join(dynamic)} has a batch range; "
            "convert with --batch N (or equal --min-batch/--opt-batch/--max-batch), or omit --dla-core."
        )
    version = tensorrt_api.version_tuple(tensorrt_version or "")[:2]
    if version and version[0] >= 11:
        if version < DLA_FROM_11:
            raise EngineError(
                f"TensorRT {tensorrt_version} has no DLA support (TensorRT 11.0-11.3; 11.4.1 restores it on AGX "
                "Orin with JetPack 7.2.2+); omit --dla-core, or use TensorRT 10.x or 11.4+."
            )
        agx_orin = (facts.module or "").startswith("p3701") or "agx orin" in (facts.model or "").lower()
        if not agx_orin:
            raise EngineError(
                f"TensorRT {tensorrt_version} supports DLA only on Jetson AGX Orin, not on {board}; omit --dla-core."
            )


def check_choices(options: EngineOptions) -> None:
    """--precision and --builder-optimization-level must be values TensorRT knows: one-line EngineError."""
    if options.optimization_level is not None and not 0 <= options.optimization_level <= 5:
        raise EngineError(f"--builder-optimization-level must be 0..5 (got {options.optimization_level}).")


def build_settings(
    manifest: Manifest, options: EngineOptions, workspace_bytes: int, *, strongly_typed: bool = False,
) -> tensorrt_api.BuildSettings:
    """EngineOptions + manifest -> the version-neutral BuildSettings the builders consume.

    strongly_typed: the graph carries the precisions (model_fp16.onnx), so nothing is pinned.
    """
    check_choices(options)
    weak_reduced = options.precision in (Precision.FP16, Precision.INT8) and not strongly_typed
    return tensorrt_api.BuildSettings(
        precision=options.precision,
        workspace_bytes=workspace_bytes,
        profile=optimisation_profile(manifest),
        fp32_pins=fp32_pins(manifest) if weak_reduced else [],
        dla_core=options.dla_core,
        optimization_level=options.optimization_level,
        strongly_typed=strongly_typed,
    )


def onnx_to_build(artifact_dir: Path, precision: Precision, strongly_typed: bool) -> Path:
    """The ONNX file a build reads: model_fp16.onnx for a strongly typed FP16 build, else model.onnx."""
    if not (strongly_typed and precision == Precision.FP16):
        return Path(artifact_dir) / ONNX_NAME
    path = Path(artifact_dir) / FP16_ONNX_NAME
    if not path.is_file():
        raise EngineError(
            f"{artifact_dir} has no {FP16_ONNX_NAME}, which a strongly typed FP16 build needs; run "
            f"`edge-deploy convert {artifact_dir}` (it makes and verifies it first)."
        )
    return path


# --------------------------------------------------------------------------- build


@dataclass
class _Build:
    """One build, resolved before anything is written."""

    tool: Path | None  # the trtexec binary; None: the tensorrt Python module builds
    settings: tensorrt_api.BuildSettings
    fingerprint: PlanFingerprint
    onnx: Path  # the ONNX file built (model_fp16.onnx for a strongly typed FP16 build)

    @property
    def builder(self) -> str:
        return "python" if self.tool is None else "trtexec"

    @property
    def tensorrt_version(self) -> str | None:
        return self.fingerprint.tensorrt


def onnx_ops(path: Path) -> set[str]:
    """The op types of an ONNX graph (weights not read); empty when the file cannot be read (the build says why)."""
    try:
        import onnx

        return {node.op_type for node in onnx.load(str(path), load_external_data=False).graph.node}
    except Exception:  # noqa: BLE001 - a missing or unreadable file is the builder's to report
        return set()


def _resolve(manifest: Manifest, options: EngineOptions, facts: machine_facts.DeviceFacts,
             artifact_dir: Path) -> _Build:
    """Builder, settings and fingerprint of the build `options` ask for; one-line EngineError when impossible."""
    builder = available_builder(options.builder)
    if builder is None:
        if options.builder == "auto" or available_builder("auto") is None:
            raise EngineError(tensorrt_missing_message())
        what = "the tensorrt Python module" if options.builder == "python" else "trtexec"
        raise EngineError(
            f"--builder {options.builder} needs {what}, which is not available here; "
            "use --builder auto to build with what is installed."
        )
    tool = None
    if builder == "python":
        version = tensorrt_api.module_version()
    else:
        tool = trtexec.find_trtexec()
        if tool is None:  # gone since available_builder looked
            raise EngineError(tensorrt_missing_message())
        version = trtexec.trtexec_version(tool) or facts.tensorrt
    tensorrt_api.check_ops(onnx_ops(artifact_dir / ONNX_NAME), version)
    tensorrt_api.check_supported(version)
    strong = tensorrt_api.strongly_typed(version, options.precision, weak_typing=options.weak_typing,
                                         dla=options.dla_core is not None)
    settings = build_settings(manifest, options, 0, strongly_typed=strong)  # workspace sized once a build is certain
    check_dla(options.dla_core, facts, version, options.precision, settings.profile)
    onnx = onnx_to_build(artifact_dir, options.precision, strong)
    onnx_sha = sha256_file(onnx)
    digest = None
    if options.precision == Precision.INT8:
        if manifest.fused_preprocess:
            raise EngineError("INT8 calibration feeds preprocessed images, but this model takes camera frames "
                              "(--fuse-preprocess); build it with --precision fp16 or fp32.")
        images = calibration_images(options.calibration_images)
        digest = calibration_digest(onnx_sha, images, manifest.preprocess)
        settings.calibration = make_calibration(artifact_dir, manifest, images, digest, settings.profile)
    return _Build(tool, settings, plan_fingerprint(facts, version, onnx_sha, settings, digest, onnx.name), onnx)


def _read_timing_cache(path: Path | None, reporter: Reporter) -> bytes | None:
    if path is None:
        return None
    if not path.exists():
        reporter.info(f"timing cache {path} does not exist yet: it will be created")
        return b""
    try:
        return path.read_bytes()
    except OSError as exc:
        reporter.warn(f"cannot read the timing cache {path} ({exc.strerror}); starting a new one")
        return b""


def _build_python(onnx: Path, plan_out: Path, settings: tensorrt_api.BuildSettings, timing_cache: Path | None,
                  reporter: Reporter) -> None:
    """Build `plan_out` with the tensorrt module; the updated timing cache replaces `timing_cache`."""
    settings.timing_cache = _read_timing_cache(timing_cache, reporter)
    result = tensorrt_api.load().build(onnx, settings)
    for warning in result.warnings:
        reporter.warn(warning if "timing cache" not in warning else f"{warning} ({timing_cache})")
    if result.unmatched_nodes:
        reporter.warn(
            f"{len(result.unmatched_nodes)} FP16-report node(s) have no TensorRT layer of that name and were not "
            f"pinned: {', '.join(result.unmatched_nodes[:5])}"
        )
    if result.pinned_layers:
        reporter.info(f"kept {len(result.pinned_layers)} layer(s) in FP32: {', '.join(result.pinned_layers[:8])}")
    plan_out.write_bytes(result.plan)
    if timing_cache is not None and result.timing_cache:
        timing_cache.parent.mkdir(parents=True, exist_ok=True)
        write_bytes_atomic(timing_cache, result.timing_cache)


def _verify(plan: Path, onnx: Path, manifest: Manifest, dla_core: int | None,
            reporter: Reporter, io: IOSignature | None = None) -> PlanVerify:
    """The plan's "verify" section: verify_plan's, or why it was skipped (needs the tensorrt module).

    onnx: the FP32 reference (model.onnx); io: the plan's I/O (that of the ONNX file it was built from).
    """
    if tensorrt_api.module_version() is None:
        reason = "the tensorrt Python module is not importable (a venv without --system-site-packages?)"
        reporter.warn(f"the plan was built but not verified: {reason}")
        return PlanVerify(status="skipped", reason=reason)
    with reporter.stage("verify plan"):
        return verify_plan(plan, onnx, manifest, tensorrt_api.load(), reporter, dla_core=dla_core, io=io)


def build_plan(
    artifact_dir: Path,
    manifest: Manifest,
    options: EngineOptions,
    reporter: Reporter | None = None,
    *,
    root: Path | None = None,
) -> PlanRecord:
    """Build (or keep) artifact_dir/model.plan and return the manifest's "plan" section.

    Skips the build when model.plan exists with the same fingerprint (unless
    options.force); otherwise says what changed and rebuilds. The plan is built
    into a temporary file, verified (unless options.verify is False) and only
    then renamed over model.plan. `root` is where device facts are read (tests).
    The caller stores the returned section and the plan's file entry in the manifest.
    """
    reporter = reporter or Reporter()
    artifact_dir = Path(artifact_dir)
    onnx = artifact_dir / ONNX_NAME
    if not onnx.is_file():
        raise EngineError(f"{artifact_dir} has no {ONNX_NAME}; run `edge-deploy convert` to export it first.")
    check_choices(options)
    facts = machine_facts.device_facts(root)
    build = _resolve(manifest, options, facts, artifact_dir)
    plan_path = artifact_dir / PLAN_NAME

    current, changes = plan_is_current(plan_path, manifest, build.fingerprint)
    if current and not options.force and manifest.plan is not None:  # current: a plan is recorded
        reporter.info(
            f"{PLAN_NAME} is up to date (same TensorRT {build.tensorrt_version}, device, ONNX model and options): "
            "skipped the build; --force rebuilds it"
        )
        return manifest.plan
    if changes:
        reporter.info(f"rebuilding {PLAN_NAME}: " + "; ".join(changes))
    elif current:
        reporter.info(f"rebuilding {PLAN_NAME} (--force)")

    build.settings.workspace_bytes = workspace_size(options.workspace, facts, build.onnx.stat().st_size)
    for warning in machine_facts.small_device_warnings(facts):
        reporter.warn(warning)

    timing_cache = Path(options.timing_cache) if options.timing_cache is not None else None
    output = AtomicOutput(plan_path)  # .model.plan.<pid>.<random>.tmp beside it, until verified
    plan_tmp = output.tmp
    started = time.perf_counter()
    try:
        typing = "strongly typed" if build.settings.strongly_typed else "builder flags"
        with reporter.stage(f"build {PLAN_NAME} ({build.builder}, {options.precision}, {typing}, "
                            f"from {build.onnx.name})"):
            if build.tool is None:
                _build_python(build.onnx, plan_tmp, build.settings, timing_cache, reporter)
            else:
                trtexec.build_with_trtexec(build.tool, build.onnx, plan_tmp, build.settings, build.tensorrt_version,
                                           timing_cache, reporter)
        build_seconds = time.perf_counter() - started
        verification = PlanVerify(status="skipped", reason="--no-verify")
        if options.verify:
            verification = _verify(plan_tmp, onnx, manifest, build.settings.dla_core, reporter,
                                   io=manifest.io_of(build.onnx.name))
        output.commit()
    except EdgeDeployError:
        raise
    except Exception as exc:  # TensorRT/pycuda raise plain exceptions: one line, nothing replaced
        raise EngineError(f"building {PLAN_NAME} failed: {one_line(exc, 300)}; nothing was replaced.") from exc
    finally:
        output.discard()

    mode = facts.power_mode
    return PlanRecord.from_dict({
        **build.fingerprint.to_dict(),
        "jetpack": facts.jetpack,
        "device": facts.model,
        "nvpmodel": mode.name if mode else None,
        "workspace_bytes": build.settings.workspace_bytes,
        "builder": build.builder,
        "build_time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "build_seconds": round(build_seconds, 1),
        "timing_cache": str(timing_cache) if timing_cache is not None else None,
        "verify": verification.to_dict(),
    })


def check_existing_plan(
    artifact_dir: Path,
    manifest: Manifest,
    facts: machine_facts.DeviceFacts | None = None,
    *,
    deserialize: bool = True,
) -> None:
    """An existing model.plan must match its manifest entry, this machine and (when TensorRT is here) load.

    One-line EngineError for a missing or corrupt plan, or a plan from another
    TensorRT version or device.
    """
    plan = Path(artifact_dir) / PLAN_NAME
    if not plan.is_file():
        raise EngineError(f"{plan} does not exist; build it with `edge-deploy convert {artifact_dir}`.")
    if plan_file_matches(plan, manifest) is False:
        raise EngineError(
            f"{plan} is corrupt or was changed after it was built (sha256 differs from the manifest); "
            f"rebuild it with `edge-deploy convert {artifact_dir} --force`."
        )
    changes = plan_mismatch(manifest.plan, facts)
    if changes:
        raise EngineError(
            f"{plan} was not built for this machine ({'; '.join(changes)}); "
            f"rebuild it here with `edge-deploy convert {artifact_dir} --force`."
        )
    if deserialize and tensorrt_api.module_version() is not None:
        trt = tensorrt_api.load()
        dla_core = manifest.plan.dla_core if manifest.plan else None
        engine = trt.deserialize(plan.read_bytes(), where=str(plan), dla_core=dla_core)
        check_io(trt.io_tensors(engine), manifest.plan_io, where=str(plan))
