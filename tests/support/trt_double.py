"""A recording stand-in for the `tensorrt` Python module (tests only).

TensorRT cannot be installed here: there is no NVIDIA GPU, and while PyPI's x86_64
tensorrt bindings wheels are real, the libraries (tensorrt-cu*-libs) are source packages
that download from NVIDIA at install time, which this environment cannot reach. So the
engine stage is tested against this double at the one module boundary,
edge_deploy.machine.tensorrt_api. It has only
the names the Python bindings of the given version have (NVIDIA/TensorRT
python/src/infer/pyCore.cpp per release branch: 8.5 has no
builder_optimization_level; 10.0 dropped STRICT_TYPES and max_workspace_size;
11 dropped the FP16/INT8 flags and INT8 calibrators); setting a builder-config
property the version lacks raises AttributeError as pybind11 does. It records every call
that configures a build, and lets a test choose the outcome (a plan, a failed
build, a corrupt or mismatched timing cache, a plan from another version:
b"PLAN<other>" fails the serialization-version check, b"PLANLIB<version>" the
library-version check with TensorRT's "expecting library version X got Y").
NetworkDefinitionCreationFlag values follow include/NvInfer.h per branch
(`creation_flags`); an 11.x double has no EXPLICIT_BATCH, no weak-typing flags,
no ILayer.precision/set_output_type, no int8_calibrator and no calibrators.
It does not imitate what TensorRT computes: real builds are in
tests/engine/test_tensorrt.py, which runs on a Jetson. `FakePycuda` does the same for
`pycuda.driver` (device memory is host bytes). The fixtures that install these
doubles are in tests/support/jetson_fixtures.py.
"""
from __future__ import annotations

import sys
import types
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from edge_deploy.machine import tensorrt_api
from edge_deploy.core.progress import Reporter


class _Enum:
    """An enum member: compares by identity, has .name like pybind11 enums."""

    def __init__(self, kind: str, name: str, value: int = 0) -> None:
        self.kind, self.name, self.value = kind, name, value

    def __int__(self) -> int:
        return self.value

    def __repr__(self) -> str:
        return f"{self.kind}.{self.name}"


def _enum(kind: str, *names: str) -> types.SimpleNamespace:
    return types.SimpleNamespace(**{n: _Enum(kind, n, i) for i, n in enumerate(names)})


def creation_flags(major_minor: tuple[int, ...]) -> list[str]:
    """NetworkDefinitionCreationFlag members in value order (0, 1, ...), as include/NvInfer.h defines them.

    release/8.5, 8.6: EXPLICIT_BATCH = 0, EXPLICIT_PRECISION = 1; 10.0-10.8: EXPLICIT_BATCH = 0
    (deprecated), STRONGLY_TYPED = 1; 10.9-10.16 add PREFER_JIT_PYTHON_PLUGINS = 2 and
    PREFER_AOT_PYTHON_PLUGINS = 3; 11.0/11.1 drop EXPLICIT_BATCH: STRONGLY_TYPED = 0 ("deprecated:
    always enabled", kept for API compatibility and ignored), PREFER_JIT = 1, PREFER_AOT = 2.
    """
    if major_minor < (10, 0):
        return ["EXPLICIT_BATCH", "EXPLICIT_PRECISION"]
    plugins = ["PREFER_JIT_PYTHON_PLUGINS", "PREFER_AOT_PYTHON_PLUGINS"] if major_minor >= (10, 9) else []
    if major_minor < (11, 0):
        return ["EXPLICIT_BATCH", "STRONGLY_TYPED", *plugins]
    return ["STRONGLY_TYPED", *plugins]


@dataclass
class Tensor:
    name: str
    dtype: Any


@dataclass
class StronglyTypedLayer:
    """ILayer of TensorRT 11 (pyGraph.cpp, release/11.0): no precision, no set_output_type."""

    name: str
    outputs: list[Tensor]
    record: list = field(default_factory=list)

    @property
    def num_outputs(self) -> int:
        return len(self.outputs)

    def get_output(self, i: int) -> Tensor:
        return self.outputs[i]


