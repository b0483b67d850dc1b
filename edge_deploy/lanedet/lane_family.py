"""The lane-model family interface and its registry.

A family is one kind of lane detector (LaneATT, UFLDv2, ...): what its model outputs mean
and how they become `Lane`s. Everything that turns model outputs into lanes asks
the family recorded for the model (the manifest's "family", config.pbtxt's
``edge_deploy.family``): LaneDetClient and AsyncLaneDetClient, the server-side
postprocess model, `infer`, `evaluate`, the FP16 and plan lane checks, and fused
preprocessing. docs/design.md, "Adding a lane-model family", walks through a new one.

A family provides:

- `preprocess`: its default preprocessing spec (input size, colour, scale, mean/std, crop);
- `decode_defaults` (an instance of its own `DecodeParams` subclass) and `datasets`: the decode
  defaults (and preprocessing), per data set where they differ;
- `decoder_module`: a self-contained module (numpy, the standard library and `lane.py` only,
  because install copies it beside Triton Python-backend models) whose
  ``decode_outputs(outputs, *, image_size, model_width, **decode_params)`` turns one image's lane
  outputs into `Lane`s in frame pixels;
- `lane_outputs()`: which of a model's outputs the decoder reads (or why the model is not one of this
  family's), and `max_points()`, the most points a lane has (server-side pipelines pad to it);
- `build()` (or all of `load()`): the model builder and official-checkpoint loader (torch), for
  `convert NAME`; `load()` reads and checks what every builder needs first, then calls `build()`.

The base class and the registry share this module because they ask each other: `describe()` and `options_from()`
ask the registry about the other families, and the registry checks that what it hands out is a `LaneFamily`.
Decode parameters (`decode_params.py`), data-set presets (`datasets.py`), `TensorSpec` (`tensor_spec.py`), where
families come from (`entry_points.py`) and the convert-side types (`source.py`) have their own modules;
`family.py` re-exports the names a family of another package uses.

Light on purpose (numpy, the standard library and the package's own light modules): the client imports it.
"""
from __future__ import annotations

import contextlib
import importlib
import importlib.util
import sys
from abc import ABC, abstractmethod
from dataclasses import dataclass
from importlib import resources
from types import ModuleType
from typing import TYPE_CHECKING, Any, Generic, Mapping, Sequence, TypeVar

import numpy as np

from ..core.deps import require
from ..errors import ConvertError, EdgeDeployError, PluginError, one_line
from .model_source import ModelSource, SourceFile, source_fields
from .datasets import DatasetPreset
from .decode_params import DecodeParams
from .description import FamilyDescription
from .entry_points import BUILTIN, family_entry_points, family_origin, provider, warn_once
from .plugin_probe import probe_plugins
from .lane import Lane
from .source import FamilyOption, SourceSpec, family_options, one_of, option_flag
from .tensor_spec import TensorSpec

if TYPE_CHECKING:  # pragma: no cover
    from .preprocess import PreprocessSpec

__all__ = ["BrokenFamilyError", "FamilyError", "LaneFamily", "LoadedModel", "asking_families", "described_families",
           "family_fault",
           "family_for_outputs", "family_names", "family_problem", "get_family", "is_plugin", "known_families",
           "register_family", "unregister_family"]


@dataclass
class LoadedModel:
    """A torch module ready to export, with what the manifest says about where it came from."""

    module: Any  # torch.nn.Module
    sample_shape: tuple[int, ...]  # per-sample input shape (without batch)
    # the manifest's "source" section (the family's `source_type`, e.g. from `source_section`); source.trained is
    # False for seeded weights. A mapping (a plug-in family's) is read into the family's source type here, once.
    source: ModelSource
    family: LaneFamily | None = None  # None: found from the exported outputs (the registry)
    decode: DecodeParams | None = None  # the decode defaults the model was trained for (None: the family's)
    preprocess: PreprocessSpec | None = None  # its preprocessing (None: the family's, at the model's input size)
    output_names: tuple[str, ...] | None = None  # the names its outputs are exported under (None: --output-name)

    def __post_init__(self) -> None:
        source: object = self.source
        if not isinstance(source, ModelSource):
            if not isinstance(source, Mapping):
                raise TypeError(f"LoadedModel.source is {type(source).__name__}, not a ModelSource")
            self.source = (self.family.source_type if self.family is not None else ModelSource).from_dict(source)
        if not isinstance(self.source.trained, bool):
            raise TypeError("LoadedModel.source says nothing of trained (true: trained weights, false: seeded ones)")


