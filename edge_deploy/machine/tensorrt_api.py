"""The one module that imports `tensorrt` and `pycuda`.

Every TensorRT Python API version difference lives here (8.5/8.6 of JetPack
5.1/6.0, 10.x of JetPack 6.1+/7 and 11.x of JetPack 7.2.2+; trtexec's flag
differences are in trtexec.py). Checked against NVIDIA/TensorRT's bindings,
python/src/infer/pyCore.cpp and pyGraph.cpp, and include/NvInfer.h on the
release/8.5, 8.6, 10.0, 10.3, 10.16, 11.0 and 11.1 branches:

- network creation: 8.x needs the EXPLICIT_BATCH creation flag for ONNX; in 10.x
  explicit batch is the only mode and that flag is deprecated (pass 0), and
  STRONGLY_TYPED (value 1 in 10.x) makes a strongly typed network; 11.x has no
  EXPLICIT_BATCH, every network is strongly typed and STRONGLY_TYPED (value 0
  there, "deprecated and ignored" in NvInfer.h) is not passed;
- `builder_optimization_level` exists from 8.6 only;
- 11.x removed weak typing: BuilderFlag FP16/INT8/OBEY_/PREFER_PRECISION_CONSTRAINTS,
  ILayer.precision/set_output_type, int8_calibrator and the INT8 calibrators.

Which path a build takes (`strongly_typed`): 8.5/8.6 the builder flags (FP16,
INT8 with a calibrator, FP32 pins with OBEY_PRECISION_CONSTRAINTS) on model.onnx;
10.x FP16 the strongly typed network from model_fp16.onnx (no precision flags:
the graph's types decide), unless --weak-typing or DLA, which keep the flag
path, as do FP32 and INT8; 11.x strongly typed only (FP16 from model_fp16.onnx,
FP32 from model.onnx; INT8 needs explicit Q/DQ quantization and is refused).

Every line shares the rest: `set_memory_pool_limit(WORKSPACE, n)`, the timing
cache calls, the DLA settings, and the named I/O tensor API (`num_io_tensors`,
`get_tensor_*`, `set_input_shape`, `set_tensor_address`, `execute_async_v3`).

The rest of edge-deploy speaks in `BuildSettings`, `TensorInfo` and NumPy
arrays; `engine.py` decides what to build, this module only talks to TensorRT.
Tests drive `TensorRT` with a recording stand-in module (TensorRT cannot be
installed without an NVIDIA GPU).
"""
from __future__ import annotations

import importlib
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator

from ..errors import EngineError, one_line
from ..core.fsutil import write_bytes_atomic
from ..artifact.precision import Precision
from ..core.deps import require

if TYPE_CHECKING:
    import numpy as np

# TensorRT DataType member names -> Triton datatype names (the manifest's vocabulary).
_TRITON_DTYPE = {
    "FLOAT": "FP32",
    "HALF": "FP16",
    "BF16": "BF16",
    "INT8": "INT8",
    "UINT8": "UINT8",
    "INT32": "INT32",
    "INT64": "INT64",
    "BOOL": "BOOL",
    "FP8": "FP8",
}


@dataclass
class Calibration:
    """INT8 calibration input: batches of the model's preprocessed images and a cache file."""

    input_name: str
    batch_size: int
    batches: Callable[[], Iterator[Any]]  # yields float32 arrays of shape [batch_size, C, H, W]
    cache_path: Path


@dataclass
class BuildSettings:
    """A version-neutral description of one engine build (made by engine.py from the user's options)."""

    precision: Precision  # fp16 | fp32 | int8 (a str enum: compares equal to those strings)
    workspace_bytes: int
    profile: dict[str, tuple[list[int], list[int], list[int]]] = field(default_factory=dict)
    # (ONNX node name, its output tensor name or "") for each node pinned to FP32 (weakly typed builds only)
    fp32_pins: list[tuple[str, str]] = field(default_factory=list)
    strongly_typed: bool = False  # the graph's types decide precision; no precision flags or pins
    dla_core: int | None = None
    optimization_level: int | None = None
    timing_cache: bytes | None = None  # None: no timing cache; b"": start a new one
    calibration: Calibration | None = None


@dataclass
class BuildResult:
    """What a build produced: the serialized plan and what the caller must report or save."""

    plan: bytes
    timing_cache: bytes | None
    pinned_layers: list[str]
    unmatched_nodes: list[str]
    warnings: list[str]