@dataclass
class Layer(StronglyTypedLayer):
    """ILayer of TensorRT 8.5 to 10.x, with the layer precision calls (deprecated in 10.12, gone in 11.0)."""

    @property
    def precision(self) -> Any:
        return None

    @precision.setter
    def precision(self, value: Any) -> None:
        self.record.append(("layer.precision", self.name, value.name))

    def set_output_type(self, index: int, dtype: Any) -> None:
        self.record.append(("layer.set_output_type", self.name, index, dtype.name))


@dataclass
class FakeEngineSpec:
    """The I/O a deserialized engine reports: [(name, is_input, dtype name, shape, profile or None)].

    `compute`, when given, is what the engine "runs": {input: array} -> {output: array}
    (tests pass ONNX Runtime, perturbed or not), reading and writing fake device memory.
    """

    tensors: list[tuple[str, bool, str, tuple, tuple | None]]
    compute: Any = None
    memory: Any = None  # the FakePycuda whose allocations the engine reads and writes
    device_memory_bytes: int = 48 * 2**20  # what an execution context would take on the device


def make_tensorrt(
    version: str = "8.6.1",
    *,
    layers: list[tuple[str, list[tuple[str, str]]]] | None = None,
    dla_cores: int = 2,
    build_fails: bool = False,
    engine: FakeEngineSpec | None = None,
) -> types.ModuleType:
    """A `tensorrt` stand-in of `version`; `.calls` lists what a build configured, in order."""
    calls: list[tuple] = []
    trt = types.ModuleType("tensorrt")
    trt.__version__ = version
    trt.calls = calls
    major_minor = tuple(int(p) for p in version.split(".")[:2])

    dtypes = _enum("DataType", "FLOAT", "HALF", "INT8", "INT32", "BOOL")
    trt.DataType = dtypes
    trt.float32, trt.float16, trt.int8, trt.int32, trt.bool = (
        dtypes.FLOAT, dtypes.HALF, dtypes.INT8, dtypes.INT32, dtypes.BOOL)
    trt.nptype = lambda dt: {"FLOAT": "float32", "HALF": "float16", "INT32": "int32"}[dt.name]
    # Member lists as python/src/infer/pyCore.cpp of NVIDIA/TensorRT binds them (release/8.5, 8.6, 10.x, 11.x):
    # 10.0 removed STRICT_TYPES and EXPLICIT_PRECISION; 11 removed the weak-typing flags and EXPLICIT_BATCH.
    weakly_typed = major_minor < (11, 0)
    builder_flags = ["DEBUG", "GPU_FALLBACK", "REFIT"]
    if weakly_typed:
        builder_flags += ["FP16", "INT8", "OBEY_PRECISION_CONSTRAINTS", "PREFER_PRECISION_CONSTRAINTS"]
    if major_minor < (10, 0):
        builder_flags.append("STRICT_TYPES")
    trt.BuilderFlag = _enum("BuilderFlag", *builder_flags)
    trt.MemoryPoolType = _enum("MemoryPoolType", "WORKSPACE", "DLA_MANAGED_SRAM", "DLA_LOCAL_DRAM", "DLA_GLOBAL_DRAM")
    trt.DeviceType = _enum("DeviceType", "GPU", "DLA")
    trt.TensorIOMode = _enum("TensorIOMode", "NONE", "INPUT", "OUTPUT")
    flag_names = creation_flags(major_minor)
    trt.NetworkDefinitionCreationFlag = _enum("NetworkDefinitionCreationFlag", *flag_names)

    class ILogger:
        Severity = _enum("Severity", "INTERNAL_ERROR", "ERROR", "WARNING", "INFO", "VERBOSE")

        def __init__(self) -> None:
            pass

    trt.ILogger = ILogger
    layer_specs = layers if layers is not None else [("conv1", [("conv1_out", "FLOAT")])]

    layer_class = Layer if weakly_typed else StronglyTypedLayer

    class Network:
        def __init__(self) -> None:
            self.layers = [layer_class(name, [Tensor(t, getattr(dtypes, d)) for t, d in outs], calls)
                           for name, outs in layer_specs]

        @property
        def num_layers(self) -> int:
            return len(self.layers)

        def get_layer(self, i: int) -> Layer:
            return self.layers[i]

    class TimingCache:
        def __init__(self, data: bytes) -> None:
            self.data = bytes(data)

        def serialize(self) -> bytes:
            return b"TIMING-CACHE:" + version.encode()

    # IBuilderConfig's settable properties that edge-deploy may touch; any other name fails like pybind11's
    # AttributeError (e.g. max_workspace_size, gone in 10.0; int8_calibrator, gone in 11).
    config_properties = {"default_device_type", "DLA_core"}
    if major_minor < (10, 0):
        config_properties.add("max_workspace_size")
    if major_minor >= (8, 6):
        config_properties.add("builder_optimization_level")
    if weakly_typed:
        config_properties.add("int8_calibrator")

    class Config:
        def __init__(self) -> None:
            object.__setattr__(self, "_cache", None)

        def __setattr__(self, name: str, value: Any) -> None:
            if name not in config_properties:
                raise AttributeError(f"'tensorrt.IBuilderConfig' object has no attribute '{name}' (TensorRT {version})")
            calls.append(("config." + name, getattr(value, "name", value)))
            object.__setattr__(self, name, value)

        def set_flag(self, flag: Any) -> None:
            calls.append(("config.set_flag", flag.name))

        def set_memory_pool_limit(self, pool: Any, size: int) -> None:
            calls.append(("config.set_memory_pool_limit", pool.name, size))

        def add_optimization_profile(self, profile: Any) -> int:
            calls.append(("config.add_optimization_profile",))
            return 0

        def set_calibration_profile(self, profile: Any) -> bool:
            if not weakly_typed:
                raise AttributeError("'tensorrt.IBuilderConfig' object has no attribute 'set_calibration_profile'")
            calls.append(("config.set_calibration_profile",))
            return True

        def create_timing_cache(self, data: bytes) -> TimingCache:
            if bytes(data).startswith(b"CORRUPT"):
                raise RuntimeError("[timingCache.cpp] Error Code 1: Serialization (timing cache is corrupt)")
            calls.append(("config.create_timing_cache", bytes(data)))
            return TimingCache(data)

        def set_timing_cache(self, cache: TimingCache, ignore_mismatch: bool) -> bool:
            ok = not cache.data.startswith(b"OTHER-VERSION")
            calls.append(("config.set_timing_cache", cache.data, ignore_mismatch, ok))
            if ok:
                object.__setattr__(self, "_cache", cache)
            return ok

        def get_timing_cache(self) -> TimingCache:
            return self._cache

    for name in config_properties:
        setattr(Config, name, None)  # class attributes: hasattr() is true exactly where TensorRT has them

    class Profile:
        def set_shape(self, name: str, low: tuple, opt: tuple, high: tuple) -> None:
            calls.append(("profile.set_shape", name, tuple(low), tuple(opt), tuple(high)))

    class Builder:
        def __init__(self, logger: Any) -> None:
            self.logger = logger
            self.num_DLA_cores = dla_cores

        def create_network(self, flags: int = 0) -> Network:
            if flags >> len(flag_names):
                raise TypeError(f"create_network(): flag bits {flags:#x} name no NetworkDefinitionCreationFlag")
            calls.append(("builder.create_network", flags))
            return Network()

        def create_builder_config(self) -> Config:
            return Config()

        def create_optimization_profile(self) -> Profile:
            return Profile()

        def build_serialized_network(self, network: Network, config: Config) -> bytes | None:
            calls.append(("builder.build_serialized_network",))
            if build_fails:
                self.logger.log(ILogger.Severity.ERROR,
                                "10: [optimizer.cpp::computeCosts::3728] Error Code 10: Internal Error "
                                "(Could not find any implementation for node conv1.)")
                return None
            return b"PLAN" + version.encode()

    class OnnxParser:
        def __init__(self, network: Network, logger: Any) -> None:
            self.num_errors = 0

        def parse_from_file(self, path: str) -> bool:
            calls.append(("parser.parse_from_file", path))
            return True

    class Engine:
        def __init__(self, spec: FakeEngineSpec) -> None:
            self.spec_obj = spec
            self.spec = {t[0]: t for t in spec.tensors}
            self.order = [t[0] for t in spec.tensors]

        @property
        def num_io_tensors(self) -> int:
            return len(self.order)

        def get_tensor_name(self, i: int) -> str:
            return self.order[i]

        def get_tensor_mode(self, name: str) -> Any:
            return trt.TensorIOMode.INPUT if self.spec[name][1] else trt.TensorIOMode.OUTPUT

        def get_tensor_dtype(self, name: str) -> Any:
            return getattr(dtypes, self.spec[name][2])

        def get_tensor_shape(self, name: str) -> tuple:
            return self.spec[name][3]

        def get_tensor_profile_shape(self, name: str, index: int) -> tuple:
            return self.spec[name][4]

        def create_execution_context(self) -> "Context":
            return Context(self)

    # ICudaEngine.device_memory_size: 8.x to 10.x (deprecated in 10.1, gone in 11); device_memory_size_v2 from 10.1.
    if major_minor < (11, 0):
        Engine.device_memory_size = property(lambda self: self.spec_obj.device_memory_bytes)  # type: ignore[attr-defined]
    if major_minor >= (10, 1):
        Engine.device_memory_size_v2 = property(lambda self: self.spec_obj.device_memory_bytes)  # type: ignore[attr-defined]

    class Context:
        def __init__(self, owner: Engine) -> None:
            self.engine, self.shapes, self.addresses = owner, {}, {}
            self.outputs: dict = {}

        def set_input_shape(self, name: str, shape: tuple) -> bool:
            self.shapes[name] = tuple(shape)
            return True

        def _inputs(self) -> dict:
            import numpy as np

            memory = self.engine.spec_obj.memory
            return {n: np.frombuffer(memory.buffers[self.addresses[n]], dtype=np.float32).reshape(s)
                    for n, s in self.shapes.items()}

        def get_tensor_shape(self, name: str) -> tuple:
            if name not in self.outputs:
                self.outputs = self.engine.spec_obj.compute(self._inputs())
            return self.outputs[name].shape

        def set_tensor_address(self, name: str, address: int) -> bool:
            self.addresses[name] = address
            return True

        def execute_async_v3(self, stream: int) -> bool:
            import numpy as np

            memory = self.engine.spec_obj.memory
            for name, value in self.engine.spec_obj.compute(self._inputs()).items():
                memory.buffers[self.addresses[name]][:] = np.ascontiguousarray(value, dtype=np.float32).tobytes()
            calls.append(("context.execute_async_v3", tuple(sorted(self.shapes.items()))))
            return True

    class Runtime:
        DLA_core = -1  # IRuntime's default: no DLA core chosen

        def __init__(self, logger: Any) -> None:
            object.__setattr__(self, "logger", logger)

        def __setattr__(self, name: str, value: Any) -> None:
            if name != "DLA_core":
                raise AttributeError(f"'tensorrt.Runtime' object has no attribute '{name}'")
            calls.append(("runtime.DLA_core", value))
            object.__setattr__(self, name, value)

        def deserialize_cuda_engine(self, data: bytes) -> Engine | None:
            data = bytes(data)
            if data.startswith(b"PLAN" + version.encode()) and engine is not None:
                return Engine(engine)
            if data.startswith(b"PLANLIB"):  # same plan format, another library build: TensorRT's check
                built = data[len(b"PLANLIB"):].decode()
                self.logger.log(ILogger.Severity.ERROR,
                                f"6: The engine plan file is not compatible with this version of TensorRT, "
                                f"expecting library version {version} got {built}, please rebuild.")
                self.logger.log(ILogger.Severity.ERROR,
                                "4: [runtime.cpp::deserializeCudaEngine::66] Error Code 4: Internal Error "
                                "(Engine deserialization failed.)")
                return None
            if data.startswith(b"PLAN"):
                self.logger.log(ILogger.Severity.ERROR,
                                "1: [stdArchiveReader.cpp::StdArchiveReader::42] Error Code 1: Serialization "
                                "(Serialization assertion stdVersionRead == kSERIALIZATION_VERSION failed."
                                "Version tag does not match. Note: Current Version: 236, Serialized Engine Version: 213)")
                return None
            self.logger.log(ILogger.Severity.ERROR,
                            "1: [stdArchiveReader.cpp::StdArchiveReader::32] Error Code 1: Serialization "
                            "(Serialization assertion magicTagRead == kMAGIC_TAG failed.Magic tag does not match)")
            return None

    class IInt8EntropyCalibrator2:
        def __init__(self) -> None:
            pass

    trt.Builder, trt.OnnxParser, trt.Runtime = Builder, OnnxParser, Runtime
    if weakly_typed:  # deprecated in 10.1, removed in 11
        trt.IInt8EntropyCalibrator2 = IInt8EntropyCalibrator2
    return trt


