"""`edge-deploy infer`: lanes for images (PNG with the lanes drawn and/or JSON) and videos or cameras (an annotated
video and JSON lines); `edge-deploy sample`: synthetic frames or a synthetic drive to try it on."""
from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Optional

import typer

from . import option_groups as groups
from .typer_app import app
from .options import takes_options
from .numeric import number
from ..errors import CalibrationError, ClientError
from ..core.numbers import MAX_AGE_S, SPEED_MPS, TIMEOUT_S, WAIT_S, whole
from .recordings import FOXGLOVE_WAIT_S
from ..lanedet.decode_params import DecodeParamsError, ScoreNmsDecodeParams

if TYPE_CHECKING:  # numpy and OpenCV: loaded when a command runs
    from ..media.lane_json import ImageLanes
    from ..media.live import DecodeOverrides


class Transport(str, Enum):
    auto = "auto"
    shm = "shm"
    grpc = "grpc"


_DECODE = "Decoding (default: the model config's)"
_GEOMETRY = "Lane markers in metres"
_LIVE = "Cameras and live sources"
_ROS = "ROS recordings and ROS 2 output (docs/recordings.md)"

SYNTHETIC_FRAMES = whole(0, 10000, "frames")
MAX_FRAMES = whole(0, 10**9, "frames", note="0: until it ends")
SAMPLE_COUNT = whole(1, 100000, "frames")
SAMPLE_SIDE = whole(64, 8192, "pixels")
SAMPLE_SEED = whole(0, 10**8, noun="a seed offset")  # evaluation seeds: EVAL_SEED_BASE + this


def lane_geometry(camera: Path | None, track: bool, speed: float | None, recordings: bool = False) -> Any:
    """The LaneGeometry --camera/--track/--speed ask for (None without --camera); one-line errors. With
    `recordings`, --track/--speed may come without --camera (a recording's CameraInfo is its camera)."""
    if camera is None:
        if (track or speed is not None) and not recordings:
            raise CalibrationError(f"{'--track' if track else '--speed'} works on lane markers, which need the "
                                   "camera: add --camera CALIB.yaml.")
        if speed is not None and not speed >= 0:
            raise CalibrationError(f"--speed must be 0 or more metres per second (got {speed:g}).")
        return None
    from ..geometry.figures import MAX_SPEED_MPS

    if speed is not None and not 0 <= speed <= MAX_SPEED_MPS:
        raise CalibrationError(f"--speed must be 0 to {MAX_SPEED_MPS:g} metres per second (got {speed:g}).")
    from ..geometry import Camera, LaneGeometry

    return LaneGeometry(Camera.from_yaml(camera), track=track, speed_mps=speed)


def synthetic_frames(count: int, width: int = 1640, height: int = 590, seed: int = 0) -> list[tuple[str, Any]]:
    """`count` synthetic road frames named road-000.png, ...: evaluation seeds (never used to train the demo
    weights), from EVAL_SEED_BASE + seed on."""
    from ..synthetic.roads import EVAL_SEED_BASE, scene

    return [(f"road-{i:03d}.png", scene(EVAL_SEED_BASE + seed + i, width, height).frame) for i in range(count)]