@dataclass
class TensorInfo:
    """One engine I/O tensor, described with the manifest's vocabulary."""

    name: str
    is_input: bool
    datatype: str  # Triton name: FP32, FP16, ...
    shape: list[int]  # -1 for dynamic axes
    profile: tuple[list[int], list[int], list[int]] | None = None  # (min, opt, max) of profile 0


@dataclass
class GpuInfo:
    name: str
    compute_capability: str
    cuda_driver: str | None


_LIBRARY_MISMATCH = re.compile(r"expecting library version\s+([\w.]+)\s+got\s+([\w.]+?)[,.]?(?:\s|$)")


def _import(name: str) -> Any | None:
    try:
        return importlib.import_module(name)
    except Exception:  # noqa: BLE001 - a broken install (missing libnvinfer.so) counts as absent
        return None


def module_version() -> str | None:
    """tensorrt.__version__ when the Python module imports, else None."""
    trt = _import("tensorrt")
    return getattr(trt, "__version__", None) if trt is not None else None


def has_pycuda() -> bool:
    """True when pycuda.driver imports (needed to run a plan, not to build one)."""
    return _import("pycuda.driver") is not None


_FACADES: dict[int, "TensorRT"] = {}


def load() -> "TensorRT":
    """The installed TensorRT (one facade, hence one logger, per process), or MissingDependencyError."""
    module = require("tensorrt", "building a TensorRT plan with the Python API")
    # TensorRT keeps the first logger it is given process-wide; reuse ours.
    facade = _FACADES.get(id(module))
    if facade is None or facade.trt is not module:
        facade = _FACADES[id(module)] = TensorRT(module)
    return facade


def gpu_info() -> GpuInfo | None:
    """Name and compute capability of GPU 0 via pycuda (no context is created), or None."""
    cuda = _import("pycuda.driver")
    if cuda is None:
        return None
    try:
        cuda.init()
        device = cuda.Device(0)
        major, minor = device.compute_capability()
        driver = cuda.get_driver_version()  # e.g. 12020
        return GpuInfo(
            name=str(device.name()),
            compute_capability=f"{major}.{minor}",
            cuda_driver=f"{driver // 1000}.{(driver % 1000) // 10}",
        )
    except Exception:  # noqa: BLE001 - no GPU / driver: report nothing
        return None


def dla_core_count() -> int | None:
    """builder.num_DLA_cores from TensorRT, or None when TensorRT is absent."""
    trt = _import("tensorrt")
    if trt is None:
        return None
    try:
        return int(load().builder().num_DLA_cores)
    except Exception:  # noqa: BLE001
        return None


def version_tuple(version: str) -> tuple[int, ...]:
    """(10, 3, 0) from '10.3.0.26' (leading numeric parts only; () when there are none)."""
    parts = []
    for piece in version.split("."):
        digits = "".join(ch for ch in piece if ch.isdigit())
        if not digits:
            break
        parts.append(int(digits))
    return tuple(parts)


SUPPORTED = ((8, 5), (12, 0))  # [lowest, first unsupported): JetPack 5.1 to 7.2


def check_supported(version: str | None) -> None:
    """One-line EngineError when edge-deploy cannot build with TensorRT `version` (None: unknown, allowed)."""
    if not version:
        return
    found = version_tuple(version)[:2]
    if SUPPORTED[0] <= found < SUPPORTED[1]:
        return
    if found >= SUPPORTED[1]:
        why = "it is newer than the TensorRT lines edge-deploy knows"
    else:
        why = "it lacks the named I/O tensor API edge-deploy uses"
    raise EngineError(
        f"TensorRT {version} is not supported for building plans: {why}; "
        "use TensorRT 8.5 to 11.x (JetPack 5.1 to 7.2), e.g. trtexec of that version via $TRTEXEC."
    )


# ONNX ops that only newer TensorRT ONNX parsers import: op -> (the first TensorRT that does, where that is written).
# Rows are per op, never per model family: a model is checked by the ops its graph holds.
OP_MIN_TENSORRT: dict[str, tuple[tuple[int, int], str]] = {
    # CLRNet's ROIGather (grid_sample). onnx-tensorrt docs/operators.md lists GridSample as "N" on its
    # release branch 8.4-GA and "Y" (FP32, FP16) from 8.5-GA on.
    "GridSample": ((8, 5), "onnx-tensorrt's operator table (docs/operators.md) lists it from release 8.5-GA"),
}


