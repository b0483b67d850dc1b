"""config.pbtxt: built as a Triton `ModelConfig` protobuf and printed with text_format.

Never a string template: the message is filled from the artifact's manifest and
printed by protobuf. proto3 omits zero scalars, but Triton needs
`max_batch_size: 0` written for a model without a batch dimension, so
`config_text` adds it.

Parameters that edge-deploy writes (all values are strings, Triton's only kind):

- ``edge_deploy.family``: the lane-model family (edge_deploy.lanedet.family) whose decoder reads
  the outputs; absent (configs written before families) means laneatt.
- ``edge_deploy.preprocess``: JSON of the manifest's preprocessing spec
  (height, width, color, scale, mean, std, interpolation, crop, layout).
- ``edge_deploy.decode``: JSON of the decode defaults
  (conf_threshold, nms_threshold, top_k).
- ``edge_deploy.role``: ``model`` | ``preprocess`` | ``postprocess`` | ``pipeline``.
- ``edge_deploy.pipeline`` (NAME_pipeline only): ``ensemble`` | ``bls`` (absent: ensemble,
  configs written before `install --pipeline bls`).
- ``edge_deploy.runtime``: ``tensorrt`` | ``onnxruntime`` | ``python`` (the lane model only).
- ``edge_deploy.fused_preprocess`` (fused models only, `convert --fuse-preprocess`): JSON
  {"input", "height", "width", "color"} of the UINT8 camera frame the model takes; the
  client then sends frames as they are and only decodes.
- ``edge_deploy.manifest_sha256``: sha256 of the manifest.json of the version
  the config was written for.
- ``edge_deploy.ort_threads`` (the ``python`` runtime, written by `install --threads N`; else
  absent): ONNX Runtime intra- and inter-op threads of the Python-backend runner (absent:
  $EDGE_DEPLOY_ORT_THREADS of the server's environment, else one per core). For the
  ``onnxruntime`` runtime `--threads N` writes the ONNX Runtime backend's own parameters
  ``intra_op_thread_count`` and ``inter_op_thread_count`` instead.

`install --priority high|normal|low` writes ``optimization { priority: PRIORITY_MAX |
PRIORITY_DEFAULT | PRIORITY_MIN }`` (the TensorRT backend's CUDA stream priority) and, for a
dynamic-batch model, ``dynamic_batching { priority_levels: 3 default_priority_level: 1 | 2 | 3 }``
(level 1 is Triton's highest); `scheduling` reads them back.

`LaneDetClient` reads the first two from `get_model_config` to configure
itself; the server-side pipeline models read the same values from the
manifest.json stored in their version directory.
"""
from __future__ import annotations

import enum
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..artifact.manifest import FP16_ONNX_NAME, ONNX_NAME, PLAN_NAME, FusedFrame, IOSignature, Manifest, TensorSpec
from ..core import numbers
from ..errors import RepositoryError
from ..artifact.precision import Precision
from ..core.triton_layout import config_pb2 as _pb
from ..lanedet.decode_params import DecodeParams
from ..lanedet.preprocess import PreprocessSpec
from ..lanedet.contract import (
    FRAME,
    LANES,
    NUM_LANES,
    NUM_POINTS,
    ORIGINAL_SIZE,
    PARAM_DECODE,
    PARAM_DETECTION,
    PARAM_FAMILY,
    PARAM_FAMILY_PACKAGE,
    PARAM_FUSED,
    PARAM_MANIFEST_SHA256,
    PARAM_PIPELINE,
    PARAM_PREPROCESS,
    PARAM_ROLE,
    PARAM_RUNTIME,
    SCORES,
)