@dataclass(frozen=True)
class InferOptions:
    """What `edge-deploy infer` is asked: one typed field per option, in the order of --help (the command's
    parameters are made from these fields); `checked()` refuses what cannot work before any file is read."""

    images: Annotated[Optional[list[str]], typer.Argument(
        help="Image files (PNG/JPEG, any size) or directories of them, video files (.mp4 .avi .mkv .mov .webm), cameras (/dev/video0), "
             "GStreamer pipelines ending in appsink, or ROS recordings (rosbag2 directories, .mcap, ROS 1 .bag).",
        show_default=False)] = None
    url: Annotated[Optional[str], groups.url(groups.FOUND_URL_HELP)] = None
    model: Annotated[str, typer.Option(help="Served model: the lane model NAME or NAME_pipeline.")] = "lanedet"
    detector: Annotated[Optional[str], typer.Option(
        help="A served object detector beside the lane model (docs/stack.md): its boxes are drawn, written to the "
             "JSON (\"detections\") and published on /edge_deploy/detections.", show_default=False)] = None
    out: Annotated[Path, typer.Option("--out", "-o", help="Directory for <image>.lanes.png / .lanes.json.")] = Path("lanes")
    json_out: Annotated[bool, typer.Option("--json", help="Also write <image>.lanes.json (points in image pixels).")] = False
    png: Annotated[bool, typer.Option("--png/--no-png", help="Write <image>.lanes.png with the lanes drawn.")] = True
    synthetic: Annotated[int, number(SYNTHETIC_FRAMES, help="Also run on N synthetic 1640x590 road frames (written to "
                                                            "OUT too).")] = 0
    conf: Annotated[Optional[float], groups.conf(_DECODE)] = None
    nms: Annotated[Optional[float], groups.nms(_DECODE)] = None
    top_k: Annotated[Optional[int], groups.top_k(_DECODE)] = None
    transport: Annotated[Transport, typer.Option(help="auto: shared memory when the server is on this host.")] = Transport.auto
    timeout: Annotated[float, number(TIMEOUT_S, help="Seconds per request.")] = 30.0
    wait: Annotated[float, number(WAIT_S, help="Wait up to this many seconds for the server and model to be "
                                               "ready.")] = 0.0
    max_frames: Annotated[int, number(MAX_FRAMES, help="Stop a video or camera after this many frames (Ctrl-C stops "
                                                       "a camera and keeps what was written).")] = 0
    tls_ca: Annotated[Optional[Path], groups.tls_ca()] = None
    tls_cert: Annotated[Optional[Path], groups.tls_cert()] = None
    tls_key: Annotated[Optional[Path], groups.tls_key()] = None
    camera: Annotated[Optional[Path], typer.Option(
        help="Camera calibration (ROS camera_info YAML + mounting): add lane markers (cubics in metres, ego "
             "left/right) and the ego lane's figures to the JSON, and a bird's-eye panel to the pictures.",
        rich_help_panel=_GEOMETRY)] = None
    track: Annotated[bool, typer.Option("--track", help="Follow the markers across a video's frames (stable ids, "
                                                        "smoothed); with --camera.", rich_help_panel=_GEOMETRY)] = False
    speed: Annotated[Optional[float], number(SPEED_MPS, help="Vehicle speed (m/s) for the time to line crossing; "
                                                             "with --camera.", rich_help_panel=_GEOMETRY)] = None
    realtime: Annotated[bool, typer.Option(
        "--realtime", help="Read video files at their frame rate and detect only the newest frame, dropping what "
                           "the model cannot keep up with, as a vehicle app does (cameras and GStreamer pipelines "
                           "always are); prints frames read / processed / dropped and the capture -> lanes "
                           "latency.", rich_help_panel=_LIVE)] = False
    max_age: Annotated[float, number(MAX_AGE_S, help="Seconds after capture that a live frame's lanes count as fresh "
                                                     "(its state in the JSON lines, and each request's deadline).",
                                     rich_help_panel=_LIVE)] = 0.1
    topic: Annotated[Optional[str], typer.Option(help="A recording's image topic (sensor_msgs Image or "
                                                     "CompressedImage); needed when it has several.",
                                                 rich_help_panel=_ROS)] = None
    mcap: Annotated[Optional[Path], typer.Option(help="Also write the frames, lanes and markers as ROS 2 messages to "
                                                      "this MCAP file (rosbag2-compatible).", rich_help_panel=_ROS)] = None
    foxglove: Annotated[Optional[str], typer.Option(metavar="[HOST:]PORT", help="Publish the same live over the "
                                                    "Foxglove WebSocket protocol (host 127.0.0.1 unless given; "
                                                    "unauthenticated).", rich_help_panel=_ROS)] = None
    foxglove_insecure: Annotated[bool, typer.Option(
        "--foxglove-insecure", help="Let --foxglove listen beyond loopback (0.0.0.0, an interface's address): the "
                                    "protocol has no authentication, so anyone who reaches it sees the camera and "
                                    "the lanes.", rich_help_panel=_ROS)] = False
    foxglove_wait: Annotated[float, number(
        FOXGLOVE_WAIT_S, metavar="SECONDS", help="Before the first frame, wait up to this long for a Foxglove client "
                                                 "to subscribe, so that it sees the run from frame 0 (0: start at once).",
        rich_help_panel=_ROS)] = 0.0

    def checked(self) -> "InferOptions":
        """These options, or a one-line ClientError (CalibrationError for --track/--speed without --camera)."""
        _check_numbers(synthetic=self.synthetic, timeout=self.timeout, wait=self.wait, conf=self.conf, nms=self.nms,
                       top_k=self.top_k)
        if self.max_frames < 0:
            raise ClientError(f"--max-frames must be 0 (no limit) or more (got {self.max_frames}).")
        if not 0 < self.max_age < float("inf"):
            raise ClientError(f"--max-age must be more than 0 seconds (got {self.max_age:g}).")
        if not self.images and self.synthetic <= 0:
            raise ClientError("no images given; pass image files or --synthetic N.")
        if not self.png and not self.json_out:
            raise ClientError("--no-png without --json writes nothing; add --json.")
        if self.detector is not None:
            from ..media import is_live_source

            live = next((v for v in self.videos() if self.realtime or is_live_source(v)), None)
            if live is not None:
                raise ClientError(f"--detector works on images, video files and recordings; {live} is read live "
                                  "(a camera, a pipeline or --realtime): use PerceptionStream (docs/stack.md) for a "
                                  "live stack.")
        from .recordings import check_ros_options

        check_ros_options(topic=self.topic, mcap=self.mcap, foxglove=self.foxglove, recordings=self.recordings(),
                          streams=len(self.videos()) + len(self.recordings()),
                          stills=bool(self.image_paths()) or self.synthetic > 0,
                          foxglove_insecure=self.foxglove_insecure, foxglove_wait=self.foxglove_wait,
                          inputs=self.read_files())
        out = self.out
        blocker = next((p for p in (out, *out.parents) if p.exists() and not p.is_dir()), None)
        if blocker is not None:
            raise ClientError(f"--out {out} cannot be a directory: {blocker} is a file; pass a directory with --out.")
        return self

    def read_files(self) -> list[str]:
        """Every video file and recording this run reads (an output must not be one of them)."""
        return [s for s in (*self.videos(), *self.recordings()) if not s.startswith("/dev/video") and "!" not in s]

    def videos(self) -> list[str]:
        from ..media import is_video_source

        return [s for s in self.images or [] if is_video_source(s)]

    def recordings(self) -> list[str]:
        from ..media import is_recording, is_video_source

        return [s for s in self.images or [] if not is_video_source(s) and is_recording(s)]

    def image_paths(self) -> list[Path]:
        from ..media import is_recording, is_video_source

        return [Path(s) for s in self.images or [] if not is_video_source(s) and not is_recording(s)]

    def decode(self) -> DecodeOverrides:
        """The decode parameters --conf, --nms and --top-k ask of every call (media.live.DecodeOverrides)."""
        from ..media.live import DecodeOverrides

        return DecodeOverrides(conf_threshold=self.conf, nms_threshold=self.nms, top_k=self.top_k)

    def dial(self, server: Any = None) -> tuple[str, Any]:
        """(address, TLSConfig or None) to dial: --url, else `server`'s (cli.option_groups.found_server), else the
        default address; --tls-* when given, else the TLS identity of the server record found there."""
        tls = groups.client_tls(self.tls_ca, self.tls_cert, self.tls_key)
        if server is None:
            return self.url or groups.DEFAULT_URL, tls
        record = server.record
        return server.url, tls if tls is not None or record is None else record.client_tls()

    def client(self, server: Any = None) -> Any:
        """The LaneDetClient these options ask for (not yet connected with --wait), on `server` (see `dial`)."""
        from ..client.sync_client import LaneDetClient

        url, tls = self.dial(server)
        return LaneDetClient(url, self.model, transport=self.transport.value, client_timeout=self.timeout,
                             connect=self.wait <= 0, tls=tls)

    def detector_client(self, server: Any = None) -> Any:
        """The DetectorClient of --detector, or None (not yet connected with --wait)."""
        if self.detector is None:
            return None
        from ..client.detector_client import DetectorClient

        url, tls = self.dial(server)
        return DetectorClient(url, self.detector, transport=self.transport.value, client_timeout=self.timeout,
                              connect=self.wait <= 0, tls=tls)