class FakePycuda:
    """Stand-in for `pycuda.driver` (no GPU here): device memory is host bytearrays keyed by address.

    Records context pushes/pops and frees so tests can check that run() leaves nothing behind.
    """

    def __init__(self) -> None:
        self.buffers: dict[int, bytearray] = {}
        self.freed: list[int] = []
        self.pushes = 0
        self.pops = 0
        self._next = 0x1000
        driver = self

        class Allocation:
            def __init__(self, size: int) -> None:
                self.address = driver._next
                driver._next += size + 256
                driver.buffers[self.address] = bytearray(size)

            def __int__(self) -> int:
                return self.address

            def free(self) -> None:
                driver.freed.append(self.address)

        class Context:
            def push(self) -> None:
                driver.pushes += 1

            def pop(self) -> None:
                driver.pops += 1

        class Device:
            def __init__(self, index: int) -> None:
                self.index = index

            def retain_primary_context(self) -> Context:
                return Context()

        class Stream:
            handle = 0

            def synchronize(self) -> None:
                pass

        self.Device, self.Stream, self._Allocation = Device, Stream, Allocation

    def init(self) -> None:
        pass

    def mem_alloc(self, size: int):
        return self._Allocation(size)

    def memcpy_htod(self, dest, host) -> None:
        self.buffers[int(dest)][:] = bytes(memoryview(host).cast("B"))

    def memcpy_dtoh(self, host, src) -> None:
        memoryview(host).cast("B")[:] = self.buffers[int(src)]

    def module(self) -> types.ModuleType:
        module = types.ModuleType("pycuda.driver")
        for name in ("init", "mem_alloc", "memcpy_htod", "memcpy_dtoh", "Device", "Stream"):
            setattr(module, name, getattr(self, name))
        return module


