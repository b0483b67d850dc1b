"""What reading a ROS recording and writing the MCAP add to `infer`'s time per frame (issue 43: at most 10 %).

The same synthetic drive (1640x590, held-out seeds) four ways through the run loop `infer` uses
(edge_deploy.media.detect, in this process, frame by frame):

    video        detect_video on drive.mp4 (MPEG-4, as `edge-deploy sample --video` writes it): the baseline
    bag          detect_recording on a rosbag2 MCAP of the frames as sensor_msgs/Image bgr8
    bag+mcap     the same with --mcap (edge_deploy.ros.Publisher writing an MCAP file)
    jpeg+mcap    a rosbag2 MCAP of the frames as CompressedImage jpeg, with --mcap

and `detect`: LaneDetClient.detect alone on frames in memory (the client's request time, nothing read or written).
Each way runs --repeats times, interleaved; the table gives the median ms per frame and what each adds to `video`.
The recordings are written by the `rosbags` writer (tests/support/recordings.py).

    python3 benchmarks/bench_recordings.py                       # the stand-in model on the bundled tritonserver
    python3 benchmarks/bench_recordings.py --url HOST:PORT --model lanedet --frames 20 --repeats 1
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "support"))  # small_artifact.py, recordings.py, triton_helpers.py
sys.path.insert(0, str(ROOT / "tests"))  # conftest.free_port for triton_helpers.serving
ANCHORS = ROOT / "tests" / "data" / "laneatt" / "anchors_2784x77.npy"


@contextmanager
def stand_in(work: Path) -> Iterator[tuple[str, str]]:
    """The negligible-compute LaneATT stand-in (tests/support/small_artifact.py) served raw; yields (url, model)."""
    from small_artifact import make_artifact
    from triton_helpers import serving

    from edge_deploy.deploy.install import install
    from edge_deploy.deploy.options import InstallOptions

    install(InstallOptions(make_artifact(work / "artifact", ANCHORS), work / "repo", "standin", runtime="python"))
    with serving(work / "repo", work) as proc:
        yield proc.url, "standin"


def sources(work: Path, count: int) -> dict[str, Path]:
    from recordings import write_recording

    from edge_deploy.media import write_video
    from edge_deploy.synthetic.roads import EVAL_SEED_BASE, drive

    frames = [scene.frame for scene in drive(EVAL_SEED_BASE, count, 1640, 590, fps=30.0)]
    return {
        "video": write_video(work / "drive.mp4", frames, 1640, 590, fps=30.0),
        "bag": write_recording(work / "raw", frames, kind="mcap", encoding="bgr8"),
        "jpeg": write_recording(work / "jpeg", frames, kind="mcap", encoding="jpeg",
                                topic="/front/image_raw/compressed"),
    }


def one_run(way: str, client: Any, paths: dict[str, Path], out: Path) -> tuple[float, float]:
    """(wall, this process's CPU) ms per frame of one way (CPU: every thread of the client, not the server)."""
    from edge_deploy.media import detect_recording, detect_video, frames_of, open_recording
    from edge_deploy.ros import Publisher

    def detect(frame: Any) -> list[Any]:
        return client.detect(frame)

    if way == "detect":
        frames = [f.image for f in frames_of(paths["bag"])]
        started, cpu = time.perf_counter(), time.process_time()
        for frame in frames:
            detect(frame)
        return ((time.perf_counter() - started) / len(frames) * 1e3,
                (time.process_time() - cpu) / len(frames) * 1e3)
    out.mkdir(parents=True)
    started, cpu = time.perf_counter(), time.process_time()
    if way == "video":
        result = detect_video(detect, str(paths["video"]), out, model="m")
    else:
        publisher = Publisher.open(out / "lanes.mcap") if way.endswith("+mcap") else None
        try:
            recording = open_recording(paths["jpeg" if way.startswith("jpeg") else "bag"])
            result = detect_recording(detect, recording, out, model="m", publish=publisher)
        finally:
            if publisher is not None:
                publisher.close()
    return (time.perf_counter() - started) / result.frames * 1e3, (time.process_time() - cpu) / result.frames * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", help="a served lane model (default: the stand-in, started here)")
    parser.add_argument("--model", default="lanedet")
    parser.add_argument("--frames", type=int, default=60)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    from edge_deploy.client.sync_client import LaneDetClient
    from edge_deploy.media import frames_of

    ways = ["detect", "video", "bag", "bag+mcap", "jpeg+mcap"]
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        paths = sources(work, args.frames)
        with (stand_in(work / "server") if args.url is None else _given(args.url, args.model)) as (url, model):
            with LaneDetClient(url, model) as client:
                for frame in frames_of(paths["bag"], 3):
                    client.detect(frame.image)  # warm up
                times: dict[str, list[tuple[float, float]]] = {way: [] for way in ways}
                for repeat in range(args.repeats):
                    for way in ways:
                        times[way].append(one_run(way, client, paths, work / f"out-{way}-{repeat}"))
    wall = {way: statistics.median(w for w, _ in values) for way, values in times.items()}
    cpu = {way: statistics.median(c for _, c in values) for way, values in times.items()}
    print(f"{args.frames} frames 1640x590, {args.repeats} runs each, median ms per frame "
          f"(model {model} at {'the stand-in' if args.url is None else args.url})")
    print("| way | wall ms/frame | runs | added to video | client CPU ms/frame | runs | added to video |")
    print("|---|---:|---|---:|---:|---|---:|")
    for way in ways:
        def added(m: dict[str, float]) -> str:
            return "" if way in ("detect", "video") else f"{(m[way] - m['video']) / m['video']:+.1%}"

        print(f"| {way} | {wall[way]:.1f} | {' '.join(f'{w:.1f}' for w, _ in times[way])} | {added(wall)} | "
              f"{cpu[way]:.1f} | {' '.join(f'{c:.1f}' for _, c in times[way])} | {added(cpu)} |")


@contextmanager
def _given(url: str, model: str) -> Iterator[tuple[str, str]]:
    yield url, model


if __name__ == "__main__":
    main()