O = TypeVar("O")  # the family's own convert options (`options_type`); Any for a family without


class LaneFamily(ABC, Generic[O]):
    """One lane-detector family. Subclass it, set the class attributes, register an instance.

    A family with its own convert options subclasses ``LaneFamily[ItsOptions]`` with ``options_type = ItsOptions``,
    so that `options_from` and `build` are typed with them."""

    name: str  # as recorded in manifests and configs, and as `convert NAME`
    title: str  # for people: "LaneATT"
    preprocess: PreprocessSpec
    decode_defaults: DecodeParams
    datasets: Mapping[str, DatasetPreset] = {}
    decoder_module: str  # dotted name of the self-contained decoder module (see the module docstring)
    backbones: tuple[str, ...] = ()  # what `convert NAME --backbone` takes (empty: the family has no choice)
    default_backbone: str | None = None
    default_dataset: str | None = None  # the data set `convert NAME` builds for without --dataset (None: none)
    options_type: type[O] | None = None  # a dataclass of the family's own convert options (`family_options`)
    source_type: type[ModelSource] = ModelSource  # the manifest's "source" of its models: a subclass for own keys

    @abstractmethod
    def lane_outputs(self, outputs: Sequence[TensorSpec], has_batch: bool) -> tuple[TensorSpec, ...]:
        """The outputs the decoder reads, in its order, or ValueError (why, in one line that continues
        "model NAME ...") when `outputs` are not this family's. `has_batch`: shapes lead with the batch axis."""

    @abstractmethod
    def max_points(self, lane_outputs: Sequence[TensorSpec]) -> int:
        """The most points a lane decoded from these outputs (`lane_outputs`' result) has."""

    def matches(self, outputs: Sequence[TensorSpec], has_batch: bool) -> bool:
        try:
            self.lane_outputs(outputs, has_batch)
        except ValueError:
            return False
        return True

    def options(self) -> tuple[FamilyOption, ...]:
        """This family's own convert options (the CLI makes a flag of each)."""
        return family_options(self.options_type)

    def options_from(self, spec: SourceSpec) -> O | None:
        """spec.options as this family's typed options object (None without `options_type`), or ConvertError
        naming the options that belong to other families and the ones this family takes."""
        given = {name: value for name, value in spec.options.items() if value is not None}
        known = {option.name for option in self.options()}
        foreign = [option_flag(name) for name in given if name not in known]
        if foreign:
            takes = ", ".join(["--dataset", "--backbone", "--checkpoint", *(o.flag for o in self.options())])
            owners = sorted({other.title for other in described_families() if other.name != self.name
                             and any(o.flag in foreign for o in other.options)})
            whose = f"only appl{'ies' if len(foreign) == 1 else 'y'} to {' and '.join(owners)}" if owners else \
                "is not an option of any lane family"
            raise ConvertError(f"{' and '.join(foreign)} {whose}; {self.title} takes {takes}.")
        if self.options_type is None:
            return None
        values = {}
        for option in self.options():
            value = given.get(option.name)
            if value is None:
                continue
            if option.choices and value not in option.choices:
                raise ConvertError(f"{self.title} has no {option.flag} {value}; use {one_of(option.choices)}.")
            try:
                values[option.name] = option.value(value)
            except ValueError as exc:
                raise ConvertError(f"{self.title}'s {exc}; give it one.") from None
        return self.options_type(**values)

    def backbone_from(self, spec: SourceSpec) -> str | None:
        """spec.backbone (the family's default when not given), or ConvertError naming the backbones it has."""
        if spec.backbone is None:
            return self.default_backbone
        if spec.backbone not in self.backbones:
            choices = one_of(self.backbones) if self.backbones else "no choice of backbone (drop --backbone)"
            raise ConvertError(f"{self.title} has no --backbone {spec.backbone}; use {choices}.")
        return spec.backbone

    def dataset_from(self, spec: SourceSpec, default: str | None = None) -> str | None:
        """spec.dataset (`default` when not given), or ConvertError naming the data sets this family has presets
        for."""
        dataset = spec.dataset or default
        if dataset is not None and dataset not in self.datasets:
            choices = one_of(list(self.datasets)) if self.datasets else "none (drop --dataset)"
            raise ConvertError(f"{self.title} has no --dataset {dataset} preset; use {choices}.")
        return dataset

    def check_input_shape(self, spec: SourceSpec, shape: Sequence[int], preset: str | None = None) -> None:
        """ConvertError when --input-shape was given and is not the model's (C, H, W) `shape` (of `preset`)."""
        if spec.input_shape is not None and tuple(spec.input_shape[1:]) != tuple(shape):
            where = f"{self.title} for {preset}" if preset else self.title
            raise ConvertError(f"{where} takes {shape[1]}x{shape[2]} input, not --input-shape "
                               f"{','.join(map(str, spec.input_shape))}; drop --input-shape.")

    def source_section(self, spec: SourceSpec, module: Any, *, backbone: str | None, dataset: str | None,
                       dropped: str | None = None, **extra: Any) -> ModelSource:
        """The manifest's "source" section for a model `load` built (a `source_type` record): what it is, the
        checkpoint it came from (path, sha256 and what of it was `dropped`), its parameter count, whether it is
        trained (else its seed), then `extra`: the family's own keys (the fields of its `source_type`; kept as
        they are without one)."""
        trained = spec.checkpoint is not None
        checkpoint = SourceFile.of(spec.checkpoint, dropped or None) if spec.checkpoint is not None else None
        return source_fields(self.source_type, {
            "kind": self.name, "spec": self.name, "backbone": backbone, "dataset": dataset, "checkpoint": checkpoint,
            "parameters": sum(p.numel() for p in module.parameters()), "trained": trained,
            "seed": None if trained else spec.seed, **extra})

    def check_image_size(self, dataset: str | None, decode: DecodeParams) -> tuple[int, int] | None:
        """(H, W) at which convert's FP16, fused and plan lane checks decode this family's lanes and hold their
        limits (pixels at this width): the frames of `dataset` (or of the preset whose decode parameters these
        are), when its preset gives their size; None: the model's input size, limits at 640 wide."""
        preset = self.datasets.get(dataset or "") or next(
            (p for p in self.datasets.values() if p.decode == decode), None)
        return preset.image_size if preset is not None else None

    def recognizes_checkpoint(self, keys: Sequence[str]) -> bool:
        """Whether a state dict with these keys is one of this family's checkpoints (for the message that names
        the right family when another family's checkpoint is given): False unless the family says."""
        return False

    def describe(self) -> FamilyDescription:
        """What `edge-deploy families` shows of this family (JSON by its `to_dict`)."""
        return FamilyDescription(
            name=self.name, title=self.title, origin=family_origin(self.name), backbones=tuple(self.backbones),
            default_backbone=self.default_backbone,
            datasets={name: p.image_size for name, p in self.datasets.items()}, options=self.options(),
            input=(self.preprocess.height, self.preprocess.width), decode=self.decode_defaults)

    def decode_params_for(self, dataset: str | None) -> DecodeParams:
        """The decode defaults of `dataset` (the family's own without one)."""
        if dataset is not None and dataset in self.datasets:
            return self.datasets[dataset].decode
        return self.decode_defaults

    def decoder(self) -> ModuleType:
        return importlib.import_module(self.decoder_module)

    def decode_params_type(self) -> type[DecodeParams]:
        """The class of this family's decode parameters (a manifest's "decode" is read with it)."""
        return type(self.decode_defaults)

    def decode(self, outputs: Sequence[np.ndarray], params: DecodeParams, image_size: tuple[float, float],
               model_width: float) -> list[Lane]:
        """One image's lane outputs (in `lane_outputs` order) -> lanes in an image of `image_size` (H, W)."""
        return self.decoder().decode_outputs(outputs, image_size=image_size, model_width=model_width,
                                             **params.to_dict())

    def decoder_sources(self) -> dict[str, bytes]:
        """The files a server-side postprocess model imports: decode.py (this family's decoder) and lane.py."""
        module = self.decoder()
        with open(module.__file__, "rb") as fh:  # type: ignore[arg-type]
            decoder = fh.read()
        return {"decode.py": decoder, "lane.py": resources.files(__package__).joinpath("lane.py").read_bytes()}

    def load(self, spec: SourceSpec) -> LoadedModel:
        """Build the torch model `convert NAME` exports (weights from spec.checkpoint). What every family's builder
        does first is done here: its own options, --dataset (default `default_dataset`) and --backbone read from
        `spec` and checked, --input-shape checked against `input_shape(dataset)`, torch required; then `build`
        makes the model. A family overrides `build` (or `load` itself); one with neither has no model builder."""
        if type(self).build is LaneFamily.build:
            raise ConvertError(f"the {self.title} family has no model builder; convert a TorchScript file or "
                               "package.module:factory instead.")
        options = self.options_from(spec)
        dataset, backbone = self.dataset_from(spec, self.default_dataset), self.backbone_from(spec)
        shape = self.input_shape(dataset)
        self.check_input_shape(spec, shape, dataset)
        require("torch", f"converting {self.title} from PyTorch")
        return self.build(spec, backbone=backbone, dataset=dataset, options=options, shape=shape)

    def input_shape(self, dataset: str | None) -> tuple[int, int, int]:
        """The model's per-sample input (C, H, W) for `dataset`: its preset's preprocessing size, else the family's."""
        preset = self.datasets.get(dataset or "")
        spec = preset.preprocess if preset is not None and preset.preprocess is not None else self.preprocess
        return (3, spec.height, spec.width)

    def build(self, spec: SourceSpec, *, backbone: str | None, dataset: str | None, options: O | None,
              shape: tuple[int, int, int]) -> LoadedModel:
        """The model `load` returns, from what it read and checked: `backbone` and `dataset` (defaults applied),
        `options` (`options_from`'s object, None without `options_type`) and the input `shape` (C, H, W). torch is
        importable here."""
        raise NotImplementedError  # load() says "no model builder" before calling it



