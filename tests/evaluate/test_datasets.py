"""Evaluation data readers: CULane and TuSimple layouts written here, and reserved-seed synthetic frames."""
from __future__ import annotations

import json
from pathlib import Path

import cv2
import numpy as np
import pytest

from edge_deploy.errors import EdgeDeployError, EvaluationError
from edge_deploy.evaluate import datasets as d
from edge_deploy.evaluate.metrics import CULaneEvaluator


def _image(path: Path, seed: int = 0) -> np.ndarray:
    yy, xx = np.mgrid[0:48, 0:80]
    frame = np.stack([xx * 3, yy * 5, np.full_like(xx, 40 + 100 * seed)], axis=2).astype(np.uint8)  # smooth: JPEG keeps it
    path.parent.mkdir(parents=True, exist_ok=True)
    assert cv2.imwrite(str(path), frame)
    return frame


# --- CULane -----------------------------------------------------------------------------------


def test_lines_file_round_trip(tmp_path):
    lanes = [
        np.array([[10.25, 100.0], [20.5, 150.0], [31.0, 200.0]], dtype=np.float32),
        np.array([[-12.5, 300.0], [40.0, 350.0]], dtype=np.float32),  # runs off the left edge
    ]
    path = d.write_lines_file(tmp_path / "a" / "00000.lines.txt", lanes + [np.zeros((1, 2))])
    back = d.read_lines_file(path)
    assert len(back) == 2
    for got, want in zip(back, lanes):
        assert got.dtype == np.float32
        np.testing.assert_allclose(got, want, atol=1e-5)


def test_lines_file_as_culane_stores_it(tmp_path):
    # CULane lists points bottom-up with a trailing space; negative x is kept by the metric readers.
    path = tmp_path / "x.lines.txt"
    path.write_text("-5.5 590 100.25 400 200 250 \n\n7 8 \n300 590 400 300 \n")
    lanes = d.read_lines_file(path)
    assert len(lanes) == 2  # the blank line and the one-point line are dropped
    np.testing.assert_allclose(lanes[0], [[200, 250], [100.25, 400], [-5.5, 590]])  # top to bottom
    np.testing.assert_allclose(lanes[1], [[400, 300], [300, 590]])
    dropped = d.read_lines_file(path, drop_negative=True)
    np.testing.assert_allclose(dropped[0], [[200, 250], [100.25, 400]])


@pytest.mark.parametrize("text", ["1 2 3\n", "1 2 a b\n", "nan 1 2 3\n", "1 2 inf 4\n"])
def test_malformed_lines_file(tmp_path, text):
    path = tmp_path / "bad.lines.txt"
    path.write_text("1 2 3 4\n" + text)
    with pytest.raises(EvaluationError, match=r"malformed lane annotation .*bad\.lines\.txt:2") as err:
        d.read_lines_file(path)
    assert "\n" not in str(err.value)


def _culane_tree(tmp_path: Path) -> tuple[Path, list[np.ndarray]]:
    root = tmp_path / "culane"
    frames = []
    for i, name in enumerate(["driver_23_30frame/05151649_0422.MP4/00000.jpg", "driver_37_30frame/a.MP4/00030.jpg"]):
        frames.append(_image(root / name, seed=i))
        d.write_lines_file((root / name).with_suffix(".lines.txt"), [np.array([[i, 10.0], [i + 5, 40.0]])])
    (root / "list").mkdir()
    # A test list (leading slash) and a train_gt-style line (extra fields, no slash).
    (root / "list" / "test.txt").write_text(
        "/driver_23_30frame/05151649_0422.MP4/00000.jpg\n\ndriver_37_30frame/a.MP4/00030.jpg /seg.png 1 1 0 0\n"
    )
    return root, frames


def test_culane_list_and_frames(tmp_path):
    root, frames = _culane_tree(tmp_path)
    entries = d.read_culane_list(root, "list/test.txt")
    assert [e.name for e in entries] == [
        "/driver_23_30frame/05151649_0422.MP4/00000.jpg",
        "driver_37_30frame/a.MP4/00030.jpg",
    ]
    assert entries[1].lines == root / "driver_37_30frame/a.MP4/00030.lines.txt"
    got = list(d.culane_frames(root, root / "list" / "test.txt"))
    assert len(got) == 2
    for (name, frame, truth), want, i in zip(got, frames, range(2)):
        assert frame.shape == want.shape and frame.dtype == np.uint8
        assert np.abs(frame.astype(int) - want).mean() < 3  # JPEG, not bit-exact
        np.testing.assert_allclose(truth[0], [[i, 10], [i + 5, 40]])
    assert len(list(d.culane_frames(root, "list/test.txt", limit=1))) == 1


