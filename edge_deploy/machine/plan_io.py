"""Whether a plan's I/O tensors are the manifest's: names, datatypes, shapes and the batch range.

Asked by the plan check after a build (engine/verify.py) and by the repository before a plan goes in
(repository/signature.py).
"""
from __future__ import annotations

from typing import Sequence

from ..artifact.manifest import IOSignature
from ..errors import EngineError
from . import tensorrt_api


def check_io(tensors: Sequence[tensorrt_api.TensorInfo], io: IOSignature, where: str = "the plan") -> None:
    """The engine's I/O names, datatypes and shapes must be the manifest's; one-line EngineError otherwise."""
    expected = {t.name: (True, t) for t in io.inputs}
    expected.update({t.name: (False, t) for t in io.outputs})
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
        if tensor.datatype != spec.datatype:
            raise EngineError(
                f"{where}: {kind} {name!r} is {tensor.datatype}, the manifest says {spec.datatype}; rebuild it."
            )
        want = list(spec.shape)
        if len(want) != len(tensor.shape) or any(w != g for w, g in zip(want, tensor.shape)):
            raise EngineError(
                f"{where}: {kind} {name!r} has shape {tensor.shape}, the manifest says {want}; rebuild it."
            )
    batch = io.batch
    for tensor in tensors:
        if tensor.is_input and tensor.profile is not None and batch.dynamic:
            low, high = tensor.profile[0][0], tensor.profile[2][0]
            if (low, high) != (batch.min, batch.max):
                raise EngineError(
                    f"{where}: input {tensor.name!r} accepts batch {low}..{high}, the manifest says "
                    f"{batch.min}..{batch.max}; rebuild it."
                )