@app.command()
@takes_options(InferOptions)
def infer(**given: Any) -> None:
    """Detect lanes with a served model: each image written with its lanes drawn (PNG) and/or as JSON; each video
    or camera as OUT/<name>.lanes.mp4 with the lanes drawn and OUT/<name>.lanes.jsonl (one JSON line per frame).
    With --camera, lane markers in the vehicle frame too (docs/geometry.md)."""
    from ..media import detect_images, detect_recording, detect_video, is_live_source
    from .recordings import open_recordings, publishing

    options = InferOptions(**given).checked()
    bags = options.recordings()
    geometry = lane_geometry(options.camera, options.track, options.speed, recordings=bool(bags))
    frames = _frames(options.image_paths(), options.videos(), options.synthetic, options.out, geometry)
    opened = open_recordings(bags, options.topic, geometry.camera if geometry else None, options.track, options.speed)
    server = groups.found_server(options.url)
    client = options.client(server)
    objects = options.detector_client(server)
    camera = (geometry is not None and bool(options.videos())) or any(bag.setup is not None for bag in opened)
    with client, contextlib.ExitStack() as stack, publishing(
            options.mcap, options.foxglove, options.read_files(), camera=camera, detections=objects is not None,
            insecure=options.foxglove_insecure, wait=options.foxglove_wait) as publish:
        if objects is not None:
            stack.enter_context(objects)
        if options.wait > 0:
            typer.echo(f"waiting up to {options.wait:g} s for {options.model} at {server.url} to be ready", err=True)
            client.wait_until_ready(options.wait)
            if objects is not None:
                objects.wait_until_ready(options.wait)
        detect_objects = objects.detect if objects is not None else None

        decode = options.decode()

        def detect(frame: Any) -> list[Any]:
            return client.detect(frame, conf_threshold=decode.conf_threshold, nms_threshold=decode.nms_threshold,
                                 top_k=decode.top_k)

        records = detect_images(detect, frames, options.out, model=client.model_name, write_png=options.png,
                                write_json=options.json_out, geometry=geometry, detect_objects=detect_objects)
        played, streamed = [], []
        for video in options.videos():
            if options.realtime or is_live_source(video):
                streamed.append(_detect_live(client, video, options, geometry, publish))
                played.append(streamed[-1].video)
                continue
            played.append(detect_video(detect, video, options.out, model=client.model_name,
                                       max_frames=options.max_frames, progress=_progress(video), geometry=geometry,
                                       publish=publish, detect_objects=detect_objects))
        for bag in opened:
            played.append(detect_recording(detect, bag.recording, options.out, model=client.model_name,
                                           max_frames=options.max_frames, progress=_progress(str(bag.recording.path)),
                                           geometry=bag.geometry, publish=publish, setup=bag.setup,
                                           detect_objects=detect_objects))
    _print_results(records, played, client, options.out)
    for live in streamed:
        typer.echo(f"{live.video.source}: {live.stats.line()}")