def test_culane_separate_annotation_root(tmp_path):
    root, _ = _culane_tree(tmp_path)
    anno = tmp_path / "anno"
    name = "driver_23_30frame/05151649_0422.MP4/00000"
    d.write_lines_file(anno / f"{name}.lines.txt", [np.array([[1.0, 2.0], [3.0, 4.0]])])
    (root / "list" / "one.txt").write_text(f"/{name}.jpg\n")
    (entry,) = d.read_culane_list(root, "list/one.txt", annotations_root=anno)
    assert entry.lines == anno / f"{name}.lines.txt"


def test_culane_errors(tmp_path):
    root, _ = _culane_tree(tmp_path)
    with pytest.raises(EvaluationError, match="list file not found"):
        d.culane_frames(root, "list/missing.txt")  # raised at the call, before any frame
    (root / "list" / "empty.txt").write_text("\n")
    with pytest.raises(EvaluationError, match="names no images"):
        d.read_culane_list(root, "list/empty.txt")
    (root / "list" / "ghost.txt").write_text("/driver_23_30frame/ghost.jpg\n")
    with pytest.raises(EvaluationError, match=r"image not found: .*ghost\.jpg \(line 1 of"):
        d.read_culane_list(root, "list/ghost.txt")
    (root / "driver_37_30frame/a.MP4/00030.lines.txt").unlink()
    with pytest.raises(EvaluationError, match=r"lane annotation not found: .*00030\.lines\.txt \(line 3 of"):
        d.read_culane_list(root, "list/test.txt")
    broken = root / "broken.jpg"
    broken.write_bytes(b"not a jpeg")
    with pytest.raises(EvaluationError, match="cannot decode image"):
        d.read_image(broken)
    with pytest.raises(EvaluationError, match="image not found"):
        d.read_image(root / "nowhere.jpg")
    assert issubclass(EvaluationError, EdgeDeployError)


# --- TuSimple ---------------------------------------------------------------------------------

H_SAMPLES = [240, 250, 260, 270, 280]


def _tusimple_tree(tmp_path: Path) -> Path:
    root = tmp_path / "tusimple"
    labels = [
        {"lanes": [[-2, 100, 110, 120, 130], [-2, -2, -2, -2, 300], [500, 490, 480, -2, -2]],
         "h_samples": H_SAMPLES, "raw_file": "clips/0313-1/6040/20.jpg"},
        {"lanes": [], "h_samples": H_SAMPLES, "raw_file": "clips/0313-1/6060/20.jpg"},
    ]
    root.mkdir()
    (root / "label_data_0313.json").write_text("\n".join(json.dumps(x) for x in labels) + "\n")
    for x in labels:
        _image(root / x["raw_file"])
    return root


def test_tusimple_labels(tmp_path):
    root = _tusimple_tree(tmp_path)
    first, second = d.read_tusimple_labels(root / "label_data_0313.json")
    assert first.raw_file == "clips/0313-1/6040/20.jpg"
    np.testing.assert_array_equal(first.h_samples, H_SAMPLES)
    np.testing.assert_array_equal(first.lanes[1], [-2, -2, -2, -2, 300])
    poly = first.polylines()  # the one-point lane is dropped
    assert len(poly) == 2 and poly[0].dtype == np.float32
    np.testing.assert_allclose(poly[0], [[100, 250], [110, 260], [120, 270], [130, 280]])
    np.testing.assert_allclose(poly[1], [[500, 240], [490, 250], [480, 260]])
    assert second.lanes == () and second.polylines() == []
    frames = list(d.tusimple_frames(root, ["label_data_0313.json"]))
    assert [name for name, _, _ in frames] == [first.raw_file, second.raw_file]
    assert frames[0][1].shape == (48, 80, 3) and frames[0][2].raw_file == first.raw_file


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("{not json", "malformed TuSimple label at .*:2"),
        (json.dumps({"lanes": [], "h_samples": []}), "needs 'lanes', 'h_samples' and 'raw_file'"),
        (json.dumps({"lanes": [[1, 2]], "h_samples": [1, 2, 3], "raw_file": "a.jpg"}), "2 x values for 3 h_samples"),
        (json.dumps({"lanes": [["a"]], "h_samples": [1], "raw_file": "a.jpg"}), "must be numbers"),
    ],
)
def test_malformed_tusimple_labels(tmp_path, line, message):
    path = tmp_path / "label_data_bad.json"
    good = {"lanes": [], "h_samples": H_SAMPLES, "raw_file": "x.jpg"}
    path.write_text(json.dumps(good) + "\n" + line + "\n")
    with pytest.raises(EvaluationError, match=message):
        d.read_tusimple_labels(path)