_REGISTRY: dict[str, LaneFamily] = {}


class FamilyError(KeyError):
    """No lane-model family of that name (a KeyError, as it always was); str() is the message, not its repr."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class BrokenFamilyError(PluginError, FamilyError):
    """A family from another package (or registered by other code) that failed: at import, its checks, or a call
    edge-deploy made of it. Its package's bug, said in one line (exit 2), never edge-deploy's; `package` names it."""

    def __init__(self, message: str, *, family: str, package: str, what: str = "") -> None:
        super().__init__(message)
        self.family, self.package, self.what = family, package, what or message


# Plug-ins that failed (name -> why), left out of every list; asked for by name, the error says why again.
_BROKEN: dict[str, BrokenFamilyError] = {}


def register_family(family: LaneFamily) -> LaneFamily:
    """Make `family` known by its name (a family of your own; the built-in ones register themselves)."""
    _REGISTRY[family.name] = family
    _BROKEN.pop(family.name, None)
    return family


def unregister_family(name: str) -> None:
    """Forget a family `register_family` made known (an application's own, or a test's); built-in and entry-point
    families come back when next asked for."""
    _REGISTRY.pop(name, None)
    _BROKEN.pop(name, None)



def is_plugin(family: LaneFamily | str) -> bool:
    """Whether a family is not one of edge-deploy's own (its failures are its package's, not edge-deploy's)."""
    return (family if isinstance(family, str) else family.name) not in BUILTIN


