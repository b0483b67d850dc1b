"""cli/convert.py's ConvertOptions: the command's parameters are its fields, and the library's inputs are made
from it once (SourceSpec, ExportSettings, EngineOptions)."""
from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import typer.main

from edge_deploy.cli.convert import ConvertOptions
from edge_deploy.errors import ConvertError


def _command():
    from edge_deploy.cli import app

    return typer.main.get_command(app).commands["convert"]


def test_the_command_takes_the_fields_in_order_then_the_families_flags() -> None:
    names = [p.name for p in _command().params]
    fields = [f.name for f in dataclasses.fields(ConvertOptions) if f.name != "family_options"]
    assert names[:len(fields)] == fields
    assert "anchor_order" in names[len(fields):]  # LaneATT's own flag, from the family registry


def _options(**given) -> ConvertOptions:
    """The options as the command builds them from its keyword arguments (the fields' defaults for the rest)."""
    return ConvertOptions.of({"model": "laneatt", "anchor_order": None, **given})


def test_defaults_and_given_values_reach_the_library_settings() -> None:
    options = _options(output=Path("out"), min_batch=2, output_name="a, b", workspace="512M", dla_core=1,
                       anchor_order="stable")
    assert options.family_options == {"anchor_order": "stable"}
    source = options.source()
    assert (source.model, source.options, source.seed) == ("laneatt", {"anchor_order": "stable"}, 0)
    settings = options.export_settings()
    assert (settings.batch.min, settings.batch.opt, settings.batch.max) == (2, 2, 4)
    assert settings.output_names == ("a", "b") and settings.opset == 17
    engine = options.engine_options()
    assert (engine.workspace, engine.dla_core, engine.builder) == (512 << 20, 1, "auto")


@pytest.mark.parametrize("given, words", [
    ({"batch": 2, "max_batch": 8}, "--batch fixes the batch size"),
    ({"frame_size": "640x360"}, "--frame-size is the camera frame size of --fuse-preprocess"),
])
def test_what_does_not_fit_is_refused_when_the_settings_are_made(given, words) -> None:
    with pytest.raises(ConvertError, match=words):
        _options(**given).export_settings()


def test_a_family_option_may_not_take_a_name_of_converts_own() -> None:
    # issue 44 item 4: the registry refuses a plug-in option named like one of convert's (`output`) from this list;
    # it must name every option convert has, or such a plug-in breaks convert's flags again
    from dataclasses import fields

    from edge_deploy.cli.convert import ConvertOptions
    from edge_deploy.lanedet.family import CONVERT_OPTION_NAMES

    assert {f.name for f in fields(ConvertOptions)} <= CONVERT_OPTION_NAMES