def test_tusimple_missing_files(tmp_path):
    root = _tusimple_tree(tmp_path)
    with pytest.raises(EvaluationError, match="label file not found"):
        d.read_tusimple_labels(root / "label_data_0601.json")
    (root / "clips/0313-1/6060/20.jpg").unlink()
    with pytest.raises(EvaluationError, match=r"image not found: .*6060/20\.jpg"):
        d.tusimple_frames(root, ["label_data_0313.json"])  # checked before the first frame


# --- synthetic ----------------------------------------------------------------------------------


def test_synthetic_frames_use_reserved_seeds():
    from edge_deploy.synthetic.roads import scene

    frames = list(d.synthetic_frames(3, seed=5))
    assert [f[0] for f in frames] == [f"synthetic-{d.EVAL_SEED_BASE + 5 + i}" for i in range(3)]
    expected = scene(d.EVAL_SEED_BASE + 6)
    _, got_frame, got_truth, tags = frames[1]
    assert np.array_equal(got_frame, expected.frame) and got_frame.shape == (590, 1640, 3)
    assert tags == expected.conditions and len(got_truth) == len(expected.lanes) >= 2
    for a, b in zip(got_truth, expected.lanes):
        assert np.array_equal(a, b) and a.dtype == np.float32
    assert list(d.synthetic_frames(0)) == []
    small = next(iter(d.synthetic_frames(1, width=320, height=180, lanes=2)))
    assert small[1].shape == (180, 320, 3) and len(small[2]) == 2


def test_synthetic_truth_scores_perfectly_against_itself():
    ev = CULaneEvaluator()
    total = 0
    for _, _, truth, _ in d.synthetic_frames(4, seed=11):
        ev.add(truth, truth)
        total += len(truth)
    for result in ev.results():
        assert (result.tp, result.fp, result.fn, result.f1, result.mean_abs_dx) == (total, 0, 0, 1.0, 0.0)


def test_seed_guards():
    with pytest.raises(EvaluationError, match="seed"):
        d.synthetic_frames(1, seed=-1)
    with pytest.raises(EvaluationError, match="below"):
        d.synthetic_frames(2, seed=d.EVAL_SEED_BASE - 1)
    with pytest.raises(EvaluationError, match="n must be"):
        d.synthetic_frames(True)


READ_EACH = """
from edge_deploy.evaluate import datasets as d
f = P(sys.argv[1])
attempt("culane", lambda: d.evaluation_frames(data=f / "test.txt"))
attempt("tusimple", lambda: d.evaluation_frames(tusimple=[f / "label_data_0313.json"]))
attempt("lines", lambda: d.read_lines_file(f / "00000.lines.txt"))
"""


def test_a_fifo_given_as_a_data_set_file_is_refused_in_one_line(tmp_path):
    """Issue 54: a FIFO as evaluate's list, label or annotation file is refused at once, never read until something
    writes to it (plant: path.read_text() back in evaluate/datasets.py, and the child hangs past its timeout)."""
    import os

    from cli_process import run_cli
    from reader_child import read_in_child

    for name in ("test.txt", "label_data_0313.json", "00000.lines.txt"):
        os.mkfifo(tmp_path / name)
    lines = read_in_child(READ_EACH, str(tmp_path))
    assert len(lines) == 3, lines
    fifo = "is a FIFO (named pipe), not a regular file; give the data set's own file."
    assert lines["culane"] == f"EvaluationError CULane list file {tmp_path}/test.txt {fifo}"
    assert lines["tusimple"] == f"EvaluationError TuSimple label file {tmp_path}/label_data_0313.json {fifo}"
    assert lines["lines"] == f"EvaluationError lane annotation {tmp_path}/00000.lines.txt {fifo}"
    cli = run_cli(["evaluate", str(tmp_path / "art"), "--data", str(tmp_path / "test.txt")], cwd=tmp_path, timeout=60)
    assert cli.returncode == 2 and cli.stderr.strip() == f"error: CULane list file {tmp_path}/test.txt {fifo}", \
        cli.stderr