def family_fault(family: LaneFamily | str, what: str) -> BrokenFamilyError:
    """The error for a plug-in family that failed (`what`: "its load() raised ValueError: ..."): one line saying whose
    bug it is. The family is left out of this process's lists from now on, with one warning line."""
    name = family if isinstance(family, str) else family.name
    package = provider(name)
    if package.startswith("the code"):
        fix = "fix that code"
    else:
        fix = f"update or reinstall {package}, or uninstall it"
    error = BrokenFamilyError(f"lane-model family {name!r} of {package} is broken: {what}; this is a bug of "
                              f"{package}, not of edge-deploy or of your input: {fix}.", family=name, package=package,
                              what=what)
    _BROKEN.setdefault(name, error)
    _REGISTRY.pop(name, None)
    warn_once(name, f"lane-model family {name!r} of {package} is left out: {what}.")
    return error


def family_problem(family: Any, name: str) -> str | None:
    """Why `family` cannot serve as the family NAME (one phrase), or None: checked once, when a plug-in is loaded, so
    that nothing edge-deploy asks of it later fails on a wrong type."""
    from .preprocess import PreprocessSpec

    if not isinstance(family, LaneFamily):
        return f"it is {type(family).__name__}, not a LaneFamily"
    for attribute in _READ:  # a property that raises is the plug-in's failure, said here, never a traceback later
        try:
            getattr(family, attribute, None)
        except Exception as exc:  # noqa: BLE001 - a third-party property can fail in any way
            return f"its {attribute} raised {type(exc).__name__}: {one_line(exc, 160)}"
    checks: list[tuple[bool, str]] = [
        (isinstance(family.name, str) and family.name == name, f"its name is {family.name!r}, not the entry point's "
                                                               f"{name!r}"),
        (isinstance(getattr(family, "title", None), str) and bool(family.title), "its title is not a non-empty string"),
        (isinstance(getattr(family, "preprocess", None), PreprocessSpec), "its preprocess is not a PreprocessSpec"),
        (isinstance(getattr(family, "decode_defaults", None), DecodeParams),
         "its decode_defaults is not a DecodeParams"),
        (isinstance(family.datasets, Mapping) and all(isinstance(k, str) and isinstance(v, DatasetPreset)
                                                      for k, v in family.datasets.items()),
         "its datasets is not a mapping of names to DatasetPreset"),
        (isinstance(family.backbones, (tuple, list)) and all(isinstance(b, str) for b in family.backbones),
         f"its backbones are not names ({family.backbones!r:.60})"),
        (family.default_backbone is None or family.default_backbone in family.backbones,
         f"its default_backbone {family.default_backbone!r:.40} is not one of its backbones"),
        (isinstance(getattr(family, "decoder_module", None), str), "its decoder_module is not a module name"),
    ]
    for ok, problem in checks:
        if not ok:
            return problem
    try:
        found = importlib.util.find_spec(family.decoder_module) is not None
    except Exception:  # noqa: BLE001 - its parent package fails to import, or the name is malformed
        found = False
    if not found:
        return f"its decoder_module {family.decoder_module!r} cannot be found (install copies it beside the server's " \
               "pipeline models)"
    try:
        family.options()
    except Exception as exc:  # noqa: BLE001 - a wrong option type, a name convert has
        return f"{type(exc).__name__}: {one_line(exc, 200)}"
    return None


