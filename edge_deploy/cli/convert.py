"""`edge-deploy convert`: torch -> ONNX (-> TensorRT plan on the device) (-> model repository)."""
from __future__ import annotations

import inspect
from dataclasses import dataclass, field, fields
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Optional

import typer

from ..lanedet.source import OptionValue
from ..artifact.precision import Precision
from . import option_groups as groups
from .typer_app import app
from .options import takes_options
from .numeric import number, text_callback
from ..core.numbers import SEED, Range, whole
from ..errors import ConvertError, os_error_message
from ..lanedet.family import described_families
from ..core.progress import ConsoleReporter
from ..core.sizes import MIN_WORKSPACE, parse_size

if TYPE_CHECKING:  # pragma: no cover - the library's types, imported when the command runs
    from ..engine.options import EngineOptions
    from ..export.onnx_import import DetectionOptions
    from ..export.settings import ExportSettings
    from ..lanedet.source import SourceSpec


class Target(str, Enum):
    auto = "auto"
    onnx = "onnx"
    tensorrt = "tensorrt"


class Builder(str, Enum):
    auto = "auto"
    python = "python"
    trtexec = "trtexec"


_TRT = "TensorRT plan (on the device)"
_FAMILY = "Lane-model families"
_BATCH = "Batch"
_FUSED = "Fused preprocessing"
_DECODE = "Decode defaults (recorded for clients)"
_DETECTOR = "Object detectors (MODEL.onnx)"
_FAMILY_DEFAULT = "the family's for the data set"

OPSET = whole(1, 30, noun="an ONNX opset")  # which of them the device parses: export/onnx_target.py says, and why
BATCH = whole(1, 1024, "frames")
TOLERANCE = Range(0, 1, "", noun="a tolerance")
DLA_CORE = whole(0, 1, noun="a DLA core")  # engine.options.DLA_CORES: AGX Orin and Orin NX have two
OPTIMIZATION_LEVEL = whole(0, 5, noun="a builder optimisation level")


def _families() -> list[Any]:
    # Described, not imported: a plug-in's flags come from the process that probed it, so that converting a built-in
    # family never imports a plug-in here (docs/families.md, "Plug-ins in isolation").
    return described_families()


def _workspace(text: str) -> int:
    """--workspace in bytes: a size from MIN_WORKSPACE (64 MiB) to 1 TiB, else one line naming the bounds."""
    return parse_size(text, "--workspace", low=MIN_WORKSPACE)


def _input_shape(text: str) -> tuple[int, ...]:
    """--input-shape's dimensions (export.source.parse_input_shape: its bounds), else one line naming them."""
    from ..export.source import parse_input_shape

    return parse_input_shape(text)


def _per_family(what: str) -> str:
    """Help text listing, per registered family, the backbones or data sets it takes and its default."""
    parts = []
    for family in _families():
        if what == "backbone" and family.backbones:
            parts.append(f"{family.name}: {'|'.join(family.backbones)} (default {family.default_backbone})")
        elif what == "dataset" and family.datasets:
            parts.append(f"{family.name}: {'|'.join(family.datasets)}")
    return "; ".join(parts)


def _family_option_parameters() -> list[inspect.Parameter]:
    """One keyword parameter (a --flag) per option of a registered family's options dataclass
    (`LaneFamily.options_type`), in the help panel of the families that take it."""
    owners: dict[str, list[Any]] = {}
    for family in _families():
        for option in family.options:
            owners.setdefault(option.name, [option]).append(family.title)
    parameters = []
    for name, (option, *titles) in owners.items():
        panel = f"{' and '.join(titles)} only"
        if option.range is not None:  # a number: checked against its range as it is parsed
            info = number(option.range, option.flag, help=option.help, rich_help_panel=panel, show_default=False)
        else:
            info = typer.Option(option.flag, help=option.help, rich_help_panel=panel, show_default=False)
        kind = Enum(option.name, {choice: choice for choice in option.choices}, type=str) if option.choices \
            else option.type  # an Enum shows and checks the choices, with any typer
        annotation = Annotated[Optional[kind], info]  # type: ignore[valid-type]
        parameters.append(inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=None, annotation=annotation))
    return parameters


