"""edge_deploy.media.images: image files named by paths, read as BGR frames, with one-line errors."""
from __future__ import annotations

import cv2
import numpy as np
import pytest

from edge_deploy.errors import FrameError
from edge_deploy.media import image_paths, read_image, read_images


def test_an_image_reads_back_as_the_bgr_frame_written(tmp_path) -> None:
    frame = np.random.default_rng(0).integers(0, 256, (30, 40, 3), dtype=np.uint8)
    cv2.imwrite(str(tmp_path / "a.png"), frame)
    np.testing.assert_array_equal(read_image(tmp_path / "a.png"), frame)


def test_a_directory_gives_its_images_sorted_and_a_file_stays_as_given(tmp_path) -> None:
    folder = tmp_path / "frames"
    folder.mkdir()
    frame = np.zeros((8, 8, 3), np.uint8)
    for name in ("b.JPG", "a.png", "c.bmp"):
        (folder / name).write_bytes(cv2.imencode(".png", frame)[1].tobytes())  # decoded by content, not suffix
    (folder / "notes.txt").write_text("not an image\n")
    cv2.imwrite(str(tmp_path / "z.png"), frame)
    paths = [folder / "a.png", folder / "b.JPG", folder / "c.bmp", tmp_path / "z.png"]
    assert image_paths([folder, tmp_path / "z.png"]) == paths
    assert [name for name, _ in read_images([folder, tmp_path / "z.png"])] == [str(p) for p in paths]


@pytest.mark.parametrize("content, needle", [
    (None, "does not exist"), (b"", "is empty \\(0 bytes\\)"), (b"plain text\n", "cannot decode")])
def test_what_is_no_image_is_a_one_line_frame_error(tmp_path, content, needle) -> None:
    path = tmp_path / "x.png"
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(FrameError, match=needle) as info:
        read_image(path)
    assert "\n" not in str(info.value)


def test_a_directory_without_images_is_a_frame_error(tmp_path) -> None:
    with pytest.raises(FrameError, match="is a directory with no images in it"):
        image_paths([tmp_path])