# What edge-deploy reads of a family (its class attributes, which a plug-in may make properties).
_READ = ("name", "title", "preprocess", "decode_defaults", "datasets", "decoder_module", "backbones", "default_backbone",
         "default_dataset", "options_type", "source_type")


def _load_entry_point(name: str, point: Any) -> LaneFamily:
    """The plug-in family NAME, imported and checked; BrokenFamilyError (whose bug, in one line) when it fails in any
    way. What it prints on import goes to stderr (never into a command's output), and a sys.exit() there is its
    failure, not the command's exit."""
    try:
        with contextlib.redirect_stdout(sys.stderr):
            loaded = point.load()
            family = loaded() if isinstance(loaded, type) and issubclass(loaded, LaneFamily) else loaded
    except KeyboardInterrupt:
        raise
    except SystemExit as exc:
        raise family_fault(name, f"importing {point.value} called sys.exit({exc.code!r})") from None
    except BaseException as exc:  # noqa: BLE001 - a third-party package can fail in any way on import
        raise family_fault(name, f"importing {point.value} failed ({type(exc).__name__}: {one_line(exc, 160)})") \
            from None
    try:
        problem = family_problem(family, name)
    except Exception as exc:  # noqa: BLE001 - a property that raises only when read a second time, a check's call
        problem = f"checking it raised {type(exc).__name__}: {one_line(exc, 160)}"
    if problem:
        raise family_fault(name, f"{point.value}: {problem}")
    return family