RUNTIMES = ("tensorrt", "onnxruntime", "python")
# A BLS pipeline instance waits for the model while it runs; a second one preprocesses and decodes the next
# frame meanwhile (what the ensemble's separate steps do). BENCHMARKS.md measures one against two.
BLS_INSTANCES = 2
# How long a BLS pipeline waits for one call to the lane model before failing its frames with a one-line error
# (pipeline.json's call_timeout_s; 0: forever). Below LaneDetClient's 10 s client_timeout, so that the client
# gets the pipeline's error rather than its own deadline; far above a frame's tens of milliseconds.
BLS_CALL_TIMEOUT_S = 5.0
# Calls to the lane model a BLS instance keeps outstanding (pipeline.json's call_threads): a stalled model holds at
# most these (and their tensors); further frames are refused at once.
BLS_CALL_THREADS = 4
DATATYPES = ("BOOL", "UINT8", "UINT16", "UINT32", "UINT64", "INT8", "INT16", "INT32", "INT64",
             "FP16", "FP32", "FP64", "BF16", "STRING", "BYTES")



# The ONNX file an ONNX runtime serves, by precision (an INT8 model is a plan only).
SERVED_ONNX = {Precision.FP16: FP16_ONNX_NAME, Precision.FP32: ONNX_NAME}


class Priority(str, enum.Enum):
    """`install --priority`: how the lane model goes before other models co-served with it."""

    HIGH = "high"
    NORMAL = "normal"
    LOW = "low"


PRIORITIES = tuple(p.value for p in Priority)
# ModelOptimizationPolicy.ModelPriority of model_config.proto, by --priority (PRIORITY_DEFAULT is proto3's 0: not
# printed, so a normal config reads as one written before --priority).
PRIORITY_NAMES = {Priority.HIGH: "PRIORITY_MAX", Priority.NORMAL: "PRIORITY_DEFAULT", Priority.LOW: "PRIORITY_MIN"}
# dynamic_batching's priority levels (Triton's level 1 is the highest) and each --priority's default level.
PRIORITY_LEVELS = 3
PRIORITY_LEVEL = {Priority.HIGH: 1, Priority.NORMAL: 2, Priority.LOW: 3}
# `install --threads N`: ONNX Runtime's intra- and inter-op threads, 1..MAX_THREADS.
MAX_THREADS = numbers.MAX_THREADS  # 64, as $EDGE_DEPLOY_ORT_THREADS
PARAM_ORT_THREADS = "edge_deploy.ort_threads"  # the python runtime's (triton_models/onnx_runner.py reads it)
ORT_THREAD_PARAMS = ("intra_op_thread_count", "inter_op_thread_count")  # Triton's onnxruntime backend's


def priority_of(value: Priority | str) -> Priority:
    """A --priority value checked: a Priority or its name; RepositoryError (one line) otherwise."""
    try:
        return Priority(value.lower() if isinstance(value, str) else value)
    except ValueError:
        raise RepositoryError(f"unknown priority {str(value)!r}: use --priority {'|'.join(PRIORITIES)}.") from None


def check_threads(threads: int | None) -> int | None:
    """A --threads value checked: None (not set) or a whole number from 1 to MAX_THREADS."""
    if threads is None:
        return None
    if isinstance(threads, bool) or not isinstance(threads, int) or not 1 <= threads <= MAX_THREADS:
        raise RepositoryError(f"--threads must be a whole number from 1 to {MAX_THREADS} (got {threads}); "
                              "leave it out to let ONNX Runtime use one thread per core.")
    return threads


@dataclass
class ConfigOptions:
    """The install options that shape a lane model's config (stored per version for rollback)."""

    max_queue_delay_us: int | None = None
    instances: int = 1
    warmup: bool = False
    precision: Precision = Precision.FP32  # of the ONNX file ONNX runtimes serve: FP16 is model_fp16.onnx
    priority: Priority = Priority.NORMAL
    threads: int | None = None  # ONNX Runtime's intra- and inter-op threads (ONNX runtimes only); None: its default

    def __post_init__(self) -> None:
        self.priority = priority_of(self.priority)
        self.threads = check_threads(self.threads)
        if self.precision not in SERVED_ONNX:
            raise RepositoryError(f"an ONNX runtime serves {' or '.join(map(str, SERVED_ONNX))}, not {self.precision}.")

    @property
    def onnx_file(self) -> str:
        """The artifact's ONNX file that ONNX runtimes serve (as model.onnx in the version directory)."""
        return SERVED_ONNX[self.precision]

    def to_dict(self) -> dict[str, Any]:
        # "fp16" too: what an older edge-deploy reads when it rolls back to this version.
        return {"max_queue_delay_us": self.max_queue_delay_us, "instances": self.instances, "warmup": self.warmup,
                "precision": self.precision.value, "fp16": self.precision is Precision.FP16,
                "priority": self.priority.value, "threads": self.threads}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "ConfigOptions":
        return cls(
            max_queue_delay_us=data.get("max_queue_delay_us"),
            instances=int(data.get("instances", 1)),
            warmup=bool(data.get("warmup", False)),
            precision=_stored_precision(data),
            priority=data.get("priority") or Priority.NORMAL,  # absent in records written before --priority
            threads=data.get("threads"),
        )


