"""Bounded reading (issue 54, class 2 and the reading part of class 8; docs/failures.md "Bounded reading"): no
hostile recording or image costs more than its cap, and no reader opens a FIFO, socket or device node.

The hostile inputs are built byte by byte (tests/support/hostile_recordings.py). Memory is measured in a child
process limited to 3 GiB of address space (VmHWM: the child's own peak), the temporary directory in a child whose
$TMPDIR is a fresh folder and whose file size is limited (RLIMIT_FSIZE): with a cap taken out, the child is killed
or its peak is far over the bound, and the test fails.
"""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from needs import torch_or_skip

pytest.importorskip("rosbags")

from cli_process import run_cli  # noqa: E402
from hostile_recordings import message_record, png, unindexed_mcap, write, zstd_zeros  # noqa: E402
from reader_child import read_in_child  # noqa: E402
from recordings import write_recording  # noqa: E402

from edge_deploy.errors import CheckpointError, FrameError  # noqa: E402
from edge_deploy.media import bag_reader, open_recording, read_frames, read_image  # noqa: E402
from edge_deploy.media.image_header import MAX_IMAGE_PIXELS, image_size  # noqa: E402

GIB = 1 << 30
PEAK_BOUND_KIB = 600 * 1024  # what reading a small recording or image may cost, interpreter and libraries included


def child(script: str, tmp_path: Path, *, fsize: int | None = None) -> tuple[list[str], int, list[str]]:
    """Run `script` (which prints the FrameError it gets) in a child limited to 3 GiB of address space (and
    `fsize` bytes a file), $TMPDIR a fresh folder: (its output lines but the last, its peak memory in KiB, what it
    left in $TMPDIR)."""
    tmp = tmp_path / "tmpdir"
    tmp.mkdir(exist_ok=True)
    limits = "resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))\n"
    if fsize is not None:
        limits += f"resource.setrlimit(resource.RLIMIT_FSIZE, ({fsize}, {fsize}))\n"
    code = ("import resource, sys\n" + limits + textwrap.dedent(script)
            + "print(next(l.split()[1] for l in open('/proc/self/status') if l.startswith('VmHWM:')))\n")
    env = {**os.environ, "TMPDIR": str(tmp)}
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=180, env=env,
                            check=False)
    assert result.returncode == 0, (result.returncode, result.stderr[-2000:])
    *lines, peak = result.stdout.strip().splitlines()
    return lines, int(peak), sorted(p.name for p in tmp.iterdir())


READ_ALL = """
from edge_deploy.errors import FrameError
from edge_deploy.media import frames_of
try:
    print(len(list(frames_of({path!r}))))
except FrameError as exc:
    print(exc)
"""


# --- recordings: compressed chunks, rosbag2 compression --------------------------------------------------------


def test_a_zstd_chunk_decompresses_no_further_than_it_declares(tmp_path):
    """A 40 KB MCAP file whose one chunk declares 64 bytes and holds a zstd frame of 1 GiB: one line, and the
    reader never makes more than the 64 bytes (+1) it was told."""
    bomb = zstd_zeros(GIB, message_record(1, 1, b""))
    path = write(tmp_path / "bomb.mcap", unindexed_mcap(bomb, 64))
    assert path.stat().st_size < 100_000
    (line,), peak, _ = child(READ_ALL.format(path=str(path)), tmp_path)
    assert str(path) in line and "decompresses to more than the 64 bytes it declares" in line
    assert peak < PEAK_BOUND_KIB


def test_a_chunk_declaring_more_than_the_cap_is_refused_before_it_decompresses(tmp_path):
    size = bag_reader.MAX_CHUNK_BYTES + 1
    path = write(tmp_path / "big.mcap", unindexed_mcap(zstd_zeros(1 << 20), size))
    with pytest.raises(FrameError) as exc:
        open_recording(path)
    line = str(exc.value)
    assert "\n" not in line and str(path) in line
    assert "declares 256 MiB decompressed, over the 256 MiB a chunk may hold (MAX_CHUNK_BYTES)" in line
    assert "mcap doctor" in line


def _indexed(tmp_path: Path, frames: list) -> Path:
    return write_recording(tmp_path / "src.mcap", frames, kind="bare-mcap")


