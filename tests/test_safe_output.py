"""One safe output (issue 54, class 3): every file edge-deploy writes goes through edge_deploy.core.fsutil, which writes
a temporary file beside the target under a name of this run's own (pid and random), refuses a target that is not a
regular file (a FIFO, a socket, a directory: what /dev/null is to root) or that is one of the inputs (the same
file through a symbolic or hard link too), removes the temporary file on any error, and renames atomically.

Real files, FIFOs and sockets made in tmp_path (never the real /dev); the run loop of `infer` (media.detect) with
a detect callable, the MCAP writer of `--mcap` and the video writer as the CLI uses them. The CLI's own refusals,
SIGTERM and a full disk mid-run are in tests/cli/test_outputs_safety.py."""
from __future__ import annotations

import os
import socket
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from edge_deploy.errors import ClientError, EdgeDeployError, OutputError
from edge_deploy.core.fsutil import AtomicOutput, atomic_path, check_target, write_bytes_atomic, write_json_atomic
from edge_deploy.media.detect import detect_stream
from edge_deploy.media.stamped import StampedFrame
from edge_deploy.media.video import VideoWriter

OLD = b"the earlier output\n"


def fifo(path: Path) -> Path:
    os.mkfifo(path)
    return path


def unix_socket(path: Path) -> socket.socket:
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    return server


def entries(directory: Path) -> dict[str, tuple[int, bytes | None]]:
    """Each entry's file type and, for a regular file, its bytes: what "nothing changed" compares."""
    out = {}
    for path in sorted(directory.iterdir()):
        mode = path.lstat().st_mode
        out[path.name] = (stat.S_IFMT(mode), path.read_bytes() if stat.S_ISREG(mode) else None)
    return out


@pytest.fixture
def odd_targets(tmp_path):
    """A FIFO, a socket (both stand for a device node such as /dev/null: not regular files) and a directory."""
    targets = {"fifo": fifo(tmp_path / "out.fifo"), "dir": tmp_path / "out.dir"}
    targets["dir"].mkdir()
    (targets["dir"] / "keep").write_bytes(OLD)
    sock = unix_socket(tmp_path / "out.sock")
    targets["socket"] = tmp_path / "out.sock"
    yield targets
    sock.close()


WRITERS = {
    "write_bytes_atomic": lambda path: write_bytes_atomic(path, b"new"),
    "write_json_atomic": lambda path: write_json_atomic(path, {"a": 1}),
    "atomic_path": lambda path: atomic_path(path).__enter__(),
    "AtomicOutput": lambda path: AtomicOutput(path),
    "VideoWriter": lambda path: VideoWriter(path, 30.0),
}


@pytest.mark.parametrize("writer", WRITERS)
@pytest.mark.parametrize("kind", ["fifo", "socket", "dir"])
def test_a_target_that_is_not_a_regular_file_is_refused_in_one_line_and_left_alone(tmp_path, odd_targets, writer,
                                                                                   kind):
    before = entries(tmp_path)
    with pytest.raises(OutputError) as refused:
        WRITERS[writer](odd_targets[kind])
    message = str(refused.value)
    assert "\n" not in message and "not a regular file" in message and str(odd_targets[kind]) in message
    assert entries(tmp_path) == before  # the node is still there, of its kind; no temporary file beside it
    assert entries(odd_targets["dir"]) == {"keep": (stat.S_IFREG, OLD)}


def test_a_link_to_a_device_like_node_is_refused_too(tmp_path):
    node = fifo(tmp_path / "null")
    (tmp_path / "link").symlink_to(node)
    with pytest.raises(OutputError, match="FIFO"):
        write_bytes_atomic(tmp_path / "link", b"x")
    assert (tmp_path / "link").is_symlink() and stat.S_ISFIFO(node.stat().st_mode)


def test_the_mcap_writer_refuses_what_is_not_a_regular_file(tmp_path, odd_targets):
    pytest.importorskip("mcap")
    from edge_deploy.ros.mcap_file import McapRecording

    before = entries(tmp_path)
    for target in odd_targets.values():
        with pytest.raises(ClientError, match=r"^--mcap .* is a .*not a regular file"):
            McapRecording(target)
    assert entries(tmp_path) == before


@pytest.mark.parametrize("how", ["same path", "symbolic link", "hard link"])
def test_an_input_is_never_the_output(tmp_path, how):
    recording = tmp_path / "drive.mcap"
    recording.write_bytes(OLD)
    target = {"same path": recording, "symbolic link": tmp_path / "sym.mcap",
              "hard link": tmp_path / "hard.mcap"}[how]
    if how == "symbolic link":
        target.symlink_to(recording)
    elif how == "hard link":
        os.link(recording, target)
    before = entries(tmp_path)
    with pytest.raises(OutputError, match="is the input"):
        write_bytes_atomic(target, b"new", inputs=[recording])
    with pytest.raises(OutputError, match="is the input"):
        check_target(target, inputs=[str(recording)])
    assert entries(tmp_path) == before


def test_the_mcap_writer_refuses_an_input_recording_and_a_file_inside_an_input_directory(tmp_path):
    pytest.importorskip("mcap")
    from edge_deploy.ros.mcap_file import McapRecording

    bag = tmp_path / "bag"
    bag.mkdir()
    (bag / "bag_0.mcap").write_bytes(OLD)
    bare = tmp_path / "bare.mcap"
    bare.write_bytes(OLD)
    before = entries(tmp_path)
    with pytest.raises(ClientError, match="is the input"):
        McapRecording(bare, inputs=[bare])
    with pytest.raises(ClientError, match="is the input"):
        McapRecording(bag / "bag_0.mcap", inputs=[bag])  # a rosbag2 directory: its files are inputs
    assert entries(tmp_path) == before and entries(bag) == {"bag_0.mcap": (stat.S_IFREG, OLD)}