def _stored_precision(data: Mapping[str, object]) -> Precision:
    """The precision an install record's options give (before "precision", a bool "fp16")."""
    try:
        return Precision(data["precision"])
    except (KeyError, ValueError):
        return Precision.FP16 if data.get("fp16") else Precision.FP32


def served_io(manifest: Manifest, runtime: str, options: ConfigOptions | None = None) -> IOSignature:
    """The I/O of the file a runtime serves: the plan's (that of the ONNX it was built from), model_fp16.onnx's
    for an FP16 options.precision, else model.onnx's."""
    if runtime == "tensorrt":
        return manifest.plan_io
    if options is not None and options.precision is Precision.FP16:
        return manifest.io_of(FP16_ONNX_NAME)
    return manifest.io


def data_type(name: str) -> int:
    """Triton datatype name (FP32, UINT8, ...) -> the DataType enum value of model_config.proto."""
    name = "STRING" if name == "BYTES" else name
    if name not in DATATYPES:
        raise RepositoryError(f"unknown tensor datatype {name!r} in the manifest; re-run `edge-deploy convert`.")
    return _pb().DataType.Value(f"TYPE_{name}")


def batching(manifest: Manifest) -> tuple[int, bool]:
    """(max_batch_size, has_batch_dim) from the manifest's io.batch: 0/False for a fixed-batch model."""
    batch = manifest.io.batch
    if batch.dynamic:
        return batch.max, True
    return 0, False


def _tensor_dims(shape: tuple[int, ...], has_batch_dim: bool) -> list[int]:
    return [int(d) for d in (shape[1:] if has_batch_dim else shape)]


def _policy(config: Any, version_policy: int | None) -> None:
    if version_policy is None:
        config.version_policy.latest.num_versions = 1
    else:
        config.version_policy.specific.versions.append(int(version_policy))


def _set_params(config: Any, params: Mapping[str, object]) -> None:
    for key, value in params.items():
        config.parameters[key].string_value = value if isinstance(value, str) else json.dumps(value)