def get_family(name: str, *, probe: bool = True) -> LaneFamily:
    """The family called `name`: registered, built in, or from an installed package's entry point; KeyError (with
    the known names) when there is none, BrokenFamilyError (a KeyError and an EdgeDeployError, naming the package and
    why) when its package is broken. A plug-in is probed in a child process before it is imported here, unless
    probe=False (the client's: an app imports the family it serves in its own process anyway, and a child Python at
    its first detect would cost that call's deadline)."""
    if name in _BROKEN:
        raise _BROKEN[name]
    if name not in _REGISTRY:
        if name in BUILTIN:
            register_family(importlib.import_module(BUILTIN[name]).FAMILY)
        elif name in (points := family_entry_points()):
            if probe:
                _probe_first(name)
            register_family(_load_entry_point(name, points[name]))
    if name not in _REGISTRY:
        raise FamilyError(f"no lane-model family {name!r} (known: {', '.join(family_names())}; a family of another "
                          "package needs that package installed)")
    return _REGISTRY[name]



def family_names() -> list[str]:
    """Every family's name: the built-in ones first, in their order, then the others sorted (broken ones too: asked
    for by name, they say why they are left out)."""
    return [*BUILTIN, *sorted({*_REGISTRY, *family_entry_points(), *_BROKEN} - set(BUILTIN))]


def known_families() -> list[LaneFamily]:
    """Every family that loads (`family_names` order), plug-ins imported into this process; one whose package is
    broken is left out here, with one warning line naming the package and why, and named by the error when it is
    asked for by name. What lists families for people (`families`, `convert`'s flags) uses `described_families`,
    which imports no plug-in here."""
    found = []
    for name in family_names():
        try:
            found.append(get_family(name))
        except BrokenFamilyError:
            continue
    return found


def described_families() -> list[FamilyDescription]:
    """What `families` and `convert`'s flags show of every family that loads (`family_names` order), without importing
    a plug-in into this process: built-in and registered families (and plug-ins already imported here) describe
    themselves; the other plug-ins are imported and described in a child process (plugin_probe.py: each within
    EDGE_DEPLOY_PLUGIN_TIMEOUT seconds, its exits and threads contained there), once per process. One that fails
    there (a hang, a property that raises, a failed check) is left out with one warning line naming its package and
    why, and asked for by name later, says so without being imported."""
    _probe([name for name in family_names()
            if name not in BUILTIN and name not in _REGISTRY and name not in _BROKEN and name not in _PROBED])
    out = []
    for name in family_names():
        if name in _BROKEN:
            continue
        if name in _PROBED and name not in _REGISTRY:
            out.append(_PROBED[name])
            continue
        try:
            family = get_family(name)
        except BrokenFamilyError:
            continue
        try:
            out.append(family.describe())
        except Exception as exc:  # noqa: BLE001 - a plug-in imported here can fail in any way
            if not is_plugin(family):
                raise
            family_fault(family, f"its describe() raised {type(exc).__name__}: {one_line(exc, 120)}")
    return out


