"""ONNX -> TensorRT plan, built on the device, verified, fingerprinted.

`build_plan` turns artifact_dir/model.onnx into artifact_dir/model.plan (the raw
serialized engine, as Triton's tensorrt_plan backend loads it) with either the
`tensorrt` Python module ("python" builder, via edge_deploy.tensorrt_api) or
NVIDIA's `trtexec` tool. The plan is written to a temporary file and renamed
into place only after it was built and verified, so an existing plan is never
damaged by a failed build.

A plan only runs where it was built: the manifest's "plan" section records the
fingerprint (TensorRT, CUDA, GPU, compute capability, L4T, the ONNX sha256 and
the build options). `fingerprint_diff` says what differs; `build_plan` skips a
build whose fingerprint matches and rebuilds, saying why, when it does not.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

from . import device as device_mod
from . import tensorrt_api
from .errors import EdgeDeployError, EngineError
from .manifest import sha256_file
from .progress import Reporter

ONNX_NAME = "model.onnx"
PLAN_NAME = "model.plan"
TRTEXEC_LOG = "trtexec.log"
PRECISIONS = ("fp16", "fp32", "int8")
BUILDERS = ("auto", "python", "trtexec")
TRTEXEC_ENV = "TRTEXEC"
TRTEXEC_DEFAULT = Path("/usr/src/tensorrt/bin/trtexec")

MiB = 1 << 20
GiB = 1 << 30
MIN_WORKSPACE = 64 * MiB  # below this TensorRT finds no tactic for LaneATT's larger layers
DEFAULT_WORKSPACE_CAP = 4 * GiB  # more rarely helps and starves the rest of a shared-RAM Jetson
BUILD_RESERVE = 1 * GiB  # RAM left to the OS, the parser's weight copies and the builder itself
MAX_LANE_DX_PX = 2.0  # mean |dx| allowed between ONNX Runtime and plan lanes, 640-wide pixels
IMAGE_SUFFIXES = {".jpg", ".jpeg", ".png", ".bmp", ".tif", ".tiff", ".webp"}

# Fingerprint keys that make a plan unusable or stale when they differ.
MACHINE_KEYS = ("tensorrt", "cuda", "gpu", "compute_capability", "l4t")
BUILD_KEYS = ("onnx_sha256", "precision", "dla_core", "profile", "optimization_level", "fp32_layers", "calibration")
_LABELS = {
    "tensorrt": "TensorRT",
    "cuda": "CUDA",
    "gpu": "GPU",
    "compute_capability": "compute capability",
    "l4t": "L4T release",
    "onnx_sha256": "ONNX model (sha256)",
    "precision": "precision",
    "dla_core": "DLA core",
    "profile": "optimisation profile",
    "optimization_level": "builder optimisation level",
    "fp32_layers": "FP32-pinned nodes",
    "calibration": "INT8 calibration images",
}


@dataclass
class EngineOptions:
    """What the user asked of the TensorRT build (CLI options of `convert`)."""

    builder: str = "auto"  # auto | python | trtexec
    precision: str = "fp16"  # fp16 | fp32 | int8
    workspace: int | None = None  # bytes; None: derived from free memory
    dla_core: int | None = None
    timing_cache: Path | None = None
    calibration_images: Path | None = None
    optimization_level: int | None = None
    verify: bool = True
    force: bool = False


# --------------------------------------------------------------------------- builders


def find_trtexec() -> Path | None:
    """trtexec: $TRTEXEC, /usr/src/tensorrt/bin/trtexec (JetPack), then PATH."""
    candidates = [os.environ.get(TRTEXEC_ENV), str(TRTEXEC_DEFAULT), shutil.which("trtexec")]
    for value in candidates:
        if value and Path(value).is_file() and os.access(value, os.X_OK):
            return Path(value)
    return None


def available_builder(preference: str = "auto") -> str | None:
    """The builder to use: "python" (tensorrt module), "trtexec", or None when the asked one is absent."""
    if preference not in BUILDERS:
        raise EngineError(f"--builder must be one of {', '.join(BUILDERS)} (got {preference!r}).")
    if preference in ("auto", "python") and tensorrt_api.module_version() is not None:
        return "python"
    if preference in ("auto", "trtexec") and find_trtexec() is not None:
        return "trtexec"
    return None


def tensorrt_missing_message() -> str:
    """One line: no TensorRT here, and how to get it on a Jetson."""
    return (
        "building a TensorRT plan needs TensorRT, and neither its Python module nor trtexec is available here; "
        "on a Jetson it comes with JetPack (`sudo apt install nvidia-jetpack`, or just `python3-libnvinfer` "
        "and `libnvinfer-bin` for trtexec); in a venv, create it with `python3 -m venv --system-site-packages` "
        "so the system TensorRT is visible; elsewhere run `edge-deploy convert --target onnx` and build on the device."
    )


def parse_trtexec_version(text: str) -> str | None:
    """'8.6.2' from trtexec's '&&&& RUNNING TensorRT.trtexec [TensorRT v8602]' (10.x: v100300 -> 10.3.0)."""
    match = re.search(r"TensorRT v(\d{4,6})\b", text)
    if not match:
        return None
    n = int(match.group(1))
    if n >= 100000:  # 10.x and later: major*10000 + minor*100 + patch
        return f"{n // 10000}.{(n // 100) % 100}.{n % 100}"
    return f"{n // 1000}.{(n // 100) % 10}.{n % 100}"