def model_config(
    manifest: Manifest,
    *,
    name: str,
    runtime: str,
    options: ConfigOptions | None = None,
    version_policy: int | None = None,
    manifest_sha256: str = "",
) -> Any:
    """The lane model's ModelConfig. version_policy None = latest 1; an int = specific [V] (rollback)."""
    pb = _pb()
    options = options or ConfigOptions()
    if runtime not in RUNTIMES:
        raise RepositoryError(f"unknown runtime {runtime!r}; use one of {', '.join(RUNTIMES)}.")
    io = served_io(manifest, runtime, options)
    if not io.inputs or not io.outputs:
        raise RepositoryError("the manifest has no io.inputs/io.outputs; re-run `edge-deploy convert`.")
    max_batch, has_batch = batching(manifest)
    config = pb.ModelConfig(name=name, max_batch_size=max_batch)
    if runtime == "tensorrt":
        config.platform = "tensorrt_plan"
        config.default_model_filename = PLAN_NAME
    elif runtime == "onnxruntime":
        config.platform = "onnxruntime_onnx"
        config.default_model_filename = ONNX_NAME
    else:
        config.backend = "python"
    _policy(config, version_policy)
    for spec, dest in ((io.inputs, config.input), (io.outputs, config.output)):
        for tensor in spec:
            dest.add(name=tensor.name, data_type=data_type(tensor.datatype), dims=_tensor_dims(tensor.shape, has_batch))
    if options.max_queue_delay_us is not None and not has_batch:
        raise RepositoryError(
            "--max-queue-delay-us needs a model with a dynamic batch axis, but this one has a fixed batch "
            "(max_batch_size 0); install without it, or convert with --min-batch/--max-batch."
        )
    if options.threads is not None and runtime == "tensorrt":
        raise RepositoryError(
            f"--threads {options.threads} sets ONNX Runtime's thread counts, but this model is served as a TensorRT "
            "plan (runtime tensorrt), which has none; install without --threads, or with --runtime onnxruntime "
            "or --runtime python."
        )
    if options.priority is not Priority.NORMAL:  # else no `optimization {}` at all: the config as before --priority
        config.optimization.priority = pb.ModelOptimizationPolicy.ModelPriority.Value(PRIORITY_NAMES[options.priority])
    if has_batch:
        config.dynamic_batching.SetInParent()
        if options.max_queue_delay_us:
            config.dynamic_batching.max_queue_delay_microseconds = int(options.max_queue_delay_us)
        config.dynamic_batching.priority_levels = PRIORITY_LEVELS
        config.dynamic_batching.default_priority_level = PRIORITY_LEVEL[options.priority]
    kind = {"tensorrt": pb.ModelInstanceGroup.KIND_GPU, "python": pb.ModelInstanceGroup.KIND_CPU}.get(
        runtime, pb.ModelInstanceGroup.KIND_AUTO
    )
    group = config.instance_group.add(count=int(options.instances), kind=kind)
    dla_core = manifest.plan.dla_core if runtime == "tensorrt" and manifest.plan else None
    if dla_core is not None:
        # A DLA plan: without a secondary device Triton's TensorRT backend deserializes it with DLA core -1
        # (IRuntime's default). ModelInstanceGroup.SecondaryDevice of model_config.proto; KIND_NVDLA is
        # proto3's default (0), so text_format does not print the kind.
        group.secondary_devices.add(kind=pb.ModelInstanceGroup.SecondaryDevice.KIND_NVDLA, device_id=int(dla_core))
    if options.warmup:
        warm = config.model_warmup.add(name="zeros", batch_size=1)
        for tensor in io.inputs:
            dims = _tensor_dims(tensor.shape, has_batch)
            if any(d < 0 for d in dims):
                raise RepositoryError(
                    f"--warmup needs fixed input dims, but {tensor.name} has {dims}; install without --warmup."
                )
            warm.inputs[tensor.name].data_type = data_type(tensor.datatype)
            warm.inputs[tensor.name].dims.extend(dims)
            warm.inputs[tensor.name].zero_data = True
    _set_params(config, {
        PARAM_ROLE: "model",
        PARAM_RUNTIME: runtime,
        PARAM_PREPROCESS: manifest.preprocess.to_dict(),
        PARAM_DECODE: manifest.decode.to_dict(),
        PARAM_MANIFEST_SHA256: manifest_sha256,
    })
    _set_family(config, manifest)
    if manifest.fused_frame is not None:
        _set_params(config, {PARAM_FUSED: manifest.fused_frame.to_dict()})
    if manifest.detection is not None:
        _set_params(config, {PARAM_DETECTION: manifest.detection.to_dict()})
    if options.threads is not None:
        names = ORT_THREAD_PARAMS if runtime == "onnxruntime" else (PARAM_ORT_THREADS,)
        _set_params(config, {key: str(options.threads) for key in names})
    return config