# Plug-in families described by the child process that probed them, by name (never imported here for that).
_PROBED: dict[str, FamilyDescription] = {}
_ISOLATED = False  # this process is the probe's child (plugin_child.py): it imports plug-ins unprobed


def _probe(names: list[str]) -> None:
    """Probe the plug-ins `names` in a child process (plugin_probe.py): each sound one is described (_PROBED), each
    broken one left out with its warning line (_BROKEN)."""
    if not names:
        return
    for name, (state, found) in probe_plugins(names).items():
        if state != "ok":
            family_fault(name, str(found))
            continue
        try:
            _PROBED[name] = FamilyDescription.from_dict(found)
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            family_fault(name, f"its description cannot be read ({type(exc).__name__}: {one_line(exc, 120)})")


def _probe_first(name: str) -> None:
    """Before the plug-in family `name` is imported here: probed in a child first (once per process), so that one
    whose import hangs, exits or fails is refused as broken (BrokenFamilyError) without ever running here, whatever
    asks for it (`convert NAME`, a manifest or a served model's config naming it)."""
    if not _ISOLATED and name not in _PROBED:
        _probe([name])
    if name in _BROKEN:
        raise _BROKEN[name]


def isolate_plugins_here() -> None:
    """This process is the probe's child: plug-ins are imported here without a probe of their own."""
    global _ISOLATED
    _ISOLATED = True


def asking_families(question: str, ask: Any, *, skip: str | None = None) -> list[LaneFamily]:
    """The families (but `skip`) for which `ask(family)` is true: the built-in and registered ones first; only when
    none of them answers, the plug-ins, imported here after the out-of-process probe (`described_families`) found them
    sound, so that a question about a built-in family's model never imports a plug-in, and a plug-in that hangs on
    import is never imported here. A plug-in whose answer raises is that plug-in's failure: it is left out (one
    warning line), never the caller's (a user's conversion of another family). `question` names the call for the
    warning ("recognizes_checkpoint()")."""
    first = [get_family(name) for name in BUILTIN] + [f for name, f in list(_REGISTRY.items()) if name not in BUILTIN]
    found = _answering(question, ask, skip, first)
    if found:
        return found
    described_families()  # probes the plug-ins not imported yet; the broken ones are left out of family_names' below
    plugins = []
    for name in family_names():
        if name in BUILTIN or name in _BROKEN or any(f.name == name for f in first):
            continue
        try:
            plugins.append(get_family(name))
        except BrokenFamilyError:
            continue
    return _answering(question, ask, skip, plugins)


def _answering(question: str, ask: Any, skip: str | None, families: list[LaneFamily]) -> list[LaneFamily]:
    out = []
    for family in families:
        if family.name == skip:
            continue
        try:
            answer = ask(family)
        except EdgeDeployError:
            raise
        except Exception as exc:  # noqa: BLE001 - a plug-in can fail in any way
            if not is_plugin(family):
                raise
            family_fault(family, f"its {question} raised {type(exc).__name__}: {one_line(exc, 120)}")
            continue
        if answer:
            out.append(family)
    return out


def family_for_outputs(outputs: Sequence[TensorSpec], has_batch: bool) -> LaneFamily | None:
    """The first family (built-in ones first) whose outputs these are, or None."""
    found = asking_families("matches()", lambda family: family.matches(outputs, has_batch))
    return found[0] if found else None
