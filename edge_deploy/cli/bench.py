"""`edge-deploy bench`: frames/s, latency and where the time goes, for every served lane model and pipeline."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Optional

import typer

from ..core import strict_json
from ..errors import BenchError
from . import option_groups as groups
from .typer_app import app
from .infer import Transport
from .options import takes_options
from .numeric import number, numbers
from ..bench.config import CAMERAS, CONCURRENCY
from ..core.numbers import FPS, MAX_AGE_S, TIMEOUT_S, Range, whole

if TYPE_CHECKING:
    from rich.console import Console

    from ..bench.config import BenchConfig
    from ..bench.results import BenchReport

_REALTIME = "Realtime"
_STACK = "Perception stack"

BENCH_FRAMES = whole(1, 100000, "frames")
WARMUP_S = Range(0, 3600, "seconds")


@dataclass(frozen=True)
class BenchOptions:
    """What `edge-deploy bench` is asked: one typed field per option, in the order of --help (the command's
    parameters are made from these fields); `config()` makes the library's BenchConfig once, finding the server."""

    url: Annotated[Optional[str], groups.url(
        f"{groups.FOUND_URL_HELP[:-1]}; a server `edge-deploy serve` started on this machine is found there, with its "
        "key and TLS identity.")] = None
    repository: Annotated[Optional[Path], typer.Option(
        "--repository", "-r", help="Model repository: its models, and its running `edge-deploy serve` server.",
        show_default=False)] = None
    model: Annotated[Optional[list[str]], typer.Option(
        "--model", help="Only this served model (a lane model or NAME_pipeline); repeat for several (default: every "
                        "lane model and its pipeline).", show_default=False)] = None
    frames: Annotated[Optional[Path], typer.Option(
        help="A directory of images, a video file, a camera (/dev/video0) or a GStreamer pipeline ending in appsink "
             "(its first --max-frames frames; default: the synthetic sample set).", show_default=False)] = None
    max_frames: Annotated[int, number(BENCH_FRAMES, help="Use at most this many frames of --frames (sent round "
                                                         "robin).")] = 32
    concurrency: Annotated[str, numbers(CONCURRENCY, help="Frames in flight, comma-separated: 1 uses LaneDetClient, "
                                                          "more AsyncLaneDetClient.")] = "1,2,4"
    seconds: Annotated[float, number(TIMEOUT_S, help="Seconds timed per model and concurrency.")] = 10.0
    warmup: Annotated[float, number(WARMUP_S, help="Seconds of untimed frames before each.")] = 1.0
    check: Annotated[bool, typer.Option(
        "--check/--no-check", help="First check that every pipeline of a model gives the same lanes.")] = True
    json_out: Annotated[bool, typer.Option("--json", help="Print the results as JSON instead of a table.")] = False
    plot: Annotated[Optional[Path], typer.Option(help="Also draw the results into this PNG.", show_default=False)] = None
    transport: Annotated[Transport, typer.Option(help="auto: shared memory when the server is on this host.")] = Transport.auto
    timeout: Annotated[float, number(TIMEOUT_S, help="Seconds per request.")] = 30.0
    tls_ca: Annotated[Optional[Path], groups.tls_ca()] = None
    tls_cert: Annotated[Optional[Path], groups.tls_cert()] = None
    tls_key: Annotated[Optional[Path], groups.tls_key()] = None
    realtime: Annotated[bool, typer.Option(
        "--realtime", help="Measure lanes as a control loop gets them: LaneStream on frames arriving at --fps "
                           "(newest frame only): capture -> lanes latency, frames dropped, states; instead of "
                           "--concurrency.", rich_help_panel=_REALTIME)] = False
    fps: Annotated[float, number(FPS, help="Frames per second each camera delivers (--realtime).",
                                 rich_help_panel=_REALTIME)] = 30.0
    cameras: Annotated[str, numbers(CAMERAS, help="Streams at once in this process, comma-separated (--realtime): "
                                                  "each row a stream, with the process CPU per frame.",
                                    rich_help_panel=_REALTIME)] = "1"
    max_age: Annotated[float, number(MAX_AGE_S, help="Seconds after capture that lanes count as fresh (--realtime): "
                                                     "the streams' state and deadline.",
                                     rich_help_panel=_REALTIME)] = 0.1
    stack: Annotated[bool, typer.Option(
        "--stack", help="Measure what the other served models cost the lane model: its p50/p99 alone, then beside "
                        "every --model driven at its maximum rate; client CPU per frame for one frame to every "
                        "model against one; with the settings install wrote and without them.",
        rich_help_panel=_STACK)] = False
    lane_model: Annotated[str, typer.Option(help="The lane model of --stack.", rich_help_panel=_STACK)] = "lanedet"
    compare_settings: Annotated[bool, typer.Option(
        "--compare-settings/--no-compare-settings", help="--stack: also measure with install's --priority, "
        "--instances and --threads taken out (the models reloaded with defaults, then from their files).",
        rich_help_panel=_STACK)] = True

    def config(self) -> "BenchConfig":
        """The BenchConfig, with the server bench.config.find_server finds; BenchError for what cannot work, before
        any request."""
        from ..bench.config import BenchConfig, find_server, parse_concurrency

        from ..serve.locate import locate_server

        located = locate_server(None).url if self.url is None and self.repository is None else None
        url, repository, tls = find_server(self.url or located, self.repository,
                                           groups.client_tls(self.tls_ca, self.tls_cert, self.tls_key))
        if self.plot is not None and self.plot.suffix.lower() != ".png":
            raise BenchError(f"--plot {self.plot} must name a .png file.")
        if self.plot is not None:
            from ..core.fsutil import check_target

            check_target(self.plot, what="--plot", inputs=[self.frames] if self.frames else [], error=BenchError)
        if self.url is None:
            typer.echo(locate_server(None, self.repository).line(), err=True)
        return BenchConfig(url=url, tls=tls, repository=repository, models=tuple(self.model or ()),
                           frames=self.frames, max_frames=self.max_frames,
                           concurrency=parse_concurrency(self.concurrency), seconds=self.seconds,
                           warmup_seconds=self.warmup, transport=self.transport.value, timeout=self.timeout,
                           check_lanes=self.check)