@dataclass(frozen=True)
class Scheduling:
    """How a model's config has Triton run it (`edge-deploy models` and `status` show it): priority (high, normal,
    low: its optimization.priority), instances (the instance groups' counts) and placement (GPU, CPU, auto: GPU
    where there is one, or "DLA core N" from a group's secondary device; groups that differ are joined with "+")."""

    priority: str
    instances: int
    placement: str

    def to_dict(self) -> dict[str, Any]:
        return {"priority": self.priority, "instances": self.instances, "placement": self.placement}

    def describe(self) -> str:
        """"priority high, 2 instances on DLA core 0"."""
        return (f"priority {self.priority}, {self.instances} instance{'' if self.instances == 1 else 's'} "
                f"on {self.placement}")


def scheduling(config: Any) -> Scheduling | None:
    """The Scheduling a ModelConfig asks for; None for a model without instances of its own (an ensemble)."""
    pb = _pb()
    if config.platform == "ensemble" or not config.instance_group:
        return None
    names = {v: k for k, v in PRIORITY_NAMES.items()}
    priority = names.get(pb.ModelOptimizationPolicy.ModelPriority.Name(config.optimization.priority), Priority.NORMAL)
    kinds = {pb.ModelInstanceGroup.KIND_GPU: "GPU", pb.ModelInstanceGroup.KIND_CPU: "CPU",
             pb.ModelInstanceGroup.KIND_AUTO: "auto", pb.ModelInstanceGroup.KIND_MODEL: "model"}
    places = []
    for group in config.instance_group:
        dla = [d.device_id for d in group.secondary_devices if d.kind == pb.ModelInstanceGroup.SecondaryDevice.KIND_NVDLA]
        place = f"DLA core {dla[0]}" if dla else kinds.get(group.kind, "?")
        if place not in places:
            places.append(place)
    # count 0 is Triton's default: one instance (per GPU)
    return Scheduling(priority.value, sum(max(int(g.count), 1) for g in config.instance_group), "+".join(places))


def _set_family(config: Any, manifest: Manifest) -> None:
    if manifest.family is not None:
        _set_params(config, {PARAM_FAMILY: manifest.family})
        if manifest.source.family_package:
            _set_params(config, {PARAM_FAMILY_PACKAGE: manifest.source.family_package})


def _model_io(manifest: Manifest) -> tuple[TensorSpec, tuple[TensorSpec, ...]]:
    """The model's one input and the outputs its family decodes (the pipeline's steps pass those on)."""
    io = manifest.io
    family = manifest.lane_family()
    if len(io.inputs) != 1 or family is None:
        raise RepositoryError(
            "--pipeline needs a lane model: one input and outputs of a lane-model family; this artifact has "
            f"{len(io.inputs)} inputs and family {manifest.family}. Install without --pipeline."
        )
    try:
        return io.inputs[0], family.lane_outputs(io.outputs, io.batch.dynamic)
    except ValueError as exc:
        raise RepositoryError(f"--pipeline: the model {exc}") from None


def _add_one_frame(dest: Any, tensor: TensorSpec, manifest: Manifest) -> None:
    """The lane model's tensor as one frame of it: [1, ...] when the model has a batch axis."""
    _, has_batch = batching(manifest)
    dims = _tensor_dims(tensor.shape, has_batch)
    dest.add(name=tensor.name, data_type=data_type(tensor.datatype), dims=[1, *dims] if has_batch else dims)


def preprocess_config(manifest: Manifest, *, name: str, version_policy: int | None = None) -> Any:
    """NAME_preprocess: UINT8 [H, W, 3] frame -> the model input [1, ...] and the frame size."""
    pb = _pb()
    model_in, _ = _model_io(manifest)
    config = pb.ModelConfig(name=name, backend="python", max_batch_size=0)
    _policy(config, version_policy)
    config.input.add(name=FRAME, data_type=pb.TYPE_UINT8, dims=[-1, -1, 3])
    _add_one_frame(config.output, model_in, manifest)
    config.output.add(name=ORIGINAL_SIZE, data_type=pb.TYPE_INT32, dims=[2])
    config.instance_group.add(count=1, kind=pb.ModelInstanceGroup.KIND_CPU)
    _set_params(config, {PARAM_ROLE: "preprocess", PARAM_PREPROCESS: manifest.preprocess.to_dict()})
    return config


