"""The lane-model family interface, as a family of another package imports it (docs/families.md).

Each name lives in the module of its job: the `LaneFamily` base class, `LoadedModel` and the registry in
`lane_family.py`; decode parameters in `decode_params.py`; `DatasetPreset` in `datasets.py`; `TensorSpec` in
`tensor_spec.py`; where families come from (built-in ones, entry points) in `entry_points.py`; the convert-side
`SourceSpec` and `FamilyOption` in `source.py`. edge-deploy's own modules import them from there (the client
never imports this module, which brings the convert side with it).
"""
from __future__ import annotations

from .datasets import DatasetPreset
from .decode_params import (DECODE_OPTIONS, DecodeParams, DecodeParamsError, ScoreNmsDecodeParams, check_conf_threshold,
                            check_nms_threshold, check_top_k)
from .entry_points import ENTRY_POINT_GROUP, LEGACY_FAMILY, family_origin, family_package
from .lane_family import (BrokenFamilyError, FamilyError, LaneFamily, LoadedModel, asking_families, described_families,
                          family_fault,
                          family_for_outputs, family_names, family_problem, get_family, is_plugin, known_families,
                          register_family, unregister_family)
from .source import CONVERT_OPTION_NAMES, FamilyOption, SourceSpec, family_options, one_of, option_flag
from .tensor_spec import TensorSpec

# docs/families.md showed LaneATT's score/NMS parameters under this name before issue 47 named them
# ScoreNmsDecodeParams: a family written from that page keeps working.
DecodeDefaults = ScoreNmsDecodeParams

__all__ = ["CONVERT_OPTION_NAMES", "DECODE_OPTIONS", "ENTRY_POINT_GROUP", "LEGACY_FAMILY", "BrokenFamilyError",
           "DatasetPreset", "DecodeDefaults", "DecodeParams", "DecodeParamsError", "FamilyError", "FamilyOption",
           "described_families",
           "LaneFamily", "LoadedModel", "ScoreNmsDecodeParams", "SourceSpec", "TensorSpec", "asking_families",
           "check_conf_threshold", "check_nms_threshold", "check_top_k", "family_fault", "family_for_outputs",
           "family_names", "family_options", "family_origin", "family_package", "family_problem", "get_family",
           "is_plugin", "known_families", "one_of", "option_flag", "register_family", "unregister_family"]
