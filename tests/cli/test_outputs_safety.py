"""One safe output through the CLI (issue 54, class 3): every output option given a FIFO or a socket (standing for
a device node such as /dev/null: this test never touches the real /dev), a directory, or the input itself (also
through a symbolic or hard link) is refused in one line, exit 2, before anything is read or written; SIGTERM mid-run
(exit 143) and a full disk mid-run (exit 1) leave the earlier outputs as they were and no temporary file. Against
the real tritonserver; the SIGTERM and full-disk runs are real `python -m edge_deploy` processes."""
from __future__ import annotations

import os
import signal
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cli_process import run_cli
from conftest import free_port

OLD = b"the earlier output\n"


def one_line(result: subprocess.CompletedProcess, code: int = 2) -> str:
    assert result.returncode == code, result
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    return lines[0]


def entries(directory: Path) -> dict[str, tuple[int, bytes | None]]:
    out = {}
    for path in sorted(directory.rglob("*")):
        mode = path.lstat().st_mode
        out[str(path.relative_to(directory))] = (stat.S_IFMT(mode), path.read_bytes() if stat.S_ISREG(mode) else None)
    return out


@pytest.fixture(scope="module")
def video(tmp_path_factory) -> Path:
    where = tmp_path_factory.mktemp("video")
    assert run_cli(["sample", "-o", where, "--video", "-n", "4", "--width", "328", "--height", "120"]).returncode == 0
    return where / "drive.mp4"


@pytest.fixture
def odd(tmp_path):
    """Targets that are not regular files: a FIFO, a socket, a directory."""
    os.mkfifo(tmp_path / "null")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(str(tmp_path / "sock"))
    (tmp_path / "dir").mkdir()
    yield {"FIFO": tmp_path / "null", "socket": tmp_path / "sock", "directory": tmp_path / "dir"}
    sock.close()


@pytest.mark.slow
def test_mcap_that_is_not_a_regular_file_or_is_the_input_is_refused_before_anything_is_written(tmp_path, odd, video):
    url = f"127.0.0.1:{free_port()}"  # nothing listens: every refusal comes before a request
    source = tmp_path / "drive.mp4"
    source.write_bytes(video.read_bytes())
    (tmp_path / "sym.mp4").symlink_to(source)
    os.link(source, tmp_path / "hard.mp4")
    before = entries(tmp_path)
    cases = {**{kind: (path, "not a regular file") for kind, path in odd.items()},
             "the input": (source, "is the input"), "a link to the input": (tmp_path / "sym.mp4", "is the input"),
             "a hard link to the input": (tmp_path / "hard.mp4", "is the input")}
    for kind, (target, says) in cases.items():
        line = one_line(run_cli(["infer", source, "--url", url, "--out", tmp_path / "out", "--mcap", target]))
        assert says in line and f"--mcap {target}" in line, (kind, line)
    assert entries(tmp_path) == before  # no out/, no temporary file, every node still of its kind


@pytest.mark.slow
def test_mcap_inside_the_input_recording_is_refused(tmp_path):
    pytest.importorskip("rosbags")
    import numpy as np
    from recordings import write_recording

    bag = write_recording(tmp_path / "drive", [np.zeros((120, 328, 3), np.uint8)] * 2)
    inside = next(bag.glob("*.mcap"))
    before = entries(tmp_path)
    line = one_line(run_cli(["infer", bag, "--url", f"127.0.0.1:{free_port()}", "--out", tmp_path / "out",
                             "--mcap", inside]))
    assert "is the input" in line and entries(tmp_path) == before


@pytest.mark.slow
def test_evaluate_json_and_bench_plot_refuse_a_fifo_before_running(tmp_path, odd):
    os.mkfifo(tmp_path / "plot.png")
    before = entries(tmp_path)
    line = one_line(run_cli(["evaluate", tmp_path / "no-artifact", "--synthetic", "1", "--json", odd["FIFO"]]))
    assert f"--json {odd['FIFO']} is a FIFO" in line
    line = one_line(run_cli(["evaluate", tmp_path / "no-artifact", "--synthetic", "1", "--json", odd["directory"]]))
    assert "is a directory" in line
    line = one_line(run_cli(["bench", "--url", f"127.0.0.1:{free_port()}", "--plot", tmp_path / "plot.png"]))
    assert "--plot" in line and "is a FIFO" in line
    assert entries(tmp_path) == before


# --- against a real server: a picture output that is a FIFO, SIGTERM and a full disk mid-run ---------------------


@pytest.fixture(scope="module")
def tiny_server(tmp_path_factory, laneatt_data):
    from small_artifact import make_artifact
    from triton_helpers import serving

    from edge_deploy.deploy.install import install
    from edge_deploy.deploy.options import InstallOptions

    work = tmp_path_factory.mktemp("outputs_safety")
    install(InstallOptions(make_artifact(work / "artifact", laneatt_data / "anchors_2784x77.npy"), work / "repo",
                           "tiny", runtime="python"))
    with serving(work / "repo", work) as proc:
        yield proc