def test_overlapping_chunks_may_declare_only_max_held_bytes_together(tmp_path):
    """Chunks whose times overlap are held at once: three of 200 MiB each (each under MAX_CHUNK_BYTES) are
    refused together before any decompresses."""
    import struct

    frames = [np.full((600, 640, 3), i, np.uint8) for i in range(3)]  # over 1 MiB each: a chunk each
    src = _indexed(tmp_path, frames)
    data = bytearray(src.read_bytes())
    pos, patched = 8, 0
    while pos + 9 <= len(data) - 8:
        op, (length,) = data[pos], struct.unpack_from("<Q", data, pos + 1)
        if op == 0x08:  # ChunkIndex: start, end, offset, length, a map, u64, a string, compressed, uncompressed
            struct.pack_into("<QQ", data, pos + 9, 5, 10)  # every chunk: messages from 5 to 10 ns
            p = pos + 9 + 32
            p += 4 + struct.unpack_from("<I", data, p)[0] + 8
            p += 4 + struct.unpack_from("<I", data, p)[0]
            struct.pack_into("<Q", data, p + 8, 200 << 20)
            patched += 1
        pos += 9 + length
    path = write(tmp_path / "overlap.mcap", bytes(data))
    if patched < 3:
        pytest.skip(f"the writer made {patched} chunks")  # pragma: no cover - rosbags writes one per message here
    with pytest.raises(FrameError) as exc:
        open_recording(path)
    assert "over the 512 MiB a reader holds at once (MAX_HELD_BYTES)" in str(exc.value)


def _file_mode_bag(directory: Path, payload: bytes) -> Path:
    directory.mkdir()
    (directory / "bag_0.mcap.zstd").write_bytes(payload)
    (directory / "metadata.yaml").write_text(textwrap.dedent("""\
        rosbag2_bagfile_information:
          version: 9
          storage_identifier: mcap
          relative_file_paths: [bag_0.mcap.zstd]
          duration: {nanoseconds: 1}
          starting_time: {nanoseconds_since_epoch: 0}
          message_count: 1
          topics_with_message_count: []
          compression_format: zstd
          compression_mode: FILE
          files: []
        """))
    return directory


def test_a_file_compressed_bag_stops_at_its_expansion_cap_and_leaves_nothing(tmp_path):
    """`compression_mode: file` with a small zstd file of 1 GiB: refused at MAX_EXPANSION times its size (the
    64 MiB floor here), in a child that may write no file over 200 MiB; $TMPDIR is left empty."""
    path = _file_mode_bag(tmp_path / "bag", zstd_zeros(GIB))
    assert (path / "bag_0.mcap.zstd").stat().st_size < 200_000
    (line,), peak, left = child(READ_ALL.format(path=str(path)), tmp_path, fsize=200 << 20)
    cap = max(64 << 20, 1000 * (path / "bag_0.mcap.zstd").stat().st_size)
    assert str(path) in line and "bag_0.mcap.zstd (compression_mode: file) decompresses past " in line
    assert f"past {cap / (1 << 20):g} MiB, 1000 times its compressed size (MAX_EXPANSION)" in line
    assert "TMPDIR" in line
    assert left == [] and peak < PEAK_BOUND_KIB


@pytest.mark.parametrize("mode", ["file", "message"])
def test_compressed_rosbag2_bags_still_read(tmp_path, mode):
    """The caps admit what rosbag2 writes: a zstd-compressed bag (file or message mode) reads back its frames."""
    from rosbags.rosbag2 import Writer
    from rosbags.rosbag2.enums import CompressionFormat, CompressionMode

    frames = [np.full((16, 24, 3), 30 * i, np.uint8) for i in range(3)]
    original = Writer.__init__

    def compressed(self, *args, **kwargs):  # write_recording's Writer, set to compress
        original(self, *args, **kwargs)
        self.set_compression(getattr(CompressionMode, mode.upper()), CompressionFormat.ZSTD)

    Writer.__init__ = compressed
    try:
        path = write_recording(tmp_path / "bag", frames)
    finally:
        Writer.__init__ = original
    assert f"compression_mode: {mode}" in (path / "metadata.yaml").read_text().lower()
    read = list(read_frames(open_recording(path)))
    assert [f.image.mean() for f in read] == pytest.approx([f.mean() for f in frames])


def test_a_message_compressed_bomb_is_capped(tmp_path):
    """A `compression_mode: message` message of 1 GiB zeros: refused at MAX_CHUNK_BYTES, never held whole."""
    bomb = write(tmp_path / "message.zst", zstd_zeros(GIB))
    script = ("from edge_deploy.errors import FrameError\nfrom edge_deploy.media import bag_reader\n"
              f"try:\n    bag_reader.decompress_message(open({str(bomb)!r}, 'rb').read())\n"
              "except FrameError as exc:\n    print(exc)\n")
    (line,), peak, _ = child(script, tmp_path)
    assert "a zstd-compressed message decompresses past 256 MiB (MAX_CHUNK_BYTES)" in line
    assert peak < PEAK_BOUND_KIB


