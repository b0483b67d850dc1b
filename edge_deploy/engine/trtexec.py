"""The trtexec builder: NVIDIA's command-line tool, used when the tensorrt module does not import.

`trtexec_argv` maps the version-neutral BuildSettings to trtexec's flags (TensorRT
8.5 to 11.x), `build_with_trtexec` runs it with the plan going to a temporary
file, keeps its output in trtexec.log and turns a failure into one line
(`trtexec_error_line`). A timing cache that trtexec cannot use never fails the build.

Flags per version, from samples/common/sampleOptions.cpp of NVIDIA/TensorRT
(release/8.5, 8.6, 10.0, 10.16, 11.0, 11.1); trtexec exits on an option it does not parse:

- --buildOnly: 8.5 and 8.6 (removed in 10.0); --skipInference: 8.6 and later;
  --builderOptimizationLevel: 8.6 and later;
- --stronglyTyped: 10.0 and later (on 11 a documented no-op: every network is strongly typed);
- --fp16, --int8, --calib, --precisionConstraints, --layerPrecisions, --layerOutputTypes:
  8.5 to 10.x; all gone in 11.0.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from ..errors import EngineError
from ..core.fsutil import AtomicOutput, write_text_atomic
from ..artifact.precision import Precision
from ..core.progress import Reporter
from ..machine import tensorrt_api

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


PROBE_TIMEOUT_S = 15.0  # `trtexec --help` prints its options and exits at once; a Jetson under load is slower


@dataclass(frozen=True)
class TrtexecProbe:
    """What `trtexec --help` showed: the TensorRT version on its banner, or why the tool does not work."""

    version: str | None
    problem: str | None = None


def probe_trtexec(trtexec: Path, timeout: float = PROBE_TIMEOUT_S) -> TrtexecProbe:
    """Run `trtexec --help` (it prints the banner "&&&& RUNNING TensorRT.trtexec [TensorRT vNNNN]" and exits 0):
    the version, or the problem in words when it cannot run, does not answer within `timeout`, exits non-zero or
    prints no trtexec banner (then it is not NVIDIA's trtexec, whatever its name)."""
    try:
        done = subprocess.run([str(trtexec), "--help"], capture_output=True, text=True, timeout=timeout,
                              stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return TrtexecProbe(None, f"`{trtexec} --help` did not answer within {timeout:g} s")
    except (OSError, subprocess.SubprocessError) as exc:
        return TrtexecProbe(None, f"{trtexec} cannot be run ({getattr(exc, 'strerror', None) or exc})")
    output = done.stdout + done.stderr
    if done.returncode != 0:
        return TrtexecProbe(None, f"`{trtexec} --help` failed: {trtexec_error_line(done.stdout, done.stderr, done.returncode)}")
    if "TensorRT.trtexec" not in output:
        return TrtexecProbe(None, f"`{trtexec} --help` printed no TensorRT.trtexec banner, so it is not NVIDIA's "
                                  "trtexec")
    return TrtexecProbe(parse_trtexec_version(output))


def trtexec_version(trtexec: Path) -> str | None:
    """The TensorRT version a trtexec binary reports on its banner line (None when it reports none)."""
    return probe_trtexec(trtexec, timeout=60).version


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
    float_nodes: set[str] | None = None,
    tensorrt_version: str | None = None,
) -> list[str]:
    """The trtexec command line equivalent to `settings` (flags of TensorRT 8.5 to 11.x).

    float_nodes: pinned ONNX nodes whose outputs are all float (only those get --layerOutputTypes;
    None: all). tensorrt_version picks --buildOnly (8.5), --skipInference (8.6+) or neither (unknown),
    --stronglyTyped (10.x), and whether --builderOptimizationLevel (8.6+) is passed.
    """
    version = tensorrt_api.version_tuple(tensorrt_version or "")
    argv = [str(trtexec), f"--onnx={onnx}", f"--saveEngine={plan_out}"]
    # 8.5 knows only --buildOnly, 8.6 both, 10.0+ only --skipInference. An unknown version gets neither:
    # trtexec then also times the engine after building it, slower but accepted by every version.
    if (8,) <= version < (8, 6):
        argv.append("--buildOnly")
    elif version >= (8, 6):
        argv.append("--skipInference")
    # --memPoolSize takes MiB without a suffix in every version from 8.4 to 11.x.
    argv.append(f"--memPoolSize=workspace:{max(1, settings.workspace_bytes // MiB)}")
    if settings.strongly_typed:
        if version and version[0] >= 11:
            pass  # strongly typed is the only mode; --stronglyTyped is a deprecated no-op there
        elif version >= (10,):
            argv.append("--stronglyTyped")
        else:
            raise EngineError(f"trtexec of TensorRT {tensorrt_version or '(unknown version)'} cannot build "
                              "strongly typed networks (10.0+).")
    elif settings.precision in (Precision.FP16, Precision.INT8):
        argv.append("--fp16")
    if settings.precision == Precision.INT8 and not settings.strongly_typed:
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
    if settings.fp32_pins and not settings.strongly_typed:
        nodes = list(dict.fromkeys(node for node, _ in settings.fp32_pins))
        for node in nodes:
            _check_name(node, "FP32-pinned node")
        argv.append("--precisionConstraints=obey")
        argv.append("--layerPrecisions=" + ",".join(f"{n}:fp32" for n in nodes))
        # trtexec matches exact TensorRT layer names, and a list of types must have the layer's output count
        # (sampleEngines.cpp setLayerOutputTypes throws otherwise); one type is applied to every output, so
        # that form is used, and only for nodes whose outputs are all float (an INT32 output must stay INT32).
        typed = [n for n in nodes if float_nodes is None or n in float_nodes]
        if typed:
            argv.append("--layerOutputTypes=" + ",".join(f"{n}:fp32" for n in typed))
    if settings.dla_core is not None:
        argv += [f"--useDLACore={int(settings.dla_core)}", "--allowGPUFallback"]
    if settings.optimization_level is not None and version >= (8, 6):
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


def ignored_options(settings: tensorrt_api.BuildSettings, tensorrt_version: str | None) -> list[str]:
    """Warnings for options this trtexec cannot take (the Python builder warns the same way)."""
    version = tensorrt_api.version_tuple(tensorrt_version or "")
    if settings.optimization_level is not None and not version >= (8, 6):
        known = f"TensorRT {tensorrt_version}" if version else "a trtexec of unknown version"
        return [f"{known} has no builder optimization level (8.6+); --builder-optimization-level is ignored"]
    return []


def _float_nodes(onnx_path: Path, nodes: Sequence[str]) -> set[str] | None:
    """The pinned nodes whose outputs are all float (FP32/FP16) in the ONNX graph; None if it cannot be read."""
    try:
        import onnx

        model = onnx.load(str(onnx_path), load_external_data=False)
        inferred = onnx.shape_inference.infer_shapes(model)
    except Exception:  # noqa: BLE001 - then every pinned node gets an output type, as before
        return None
    floats = {onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16}
    types = {v.name: v.type.tensor_type.elem_type
             for v in [*inferred.graph.value_info, *inferred.graph.output, *inferred.graph.input]}
    wanted = set(nodes)
    return {n.name for n in inferred.graph.node
            if n.name in wanted and all(types.get(out) in floats for out in n.output)}


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
    nodes = [node for node, _ in settings.fp32_pins] if not settings.strongly_typed else []
    float_nodes = _float_nodes(onnx, nodes) if nodes else None
    for warning in ignored_options(settings, tensorrt_version):
        reporter.warn(warning)
    calibration = settings.calibration
    calib = calibration.cache_path if calibration is not None and calibration.cache_path.is_file() else None
    cache_copy, cache_output = None, None
    if timing_cache is not None:
        cache_output = AtomicOutput(timing_cache)  # trtexec's copy, beside it, renamed over it after the build
        cache_copy = cache_output.tmp
        if timing_cache.exists():
            shutil.copyfile(timing_cache, cache_copy)
        else:
            cache_copy.unlink()  # trtexec creates it (the name is this run's own: pid and random)
            reporter.info(f"timing cache {timing_cache} does not exist yet: it will be created")
    log_path = plan_out.parent / LOG_NAME
    argv = trtexec_argv(trtexec, onnx, plan_out, settings, timing_cache=cache_copy, calibration_cache=calib,
                        float_nodes=float_nodes, tensorrt_version=tensorrt_version)
    try:
        done = _run(argv, log_path)
        if done.returncode != 0 and cache_copy is not None and timing_cache is not None and timing_cache.exists():
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
        if cache_copy is not None and timing_cache is not None and cache_copy.is_file() and cache_copy.stat().st_size:
            cache_output.commit()  # type: ignore[union-attr]  # set with cache_copy
        if nodes:
            reporter.info(f"kept {len(nodes)} node(s) in FP32 (--layerPrecisions): {', '.join(nodes[:8])}")
            reporter.warn(
                "trtexec pins TensorRT layers by exact name, so a layer TensorRT adds for one of these nodes "
                "(named with a suffix) stays unpinned; the Python builder also pins by output tensor, and "
                "TensorRT 10+ builds model_fp16.onnx (the nodes FP32 in the graph) unless --weak-typing"
            )
    finally:
        if cache_output is not None:
            cache_output.discard()