@pytest.fixture(scope="module")
def long_video(tmp_path_factory, video) -> Path:
    """The sample drive's frames over and over: 1,200 frames, long enough to be mid-run when signalled."""
    import cv2

    capture = cv2.VideoCapture(str(video))
    frames = []
    while (read := capture.read())[0]:
        frames.append(read[1])
    capture.release()
    path = tmp_path_factory.mktemp("long_video") / "drive.mp4"
    writer = cv2.VideoWriter(str(path), cv2.VideoWriter.fourcc(*"mp4v"), 30.0, (328, 120))
    for i in range(1200):
        writer.write(frames[i % len(frames)])
    writer.release()
    return path


@pytest.mark.slow
@pytest.mark.triton
def test_a_picture_output_that_is_a_fifo_is_refused_in_one_line(tmp_path, tiny_server, video):
    import cv2

    image = tmp_path / "road.png"
    assert cv2.imwrite(str(image), cv2.VideoCapture(str(video)).read()[1])
    out = tmp_path / "out"
    out.mkdir()
    os.mkfifo(out / "road.lanes.png")
    line = one_line(run_cli(["infer", image, "--url", tiny_server.url, "--model", "tiny", "--out", out]))
    assert "road.lanes.png is a FIFO" in line
    assert [p.name for p in out.iterdir()] == ["road.lanes.png"] and stat.S_ISFIFO((out / "road.lanes.png").stat().st_mode)


def _earlier_outputs(tmp_path: Path) -> tuple[Path, Path]:
    out = tmp_path / "out"
    out.mkdir()
    for name in ("drive.lanes.mp4", "drive.lanes.jsonl"):
        (out / name).write_bytes(OLD)
    mcap = tmp_path / "o.mcap"
    mcap.write_bytes(OLD)
    return out, mcap


def _wait_for_temporaries(tmp_path: Path, proc: subprocess.Popen, deadline_s: float = 120) -> None:
    """Until the run has its three outputs open under temporary names and frames in them: its video has passed
    64 KiB (FFmpeg writes it out in 32 KiB blocks), so frames were detected and published."""
    patterns = (".o.mcap.*.tmp", "out/.drive.lanes.mp4.*.tmp.mp4", "out/.drive.lanes.jsonl.*.tmp")

    def writing() -> bool:
        found = [list(tmp_path.glob(p)) for p in patterns]
        return all(found) and found[1][0].stat().st_size > 64 << 10

    end = time.monotonic() + deadline_s
    while not writing():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < end, "the run never opened its outputs"
        time.sleep(0.05)  # polling the directory: there is no event to await for a file appearing


def _infer(tmp_path: Path, server, source: Path, *extra: str, **kwargs) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "edge_deploy", "infer", str(source), "--url", server.url,
                             "--model", "tiny", "--out", str(tmp_path / "out"), "--mcap", str(tmp_path / "o.mcap"),
                             *extra],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            stdin=subprocess.DEVNULL, **kwargs)


@pytest.mark.slow
@pytest.mark.triton
def test_sigterm_mid_run_leaves_the_earlier_outputs_and_no_temporary(tmp_path, tiny_server, long_video):
    out, mcap = _earlier_outputs(tmp_path)
    before = entries(tmp_path)
    proc = _infer(tmp_path, tiny_server, long_video)
    try:
        _wait_for_temporaries(tmp_path, proc)
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 143, stderr
    lines = [line for line in stderr.strip().splitlines() if line.startswith("error:")]
    assert lines == [lines[-1]] and "terminated (SIGTERM)" in lines[0], stderr
    assert entries(tmp_path) == before  # the earlier video, JSON lines and MCAP whole, no .tmp beside them


@pytest.mark.slow
@pytest.mark.triton
def test_a_full_disk_mid_run_leaves_the_earlier_outputs_and_no_temporary(tmp_path, tiny_server, long_video):
    """A real write failure: RLIMIT_FSIZE in the child (EFBIG once a file passes 256 KiB), as a full disk fails a
    write mid-run."""
    import resource

    def limit() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (256 << 10, 256 << 10))

    out, mcap = _earlier_outputs(tmp_path)
    before = entries(tmp_path)
    # gRPC transport: a shared-memory region is a file too, which the limit would refuse before the first frame
    proc = _infer(tmp_path, tiny_server, long_video, "--transport", "grpc", preexec_fn=limit)
    try:
        _, stderr = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 1, stderr
    assert stderr.strip().splitlines()[-1].startswith("error: File too large"), stderr
    assert entries(tmp_path) == before