def test_ros1_chunks_are_capped_too():
    import lz4.frame
    from rosbags.rosbag1 import reader as rosbag1_reader

    bag_reader.bound_rosbags()
    compressor = lz4.frame.LZ4FrameCompressor()
    bomb = compressor.begin() + b"".join(compressor.compress(bytes(1 << 20)) for _ in range(260)) + compressor.flush()
    with pytest.raises(FrameError, match=r"a ROS 1 chunk decompresses past 256 MiB \(MAX_CHUNK_BYTES\)"):
        rosbag1_reader.decompressors["lz4"](bomb)
    assert rosbag1_reader.decompressors["lz4"](lz4.frame.compress(b"road" * 1000)) == b"road" * 1000


# --- images: the header's size before decoding -----------------------------------------------------------------


def test_a_png_bomb_is_refused_from_its_header(tmp_path):
    """A 1 MB PNG of 16000 x 16000 zeros (768 MB as a BGR frame): one line from the header, and the process never
    holds the frame; through `infer`, exit 2 and no traceback."""
    path = write(tmp_path / "bomb.png", png(16000, 16000))
    assert path.stat().st_size < 2_000_000
    script = ("from edge_deploy.errors import FrameError\nfrom edge_deploy.media import read_image\n"
              f"try:\n    read_image(__import__('pathlib').Path({str(path)!r}))\nexcept FrameError as exc:\n"
              "    print(exc)\n")
    (line,), peak, _ = child(script, tmp_path)
    assert f"image {path}: its PNG header says 16000x16000 pixels, over the 67 Mpx" in line
    assert peak < PEAK_BOUND_KIB
    result = run_cli(["infer", str(path), "--url", "127.0.0.1:1"], cwd=tmp_path)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.strip().count("\n") == 0 and "over the 67 Mpx" in result.stderr


@pytest.mark.parametrize("width, height", [(100_000, 100_000), (8193, 8192), (0, 10)])
def test_an_oversized_or_empty_header_is_one_line(tmp_path, width, height):
    path = write(tmp_path / "x.png", png(width, height, rows=1))
    with pytest.raises(FrameError) as exc:
        read_image(path)
    assert "\n" not in str(exc.value) and f"{width}x{height} pixels" in str(exc.value)


def test_the_cap_admits_8192_squared_and_the_header_sizes_are_right():
    import cv2

    assert MAX_IMAGE_PIXELS == 8192 * 8192
    assert image_size(png(8192, 8192, rows=1), "x") == ("png", 8192, 8192)
    frame = np.zeros((30, 41, 3), np.uint8)
    for ext, fmt in ((".jpg", "jpeg"), (".png", "png"), (".bmp", "bmp"), (".webp", "webp"), (".tiff", "tiff")):
        assert image_size(cv2.imencode(ext, frame)[1].tobytes(), "x") == (fmt, 41, 30), ext


def test_a_compressed_image_in_a_recording_is_checked_before_decoding(tmp_path):
    """A CompressedImage message holding a PNG header bomb: one line naming the topic, no frame allocated."""
    from rosbags.typesys import Stores, get_typestore
    from recordings import fill

    from edge_deploy.media.bag import COMPRESSED, decode_image

    store = get_typestore(Stores.ROS2_HUMBLE)
    msg = fill(store, COMPRESSED, format="png", data=np.frombuffer(png(50_000, 50_000, rows=1), np.uint8))
    with pytest.raises(FrameError, match=r"^drive /cam: a CompressedImage \(png\): its PNG header says 50000x50000"):
        decode_image(msg, COMPRESSED, "drive /cam")


# --- FIFOs, sockets, devices: refused, never opened ------------------------------------------------------------

EVERY_READER = """
d = P({d!r})
from edge_deploy.media import open_recording, read_image, open_video
attempt("recording", lambda: open_recording(d / "fifo.mcap"))
attempt("ros1", lambda: open_recording(d / "fifo.bag"))
attempt("db3", lambda: open_recording(d / "fifo.db3"))
attempt("bagfile", lambda: open_recording(d / "bag"))
attempt("metadata", lambda: open_recording(d / "bag2"))
attempt("image", lambda: read_image(d / "fifo.png"))
attempt("video", lambda: open_video(str(d / "fifo.mp4")))
from edge_deploy.lanedet.checkpoint import checkpoint_path
attempt("checkpoint", lambda: checkpoint_path(d / "fifo.pt", "LaneATT"))
attempt("device", lambda: checkpoint_path(P("/dev/null"), "LaneATT"))
from edge_deploy.geometry import Camera
attempt("calibration", lambda: Camera.from_yaml(d / "fifo.yaml"))
from edge_deploy.artifact.manifest import Manifest
attempt("manifest", lambda: Manifest.read(d / "artifact"))
from edge_deploy.export.onnx_import import read_onnx
attempt("onnx", lambda: read_onnx(d / "fifo.onnx"))
from edge_deploy.export.source import classify_model
attempt("model", lambda: classify_model(str(d / "fifo.pt")))
from edge_deploy.tls.config import TLSConfig
attempt("tls", lambda: TLSConfig(ca=d / "fifo.pem"))
"""


