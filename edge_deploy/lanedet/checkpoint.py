"""Reading official checkpoints safely, and saying in one line why one does not fit a model (torch).

Shared by the families' loaders: `torch_load` (weights_only, so a pickle we are handed never runs
code), `state_dict_from` ({'model': state_dict} or a bare state_dict) and `fit_problems` (the
missing, unexpected and mis-shaped keys a strict load would refuse).
"""
from __future__ import annotations

import re
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping

if TYPE_CHECKING:
    from torch import Tensor

from ..errors import CheckpointError, ConvertError
from .lane_family import asking_families, get_family


def first(names: list[str], count: int = 3) -> str:
    shown = ", ".join(names[:count])
    return shown + (", ..." if len(names) > count else "")


def state_dict_from(obj: Any) -> dict[str, Tensor] | None:
    if isinstance(obj, dict) and isinstance(obj.get("model"), dict):
        obj = obj["model"]
    from torch import Tensor  # here: checkpoint_path, above, is asked before torch is known to be there

    if isinstance(obj, dict) and obj and all(isinstance(k, str) and isinstance(v, Tensor) for k, v in obj.items()):
        return obj
    return None


def backbone_hint(state: Mapping[str, Tensor], stage3: str) -> str | None:
    """"--backbone resnet34" / "resnet18" from the depth of ResNet's third stage (`stage3`: its key prefix, e.g.
    "model.layer3"), or None when the checkpoint has neither."""
    if f"{stage3}.5.conv1.weight" in state:
        return "--backbone resnet34"
    if f"{stage3}.1.conv1.weight" in state:
        return "--backbone resnet18"
    return None


def checkpoint_path(path: Path | str, family_title: str) -> Path:
    """`path` when it is a file, else a one-line CheckpointError saying what is there instead."""
    from ..core.bounded_read import special_kind

    path = Path(path)
    kind = special_kind(path)
    if kind is not None:  # never opened: a FIFO blocks torch.load, a device never ends
        raise CheckpointError(f"checkpoint {path} is {kind}, not a regular file; pass the path of a {family_title} "
                              "checkpoint file with --checkpoint")
    if path.is_dir():
        raise CheckpointError(f"checkpoint {path} is a directory; pass the {family_title} checkpoint file inside it "
                              "with --checkpoint")
    if not path.is_file():
        raise CheckpointError(f"checkpoint {path} not found; pass the path of a {family_title} checkpoint file with "
                              "--checkpoint")
    return path


def refuse_other_family(path: Path, state: Mapping[str, Tensor], family_name: str) -> None:
    """A CheckpointError naming the family a checkpoint belongs to when another family recognises its keys
    (`LaneFamily.recognizes_checkpoint`); nothing when none does."""
    keys = [key.removeprefix("module.") if isinstance(key, str) else key for key in state]
    others = asking_families("recognizes_checkpoint()", lambda f: f.recognizes_checkpoint(keys), skip=family_name)
    if others:
        family = others[0]
        raise CheckpointError(f"checkpoint {path} is not a {get_family(family_name).title} checkpoint: this is a "
                              f"{family.title} checkpoint: edge-deploy convert {family.name} --checkpoint {path}")


def fit_problems(expected: Mapping[str, Tensor], state: Mapping[str, Tensor]) -> str:
    """What a strict load of `state` into a model whose state_dict is `expected` would refuse ("" when it fits)."""
    missing = [k for k in expected if k not in state]
    unexpected = [k for k in state if k not in expected]
    misshaped = [f"{k} {list(state[k].shape)} vs {list(v.shape)}"
                 for k, v in expected.items() if k in state and state[k].shape != v.shape]
    problems = []
    if missing:
        problems.append(f"{len(missing)} missing ({first(missing)})")
    if unexpected:
        problems.append(f"{len(unexpected)} unexpected ({first(unexpected)})")
    if misshaped:
        problems.append(f"{len(misshaped)} mis-shaped (checkpoint vs model: {first(misshaped, 2)})")
    return "; ".join(problems)


def torch_load(path: Path, what: str, resave: str, error: type[ConvertError] = CheckpointError) -> Any:
    """torch.load with weights_only=True: a checkpoint is data, and a pickle we are handed must
    not run code. Failures become one-line errors."""
    import torch

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # e.g. "Detected pickle protocol 4": the error below says what matters
            return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # torch raises pickle, zip (RuntimeError), EOF and other errors for bad files
        text = str(exc)
        # torch < 2.6 says "Unsupported global: GLOBAL x.y", newer ones "unsupported GLOBAL x.y whose module ..."
        unsafe = re.search(r"[Uu]nsupported (?:global: )?GLOBAL ([\w.]+)", text)
        if unsafe:
            raise error(
                f"{what} {path} holds Python objects ({unsafe.group(1)}) that are not unpickled for safety; "
                f"if you trust the file, re-save just the tensors: {resave}"
            ) from exc
        detail = re.search(r"WeightsUnpickler error:\s*(\S[^\n]*)", text)
        reason = detail.group(1) if detail else (text.strip().split(". ")[0].splitlines() or [""])[0]
        reason = reason[:120] or type(exc).__name__
        if "Weights only load failed" in text:
            # The safe loader read the file and refused what is in it: it is not damaged.
            raise error(
                f"{what} {path} is a pickle the safe loader (torch.load weights_only=True) refuses ({reason}); "
                f"it may carry code, which edge-deploy never runs: if you trust the file, re-save just the "
                f"tensors: {resave}"
            ) from exc
        raise error(
            f"cannot read {what} {path}: not a readable torch file, corrupt or truncated ({reason}); "
            "re-download it or re-save it with torch.save"
        ) from exc


