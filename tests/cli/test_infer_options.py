"""cli/infer.py's InferOptions: the command's parameters are its fields; what cannot work is refused once,
in one line, before any file is read or any server is asked."""
from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import typer.main

from edge_deploy.cli.infer import InferOptions
from edge_deploy.errors import ClientError


def test_the_command_takes_the_fields_in_order() -> None:
    from edge_deploy.cli import app

    names = [p.name for p in typer.main.get_command(app).commands["infer"].params]
    assert names == [f.name for f in dataclasses.fields(InferOptions)]


@pytest.mark.parametrize("given, words", [
    ({}, "no images given"),
    ({"images": ["a.png"], "png": False}, "--no-png without --json writes nothing"),
    ({"images": ["a.png"], "max_frames": -1}, "--max-frames must be 0 (no limit) or more (got -1)"),
    ({"images": ["a.png"], "timeout": 0.0}, "--timeout must be more than 0 seconds"),
    ({"images": ["a.png"], "top_k": 0}, "--top-k"),
])
def test_what_cannot_work_is_one_line(given, words) -> None:
    with pytest.raises(ClientError) as info:
        InferOptions(**given).checked()
    assert words in str(info.value) and "\n" not in str(info.value)


def test_an_out_below_a_file_is_refused(tmp_path) -> None:
    (tmp_path / "taken").write_text("a file\n")
    with pytest.raises(ClientError, match="cannot be a directory: .*taken is a file"):
        InferOptions(images=["a.png"], out=tmp_path / "taken" / "lanes").checked()


def test_videos_and_images_are_told_apart() -> None:
    options = InferOptions(images=["a.png", "drive.mp4", "frames", "/dev/video0"]).checked()
    assert options.videos() == ["drive.mp4", "/dev/video0"]
    assert options.image_paths() == [Path("a.png"), Path("frames")]