def _with_family_options(command: Any) -> Any:
    """`command` whose **family_options parameter becomes the families' own flags (typer reads __signature__)."""
    signature = inspect.signature(command, eval_str=True)
    fixed = [p for p in signature.parameters.values() if p.kind is not inspect.Parameter.VAR_KEYWORD]
    command.__signature__ = signature.replace(parameters=[*fixed, *_family_option_parameters()])
    return command


@dataclass(frozen=True)
class ConvertOptions:
    """What `edge-deploy convert` is asked: one typed field per option, in the order of --help (the command's
    parameters are made from these fields), and the library's inputs made from them once: `source()`,
    `export_settings()`, `engine_options()` (each checks its part, with one-line errors)."""

    model: Annotated[str, typer.Argument(
        help=f"A lane-model family ({', '.join(f.name for f in _families())}), an ONNX file (e.g. an object "
             "detector's export), a TorchScript file, package.module:factory (returns an nn.Module), or an artifact directory made by convert (then only the "
             "TensorRT plan is built)."
    )]
    output: Annotated[Optional[Path], typer.Option(
        "--output", "-o", help="Artifact directory to write (model.onnx, manifest.json, model.plan). "
                               "Required unless MODEL is an artifact directory.")] = None
    backbone: Annotated[Optional[str], typer.Option(
        help=f"Backbone of a lane-model family ({_per_family('backbone')}).", rich_help_panel=_FAMILY,
        show_default=False)] = None
    checkpoint: Annotated[Optional[Path], typer.Option(
        help="Official checkpoint of the family (the layouts its official code saves; DDP 'module.' prefixes are "
             "removed), loaded strictly.", rich_help_panel=_FAMILY)] = None
    dataset: Annotated[Optional[str], typer.Option(
        help=f"The data set an official checkpoint was trained on ({_per_family('dataset')}): the family's preset "
             "for it (model geometry, preprocessing, decode defaults).", rich_help_panel=_FAMILY, show_default=False)] = None
    input_shape: Annotated[Optional[str], typer.Option(
        help="Input shape for TorchScript/factory models, e.g. 1,3,360,640 (the batch dimension comes from "
             "--batch or --min/--max-batch); for an ONNX MODEL, the sizes of its symbolic dimensions. 2 to 8 "
             "dimensions, each from 1 to 32768.", callback=text_callback(_input_shape))] = None
    layout: Annotated[Optional[str], typer.Option(
        help="An ONNX detector's outputs: yolo ([B, 4+C, A]) or efficient_nms (TensorRT's EfficientNMS outputs); "
             "default: read from the outputs.", rich_help_panel=_DETECTOR, show_default=False)] = None
    resize: Annotated[str, typer.Option(
        help="How a detector's frames fit its input: letterbox (aspect kept, padded) or stretch.",
        rich_help_panel=_DETECTOR)] = "letterbox"
    opset: Annotated[int, number(OPSET, help="ONNX opset.")] = 17
    batch: Annotated[Optional[int], number(
        BATCH, help="Fixed batch size (a static batch dimension).", rich_help_panel=_BATCH)] = None
    min_batch: Annotated[Optional[int], number(BATCH, help="Smallest batch (dynamic batch axis; default 1).",
                                               rich_help_panel=_BATCH)] = None
    opt_batch: Annotated[Optional[int], number(BATCH, help="Batch TensorRT optimises for (default: min).",
                                               rich_help_panel=_BATCH)] = None
    max_batch: Annotated[Optional[int], number(BATCH, help="Largest batch (default 4).",
                                               rich_help_panel=_BATCH)] = None
    input_name: Annotated[str, typer.Option(help="Name of the ONNX input.")] = "input"
    output_name: Annotated[str, typer.Option(
        help="Name of the ONNX output (comma-separated for several outputs).")] = "predict_lanes"
    target: Annotated[Target, typer.Option(
        help="onnx: stop after ONNX; tensorrt: also build the plan (needs TensorRT); auto: the plan when "
             "TensorRT is here.")] = Target.auto
    force: Annotated[bool, typer.Option(
        "--force", help="Replace an existing output artifact (only after success); for an artifact MODEL, "
                        "rebuild the plan even if it is current.")] = False
    seed: Annotated[int, number(SEED, help="Seed for a family's untrained (random) weights and the parity "
                                           "inputs.")] = 0
    atol: Annotated[float, number(TOLERANCE, help="Parity tolerance, absolute.")] = 1e-3
    rtol: Annotated[float, number(TOLERANCE, help="Parity tolerance, relative.")] = 1e-3
    simplify: Annotated[bool, typer.Option(help="Simplify the graph with onnxslim (kept only if results hold).")] = True
    builder: Annotated[Builder, typer.Option(help="TensorRT builder.", rich_help_panel=_TRT)] = Builder.auto
    precision: Annotated[Precision, typer.Option(
        help="fp16 also writes model_fp16.onnx (served where no plan exists) and builds an FP16 plan; fp32; int8 "
             "(a calibrated INT8 plan).", rich_help_panel=_TRT)] = Precision.FP16
    workspace: Annotated[Optional[str], typer.Option(
        help="TensorRT workspace limit, e.g. 2G or 512M, from 64 MiB to 1 TiB (default: derived from MemAvailable).",
        rich_help_panel=_TRT, callback=text_callback(_workspace))] = None
    dla_core: Annotated[Optional[int], number(
        DLA_CORE, "--dla-core", "--dla", help="Build the plan for this DLA core with GPU fallback (AGX Orin, Orin "
                                              "NX: 0 or 1).", rich_help_panel=_TRT)] = None
    timing_cache: Annotated[Optional[Path], typer.Option(help="TensorRT timing cache file (read and updated).",
                                                         rich_help_panel=_TRT)] = None
    calibration_images: Annotated[Optional[Path], typer.Option(
        help="Directory of images for INT8 calibration.", rich_help_panel=_TRT)] = None
    builder_optimization_level: Annotated[Optional[int], number(
        OPTIMIZATION_LEVEL, help="TensorRT builder optimisation level.", rich_help_panel=_TRT)] = None
    verify: Annotated[bool, typer.Option(help="Check the plan against ONNX Runtime after building.",
                                         rich_help_panel=_TRT)] = True
    fp16_io: Annotated[bool, typer.Option(
        "--fp16-io", help="model_fp16.onnx (and its strongly typed plan) with FP16 inputs/outputs instead of FP32.",
        rich_help_panel=_TRT)] = False
    weak_typing: Annotated[bool, typer.Option(
        "--weak-typing", help="TensorRT 10.x FP16: build model.onnx with the FP16 builder flag and FP32 layer pins "
                              "instead of the strongly typed model_fp16.onnx (not available on TensorRT 11).",
        rich_help_panel=_TRT)] = False
    eval_data: Annotated[Optional[str], typer.Option(
        help="Score what convert builds (model.onnx, and model_fp16.onnx when made) on labelled frames and record "
             "the CULane F1 in the manifest: synthetic:N, a CULane list file, or a TuSimple label_data_*.json.",
        show_default=False)] = None
    fuse_preprocess: Annotated[bool, typer.Option(
        "--fuse-preprocess", help="Put the preprocessing (the family's resize, bilinear for an antialiased one: area, antialiased_bilinear; scale, NCHW, FP16/FP32) into the model: it "
                                  "takes the camera's UINT8 BGR frames (FRAME [B, H, W, 3]) and the GPU does the work.",
        rich_help_panel=_FUSED)] = False
    frame_size: Annotated[Optional[str], typer.Option(
        help="Camera frame size WIDTHxHEIGHT for --fuse-preprocess (default 1640x590).", rich_help_panel=_FUSED,
        show_default=False)] = None
    conf: Annotated[Optional[float], groups.conf(_DECODE, _FAMILY_DEFAULT)] = None
    nms: Annotated[Optional[float], groups.nms(_DECODE, _FAMILY_DEFAULT, unit="pixels at the model's input width")] = None
    top_k: Annotated[Optional[int], groups.top_k(_DECODE, _FAMILY_DEFAULT, note=": as many as your roads have")] = None
    install: Annotated[bool, typer.Option("--install", help="Install the result into the model repository.")] = False
    repository: Annotated[Path, typer.Option(help="Triton model repository for --install.")] = Path("model_repository")
    name: Annotated[str, typer.Option(help="Model name in the repository for --install.")] = "lanedet"
    family_options: dict[str, OptionValue] = field(default_factory=dict)  # the families' own flags, given ones only

    @classmethod  # given: the command's **kwargs as typer passes them, plus the families' own flags (any type)
    def of(cls, given: dict[str, Any]) -> "ConvertOptions":
        """The options from the command's keyword arguments; the rest are the families' flags."""
        names = {f.name for f in fields(cls)} - {"family_options"}
        family = {key: value.value if isinstance(value, Enum) else value
                  for key, value in given.items() if key not in names and value is not None}
        return cls(**{key: value for key, value in given.items() if key in names}, family_options=family)

    def source(self) -> SourceSpec:
        """What MODEL names (export.source.SourceSpec)."""
        from ..export.source import SourceSpec

        return SourceSpec(
            model=self.model, backbone=self.backbone, checkpoint=self.checkpoint, dataset=self.dataset,
            options=dict(self.family_options),
            input_shape=_input_shape(self.input_shape) if self.input_shape else None, seed=self.seed,
        )

    def export_settings(self) -> ExportSettings:
        """How to export (export.settings.ExportSettings)."""
        from ..export.settings import ExportSettings, batch_range, fuse_frame

        return ExportSettings(
            opset=self.opset, batch=batch_range(self.batch, self.min_batch, self.opt_batch, self.max_batch),
            input_name=self.input_name,
            output_names=tuple(n.strip() for n in self.output_name.split(",") if n.strip()), atol=self.atol,
            rtol=self.rtol, simplify=self.simplify, seed=self.seed, precision=self.precision, fp16_io=self.fp16_io,
            fuse_frame=fuse_frame(self.fuse_preprocess, self.frame_size), conf_threshold=self.conf,
            nms_threshold=self.nms, top_k=self.top_k,
        )

    def detection(self) -> DetectionOptions:
        """How an ONNX detector's frames and outputs are read (export.onnx_import.DetectionOptions)."""
        from ..export.onnx_import import DetectionOptions

        return DetectionOptions(layout=self.layout, resize=self.resize)

    def engine_options(self) -> EngineOptions:
        """How to build the plan (engine.options.EngineOptions)."""
        from ..engine.options import EngineOptions

        return EngineOptions(
            builder=self.builder.value, precision=self.precision,
            workspace=None if self.workspace is None else _workspace(self.workspace), dla_core=self.dla_core,
            timing_cache=self.timing_cache, calibration_images=self.calibration_images,
            optimization_level=self.builder_optimization_level, verify=self.verify, force=self.force,
            weak_typing=self.weak_typing,
        )