def install_pycuda(monkeypatch) -> FakePycuda:
    """Put a FakePycuda in sys.modules as `pycuda.driver` (undone by `monkeypatch`); returns it."""
    gpu = FakePycuda()
    package = types.ModuleType("pycuda")
    package.driver = gpu.module()
    monkeypatch.setitem(sys.modules, "pycuda", package)
    monkeypatch.setitem(sys.modules, "pycuda.driver", package.driver)
    return gpu


# --------------------------------------------------------------------------- helpers of the engine-stage tests

ROWS = 64
# The I/O of the plan of tests/support/lane_onnx.py's model (batch 1..4), as the double's engine reports it.
ENGINE_IO = FakeEngineSpec([
    ("input", True, "FLOAT", (-1, 3, 360, 640), ((1, 3, 360, 640), (1, 3, 360, 640), (4, 3, 360, 640))),
    ("predict_lanes", False, "FLOAT", (-1, ROWS, 77), None),
])


class Recording(Reporter):
    """A reporter that keeps what it was told, for assertions."""

    def __init__(self) -> None:
        super().__init__()
        self.infos: list[str] = []
        self.warnings: list[str] = []

    def info(self, message: str) -> None:
        self.infos.append(message)

    def warn(self, message: str) -> None:
        self.warnings.append(message)


def file_names(directory: Path) -> set[str]:
    return {p.name for p in directory.iterdir()}


def settings(**overrides) -> tensorrt_api.BuildSettings:
    """BuildSettings of an FP16 build with a batch 1..4 profile and one pinned node, changed by `overrides`."""
    base = dict(
        precision="fp16",
        workspace_bytes=1 << 30,
        profile={"input": ([1, 3, 360, 640], [2, 3, 360, 640], [4, 3, 360, 640])},
        fp32_pins=[("head", "rows")],
        optimization_level=None,
        timing_cache=None,
    )
    base.update(overrides)
    return tensorrt_api.BuildSettings(**base)