def _add_lane_outputs(config: Any, manifest: Manifest) -> None:
    """LANES, SCORES, NUM_POINTS, NUM_LANES, padded to the decode's top_k lanes of the family's max_points."""
    pb = _pb()
    top_k = manifest.decode.top_k
    family = manifest.lane_family()
    max_points = family.max_points(family.lane_outputs(manifest.io.outputs, manifest.io.batch.dynamic))
    config.output.add(name=LANES, data_type=pb.TYPE_FP32, dims=[top_k, max_points, 2])
    config.output.add(name=SCORES, data_type=pb.TYPE_FP32, dims=[top_k])
    config.output.add(name=NUM_POINTS, data_type=pb.TYPE_INT32, dims=[top_k])
    config.output.add(name=NUM_LANES, data_type=pb.TYPE_INT32, dims=[1])


def postprocess_config(manifest: Manifest, *, name: str, version_policy: int | None = None) -> Any:
    """NAME_postprocess: the model's lane outputs (one frame) + frame size -> padded lanes and scores."""
    pb = _pb()
    _, lane_outputs = _model_io(manifest)
    config = pb.ModelConfig(name=name, backend="python", max_batch_size=0)
    _policy(config, version_policy)
    for tensor in lane_outputs:
        _add_one_frame(config.input, tensor, manifest)
    if manifest.fused_frame is None:  # a fused model's frames have one size: the manifest's
        config.input.add(name=ORIGINAL_SIZE, data_type=pb.TYPE_INT32, dims=[2])
    _add_lane_outputs(config, manifest)
    config.instance_group.add(count=1, kind=pb.ModelInstanceGroup.KIND_CPU)
    _set_params(config, {PARAM_ROLE: "postprocess", PARAM_DECODE: manifest.decode.to_dict()})
    _set_family(config, manifest)
    return config


def _pipeline_signature(config: Any, manifest: Manifest) -> None:
    """NAME_pipeline's inputs and outputs, whichever kind: a UINT8 FRAME [H, W, 3] of any size (a fused model's
    one frame, [1, H, W, 3] under its input name) -> LANES, SCORES, NUM_POINTS, NUM_LANES."""
    model_in, _ = _model_io(manifest)
    if manifest.fused_frame is not None:
        _add_one_frame(config.input, model_in, manifest)
    else:
        config.input.add(name=FRAME, data_type=_pb().TYPE_UINT8, dims=[-1, -1, 3])
    _add_lane_outputs(config, manifest)


def _pipeline_params(config: Any, manifest: Manifest, kind: str) -> None:
    """What LaneDetClient reads from a NAME_pipeline config (both kinds write the same)."""
    _set_params(config, {
        PARAM_ROLE: "pipeline",
        PARAM_PREPROCESS: manifest.preprocess.to_dict(),
        PARAM_DECODE: manifest.decode.to_dict(),
    })
    if kind != "ensemble":  # configs of ensembles stay as they were before kinds
        _set_params(config, {PARAM_PIPELINE: kind})
    _set_family(config, manifest)
    if manifest.fused_frame is not None:
        _set_params(config, {PARAM_FUSED: manifest.fused_frame.to_dict()})