def test_no_reader_opens_a_fifo_or_a_device(tmp_path):
    """A FIFO (or /dev/null) given as a recording, a rosbag2 directory's file or metadata, an image, a video, a
    checkpoint, a calibration file, a manifest, an ONNX model, a convert MODEL or a TLS file: each reader answers at once with its own one-line
    error saying what the path is ("not found" for none), where opening it would block for ever."""
    torch_or_skip()  # the checkpoint reader (lanedet/checkpoint.py) imports torch
    for name in ("fifo.mcap", "fifo.bag", "fifo.db3", "fifo.png", "fifo.mp4", "fifo.pt", "fifo.yaml", "fifo.onnx",
                 "fifo.pem"):
        os.mkfifo(tmp_path / name)
    for bag, fifo in (("bag", "bag_0.mcap"), ("bag2", "metadata.yaml")):
        (tmp_path / bag).mkdir()
        os.mkfifo(tmp_path / bag / fifo)
    (tmp_path / "bag" / "metadata.yaml").write_text(
        "rosbag2_bagfile_information: {version: 9, storage_identifier: mcap, relative_file_paths: [bag_0.mcap]}\n")
    (tmp_path / "artifact").mkdir()
    os.mkfifo(tmp_path / "artifact" / "manifest.json")
    lines = read_in_child(EVERY_READER.format(d=str(tmp_path)))
    assert len(lines) == 14, lines
    fifo = "is a FIFO (named pipe), not a regular file"
    expected = {"recording": ("FrameError", f"recording {tmp_path}/fifo.mcap {fifo}"),
                "ros1": ("FrameError", f"recording {tmp_path}/fifo.bag {fifo}"),
                "db3": ("FrameError", f"recording {tmp_path}/fifo.db3 {fifo}"),
                "bagfile": ("FrameError", f"recording file {tmp_path}/bag/bag_0.mcap {fifo}"),
                "metadata": ("FrameError", f"rosbag2 metadata {tmp_path}/bag2/metadata.yaml {fifo}"),
                "image": ("FrameError", f"image {tmp_path}/fifo.png {fifo}"),
                "video": ("FrameError", f"video {tmp_path}/fifo.mp4 {fifo}"),
                "checkpoint": ("CheckpointError", f"checkpoint {tmp_path}/fifo.pt {fifo}"),
                "device": ("CheckpointError", "checkpoint /dev/null is a character device, not a regular file"),
                "calibration": ("CalibrationError", f"calibration file {tmp_path}/fifo.yaml {fifo}"),
                "manifest": ("ManifestError", f"{tmp_path}/artifact/manifest.json {fifo}"),
                "onnx": ("ConvertError", f"ONNX model {tmp_path}/fifo.onnx {fifo}"),
                "model": ("ConvertError", f"MODEL {tmp_path}/fifo.pt {fifo}"),
                "tls": ("ClientError", f"TLS ca file {tmp_path}/fifo.pem {fifo}")}
    for name, (kind, text) in expected.items():
        assert lines[name].startswith(f"{kind} {text}"), (name, lines[name])
        assert "not found" not in lines[name]


def test_infer_refuses_a_fifo_recording_in_one_line(tmp_path):
    os.mkfifo(tmp_path / "drive.mcap")
    result = run_cli(["infer", str(tmp_path / "drive.mcap"), "--url", "127.0.0.1:1"], cwd=tmp_path, timeout=60)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.strip() == (f"error: recording {tmp_path}/drive.mcap is a FIFO (named pipe), not a regular "
                                      "file; pass a rosbag2 directory, a .mcap file or a ROS 1 .bag.")


def test_a_checkpoint_that_is_missing_is_still_not_found(tmp_path):
    torch_or_skip()  # lanedet/checkpoint.py imports torch
    from edge_deploy.lanedet.checkpoint import checkpoint_path

    with pytest.raises(CheckpointError, match="not found"):
        checkpoint_path(tmp_path / "none.pt", "LaneATT")
