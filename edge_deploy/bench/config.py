"""What `edge-deploy bench` measures: one typed BenchConfig, checked when made."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..client.base import DEFAULT_URL
from ..errors import BenchError
from ..core.numbers import Range, whole

DEFAULT_CONCURRENCY = (1, 2, 4)


# Frames in flight (--concurrency: one client, each frame a request and its shared-memory regions) and streams at once
# (--cameras: each a LaneStream with its threads): past these a bench measures the machine's limits, not the model's.
CONCURRENCY = whole(1, 64, "frames in flight")
CAMERAS = whole(1, 16, "streams")


def parse_concurrency(text: str, option: str = "--concurrency", rng: Range = CONCURRENCY) -> tuple[int, ...]:
    """"1,2,4" -> (1, 2, 4); a one-line BenchError for anything else, or a count outside `rng`."""
    return rng.parse_list(option, text, BenchError)


@dataclass(frozen=True)
class BenchConfig:
    """One bench run against one server.

    models: served models to measure (lane models or their NAME_pipeline); empty: every lane model the
    server serves and its pipeline. frames: a directory of images or a video (None: the synthetic sample
    set). seconds: timed per cell (model x concurrency), after warmup_seconds.
    """

    url: str = DEFAULT_URL
    tls: Any = None  # edge_deploy.tls.config.TLSConfig | None
    repository: Path | None = None  # lists the models (and finds the server) when given
    models: tuple[str, ...] = ()
    frames: Path | None = None
    max_frames: int = 32
    concurrency: tuple[int, ...] = DEFAULT_CONCURRENCY
    seconds: float = 10.0
    warmup_seconds: float = 1.0
    transport: str = "auto"
    timeout: float = 30.0
    check_lanes: bool = True
    tolerance_px: float = 1.0  # lanes-equal: largest point difference between pipelines

    def __post_init__(self) -> None:
        if not self.seconds > 0:
            raise BenchError(f"--seconds must be more than 0 (got {self.seconds}).")
        if self.warmup_seconds < 0:
            raise BenchError(f"--warmup must be 0 or more seconds (got {self.warmup_seconds}).")
        if self.max_frames < 1:
            raise BenchError(f"--max-frames must be 1 or more (got {self.max_frames}).")
        if not self.concurrency or any(int(c) < 1 for c in self.concurrency):
            raise BenchError(f"--concurrency must name whole numbers >= 1 (got {self.concurrency}).")
        if self.timeout <= 0:
            raise BenchError(f"--timeout must be more than 0 seconds (got {self.timeout}).")


def find_server(url: str | None, repository: Path | None, tls: Any = None) -> tuple[str, Path | None, Any]:
    """(url, repository, tls) of the server to bench: `url`, else the server `edge-deploy serve` runs for
    `repository`, else 127.0.0.1:8001; a server `edge-deploy serve` started here gives the repository (its key lists
    the models, as `status` does) and its client TLS identity where `tls` is None. BenchError when `repository` is not
    a directory or, without `url`, has no running server."""
    from ..serve.server_record import find_record, record_at

    if repository is not None and not repository.is_dir():
        raise BenchError(f"--repository {repository} is not a directory; pass the model repository the server serves.")
    if repository is not None and url is None:
        record = find_record(repository)
        if record is None:
            raise BenchError(f"no running `edge-deploy serve` server for {repository}; start one, or pass --url.")
        return record.url, repository, tls or record.client_tls()
    if repository is None:
        record = record_at(url or DEFAULT_URL)
        if record is not None:
            return url or DEFAULT_URL, record.repository, tls or record.client_tls()
    return url or DEFAULT_URL, repository, tls