def pipeline_config(
    manifest: Manifest, *, name: str, model: str, preprocess: str, postprocess: str,
    version_policy: int | None = None,
) -> Any:
    """NAME_pipeline: the ensemble preprocess -> model -> postprocess (latest loaded version of each).

    A fused model (convert --fuse-preprocess) takes the frame itself: the ensemble is model ->
    postprocess, and its FRAME is the model's one frame, [1, H, W, 3] at the camera's size.
    """
    pb = _pb()
    model_in, lane_outputs = _model_io(manifest)
    fused = manifest.fused_frame is not None
    config = pb.ModelConfig(name=name, platform="ensemble", max_batch_size=0)
    _policy(config, version_policy)
    _pipeline_signature(config, manifest)
    steps = config.ensemble_scheduling.step
    if not fused:
        pre = steps.add(model_name=preprocess, model_version=-1)
        pre.input_map[FRAME] = FRAME
        pre.output_map[model_in.name] = "_model_input"
        pre.output_map[ORIGINAL_SIZE] = "_original_size"
    mid = steps.add(model_name=model, model_version=-1)
    mid.input_map[model_in.name] = model_in.name if fused else "_model_input"
    post = steps.add(model_name=postprocess, model_version=-1)
    for k, tensor in enumerate(lane_outputs):
        mid.output_map[tensor.name] = f"_raw{k}" if k else "_raw"
        post.input_map[tensor.name] = f"_raw{k}" if k else "_raw"
    if not fused:
        post.input_map[ORIGINAL_SIZE] = "_original_size"
    for out in (LANES, SCORES, NUM_POINTS, NUM_LANES):
        post.output_map[out] = out
    _pipeline_params(config, manifest, "ensemble")
    return config


def bls_config(manifest: Manifest, *, name: str, version_policy: int | None = None) -> Any:
    """NAME_pipeline of `install --pipeline bls`: one Python-backend model that preprocesses, calls the lane model
    through BLS and decodes; the ensemble's inputs, outputs and parameters, so the client cannot tell them apart."""
    pb = _pb()
    config = pb.ModelConfig(name=name, backend="python", max_batch_size=0)
    _policy(config, version_policy)
    _pipeline_signature(config, manifest)
    config.instance_group.add(count=BLS_INSTANCES, kind=pb.ModelInstanceGroup.KIND_CPU)
    _pipeline_params(config, manifest, "bls")
    return config


@dataclass(frozen=True)
class BlsSpec:
    """pipeline.json of a BLS pipeline version: what it calls (the lane model `model`, whichever version the
    server serves), with which tensor, how it preprocesses and decodes, and how long it waits for each call
    (call_timeout_s: edit it in the version directory and load NAME_pipeline again to change it; 0: forever) with
    at most call_threads calls outstanding.
    triton_models/bls_model.py reads it (`to_dict`: its keys are that contract)."""

    model: str
    input: TensorSpec
    outputs: tuple[TensorSpec, ...]
    max_batch_size: int
    preprocess: PreprocessSpec
    decode: DecodeParams
    max_points: int
    fused_frame: FusedFrame | None  # the camera frame a fused model takes (pipeline.json: its height and width)
    call_timeout_s: float = BLS_CALL_TIMEOUT_S
    call_threads: int = BLS_CALL_THREADS

    def to_dict(self) -> dict[str, Any]:
        frame = self.fused_frame
        return {
            "model": self.model,
            "input": self.input.to_dict(),
            "outputs": [t.to_dict() for t in self.outputs],
            "max_batch_size": self.max_batch_size,
            "preprocess": self.preprocess.to_dict(),
            "decode": self.decode.to_dict(),
            "max_points": self.max_points,
            "fused_frame": {"height": frame.height, "width": frame.width} if frame is not None else None,
            "call_timeout_s": self.call_timeout_s,
            "call_threads": self.call_threads,
        }


def bls_spec(manifest: Manifest, *, model: str) -> BlsSpec:
    """The pipeline.json of a BLS pipeline version over the lane model `model` (see `BlsSpec`)."""
    model_in, lane_outputs = _model_io(manifest)
    family = manifest.lane_family()
    return BlsSpec(model=model, input=model_in, outputs=tuple(lane_outputs), max_batch_size=batching(manifest)[0],
                   preprocess=manifest.preprocess, decode=manifest.decode, max_points=family.max_points(lane_outputs),
                   fused_frame=manifest.fused_frame)


def config_text(config: Any) -> str:
    """config.pbtxt text for a ModelConfig, with `max_batch_size: 0` written explicitly."""
    from google.protobuf import text_format

    text = text_format.MessageToString(config)
    if config.max_batch_size == 0:
        lines = text.splitlines(keepends=True)
        at = 1 if lines and lines[0].startswith("name:") else 0
        lines.insert(at, "max_batch_size: 0\n")
        text = "".join(lines)
    return text
