"""The trtexec builder: NVIDIA's command-line tool, used when the tensorrt module does not import.

`trtexec_argv` maps the version-neutral BuildSettings to trtexec's flags (TensorRT
8.5+ and 10.x), `build_with_trtexec` runs it with the plan going to a temporary
file, keeps its output in trtexec.log and turns a failure into one line
(`trtexec_error_line`). A timing cache that trtexec cannot use never fails the build.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Sequence

from ..errors import EngineError
from ..fsutil import write_text_atomic
from ..progress import Reporter
from . import tensorrt_api

TRTEXEC_ENV = "TRTEXEC"
TRTEXEC_DEFAULT = Path("/usr/src/tensorrt/bin/trtexec")
LOG_NAME = "trtexec.log"
MiB = 1 << 20


def find_trtexec() -> Path | None:
    """trtexec: $TRTEXEC, /usr/src/tensorrt/bin/trtexec (JetPack), then PATH."""
    candidates = [os.environ.get(TRTEXEC_ENV), str(TRTEXEC_DEFAULT), shutil.which("trtexec")]
    for value in candidates:
        if value and Path(value).is_file() and os.access(value, os.X_OK):
            return Path(value)
    return None


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


def _check_name(name: str, what: str) -> None:
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
    tensorrt_version picks --buildOnly (8.5) or --skipInference (8.6+, and when unknown) and
    whether --builderOptimizationLevel (8.6+) is passed.
    """
    version = tensorrt_api.version_tuple(tensorrt_version or "0")
    # 8.5's trtexec only knows --buildOnly (an unknown option fails the run); 8.6 renamed it, 10.x dropped it.
    build_only = "--buildOnly" if (8,) <= version < (8, 6) else "--skipInference"
    argv = [str(trtexec), f"--onnx={onnx}", f"--saveEngine={plan_out}", build_only]
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
        for name in settings.profile:
            _check_name(name, "input name")
        for flag, index in (("--minShapes", 0), ("--optShapes", 1), ("--maxShapes", 2)):
            specs = [f"{name}:{'x'.join(str(int(d)) for d in ranges[index])}"
                     for name, ranges in settings.profile.items()]
            argv.append(f"{flag}={','.join(specs)}")
    if settings.fp32_pins:
        nodes = list(dict.fromkeys(node for node, _ in settings.fp32_pins))
        for node in nodes:
            _check_name(node, "FP32-pinned node")
        outputs = layer_outputs or {}
        argv.append("--precisionConstraints=obey")
        argv.append("--layerPrecisions=" + ",".join(f"{n}:fp32" for n in nodes))
        argv.append("--layerOutputTypes=" + ",".join(f"{n}:" + "+".join(["fp32"] * max(1, outputs.get(n, 1)))
                                                     for n in nodes))
    if settings.dla_core is not None:
        argv += [f"--useDLACore={int(settings.dla_core)}", "--allowGPUFallback"]
    if settings.optimization_level is not None:
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


def _run(argv: list[str], log_path: Path) -> subprocess.CompletedProcess:
    try:
        done = subprocess.run(argv, capture_output=True, text=True)
    except OSError as exc:
        raise EngineError(f"cannot run {argv[0]}: {exc.strerror}; check the trtexec installation.") from exc
    write_text_atomic(log_path, f"$ {' '.join(argv)}\n" + done.stdout + done.stderr)
    return done


def build_with_trtexec(
    trtexec: Path,
    onnx: Path,
    plan_out: Path,
    settings: tensorrt_api.BuildSettings,
    tensorrt_version: str | None,
    timing_cache: Path | None,
    reporter: Reporter,
) -> None:
    """Build `plan_out` with trtexec; its output goes to trtexec.log beside `plan_out`.

    trtexec reads and rewrites its timing cache file, so it gets a copy that
    replaces `timing_cache` only after a successful build; a cache it rejects is
    dropped and the build retried without it. Failure: a one-line EngineError.
    """
    nodes = [node for node, _ in settings.fp32_pins]
    layer_outputs = _onnx_node_outputs(onnx, nodes) if nodes else {}
    calibration = settings.calibration
    calib = calibration.cache_path if calibration is not None and calibration.cache_path.is_file() else None
    cache_copy = None
    if timing_cache is not None:
        cache_copy = timing_cache.with_name(f".{timing_cache.name}.tmp-{os.getpid()}")
        if timing_cache.exists():
            shutil.copyfile(timing_cache, cache_copy)
        else:
            reporter.info(f"timing cache {timing_cache} does not exist yet: it will be created")
    log_path = plan_out.parent / LOG_NAME
    argv = trtexec_argv(trtexec, onnx, plan_out, settings, timing_cache=cache_copy, calibration_cache=calib,
                        layer_outputs=layer_outputs, tensorrt_version=tensorrt_version)
    try:
        done = _run(argv, log_path)
        if done.returncode != 0 and cache_copy is not None and timing_cache.exists():
            # The cache may be corrupt or from another TensorRT: it must never fail the build.
            first = trtexec_error_line(done.stdout, done.stderr, done.returncode)
            cache_copy.unlink(missing_ok=True)
            plan_out.unlink(missing_ok=True)
            done = _run(argv, log_path)
            if done.returncode == 0:
                reporter.warn(f"the timing cache {timing_cache} was not usable ({first}); replaced it with a new one")
        if done.returncode != 0 or not plan_out.is_file() or plan_out.stat().st_size == 0:
            line = trtexec_error_line(done.stdout, done.stderr, done.returncode)
            if done.returncode == 0:
                line = f"it exited 0 but wrote no engine ({line})"
            raise EngineError(f"trtexec could not build the plan: {line} (full log: {log_path}).")
        if cache_copy is not None and cache_copy.is_file() and cache_copy.stat().st_size:
            os.replace(cache_copy, timing_cache)
        if nodes:
            reporter.info(f"kept {len(nodes)} node(s) in FP32 (--layerPrecisions): {', '.join(nodes[:8])}")
    finally:
        if cache_copy is not None:
            cache_copy.unlink(missing_ok=True)