def op_refusal(ops: Iterable[str], version: str | None) -> str | None:
    """Why TensorRT `version` cannot parse one of the ONNX `ops` (one line), or None (an unknown version passes)."""
    if not version:
        return None
    found = version_tuple(version)[:2]
    for op in sorted(set(ops)):
        if op in OP_MIN_TENSORRT and found < OP_MIN_TENSORRT[op][0]:
            (major, minor), source = OP_MIN_TENSORRT[op]
            return (f"a model with the ONNX op {op} cannot be built with TensorRT {version}: TensorRT parses {op} "
                    f"from {major}.{minor} ({source}); use TensorRT {major}.{minor} or newer.")
    return None


def check_ops(ops: Iterable[str], version: str | None) -> None:
    """One-line EngineError when TensorRT `version` cannot parse one of the ONNX `ops` (OP_MIN_TENSORRT)."""
    refusal = op_refusal(ops, version)
    if refusal:
        raise EngineError(refusal)


def strongly_typed(version: str | None, precision: Precision, *, weak_typing: bool = False, dla: bool = False) -> bool:
    """The builder path for TensorRT `version`: True = strongly typed network, False = builder flags.

    One-line EngineError for what TensorRT 11 cannot do: INT8 (its calibrators are gone; INT8
    is explicit quantization, Q/DQ nodes from e.g. NVIDIA ModelOpt) and --weak-typing.
    """
    major = (version_tuple(version or "") or (0,))[0]
    if major >= 11:
        if precision == Precision.INT8:
            raise EngineError(
                f"--precision int8 is not possible with TensorRT {version}: TensorRT 11 removed implicit INT8 "
                "(calibrators and the INT8 flag) in favour of explicit quantization (Q/DQ nodes, e.g. from NVIDIA "
                "ModelOpt), which edge-deploy does not make; use --precision fp16, or TensorRT 10.x for INT8."
            )
        if weak_typing:
            raise EngineError(
                f"--weak-typing is not possible with TensorRT {version}: TensorRT 11 builds strongly typed "
                "networks only; drop --weak-typing (the plan is built from model_fp16.onnx)."
            )
        return True
    if major == 10:
        # DLA keeps the flag path on 10.x: it is the DLA route JetPack 6 documents and has shipped with.
        return precision == Precision.FP16 and not weak_typing and not dla
    return False  # 8.5/8.6 have no strongly typed networks; an unknown version gets the flags every line has