def _detect_live(client: Any, source: str, options: InferOptions, geometry: Any, publish: Any) -> Any:
    """A camera, a pipeline or (--realtime) a video file through a LaneStream: the newest frame only."""
    from ..media.live import detect_live

    return detect_live(client, source, options.out, model=client.model_name, max_frames=options.max_frames,
                       max_age=options.max_age, camera=geometry.camera if geometry is not None else None,
                       track=options.track, speed_mps=options.speed, progress=_progress(source),
                       detect_options=options.decode(), publish=publish)


def _frames(paths: list[Path], videos: list[str], synthetic: int, out: Path, geometry: Any) -> list[tuple[str, Any]]:
    """Every image read and every video opened once before the first request (one-line errors); the synthetic
    frames written to OUT and added; with --camera, each frame's size checked against the calibration."""
    from ..media import open_video, read_images

    frames = read_images(paths)
    for source in videos:
        open_video(source).release()
    if synthetic > 0:
        from ..lanedet.draw import save_png

        for name, frame in synthetic_frames(synthetic):
            save_png(out / name, frame)
            frames.append((str(out / name), frame))
    if geometry is not None:
        for name, frame in frames:
            try:
                geometry.camera.check_frame(frame.shape[1], frame.shape[0])
            except CalibrationError as exc:
                raise CalibrationError(f"{name}: {exc}") from None
    return frames


def _progress(source: str) -> Any:
    """A progress line on stderr for the first frame of a video or camera, then every PROGRESS_EVERY_S seconds."""
    from ..core.progress import every_few_seconds

    return every_few_seconds(
        lambda line: typer.echo(line, err=True),
        lambda frames, seconds: f"{source}: {frames} frames, {frames / max(seconds, 1e-9):.1f} frames/s")