def trtexec_version(trtexec: Path) -> str | None:
    """The TensorRT version a trtexec binary reports on its banner line."""
    try:
        done = subprocess.run([str(trtexec), "--help"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return None
    return parse_trtexec_version(done.stdout + done.stderr)


# --------------------------------------------------------------------------- option mapping


def parse_size(text: str) -> int:
    """'4G', '512M', '1.5GiB', '65536' (bytes) -> bytes; one-line EngineError when unreadable."""
    match = re.fullmatch(r"\s*([\d.]+)\s*([KMGT]?)(i?B)?\s*", str(text), re.IGNORECASE)
    if not match:
        raise EngineError(f"cannot read the size {text!r}; write it like 2G, 512M or a number of bytes.")
    value = float(match.group(1))
    factor = {"": 1, "K": 1 << 10, "M": MiB, "G": GiB, "T": 1 << 40}[match.group(2).upper()]
    return int(value * factor)


def workspace_size(requested: int | None, facts: device_mod.DeviceFacts, onnx_bytes: int) -> int:
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


def optimisation_profile(manifest: dict[str, Any]) -> dict[str, tuple[list[int], list[int], list[int]]]:
    """One profile from the manifest's batch range: {input: (min, opt, max)}; empty for a fixed batch."""
    io = manifest.get("io") or {}
    batch = io.get("batch") or {}
    profile = {}
    for tensor in io.get("inputs", []):
        shape = [int(d) for d in tensor["shape"]]
        if any(d < 0 for d in shape[1:]):
            raise EngineError(
                f"input {tensor['name']!r} has dynamic axes other than the batch ({shape}); "
                "re-export with a fixed image size (edge-deploy convert --input-shape)."
            )
        if shape and shape[0] < 0:
            lo, opt, hi = int(batch.get("min", 1)), int(batch.get("opt", 1)), int(batch.get("max", 1))
            profile[tensor["name"]] = ([lo, *shape[1:]], [opt, *shape[1:]], [hi, *shape[1:]])
    return profile


def fp32_pins(manifest: dict[str, Any]) -> list[tuple[str, str]]:
    """(node, output tensor) pairs the FP16 report says must stay FP32 (initializers are not layers)."""
    pins: list[tuple[str, str]] = []
    for entry in (manifest.get("fp16") or {}).get("nodes", []):
        if entry.get("op") == "initializer" or not entry.get("node"):
            continue
        pair = (str(entry["node"]), str(entry.get("output") or ""))
        if pair not in pins:
            pins.append(pair)
    return pins


def check_dla(dla_core: int | None, facts: device_mod.DeviceFacts) -> None:
    """DLA asked on a device without DLA, or a core it does not have: one-line EngineError."""
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


def calibration_images(directory: Path | None) -> list[Path]:
    """The image files of --calibration-images (sorted), or a one-line EngineError."""
    if directory is None:
        raise EngineError(
            "--precision int8 needs --calibration-images DIR: a few hundred frames like the ones the model will see."
        )
    directory = Path(directory)
    if not directory.is_dir():
        raise EngineError(f"--calibration-images {directory} is not a directory.")
    images = sorted(p for p in directory.rglob("*") if p.suffix.lower() in IMAGE_SUFFIXES and p.is_file())
    if not images:
        raise EngineError(
            f"--calibration-images {directory} holds no images ({', '.join(sorted(IMAGE_SUFFIXES))}); "
            "put a few hundred representative frames there."
        )
    return images


def _preprocessor(spec: dict[str, Any], batch: int) -> Any:
    """The model's own preprocessing (edge_deploy.lanedet.preprocess) for the manifest's spec."""
    from .lanedet.preprocess import PreprocessSpec, Preprocessor

    try:
        return Preprocessor(PreprocessSpec.from_dict(spec), batch=batch)
    except ValueError as exc:
        raise EngineError(f"the manifest's preprocess spec is not usable for calibration: {exc}") from exc


def _read_image(path: Path) -> Any:
    import cv2

    image = cv2.imread(str(path), cv2.IMREAD_COLOR)
    if image is None:
        raise EngineError(f"cannot read the calibration image {path}; remove or replace it.")
    return image


def calibration_digest(onnx_sha256: str, images: Sequence[Path], spec: dict[str, Any]) -> str:
    """Identifies a calibration (model + image contents + preprocessing): names its cache file."""
    import hashlib
    import json

    digest = hashlib.sha256(onnx_sha256.encode())
    digest.update(json.dumps(spec, sort_keys=True).encode())
    for image in images:
        digest.update(sha256_file(image).encode())
    return digest.hexdigest()


def make_calibration(artifact_dir: Path, manifest: dict[str, Any], images: Sequence[Path], digest: str,
                     profile: dict[str, Any]) -> tensorrt_api.Calibration:
    """The INT8 calibration feed: the model's preprocessing over the images, in batches of the profile's opt."""
    import numpy as np

    inputs = (manifest.get("io") or {}).get("inputs") or [{"name": "input"}]
    name = inputs[0]["name"]
    batch = profile[name][1][0] if name in profile else int((inputs[0].get("shape") or [1])[0])
    batch = max(1, batch)
    if len(images) < batch:
        raise EngineError(
            f"INT8 calibration runs in batches of {batch} (the optimisation batch) but only {len(images)} "
            "image(s) were given; add more images to --calibration-images."
        )
    preprocessor = _preprocessor(manifest.get("preprocess") or {}, batch)

    def batches():
        # Whole batches only (calibration runs at the profile's opt shape); a short tail is dropped.
        for start in range(0, len(images) - batch + 1, batch):
            frames = [_read_image(image) for image in images[start : start + batch]]
            yield np.array(preprocessor.batch(frames), copy=True)

    return tensorrt_api.Calibration(name, batch, batches, Path(artifact_dir) / f"calibration-{digest[:16]}.cache")


def build_settings(
    manifest: dict[str, Any], options: EngineOptions, workspace_bytes: int
) -> tensorrt_api.BuildSettings:
    """EngineOptions + manifest -> the version-neutral BuildSettings the builders consume."""
    if options.precision not in PRECISIONS:
        raise EngineError(f"--precision must be one of {', '.join(PRECISIONS)} (got {options.precision!r}).")
    if options.optimization_level is not None and not 0 <= options.optimization_level <= 5:
        raise EngineError(f"--builder-optimization-level must be 0..5 (got {options.optimization_level}).")
    return tensorrt_api.BuildSettings(
        precision=options.precision,
        workspace_bytes=workspace_bytes,
        profile=optimisation_profile(manifest),
        fp32_pins=fp32_pins(manifest) if options.precision in ("fp16", "int8") else [],
        dla_core=options.dla_core,
        optimization_level=options.optimization_level,
    )


def _dims(shape: Sequence[int]) -> str:
    return "x".join(str(int(d)) for d in shape)


def _check_trtexec_name(name: str, what: str) -> None:
    if any(ch in name for ch in ",:'\"") or not name:
        raise EngineError(
            f"{what} {name!r} cannot be passed to trtexec (its option syntax uses , and :); "
            "use --builder python, or rename it in the model."
        )


def trtexec_argv(
    trtexec: Path,
    onnx: Path,
    plan_out: Path,
    settings: tensorrt_api.BuildSettings,
    *,
    timing_cache: Path | None = None,
    calibration_cache: Path | None = None,
    layer_outputs: dict[str, int] | None = None,
    tensorrt_version: str | None = None,
) -> list[str]:
    """The trtexec command line equivalent to `settings` (flags of TensorRT 8.5+ and 10.x).

    layer_outputs: number of outputs per pinned ONNX node (for --layerOutputTypes);
    tensorrt_version decides whether --builderOptimizationLevel (8.6+) is passed.
    """
    argv = [str(trtexec), f"--onnx={onnx}", f"--saveEngine={plan_out}", "--skipInference"]
    # --memPoolSize takes MiB without a suffix in every version from 8.4 to 10.x.
    argv.append(f"--memPoolSize=workspace:{max(1, settings.workspace_bytes // MiB)}")
    if settings.precision in ("fp16", "int8"):
        argv.append("--fp16")
    if settings.precision == "int8":
        argv.append("--int8")
        if calibration_cache is None:
            raise EngineError(
                "INT8 with trtexec needs a calibration cache, which only the Python builder can make; "
                "build once with --builder python (the cache is kept beside the plan) or use --precision fp16."
            )
        argv.append(f"--calib={calibration_cache}")
    if settings.profile:
        for flag, index in (("--minShapes", 0), ("--optShapes", 1), ("--maxShapes", 2)):
            specs = []
            for name, ranges in settings.profile.items():
                _check_trtexec_name(name, "input name")
                specs.append(f"{name}:{_dims(ranges[index])}")
            argv.append(f"{flag}={','.join(specs)}")
    if settings.fp32_pins:
        nodes = []
        for node, _ in settings.fp32_pins:
            _check_trtexec_name(node, "FP32-pinned node")
            if node not in nodes:
                nodes.append(node)
        argv.append("--precisionConstraints=obey")
        argv.append("--layerPrecisions=" + ",".join(f"{n}:fp32" for n in nodes))
        outputs = layer_outputs or {}
        argv.append("--layerOutputTypes=" + ",".join(f"{n}:" + "+".join(["fp32"] * max(1, outputs.get(n, 1)))
                                                     for n in nodes))
    if settings.dla_core is not None:
        argv += [f"--useDLACore={int(settings.dla_core)}", "--allowGPUFallback"]
    if settings.optimization_level is not None:
        version = tensorrt_api.version_tuple(tensorrt_version or "0")
        if version >= (8, 6):
            argv.append(f"--builderOptimizationLevel={int(settings.optimization_level)}")
    if timing_cache is not None:
        argv.append(f"--timingCacheFile={timing_cache}")
    return argv


def trtexec_error_line(stdout: str, stderr: str, returncode: int) -> str:
    """The one line that says why trtexec failed: its first [E] line, else its last words."""
    for line in (stderr + "\n" + stdout).splitlines():
        if "[E]" in line:
            text = line.split("[E]", 1)[1].strip()
            if text:
                return " ".join(text.split())
    for text in (stderr, stdout):
        lines = [line.strip() for line in text.splitlines() if line.strip() and not line.startswith("&&&&")]
        if lines:
            return " ".join(lines[-1].split())
    return f"exit code {returncode}, no output"


def _onnx_node_outputs(onnx_path: Path, nodes: Sequence[str]) -> dict[str, int]:
    try:
        import onnx

        model = onnx.load(str(onnx_path), load_external_data=False)
    except Exception:  # noqa: BLE001 - counts are a refinement; default to one output
        return {}
    wanted = set(nodes)
    return {n.name: len(n.output) for n in model.graph.node if n.name in wanted}


# --------------------------------------------------------------------------- fingerprint


def _major_minor(version: str | None) -> str | None:
    if not version:
        return None
    return ".".join(str(p) for p in tensorrt_api.version_tuple(version)[:2])


def machine_fingerprint(
    facts: device_mod.DeviceFacts | None = None, tensorrt_version: str | None = None
) -> dict[str, Any]:
    """The machine part of a plan fingerprint: TensorRT, CUDA, GPU, compute capability, L4T."""
    facts = facts or device_mod.device_facts()
    return {
        "tensorrt": tensorrt_version or facts.tensorrt,
        "cuda": facts.cuda,
        "gpu": facts.gpu,
        "compute_capability": facts.compute_capability,
        "l4t": facts.l4t,
    }


def plan_fingerprint(
    facts: device_mod.DeviceFacts,
    tensorrt_version: str | None,
    onnx_sha256: str,
    settings: tensorrt_api.BuildSettings,
    calibration: str | None = None,
) -> dict[str, Any]:
    """What a plan depends on: this machine plus the ONNX model and the build options."""
    fingerprint = machine_fingerprint(facts, tensorrt_version)
    fingerprint.update(
        {
            "onnx_sha256": onnx_sha256,
            "precision": settings.precision,
            "dla_core": settings.dla_core,
            "profile": {k: {"min": v[0], "opt": v[1], "max": v[2]} for k, v in settings.profile.items()},
            "optimization_level": settings.optimization_level,
            "fp32_layers": sorted({node for node, _ in settings.fp32_pins}),
            "calibration": calibration,
        }
    )
    return fingerprint


def _same(key: str, old: Any, new: Any) -> bool:
    if key == "cuda":
        return _major_minor(old) == _major_minor(new)
    if key == "tensorrt":
        # The plan format changes with every TensorRT release but not with the build number.
        return tensorrt_api.version_tuple(str(old))[:3] == tensorrt_api.version_tuple(str(new))[:3]
    if key == "gpu":
        return str(old).strip().lower() == str(new).strip().lower()
    if key == "profile":
        return _normalise(old) == _normalise(new)
    return old == new


def _normalise(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _normalise(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_normalise(v) for v in value]
    return value


def _show(key: str, value: Any) -> str:
    if value is None:
        return "none"
    if key in ("onnx_sha256", "calibration"):
        return f"{str(value)[:12]}…"
    if key == "profile":
        ranges = [f"{n}: {_dims(r['min'])}..{_dims(r['max'])} opt {_dims(r['opt'])}" for n, r in value.items()]
        return "; ".join(ranges) or "fixed"
    if key == "fp32_layers":
        return f"{len(value)} node(s)"
    return str(value)


def fingerprint_diff(recorded: dict[str, Any] | None, current: dict[str, Any]) -> list[str]:
    """What differs between a recorded plan fingerprint and `current`, one readable line per key.

    Only the keys present in `current` are compared, so a machine-only
    fingerprint (`machine_fingerprint`) asks "does this plan run here?" and a
    full one (`plan_fingerprint`) asks "is this plan still what would be built?".
    A key unknown on this machine (None) while the plan recorded it counts as a difference.
    """
    recorded = recorded or {}
    changes = []
    for key, new in current.items():
        old = recorded.get(key)
        if old is None and new is None:
            continue
        if old is None or new is None or not _same(key, old, new):
            label = _LABELS.get(key, key)
            if new is None and key in MACHINE_KEYS:
                changes.append(f"{label}: the plan was built with {_show(key, old)}, this machine has none")
            else:
                changes.append(f"{label}: {_show(key, old)} -> {_show(key, new)}")
    return changes


def plan_mismatch(plan_section: dict[str, Any] | None, facts: device_mod.DeviceFacts | None = None) -> list[str]:
    """Why a recorded plan would not run on this machine (empty: it matches). For repository and doctor."""
    if not plan_section:
        return ["no plan fingerprint recorded (built by something other than edge-deploy)"]
    return fingerprint_diff(plan_section, machine_fingerprint(facts))


def check_existing_plan(
    artifact_dir: Path,
    manifest: dict[str, Any],
    facts: device_mod.DeviceFacts | None = None,
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
    entry = (manifest.get("files") or {}).get(PLAN_NAME)
    if entry and entry.get("sha256") != sha256_file(plan):
        raise EngineError(
            f"{plan} is corrupt or was changed after it was built (sha256 differs from the manifest); "
            f"rebuild it with `edge-deploy convert {artifact_dir} --force`."
        )
    recorded = manifest.get("plan")
    changes = plan_mismatch(recorded, facts)
    if changes:
        raise EngineError(
            f"{plan} was not built for this machine ({'; '.join(changes)}); "
            f"rebuild it here with `edge-deploy convert {artifact_dir} --force`."
        )
    if deserialize and tensorrt_api.module_version() is not None:
        trt = tensorrt_api.load()
        engine = trt.deserialize(plan.read_bytes(), where=str(plan))
        check_io(trt.io_tensors(engine), manifest.get("io") or {}, where=str(plan))


# --------------------------------------------------------------------------- verification


def check_io(tensors: Sequence[tensorrt_api.TensorInfo], io: dict[str, Any], where: str = "the plan") -> None:
    """The engine's I/O names, datatypes and shapes must be the manifest's; one-line EngineError otherwise."""
    expected = {t["name"]: (True, t) for t in io.get("inputs", [])}
    expected.update({t["name"]: (False, t) for t in io.get("outputs", [])})
    found = {t.name: t for t in tensors}
    missing = sorted(set(expected) - set(found))
    extra = sorted(set(found) - set(expected))
    if missing or extra:
        raise EngineError(
            f"{where} does not have the manifest's inputs/outputs (missing {missing or 'none'}, unexpected "
            f"{extra or 'none'}): it was built from another model; rebuild with `edge-deploy convert --force`."
        )
    for name, (is_input, spec) in expected.items():
        tensor = found[name]
        kind = "input" if is_input else "output"
        if tensor.is_input != is_input:
            raise EngineError(f"{where}: {name!r} is an {kind} in the manifest but not in the plan; rebuild it.")
        if tensor.datatype != spec["datatype"]:
            raise EngineError(
                f"{where}: {kind} {name!r} is {tensor.datatype}, the manifest says {spec['datatype']}; rebuild it."
            )
        want = [int(d) for d in spec["shape"]]
        if len(want) != len(tensor.shape) or any(w != g for w, g in zip(want, tensor.shape)):
            raise EngineError(
                f"{where}: {kind} {name!r} has shape {tensor.shape}, the manifest says {want}; rebuild it."
            )
    batch = io.get("batch") or {}
    for tensor in tensors:
        if tensor.is_input and tensor.profile is not None and batch:
            low, high = tensor.profile[0][0], tensor.profile[2][0]
            if (low, high) != (int(batch.get("min", low)), int(batch.get("max", high))):
                raise EngineError(
                    f"{where}: input {tensor.name!r} accepts batch {low}..{high}, the manifest says "
                    f"{batch.get('min')}..{batch.get('max')}; rebuild it."
                )


def parity_inputs(manifest: dict[str, Any]) -> list[dict[str, Any]]:
    """The parity inputs of `convert` (seeded uniform [0, 1), one feed per parity batch size).

    With torch installed they are the very arrays `convert` checked ONNX Runtime
    against; without it, NumPy-seeded arrays of the same shapes and range.
    """
    import numpy as np

    io = manifest.get("io") or {}
    parity = manifest.get("parity") or {}
    batch = io.get("batch") or {}
    sizes = parity.get("batches") or sorted({int(batch.get("min", 1)), int(batch.get("max", 1))})
    seed = int(parity.get("seed", 0))
    inputs = io.get("inputs", [])
    if not inputs:
        raise EngineError("the manifest lists no model inputs; re-run `edge-deploy convert`.")
    feeds: list[dict[str, Any]] = []
    try:
        import torch

        generator = torch.Generator().manual_seed(seed)
        make = lambda shape: torch.rand(shape, generator=generator).numpy()  # noqa: E731
    except ImportError:
        rng = np.random.default_rng(seed)
        make = lambda shape: rng.random(shape, dtype=np.float32)  # noqa: E731
    for size in sizes:
        feed = {}
        for tensor in inputs:
            shape = (int(size), *[int(d) for d in tensor["shape"][1:]])
            feed[tensor["name"]] = np.asarray(make(shape), dtype=np.float32)
        feeds.append(feed)
    return feeds


def _lane_dx(reference: Sequence[Any], candidate: Sequence[Any]) -> list[float]:
    """|dx| at shared ys between lanes matched greedily (closest first)."""
    import numpy as np

    def on_grid(lane: Any) -> dict[float, float]:
        points = np.asarray(lane.points, dtype=np.float64)
        return {round(float(y), 3): float(x) for x, y in points}

    ref = [on_grid(lane) for lane in reference]
    cand = [on_grid(lane) for lane in candidate]
    pairs = []
    for i, a in enumerate(ref):
        for j, b in enumerate(cand):
            common = sorted(set(a) & set(b))
            if common:
                dx = [abs(a[y] - b[y]) for y in common]
                pairs.append((sum(dx) / len(dx), i, j, dx))
    used_i: set[int] = set()
    used_j: set[int] = set()
    dxs: list[float] = []
    for _, i, j, dx in sorted(pairs, key=lambda p: p[0]):
        if i in used_i or j in used_j:
            continue
        used_i.add(i)
        used_j.add(j)
        dxs.extend(dx)
    if len(used_i) < min(len(ref), len(cand)):
        dxs.append(float("inf"))  # a lane with no vertical overlap with any other
    return dxs


def compare_outputs(
    reference: Sequence[dict[str, Any]],
    actual: Sequence[dict[str, Any]],
    decode: dict[str, Any],
    lane_output: str | None,
    image_size: tuple[int, int] = (360, 640),
    decoder: Callable[..., list[Any]] | None = None,
) -> dict[str, Any]:
    """ONNX Runtime vs the plan on the same feeds: raw max abs/rel per output, then decoded lanes.

    max_rel is max|plan - ort| / max|ort| over the output (relative to its range:
    logits near 0 make per-element ratios meaningless). Lanes pass when every
    image has the same number of lanes and the mean |dx| over matched lanes is
    <= MAX_LANE_DX_PX at 640 wide.
    """
    import numpy as np

    outputs: dict[str, dict[str, float]] = {}
    for ref_feed, act_feed in zip(reference, actual):
        for name, ref in ref_feed.items():
            ref_arr = np.asarray(ref, dtype=np.float64)
            act_arr = np.asarray(act_feed[name], dtype=np.float64)
            if ref_arr.shape != act_arr.shape:
                raise EngineError(
                    f"output {name!r} has shape {list(act_arr.shape)} from the plan but {list(ref_arr.shape)} "
                    "from ONNX Runtime; rebuild with `edge-deploy convert --force`."
                )
            diff = np.abs(act_arr - ref_arr)
            finite = bool(np.all(np.isfinite(act_arr)))
            max_abs = float(diff.max()) if diff.size and finite else (0.0 if finite else float("inf"))
            scale = float(np.abs(ref_arr).max()) if ref_arr.size else 0.0
            max_rel = max_abs / scale if scale > 0 else (0.0 if max_abs == 0 else float("inf"))
            entry = outputs.setdefault(name, {"max_abs": 0.0, "max_rel": 0.0})
            entry["max_abs"] = max(entry["max_abs"], max_abs)
            entry["max_rel"] = max(entry["max_rel"], max_rel)
    worst = max(outputs, key=lambda n: outputs[n]["max_rel"]) if outputs else None
    report: dict[str, Any] = {"outputs": outputs, "worst_output": worst, "passed": True, "problems": []}
    for name, entry in outputs.items():
        if not np.isfinite(entry["max_abs"]):
            report["passed"] = False
            report["problems"].append(f"output {name!r} has inf/NaN values from the plan")
    if lane_output is None:
        report["lanes"] = None
        return report
    if decoder is None:
        from .lanedet.decode import decode_lanes as decoder
    params = {k: decode[k] for k in ("conf_threshold", "nms_threshold", "top_k") if k in decode}
    counts_ref, counts_plan, dxs = [], [], []
    image = 0
    for ref_feed, act_feed in zip(reference, actual):
        for ref_raw, act_raw in zip(np.asarray(ref_feed[lane_output]), np.asarray(act_feed[lane_output])):
            try:
                ref_lanes = decoder(ref_raw, image_size=image_size, **params)
                act_lanes = decoder(act_raw, image_size=image_size, **params)
            except ValueError as exc:
                raise EngineError(f"cannot decode the plan's output {lane_output!r}: {exc}") from exc
            counts_ref.append(len(ref_lanes))
            counts_plan.append(len(act_lanes))
            if len(ref_lanes) != len(act_lanes):
                report["passed"] = False
                report["problems"].append(
                    f"image {image}: {len(act_lanes)} lane(s) from the plan, {len(ref_lanes)} from ONNX Runtime"
                )
            dxs.extend(_lane_dx(ref_lanes, act_lanes))
            image += 1
    mean_dx = float(sum(dxs) / len(dxs)) if dxs else 0.0
    # dx is in pixels of image_size's width; the limit is defined at 640 wide.
    mean_dx_640 = mean_dx * 640.0 / float(image_size[1])
    if mean_dx_640 > MAX_LANE_DX_PX:
        report["passed"] = False
        report["problems"].append(f"lanes moved by {mean_dx_640:.2f} px on average (limit {MAX_LANE_DX_PX:g} px)")
    report["lanes"] = {
        "images": image,
        "lanes_onnxruntime": sum(counts_ref),
        "lanes_plan": sum(counts_plan),
        "mean_dx_px": mean_dx_640,
        "max_mean_dx_px": MAX_LANE_DX_PX,
    }
    return report


def _lane_output(manifest: dict[str, Any]) -> str | None:
    for tensor in (manifest.get("io") or {}).get("outputs", []):
        if tensor.get("shape") and int(tensor["shape"][-1]) == 77:
            return str(tensor["name"])
    return None


def verify_plan(plan_path: Path, artifact_dir: Path, manifest: dict[str, Any], trt: tensorrt_api.TensorRT,
                reporter: Reporter | None = None) -> dict[str, Any]:
    """Deserialize the plan, check its I/O against the manifest, run it and compare with ONNX Runtime."""
    reporter = reporter or Reporter()
    engine = trt.deserialize(Path(plan_path).read_bytes(), where=str(plan_path))
    check_io(trt.io_tensors(engine), manifest.get("io") or {}, where=str(plan_path))
    result: dict[str, Any] = {"io": "ok"}
    if tensorrt_api._import("pycuda.driver") is None:
        reason = "pycuda is not installed (pip install 'edge-deploy[jetson]')"
        reporter.warn(f"the plan's I/O matches the manifest, but it was not run: {reason}")
        result["run"] = {"status": "skipped", "reason": reason}
        return result
    from .export import ort_session

    feeds = parity_inputs(manifest)
    session = ort_session(Path(artifact_dir) / ONNX_NAME)
    names = [o.name for o in session.get_outputs()]
    reference = [dict(zip(names, session.run(None, feed))) for feed in feeds]
    actual = [trt.run(engine, feed) for feed in feeds]
    preprocess = manifest.get("preprocess") or {}
    size = (int(preprocess.get("height", 360)), int(preprocess.get("width", 640)))
    report = compare_outputs(reference, actual, manifest.get("decode") or {}, _lane_output(manifest), size)
    report["batches"] = [int(next(iter(f.values())).shape[0]) for f in feeds]
    if not report["passed"]:
        worst = report["worst_output"]
        stats = report["outputs"].get(worst, {})
        problems = report["problems"]
        summary = "; ".join(problems[:3]) + (f" (and {len(problems) - 3} more)" if len(problems) > 3 else "")
        raise EngineError(
            f"the plan does not reproduce ONNX Runtime: {summary}; worst output {worst!r} "
            f"(max abs {stats.get('max_abs', float('nan')):.3g}, max rel {stats.get('max_rel', float('nan')):.3g}); "
            "try --precision fp32 or pass --no-verify to keep it anyway."
        )
    result["run"] = {"status": "passed", **{k: v for k, v in report.items() if k not in ("passed", "problems")}}
    return result


# --------------------------------------------------------------------------- build


@dataclass
class _Plan:
    """Inputs of one build, resolved before anything is written."""

    builder: str
    tensorrt_version: str | None
    settings: tensorrt_api.BuildSettings
    fingerprint: dict[str, Any]
    calibration: tensorrt_api.Calibration | None = None


def _existing_plan_is_current(
    artifact_dir: Path, manifest: dict[str, Any], fingerprint: dict[str, Any]
) -> tuple[bool, list[str]]:
    """(True, []) when model.plan is intact and its fingerprint matches; else what differs."""
    plan = artifact_dir / PLAN_NAME
    recorded = manifest.get("plan")
    if not plan.is_file() or not recorded:
        return False, []
    entry = (manifest.get("files") or {}).get(PLAN_NAME)
    if not entry or entry.get("sha256") != sha256_file(plan):
        return False, ["the existing model.plan does not match its manifest entry (changed or corrupt)"]
    changes = fingerprint_diff(recorded, fingerprint)
    return not changes, changes


def _read_timing_cache(path: Path | None, reporter: Reporter) -> bytes | None:
    if path is None:
        return None
    path = Path(path)
    if not path.exists():
        reporter.info(f"timing cache {path} does not exist yet: it will be created")
        return b""
    try:
        return path.read_bytes()
    except OSError as exc:
        reporter.warn(f"cannot read the timing cache {path} ({exc.strerror}); starting a new one")
        return b""


def _write_atomic(path: Path, data: bytes) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        tmp.write_bytes(data)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def _build_python(onnx: Path, plan_tmp: Path, resolved: _Plan, options: EngineOptions, reporter: Reporter) -> None:
    trt = tensorrt_api.load()
    settings = resolved.settings
    settings.timing_cache = _read_timing_cache(options.timing_cache, reporter)
    result = trt.build(onnx, settings)
    for warning in result.warnings:
        reporter.warn(warning if "timing cache" not in warning else f"{warning} ({options.timing_cache})")
    if result.unmatched_nodes:
        reporter.warn(
            f"{len(result.unmatched_nodes)} FP16-report node(s) have no TensorRT layer of that name and were not "
            f"pinned: {', '.join(result.unmatched_nodes[:5])}"
        )
    if result.pinned_layers:
        reporter.info(f"kept {len(result.pinned_layers)} layer(s) in FP32: {', '.join(result.pinned_layers[:8])}")
    plan_tmp.write_bytes(result.plan)
    if options.timing_cache is not None and result.timing_cache:
        _write_atomic(Path(options.timing_cache), result.timing_cache)


def _run_trtexec(argv: list[str], log_path: Path) -> subprocess.CompletedProcess:
    try:
        done = subprocess.run(argv, capture_output=True, text=True)
    except OSError as exc:
        raise EngineError(f"cannot run {argv[0]}: {exc.strerror}; check the trtexec installation.") from exc
    _write_atomic(log_path, (f"$ {' '.join(argv)}\n" + done.stdout + done.stderr).encode())
    return done


def _build_trtexec(onnx: Path, plan_tmp: Path, artifact_dir: Path, resolved: _Plan, options: EngineOptions,
                   reporter: Reporter) -> None:
    trtexec = find_trtexec()
    if trtexec is None:
        raise EngineError(tensorrt_missing_message())
    settings = resolved.settings
    nodes = [node for node, _ in settings.fp32_pins]
    layer_outputs = _onnx_node_outputs(onnx, nodes) if nodes else {}
    calib = None
    if settings.precision == "int8" and resolved.calibration is not None:
        calib = resolved.calibration.cache_path if resolved.calibration.cache_path.is_file() else None
    cache = Path(options.timing_cache) if options.timing_cache is not None else None
    cache_tmp = None
    if cache is not None:
        # trtexec reads and rewrites its cache file: give it a copy, keep the original until success.
        cache_tmp = cache.with_name(f".{cache.name}.tmp-{os.getpid()}")
        if cache.exists():
            shutil.copyfile(cache, cache_tmp)
        else:
            reporter.info(f"timing cache {cache} does not exist yet: it will be created")
    log_path = artifact_dir / TRTEXEC_LOG

    def argv_with(cache_file: Path | None) -> list[str]:
        return trtexec_argv(trtexec, onnx, plan_tmp, settings, timing_cache=cache_file, calibration_cache=calib,
                            layer_outputs=layer_outputs, tensorrt_version=resolved.tensorrt_version)

    try:
        done = _run_trtexec(argv_with(cache_tmp), log_path)
        if done.returncode != 0 and cache is not None and cache.exists():
            # The cache may be corrupt or from another TensorRT: it must never fail the build.
            first = trtexec_error_line(done.stdout, done.stderr, done.returncode)
            if cache_tmp is not None:
                cache_tmp.unlink(missing_ok=True)
            plan_tmp.unlink(missing_ok=True)
            retry = _run_trtexec(argv_with(cache_tmp), log_path)
            if retry.returncode == 0:
                reporter.warn(f"the timing cache {cache} was not usable ({first}); replaced it with a new one")
            done = retry
        if done.returncode != 0 or not plan_tmp.is_file() or plan_tmp.stat().st_size == 0:
            line = trtexec_error_line(done.stdout, done.stderr, done.returncode)
            if done.returncode == 0:
                line = f"it exited 0 but wrote no engine ({line})"
            raise EngineError(f"trtexec could not build the plan: {line} (full log: {log_path}).")
        if cache is not None and cache_tmp is not None and cache_tmp.is_file() and cache_tmp.stat().st_size:
            os.replace(cache_tmp, cache)
        if nodes:
            reporter.info(f"kept {len(nodes)} node(s) in FP32 (--layerPrecisions): {', '.join(nodes[:8])}")
    finally:
        if cache_tmp is not None:
            cache_tmp.unlink(missing_ok=True)


def _resolve(artifact_dir: Path, manifest: dict[str, Any], options: EngineOptions,
             facts: device_mod.DeviceFacts, onnx: Path, onnx_sha: str) -> _Plan:
    builder = available_builder(options.builder)
    if builder is None:
        if options.builder == "auto" or available_builder("auto") is None:
            raise EngineError(tensorrt_missing_message())
        what = "the tensorrt Python module" if options.builder == "python" else "trtexec"
        raise EngineError(
            f"--builder {options.builder} needs {what}, which is not available here; "
            "use --builder auto to build with what is installed."
        )
    if builder == "python":
        version = tensorrt_api.module_version()
    else:
        trtexec = find_trtexec()
        version = (trtexec_version(trtexec) if trtexec else None) or facts.tensorrt
    check_dla(options.dla_core, facts)
    settings = build_settings(manifest, options, 0)  # workspace sized once a build is certain
    calibration = None
    digest = None
    if options.precision == "int8":
        images = calibration_images(options.calibration_images)
        digest = calibration_digest(onnx_sha, images, manifest.get("preprocess") or {})
        calibration = make_calibration(artifact_dir, manifest, images, digest, settings.profile)
        settings.calibration = calibration
    fingerprint = plan_fingerprint(facts, version, onnx_sha, settings, digest)
    return _Plan(builder, version, settings, fingerprint, calibration)


def build_plan(
    artifact_dir: Path,
    manifest: dict[str, Any],
    options: EngineOptions,
    reporter: Reporter | None = None,
    *,
    root: Path | None = None,
) -> dict[str, Any]:
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
    if options.precision not in PRECISIONS:
        raise EngineError(f"--precision must be one of {', '.join(PRECISIONS)} (got {options.precision!r}).")
    facts = device_mod.device_facts(root)
    onnx_sha = sha256_file(onnx)
    resolved = _resolve(artifact_dir, manifest, options, facts, onnx, onnx_sha)

    current, changes = _existing_plan_is_current(artifact_dir, manifest, resolved.fingerprint)
    if current and not options.force:
        reporter.info(
            f"{PLAN_NAME} is up to date (same TensorRT {resolved.tensorrt_version}, device, ONNX model and options): "
            "skipped the build; --force rebuilds it"
        )
        return dict(manifest["plan"])
    if changes:
        reporter.info(f"rebuilding {PLAN_NAME}: " + "; ".join(changes))
    elif current and options.force:
        reporter.info(f"rebuilding {PLAN_NAME} (--force)")

    resolved.settings.workspace_bytes = workspace_size(options.workspace, facts, onnx.stat().st_size)
    for warning in device_mod.small_device_warnings(facts):
        reporter.warn(warning)

    plan_path = artifact_dir / PLAN_NAME
    plan_tmp = artifact_dir / f".{PLAN_NAME}.tmp-{os.getpid()}"
    started = time.perf_counter()
    try:
        with reporter.stage(f"build {PLAN_NAME} ({resolved.builder}, {options.precision})"):
            if resolved.builder == "python":
                _build_python(onnx, plan_tmp, resolved, options, reporter)
            else:
                _build_trtexec(onnx, plan_tmp, artifact_dir, resolved, options, reporter)
        build_seconds = time.perf_counter() - started
        verification: dict[str, Any] = {"status": "skipped", "reason": "--no-verify"}
        if options.verify:
            if tensorrt_api.module_version() is None:
                reason = "the tensorrt Python module is not importable (a venv without --system-site-packages?)"
                reporter.warn(f"the plan was built but not verified: {reason}")
                verification = {"status": "skipped", "reason": reason}
            else:
                with reporter.stage("verify plan"):
                    verification = verify_plan(plan_tmp, artifact_dir, manifest, tensorrt_api.load(), reporter)
                    verification.setdefault("status", "passed")
        os.replace(plan_tmp, plan_path)
    except EdgeDeployError:
        raise
    except Exception as exc:  # TensorRT/pycuda raise plain exceptions: one line, nothing replaced
        message = " ".join(str(exc).split()) or type(exc).__name__
        raise EngineError(f"building {PLAN_NAME} failed: {message[:300]}; nothing was replaced.") from exc
    finally:
        plan_tmp.unlink(missing_ok=True)

    mode = facts.power_mode
    section = dict(resolved.fingerprint)
    section.update(
        {
            "jetpack": facts.jetpack,
            "device": facts.model,
            "nvpmodel": mode.name if mode else None,
            "workspace_bytes": resolved.settings.workspace_bytes,
            "builder": resolved.builder,
            "build_time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "build_seconds": round(build_seconds, 1),
            "timing_cache": str(options.timing_cache) if options.timing_cache else None,
            "verify": verification,
        }
    )
    return section
