"""Issue 34 item 15: inputs the decoders and the client must refuse in one line instead of decoding them silently
(or with a builtin error): another data set's UFLDv2 outputs, no outputs at all, a model width of 0, float frames
of another scale, and a video file that is not a video."""
from __future__ import annotations

import numpy as np
import pytest

from edge_deploy.errors import FrameError
from edge_deploy.lanedet.lane import DecodeError


def ufldv2_outputs(rows: int, cols: int, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.normal(size=shape).astype(np.float32)
            for shape in ((200, rows, 4), (100, cols, 4), (2, rows, 4), (2, cols, 4))]


def test_ufldv2_outputs_of_another_data_set_are_refused() -> None:
    from edge_deploy.lanedet.ufldv2.decode import decode_ufldv2

    culane = ufldv2_outputs(72, 81)
    decode_ufldv2(culane, dataset="culane")
    with pytest.raises(DecodeError, match="72 row and 81 column anchors, dataset='tusimple' 56 and 41; pass "
                                          "dataset='culane'"):
        decode_ufldv2(culane, dataset="tusimple")
    decode_ufldv2(culane, dataset="tusimple", row_anchor=(0.42, 1.0))  # anchors given: the caller knows the model
    for nothing in (None, 3, "outputs"):
        with pytest.raises(DecodeError, match="takes its 4 outputs"):
            decode_ufldv2(nothing)


def test_laneatt_model_width_must_be_a_width() -> None:
    from edge_deploy.lanedet.laneatt.decode import decode_lanes

    raw = np.zeros((10, 77), np.float32)
    for width in (0, -640, float("nan"), "640"):
        with pytest.raises(DecodeError, match="model_width must be the model's input width"):
            decode_lanes(raw, model_width=width)


def test_float_frames_of_another_scale_are_refused() -> None:
    from edge_deploy.client.frames import check_frame

    assert check_frame(np.full((4, 4, 3), 254.7, np.float32)).max() == 255
    assert check_frame(np.full((4, 4, 3), 300.0, np.float32)).max() == 255  # float maths' overshoot: clipped
    for value in (1000.0, -300.0, 65535.0):
        with pytest.raises(FrameError, match=f"holds float values from {value:g} to {value:g}, beyond 0..255"):
            check_frame(np.full((4, 4, 3), value, np.float32))


@pytest.mark.parametrize("content", [b"", b"this is a text file, not a video\n"], ids=["empty", "text"])
def test_a_file_that_is_no_video_is_not_blamed_on_devices(tmp_path, content) -> None:
    from edge_deploy.media import open_video

    path = tmp_path / "drive.mp4"
    path.write_bytes(content)
    with pytest.raises(FrameError) as info:
        open_video(str(path))
    message = str(info.value)
    assert f"cannot open video {path}: the file ({len(content)} bytes) is empty, damaged or not a video" in message
    assert "group video" not in message and "\n" not in message