@app.command()
@takes_options(BenchOptions)
def bench(**given: Any) -> None:
    """Measure served lane models as a vehicle app sees them: frames in, lanes out, at each concurrency; the client's
    preprocess/request/decode split, the server's queue and compute times, CPU of client and server (GPU load and
    power on a Jetson)."""
    from rich.console import Console

    from ..bench.config import parse_concurrency
    from ..bench.report import print_report, write_plot

    options = BenchOptions(**given)
    config = options.config()
    console = Console(stderr=True)
    if options.stack:
        _bench_stack(options, config, console)
        return
    if options.realtime:
        from ..bench.realtime import print_realtime, run_realtime

        counts = parse_concurrency(options.cameras, "--cameras", CAMERAS)
        with console.status(f"realtime streams for {config.seconds:g} s per model and camera count"):
            live = run_realtime(config, options.fps, counts, options.max_age)
        if options.json_out:
            typer.echo(strict_json.dumps(live.to_dict(), indent=1))
        else:
            print_realtime(live, Console())
        return
    report = _run_with_progress(config, console)
    if options.plot is not None:
        write_plot(report, options.plot)
    if options.json_out:
        typer.echo(strict_json.dumps(report.to_dict(), indent=1))
    else:
        print_report(report, Console())
    if options.plot is not None:
        console.print(f"plot: {options.plot}", highlight=False)

def _run_with_progress(config: "BenchConfig", console: "Console") -> "BenchReport":
    """run_bench with a progress bar on a terminal (none in a log or a pipe)."""
    from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

    from ..bench.runner import run_bench

    if not console.is_terminal:  # a log or a pipe: no bar to redraw
        return run_bench(config)
    with Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.percentage:>3.0f}%"),
                  TimeRemainingColumn(), console=console, transient=True) as progress:
        task = progress.add_task("bench", total=1.0)

        def on_progress(label: str, done: int, total: int, fraction: float) -> None:
            progress.update(task, description=f"{label} ({done + 1}/{total})", completed=(done + fraction) / total)

        return run_bench(config, on_progress)


def _bench_stack(options: BenchOptions, config: "BenchConfig", console: "Console") -> None:
    """`bench --stack`: the lane model beside the other models (bench/stack.py)."""
    from rich.console import Console

    from ..bench.stack import other_models, role, run_stack, stack_lines
    from ..bench.targets import grpc_client, model_names

    others = list(options.model or ())
    if not others:
        client = grpc_client(config.url, config.tls)
        try:
            names = model_names(client, config.repository, config.timeout)
            others = other_models(names, options.lane_model, lambda name: role(client, name, config.timeout))
        finally:
            client.close()
    runs = 2 if options.compare_settings else 1
    with console.status(f"stack: {options.lane_model} alone and beside {', '.join(others) or '-'}, "
                        f"{config.seconds:g} s each, {runs} setting(s)"):
        report = run_stack(config, options.lane_model, others, compare_settings=options.compare_settings)
    if options.json_out:
        typer.echo(strict_json.dumps(report.to_dict(), indent=1))
    else:
        out = Console(soft_wrap=True)
        for line in stack_lines(report):
            out.print(line, highlight=False)
