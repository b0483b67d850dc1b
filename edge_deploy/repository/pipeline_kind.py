"""Which server-side pipeline `install --pipeline` builds: the ensemble or one BLS Python model.

- ``ensemble``: NAME_preprocess -> NAME -> NAME_postprocess as a Triton ensemble (three models,
  tensors passed between backends through shared memory).
- ``bls``: one Python-backend model NAME_pipeline that preprocesses, calls NAME itself through
  Business Logic Scripting and decodes (triton_models/bls_model.py).

Both are named NAME_pipeline and take and return the same tensors, so LaneDetClient cannot tell
them apart. The kind is recorded in the pipeline's install.json and config (`edge_deploy.pipeline`),
so rollback rebuilds the same kind and a later install without --pipeline keeps it.
"""
from __future__ import annotations

import enum
from typing import Any

from ..errors import RepositoryError
from ..lanedet.contract import PARAM_PIPELINE


class PipelineKind(str, enum.Enum):
    ENSEMBLE = "ensemble"
    BLS = "bls"


KINDS = tuple(k.value for k in PipelineKind)
BLS_SPEC = "pipeline.json"  # in each version of a BLS NAME_pipeline: what to call and how (written from the manifest)


def pipeline_kind(value: bool | str | PipelineKind | None) -> PipelineKind | None:
    """`install`'s pipeline argument checked once: None (none), True (the ensemble, as before kinds existed),
    False (none), a PipelineKind or its name."""
    if value is None or value is False:
        return None
    if value is True:
        return PipelineKind.ENSEMBLE
    try:
        return PipelineKind(value)
    except ValueError:
        raise RepositoryError(
            f"unknown pipeline {value!r}: use --pipeline {' or --pipeline '.join(KINDS)} (or --no-pipeline)."
        ) from None


def kind_of_config(config: Any) -> PipelineKind:
    """The kind of an NAME_pipeline ModelConfig (an ensemble platform, or the parameter install writes)."""
    if config.platform == "ensemble" or PARAM_PIPELINE not in config.parameters:
        return PipelineKind.ENSEMBLE
    try:
        return PipelineKind(config.parameters[PARAM_PIPELINE].string_value)
    except ValueError:
        return PipelineKind.ENSEMBLE
