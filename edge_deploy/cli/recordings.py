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
from ..core.numbers import Range

FOXGLOVE_WAIT_S = Range(0, 3600, "seconds", note="0: start at once")  # --foxglove-wait: up to an hour


@dataclass(frozen=True)
class OpenedRecording:
    """A checked recording (media.bag.Recording), its camera (media.stamped.CameraSetup or None) and the
    LaneGeometry that fits its markers (None without a camera)."""

    recording: Any
    setup: Any
    geometry: Any


def check_ros_options(*, topic: str | None, mcap: Path | None, foxglove: str | None, recordings: list[str],
                      streams: int, stills: bool, foxglove_insecure: bool = False,
                      foxglove_wait: float = 0.0, inputs: Sequence[str] = ()) -> Any:
    """One-line ClientErrors for --topic/--mcap/--foxglove(-insecure, -wait) that cannot work (an address beyond
    loopback without --foxglove-insecure among them, before anything binds); returns the parsed --foxglove
    address (None without it)."""
    FOXGLOVE_WAIT_S.check("--foxglove-wait", foxglove_wait, ClientError)
    if foxglove is None and (foxglove_insecure or foxglove_wait > 0):
        given = "--foxglove-insecure" if foxglove_insecure else "--foxglove-wait"
        raise ClientError(f"{given} goes with --foxglove [HOST:]PORT, which was not given; add it or drop {given}.")
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
    from ..ros.live import check_exposure, parse_listen

    address = parse_listen(foxglove)
    check_exposure(address, foxglove_insecure)
    return address


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


def open_publisher(mcap: Path | None, foxglove: str | None, inputs: Sequence[str] = (), *, camera: bool = False,
                   detections: bool = False, insecure: bool = False) -> Any:
    """The Publisher of --mcap/--foxglove (None without either); the Foxglove address and, beyond loopback (only
    with --foxglove-insecure), the unauthenticated warning printed on stderr. The Foxglove server advertises the
    channels of this run (`camera`, `detections`: messages.run_channels) from the start. `inputs`: the files the run
    reads, which --mcap must not be."""
    if mcap is None and foxglove is None:
        return None
    from ..ros.live import parse_listen, unauthenticated_warning
    from ..ros.messages import run_channels
    from ..ros.publisher import Publisher

    address = parse_listen(foxglove) if foxglove is not None else None
    publisher = Publisher.open(mcap, address, inputs, channels=run_channels(camera, detections), insecure=insecure)
    if address is not None:
        if not address.loopback:
            typer.echo(unauthenticated_warning(address), err=True)
        typer.echo(f"Foxglove: ws://{address} (open a connection to it in Foxglove)", err=True)
    return publisher


@contextmanager
def publishing(mcap: Path | None, foxglove: str | None, inputs: Sequence[str] = (), *, camera: bool = False,
               detections: bool = False, insecure: bool = False, wait: float = 0.0) -> Iterator[Any]:
    """The run's publisher (None without --mcap/--foxglove), finished when the run ends: an MCAP file keeps the
    frames published when the run ends or is stopped with Ctrl-C, and is not left at all when there were none, or
    when the run failed or got SIGTERM (then an earlier file at that path is left as it was). `inputs`: the
    recordings and videos read, which --mcap must not be. With `wait` (--foxglove-wait), the first frame waits up
    to that long for a Foxglove client to subscribe."""
    publisher = open_publisher(mcap, foxglove, inputs, camera=camera, detections=detections, insecure=insecure)
    keep = False
    try:
        if foxglove is not None and wait > 0:
            typer.echo(f"Foxglove: waiting up to {wait:g} s for a client to subscribe", err=True)
            if not publisher.wait_for_subscriber(wait):
                typer.echo(f"Foxglove: no client subscribed within {wait:g} s; publishing anyway", err=True)
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
