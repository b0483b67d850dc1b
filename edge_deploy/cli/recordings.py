"""What `infer` does with ROS recordings and ROS 2 output (--topic, --mcap, --foxglove): the checks before any
request, each recording opened with its camera, the publisher opened and reported. infer.py calls these."""
from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import typer
from ..errors import CalibrationError, ClientError


@dataclass(frozen=True)
class OpenedRecording:
    """A checked recording (media.bag.Recording), its camera (media.stamped.CameraSetup or None) and the
    LaneGeometry that fits its markers (None without a camera)."""

    recording: Any
    setup: Any
    geometry: Any


def check_ros_options(*, topic: str | None, mcap: Path | None, foxglove: str | None, recordings: list[str],
                      streams: int, stills: bool, inputs: Sequence[str] = ()) -> Any:
    """One-line ClientErrors for --topic/--mcap/--foxglove that cannot work; returns the parsed --foxglove
    address (None without it)."""
    if topic is not None and not recordings:
        raise ClientError("--topic picks a recording's image topic, but no recording (rosbag2 directory, .mcap, "
                          ".bag) was given; pass one.")
    publishing = [name for name, value in (("--mcap", mcap), ("--foxglove", foxglove)) if value is not None]
    if publishing and (stills or streams == 0):
        raise ClientError(f"{' and '.join(publishing)} publish videos, cameras and recordings frame by frame; run "
                          "image files and --synthetic without it.")
    if mcap is not None:
        from ..ros.mcap_file import check_output

        check_output(mcap, inputs)
    if foxglove is None:
        return None
    from ..ros.live import parse_listen

    return parse_listen(foxglove)


def open_recordings(sources: list[str], topic: str | None, calibration: Any, track: bool,
                    speed: float | None) -> list[OpenedRecording]:
    """Every recording checked and its camera found before the first request (one-line errors)."""
    from ..geometry import LaneGeometry
    from ..media.bag import open_recording
    from ..media.bag_camera import recording_camera

    opened = []
    for source in sources:
        recording = open_recording(source, topic)
        setup = recording_camera(recording, calibration)
        if setup is None and (track or speed is not None):
            raise CalibrationError(f"{'--track' if track else '--speed'} works on lane markers, which need the "
                                   f"camera: {source} has no CameraInfo on its image topic; add --camera CALIB.yaml.")
        geometry = None
        if setup is not None:
            try:
                setup.camera.check_frame(recording.width, recording.height)
            except CalibrationError as exc:
                raise CalibrationError(f"{source} {recording.topic}: {exc}") from None
            geometry = LaneGeometry(setup.camera, track=track, speed_mps=speed)
        opened.append(OpenedRecording(recording, setup, geometry))
    return opened


def open_publisher(mcap: Path | None, foxglove: str | None, inputs: Sequence[str] = ()) -> Any:
    """The Publisher of --mcap/--foxglove (None without either); the Foxglove address and, beyond loopback, the
    unauthenticated warning printed on stderr."""
    if mcap is None and foxglove is None:
        return None
    from ..ros.live import parse_listen, unauthenticated_warning
    from ..ros.publisher import Publisher

    address = parse_listen(foxglove) if foxglove is not None else None
    publisher = Publisher.open(mcap, address, inputs)
    if address is not None:
        if not address.loopback:
            typer.echo(unauthenticated_warning(address), err=True)
        typer.echo(f"Foxglove: ws://{address} (open a connection to it in Foxglove)", err=True)
    return publisher


@contextmanager
def publishing(mcap: Path | None, foxglove: str | None, inputs: Sequence[str] = ()) -> Iterator[Any]:
    """The run's publisher (None without --mcap/--foxglove), finished when the run ends: an MCAP file keeps the
    frames published when the run ends or is stopped with Ctrl-C, and is not left at all when there were none, or
    when the run failed or got SIGTERM (then an earlier file at that path is left as it was). `inputs`: the
    recordings and videos read, which --mcap must not be."""
    publisher = open_publisher(mcap, foxglove, inputs)
    keep = False
    try:
        yield publisher
        keep = True
    except KeyboardInterrupt:
        keep = True
        raise
    finally:
        if publisher is not None:
            publisher.close(keep=keep)
            if mcap is not None and keep and publisher.frames > 0:
                typer.echo(f"{mcap}: {publisher.frames} frames as ROS 2 messages (docs/recordings.md)")