def _print_results(records: list[ImageLanes], played: list[Any], client: Any, out: Path) -> None:
    from rich.console import Console

    from ..core.tables import narrow_table

    console = Console()
    table = narrow_table("image", "size", "lanes", "scores", "written")
    for rec in records:
        scores = ", ".join(f"{lane.score:.2f}" for lane in rec.lanes) or "-"
        written = ", ".join(Path(path).name for path in (rec.png, rec.json) if path is not None)
        table.add_row(Path(rec.image).name, f"{rec.width}x{rec.height}", str(len(rec.lanes)), scores, written)
    if records:
        console.print(table)
    for result in played:
        typer.echo(f"{result.source}: {result.frames} frames at {result.fps:.1f} frames/s "
                   f"({result.lanes_per_frame:.1f} lanes per frame) -> {result.video}, {result.jsonl}")
    if (records or played) and client.model is not None and client.model.kind == "raw":
        console.print(f"[dim]{client.model_name}: decoded on the client ({client.transport}); output in {out}[/]")


def _check_numbers(*, synthetic: int, timeout: float, wait: float, conf: float | None, nms: float | None,
                   top_k: int | None) -> None:
    """One-line ClientErrors for numbers that would otherwise fail later with a misleading message."""
    problems = [
        (synthetic < 0, f"--synthetic must be 0 or more frames (got {synthetic})"),
        (not timeout > 0, f"--timeout must be more than 0 seconds (got {timeout:g})"),
        (not wait >= 0, f"--wait must be 0 (do not wait) or more seconds (got {wait:g})"),
    ]
    for bad, message in problems:
        if bad:
            raise ClientError(message + ".")
    try:  # the decode rules live with ScoreNmsDecodeParams; here they are named as infer's options
        ScoreNmsDecodeParams.check_given(conf_threshold=conf, nms_threshold=nms, top_k=top_k)
    except DecodeParamsError as exc:
        raise ClientError(f"{exc.for_options()}.") from None


@app.command()
def sample(
    out: Annotated[Path, typer.Option("--out", "-o", help="Directory for the frames.")] = Path("samples"),
    count: Annotated[int, number(SAMPLE_COUNT, "--count", "-n", help="How many frames (with --video: of the "
                                                                     "drive).")] = 4,
    width: Annotated[int, number(SAMPLE_SIDE, help="Frame width.")] = 1640,
    height: Annotated[int, number(SAMPLE_SIDE, help="Frame height.")] = 590,
    seed: Annotated[int, number(SAMPLE_SEED, help="Which roads (offset into the seeds held out from training).")] = 0,
    video: Annotated[bool, typer.Option("--video", help="Write one drive along a road (OUT/drive.mp4, 30 frames/s) "
                                                        "instead of separate frames.")] = False,
    stack: Annotated[bool, typer.Option("--stack", help="Also write OUT/detector.onnx, a stand-in object detector "
                                                        "(it finds bright quadrants; YOLO layout) to try "
                                                        "docs/stack.md with.")] = False,
) -> None:
    """Write synthetic road frames (PNG, CULane size by default), or a synthetic drive as a video, to try
    `edge-deploy infer` on. The roads are drawn from seeds the demo weights were never trained on. Beside each
    frame (and the drive) its camera's calibration, <name>.calib.yaml, for `infer --camera`."""
    from ..geometry import Camera
    from ..geometry.calibration_file import write_calibration
    from ..lanedet.draw import save_png
    from ..synthetic.roads import EVAL_SEED_BASE, drive_truth, scene_truth

    if stack:
        from ..export.stand_in_detector import write_stand_in_detector

        typer.echo(str(write_stand_in_detector(out / "detector.onnx")))
    if video:
        from ..media import write_video
        from ..synthetic.roads import drive

        from ..core.progress import counted, every_few_seconds

        say = every_few_seconds(lambda line: typer.echo(line, err=True),
                                lambda done, seconds: f"drive.mp4: {done}/{count} frames drawn ({seconds:.0f} s)")
        started = time.monotonic()
        frames = counted((scene.frame for scene in drive(EVAL_SEED_BASE + seed, count, width, height, fps=30.0)),
                         say)
        typer.echo(str(write_video(out / "drive.mp4", frames, width, height, fps=30.0)))
        typer.echo(f"drive.mp4: {count} frames in {time.monotonic() - started:.0f} s", err=True)
        first = next(drive_truth(EVAL_SEED_BASE + seed, 1, width, height))  # one camera for the whole drive
        typer.echo(str(write_calibration(out / "drive.calib.yaml", Camera.from_mapping(first.camera))))
        return
    for i, (name, frame) in enumerate(synthetic_frames(count, width, height, seed)):
        typer.echo(str(save_png(out / name, frame)))
        truth = scene_truth(EVAL_SEED_BASE + seed + i, width, height)
        typer.echo(str(write_calibration(out / f"{Path(name).stem}.calib.yaml",
                                           Camera.from_mapping(truth.camera))))