@app.command()
@_with_family_options
@takes_options(ConvertOptions, var_keyword="family_options")
def convert(**given: Any) -> None:
    """Convert a PyTorch lane model, or a model exported to ONNX (an object detector), to a verified ONNX model
    (and a TensorRT plan on the device)."""
    from rich.console import Console

    from ..engine.convert import convert as run_convert

    from ..export.parity import ort_threads

    ort_threads()  # $EDGE_DEPLOY_ORT_THREADS read through its range before any work (docs/convert.md)
    options = ConvertOptions.of(given)
    source, settings, engine_options = options.source(), options.export_settings(), options.engine_options()
    detection = options.detection()
    # Progress and results go to stdout; stderr carries only the error line.
    console = Console(soft_wrap=True)  # long lines stay whole in logs and pipes; the terminal wraps them
    reporter = ConsoleReporter(console)
    try:
        result = run_convert(source, options.output, settings, target=options.target.value,
                             engine_options=engine_options, force=options.force, eval_data=options.eval_data,
                             reporter=reporter, detection=detection)
    except OSError as exc:
        # Disk full or a file system gone read-only mid-way: the staging directory was discarded.
        where = options.output if options.output is not None else Path(options.model)
        raise ConvertError(f"convert could not finish writing {where} (an existing artifact there is unchanged): "
                           f"{os_error_message(exc)}") from exc
    _print_summary(console, result)
    if options.install:
        from ..deploy.install import install as install_artifact
        from ..deploy.options import InstallOptions

        console.print(install_artifact(InstallOptions(result.artifact_dir, options.repository, options.name), reporter))