def test_an_error_mid_write_leaves_the_old_file_and_no_temporary(tmp_path):
    target = tmp_path / "report.json"
    target.write_bytes(OLD)
    with pytest.raises(RuntimeError, match="mid-write"):
        with atomic_path(target) as tmp:
            tmp.write_bytes(b"half of it")
            raise RuntimeError("mid-write")
    with pytest.raises(KeyboardInterrupt):
        with AtomicOutput(target) as output, output.open("wb") as fh:
            fh.write(b"half")
            raise KeyboardInterrupt
    assert entries(tmp_path) == {"report.json": (stat.S_IFREG, OLD)}


def test_a_target_replaced_by_a_node_during_the_run_is_not_renamed_over(tmp_path):
    target = tmp_path / "o.mcap"
    output = AtomicOutput(target)
    with output.open("wb") as fh:
        fh.write(b"frames")
    fifo(target)  # what the target became while the run wrote
    with pytest.raises(OutputError, match="FIFO"):
        output.commit()
    assert stat.S_ISFIFO(target.lstat().st_mode) and [p.name for p in tmp_path.iterdir()] == ["o.mcap"]


def test_two_writers_of_one_target_never_share_a_temporary_name(tmp_path):
    target = tmp_path / "o.mcap"
    first, second = AtomicOutput(target), AtomicOutput(target)
    assert first.tmp != second.tmp and first.tmp.parent == second.tmp.parent == tmp_path
    assert f".o.mcap.{os.getpid()}." in first.tmp.name and first.tmp.name.endswith(".tmp")
    # another process (another run of the same command) gets its own name too, with its own pid
    other = subprocess.run([sys.executable, "-c", textwrap.dedent(f"""
        from edge_deploy.core.fsutil import AtomicOutput
        out = AtomicOutput({str(target)!r})
        print(out.tmp.name)
        out.discard()
    """)], capture_output=True, text=True, timeout=60, check=True).stdout.strip()
    assert other not in (first.tmp.name, second.tmp.name) and other.startswith(".o.mcap.")
    with first.open("wb") as fh:
        fh.write(b"first")
    with second.open("wb") as fh:
        fh.write(b"second")
    first.commit()
    second.commit()  # each run's file is whole: the last rename wins, nothing is mixed
    assert target.read_bytes() == b"second" and [p.name for p in tmp_path.iterdir()] == ["o.mcap"]


def _frames(count: int) -> list[StampedFrame]:
    rng = np.random.default_rng(0)
    return [StampedFrame(rng.integers(0, 255, (120, 160, 3), dtype=np.uint8), 1_000_000_000 + i, "cam", i)
            for i in range(count)]


def test_a_run_that_fails_mid_video_keeps_the_earlier_outputs_and_leaves_no_temporary(tmp_path):
    """The `.lanes.jsonl.tmp` and `.lanes.mp4.tmp.mp4` campaign 5 found after an error."""
    out = tmp_path / "out"
    out.mkdir()
    for name in ("drive.lanes.mp4", "drive.lanes.jsonl"):
        (out / name).write_bytes(OLD)
    calls = []

    def detect(frame):
        calls.append(frame)
        if len(calls) == 3:
            raise RuntimeError("the server went away")
        return []

    with pytest.raises(RuntimeError, match="went away"):
        detect_stream(detect, iter(_frames(5)), "drive.mp4", "drive", out, model="m", fps=10.0)
    assert entries(out) == {"drive.lanes.jsonl": (stat.S_IFREG, OLD), "drive.lanes.mp4": (stat.S_IFREG, OLD)}


def test_a_run_that_ends_replaces_the_earlier_outputs_whole(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "drive.lanes.jsonl").write_bytes(OLD)
    result = detect_stream(lambda frame: [], iter(_frames(3)), "drive.mp4", "drive", out, model="m", fps=10.0)
    assert sorted(p.name for p in out.iterdir()) == ["drive.lanes.jsonl", "drive.lanes.mp4"]
    assert len((out / "drive.lanes.jsonl").read_text().splitlines()) == 3 and result.frames == 3


def test_a_video_output_that_is_a_fifo_is_refused_before_the_first_frame(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    fifo(out / "drive.lanes.jsonl")
    calls = []
    with pytest.raises(OutputError, match="drive.lanes.jsonl is a FIFO"):
        detect_stream(lambda frame: calls.append(frame) or [], iter(_frames(2)), "drive.mp4", "drive", out,
                      model="m", fps=10.0)
    assert calls == [] and sorted(p.name for p in out.iterdir()) == ["drive.lanes.jsonl"]


def test_a_full_disk_mid_write_leaves_the_old_file_and_no_temporary(tmp_path):
    """A real write failure (EFBIG from RLIMIT_FSIZE, in a child process so the limit binds nothing else)."""
    target = tmp_path / "plot.png"
    target.write_bytes(OLD)
    code = textwrap.dedent(f"""
        import resource, signal, sys
        from edge_deploy.core.fsutil import write_bytes_atomic
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG
        resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))
        try:
            write_bytes_atomic({str(target)!r}, b"x" * 100_000)
        except OSError as exc:
            print(exc.errno)
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.stdout.strip() == "27", done  # EFBIG
    assert entries(tmp_path) == {"plot.png": (stat.S_IFREG, OLD)}


def test_the_error_family_holds_the_refusal():
    assert issubclass(OutputError, EdgeDeployError) and OutputError.exit_code == 2