class TensorRT:
    """A thin, version-aware facade over the `tensorrt` module (and pycuda for running engines)."""

    def __init__(self, module: Any) -> None:
        self.trt = module
        self.version: str = str(getattr(module, "__version__", "0"))
        self.major = (version_tuple(self.version) or (0,))[0]
        self.messages: list[tuple[str, str]] = []
        self.logger = self._make_logger()

    # -- logging ------------------------------------------------------------
    def _make_logger(self) -> Any:
        trt: Any = self.trt
        sink = self.messages
        severity = trt.ILogger.Severity
        errors = {severity.ERROR, severity.INTERNAL_ERROR}

        class _Collecting(trt.ILogger):
            def __init__(self) -> None:
                trt.ILogger.__init__(self)

            def log(self, sev: Any, msg: str) -> None:
                if sev in errors:
                    sink.append(("error", str(msg)))
                elif sev == severity.WARNING:
                    sink.append(("warning", str(msg)))

        return _Collecting()

    def _first_error(self, since: int = 0) -> str | None:
        for level, msg in self.messages[since:]:
            if level == "error":
                return " ".join(msg.split())
        return None

    def builder(self) -> Any:
        return self.trt.Builder(self.logger)

    # -- build ---------------------------------------------------------------
    def _network_flags(self, strong: bool) -> int:
        flags = self.trt.NetworkDefinitionCreationFlag
        if self.major >= 11:
            return 0  # always strongly typed; STRONGLY_TYPED is deprecated and ignored (NvInfer.h, release/11.0)
        if self.major == 10:
            # explicit batch is the only mode (EXPLICIT_BATCH deprecated); STRONGLY_TYPED = 1 (NvInfer.h, 10.x)
            return 1 << int(flags.STRONGLY_TYPED) if strong else 0
        return 1 << int(flags.EXPLICIT_BATCH)

    def _pin_fp32(self, network: Any, pins: list[tuple[str, str]]) -> tuple[list[str], list[str]]:
        # The ONNX parser names a layer after its node (extra layers of one node get suffixes), so a
        # layer is matched by its name or by producing the node's output tensor.
        trt = self.trt
        floats = (trt.float32, trt.float16)
        wanted_nodes = {node for node, _ in pins}
        node_of_tensor = {tensor: node for node, tensor in pins if tensor}
        pinned: list[str] = []
        matched_nodes: set[str] = set()
        for i in range(network.num_layers):
            layer = network.get_layer(i)
            outputs = [layer.get_output(j) for j in range(layer.num_outputs)]
            by_node = layer.name in wanted_nodes
            by_tensor = [t.name for t in outputs if t.name in node_of_tensor]
            if not (by_node or by_tensor):
                continue
            float_outputs = [j for j, t in enumerate(outputs) if t.dtype in floats]
            if not float_outputs:
                continue  # shape/index layers: nothing to pin
            layer.precision = trt.float32
            for j in float_outputs:
                layer.set_output_type(j, trt.float32)
            pinned.append(layer.name)
            if by_node:
                matched_nodes.add(layer.name)
            matched_nodes.update(node_of_tensor[name] for name in by_tensor)
        unmatched = [node for node, _ in pins if node not in matched_nodes]
        return pinned, unmatched

    def _attach_timing_cache(self, config: Any, data: bytes, warnings: list[str]) -> Any:
        cache = None
        problem = None
        try:
            cache = config.create_timing_cache(data)
            if cache is None:
                problem = "TensorRT could not read it"
            elif not config.set_timing_cache(cache, False):
                problem = "it was made by another TensorRT version or device"
        except Exception as exc:  # noqa: BLE001 - a corrupt cache must never fail the build
            problem = one_line(exc)
        if problem is not None:
            warnings.append(f"the timing cache is not usable ({problem}); starting a new one")
            cache = config.create_timing_cache(b"")
            config.set_timing_cache(cache, False)
        return cache

    def build(self, onnx_path: Path, settings: BuildSettings) -> BuildResult:
        """Parse the ONNX file and build a serialized engine according to `settings`."""
        check_supported(self.version)
        trt = self.trt
        strong = settings.strongly_typed
        if self.major >= 11 and not strong:
            raise EngineError(f"TensorRT {self.version} builds strongly typed networks only; this build asked for "
                              "builder precision flags (an edge-deploy bug: please report it).")
        if strong and self.major < 10:
            raise EngineError(f"TensorRT {self.version} has no strongly typed networks (10.0+).")
        start = len(self.messages)
        warnings: list[str] = []
        builder = self.builder()
        network = builder.create_network(self._network_flags(strong))
        parser = trt.OnnxParser(network, self.logger)
        if not parser.parse_from_file(str(onnx_path)):
            errors = [" ".join(str(parser.get_error(i)).split()) for i in range(parser.num_errors)]
            raise EngineError(
                f"TensorRT {self.version} cannot parse {onnx_path}: {errors[0] if errors else 'unknown error'}; "
                "re-export the model (`edge-deploy convert --target onnx`) or update TensorRT."
            )
        config = builder.create_builder_config()
        config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, int(settings.workspace_bytes))

        # Strongly typed: the ONNX graph's tensor types decide (model_fp16.onnx keeps the FP16 report's nodes
        # FP32 in the graph itself), and TensorRT forbids precision flags and layer precisions.
        if not strong and settings.precision in (Precision.FP16, Precision.INT8):
            config.set_flag(trt.BuilderFlag.FP16)
        if not strong and settings.precision == Precision.INT8:
            config.set_flag(trt.BuilderFlag.INT8)

        pinned: list[str] = []
        unmatched: list[str] = []
        if settings.fp32_pins and not strong:
            pinned, unmatched = self._pin_fp32(network, settings.fp32_pins)
            if pinned:
                config.set_flag(trt.BuilderFlag.OBEY_PRECISION_CONSTRAINTS)

        if settings.dla_core is not None:
            config.default_device_type = trt.DeviceType.DLA
            config.DLA_core = int(settings.dla_core)
            config.set_flag(trt.BuilderFlag.GPU_FALLBACK)

        profile = None
        if settings.profile:
            profile = builder.create_optimization_profile()
            for name, (low, opt, high) in settings.profile.items():
                profile.set_shape(name, tuple(low), tuple(opt), tuple(high))
            config.add_optimization_profile(profile)

        if settings.optimization_level is not None:
            if hasattr(config, "builder_optimization_level"):
                config.builder_optimization_level = int(settings.optimization_level)
            else:
                warnings.append(
                    f"TensorRT {self.version} has no builder optimization level (8.6+); the option is ignored"
                )

        calibrator = None
        if settings.precision == Precision.INT8 and settings.calibration is not None and not strong:
            calibrator = make_calibrator(trt, settings.calibration)
            config.int8_calibrator = calibrator
            if profile is not None:
                config.set_calibration_profile(profile)

        cache = None
        if settings.timing_cache is not None:
            cache = self._attach_timing_cache(config, settings.timing_cache, warnings)

        serialized = builder.build_serialized_network(network, config)
        if serialized is None:
            reason = self._first_error(start) or "no error message from TensorRT"
            raise EngineError(f"TensorRT {self.version} could not build the engine: {reason}")
        cache_bytes = None
        if cache is not None:
            cache_bytes = bytes(memoryview(config.get_timing_cache().serialize()))
        return BuildResult(
            plan=bytes(memoryview(serialized)),
            timing_cache=cache_bytes,
            pinned_layers=pinned,
            unmatched_nodes=unmatched,
            warnings=warnings,
        )

    # -- deserialize & inspect ---------------------------------------------
    def deserialize(self, plan: bytes, where: str = "the plan", dla_core: int | None = None) -> Any:
        """An ICudaEngine, or a one-line EngineError telling a corrupt plan from one of another version.

        dla_core: the DLA core a DLA plan was built for (IRuntime's default is -1; trtexec sets it too).
        """
        start = len(self.messages)
        runtime = self.trt.Runtime(self.logger)
        if dla_core is not None:
            runtime.DLA_core = int(dla_core)
        try:
            engine = runtime.deserialize_cuda_engine(plan)
        except Exception as exc:  # noqa: BLE001 - some versions raise instead of returning None
            self.messages.append(("error", str(exc)))
            engine = None
        if engine is None:
            raise EngineError(self._explain_deserialize_failure(where, self._first_error(start)))
        return engine

    def _explain_deserialize_failure(self, where: str, reason: str | None) -> str:
        text = (reason or "").lower()
        artifact = str(Path(where).parent) if where.endswith(".plan") else "ARTIFACT"
        rebuild = f"rebuild it here with `edge-deploy convert {artifact} --force`"
        # TensorRT's runtime: "The engine plan file is not compatible with this version of TensorRT,
        # expecting library version X got Y, please rebuild." (X: this library, Y: the plan's builder)
        other = _LIBRARY_MISMATCH.search(reason or "")
        if other:
            return (f"{where} was built with TensorRT {other.group(2)}, but this machine has TensorRT "
                    f"{other.group(1)}; {rebuild}.")
        if "version tag does not match" in text or "version" in text and "serializ" in text:
            return (
                f"{where} was built with another TensorRT version than this machine's {self.version} "
                f"({reason}); {rebuild}."
            )
        return (
            f"{where} is not a TensorRT plan this machine can load ({reason or 'TensorRT rejected it'}); "
            f"it is corrupt or was built elsewhere: {rebuild}."
        )

    def _dtype_name(self, dtype: Any) -> str:
        name = getattr(dtype, "name", str(dtype)).split(".")[-1].upper()
        return _TRITON_DTYPE.get(name, name)

    @staticmethod
    def device_memory_bytes(engine: Any) -> int | None:
        """The device memory an execution context of `engine` takes (activations, scratch), or None when the bindings
        do not say: `device_memory_size_v2` from TensorRT 10.1 (the only one in 11), `device_memory_size` before."""
        for name in ("device_memory_size_v2", "device_memory_size"):
            value = getattr(engine, name, None)
            if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
                return value
        return None

    def io_tensors(self, engine: Any) -> list[TensorInfo]:
        """The engine's inputs and outputs (names, Triton dtypes, shapes, profile-0 ranges)."""
        infos: list[TensorInfo] = []
        for name in self._tensor_names(engine):
            is_input = self._is_input(engine, name)
            shape = [int(d) for d in engine.get_tensor_shape(name)]
            profile: tuple[list[int], list[int], list[int]] | None = None
            if is_input and -1 in shape:
                low, opt, high = ([int(d) for d in dims] for dims in engine.get_tensor_profile_shape(name, 0))
                profile = (low, opt, high)
            dtype = self._dtype_name(engine.get_tensor_dtype(name))
            infos.append(TensorInfo(name, is_input, dtype, shape, profile))
        return infos

    @staticmethod
    def _tensor_names(engine: Any) -> list[str]:
        return [engine.get_tensor_name(i) for i in range(engine.num_io_tensors)]

    def _is_input(self, engine: Any, name: str) -> bool:
        return engine.get_tensor_mode(name) == self.trt.TensorIOMode.INPUT

    # -- run (pycuda) ----------------------------------------------------------
    def run(self, engine: Any, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Run the engine once on host arrays with pycuda; returns host output arrays by name."""
        import numpy as np


        cuda = require("pycuda.driver", "running a TensorRT plan for verification")
        trt = self.trt
        ctx = _primary_context(cuda)
        ctx.push()
        buffers: list[Any] = []

        def bind(context: Any, name: str, host: Any) -> Any:
            buffer = cuda.mem_alloc(max(host.nbytes, 1))
            buffers.append(buffer)
            context.set_tensor_address(name, int(buffer))
            return buffer

        try:
            context = engine.create_execution_context()
            stream = cuda.Stream()
            names = self._tensor_names(engine)
            outputs: list[tuple[str, Any, Any]] = []
            for name in (n for n in names if self._is_input(engine, n)):
                host = np.ascontiguousarray(inputs[name], dtype=trt.nptype(engine.get_tensor_dtype(name)))
                context.set_input_shape(name, host.shape)
                cuda.memcpy_htod(bind(context, name, host), host)
            for name in (n for n in names if not self._is_input(engine, n)):
                shape = tuple(int(d) for d in context.get_tensor_shape(name))  # known once inputs are shaped
                host = np.empty(shape, dtype=trt.nptype(engine.get_tensor_dtype(name)))
                outputs.append((name, host, bind(context, name, host)))
            if not context.execute_async_v3(stream.handle):
                raise EngineError(
                    f"TensorRT {self.version} failed to run the plan: {self._first_error() or 'no message'}"
                )
            stream.synchronize()
            for _, host, buffer in outputs:
                cuda.memcpy_dtoh(host, buffer)
            del context
            return {name: host for name, host, _ in outputs}
        finally:
            for buffer in buffers:
                buffer.free()
            ctx.pop()


def _primary_context(cuda: Any) -> Any:
    """GPU 0's primary CUDA context: the one TensorRT (CUDA runtime API) uses, so buffers and engines agree."""
    cuda.init()
    return cuda.Device(0).retain_primary_context()


def make_calibrator(trt: Any, calibration: Calibration) -> Any:
    """An IInt8EntropyCalibrator2 feeding `calibration.batches()` through device memory (pycuda)."""
    import numpy as np


    class _EntropyCalibrator(trt.IInt8EntropyCalibrator2):
        def __init__(self) -> None:
            trt.IInt8EntropyCalibrator2.__init__(self)
            self._batches = calibration.batches()
            self._device: Any = None  # pycuda's DeviceAllocation and Context, made on the first batch
            self._context: Any = None
            self.count = 0

        def get_batch_size(self) -> int:
            return calibration.batch_size

        def get_batch(self, names: list[str]) -> list[int] | None:
            batch = next(self._batches, None)
            if batch is None:
                return None
            host = np.ascontiguousarray(batch, dtype=np.float32)
            cuda = require("pycuda.driver", "INT8 calibration")
            if self._context is None:
                self._context = _primary_context(cuda)
            self._context.push()
            try:
                if self._device is None:
                    self._device = cuda.mem_alloc(host.nbytes)
                cuda.memcpy_htod(self._device, host)
            finally:
                self._context.pop()
            self.count += 1
            return [int(self._device)]

        def read_calibration_cache(self) -> bytes | None:
            path = calibration.cache_path
            return path.read_bytes() if path.is_file() and path.stat().st_size else None

        def write_calibration_cache(self, cache: Any) -> None:
            path = calibration.cache_path
            write_bytes_atomic(path, bytes(memoryview(cache)))

    return _EntropyCalibrator()