def _print_summary(console: Any, result: Any) -> None:
    from rich.table import Table

    manifest = result.manifest
    fp16 = manifest.fp16
    if fp16 is not None:
        nodes = fp16.nodes or ()
        if nodes:
            table = Table(title=f"FP16 report: {len(nodes)} node(s) outside FP16 range (kept in FP32 by TensorRT)",
                          title_justify="left")
            for column in ("node", "op", "output", "max |x|", "reason"):
                table.add_column(column)
            for node in nodes[:12]:
                table.add_row(node.node, node.op, node.output, f"{node.max_abs:.3g}", node.reason)
            if len(nodes) > 12:
                table.add_row("…", "", "", "", f"{len(nodes) - 12} more in manifest.json")
            console.print(table)
        else:
            console.print(f"FP16 report: all {fp16.tensors_checked} tensors fit FP16 "
                          f"(max |x| {fp16.max_abs:.3g}).")

    table = Table(title=f"{result.artifact_dir}", title_justify="left", show_header=True)
    table.add_column("file")
    table.add_column("size", justify="right")
    table.add_column("sha256")
    for file_name, entry in manifest.files.items():
        table.add_row(file_name, _size(entry.bytes), entry.sha256[:16] + "…")
    console.print(table)

    fp16_model = fp16.onnx if fp16 is not None else None
    if fp16_model is not None and fp16_model.verify is not None:
        check = fp16_model.verify
        for out_name, error in (check.outputs or {}).items():
            console.print(f"{fp16_model.file} vs model.onnx (ONNX Runtime) {out_name}: max abs "
                          f"{error.max_abs:.3g}, max rel {error.max_rel:.3g}")
        if check.lanes is not None:
            from ..export.fp16_onnx import fp16_lanes_line

            console.print(f"{fp16_model.file} {fp16_lanes_line(check.lanes)}")
    from ..evaluate.convert_eval import evaluation_summary

    summary = evaluation_summary(manifest.evaluation)
    if summary:
        console.print(summary)
    parity = manifest.parity
    if parity is not None and parity.tolerance is not None:
        for out_name, error in (parity.outputs or {}).items():
            console.print(f"parity {out_name} (batches {list(parity.batches or ())}): max abs {error.max_abs:.3g}, "
                          f"max rel {error.max_rel:.3g} (atol {parity.tolerance.atol:g}, "
                          f"rtol {parity.tolerance.rtol:g})")
    stages = ", ".join(f"{stage} {seconds:.1f} s" for stage, seconds in result.timings.items() if stage != "total")
    console.print(f"time: {stages}; total {result.timings['total']:.1f} s")


def _size(count: float) -> str:
    for unit in ("B", "KiB", "MiB"):
        if count < 1024:
            return f"{count:.0f} {unit}" if unit == "B" else f"{count:.1f} {unit}"
        count /= 1024
    return f"{count:.1f} GiB"
