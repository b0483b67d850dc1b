"""Soak: a served lane model under steady client load, with a server restart and repeated installs.

What a vehicle does for months, compressed into minutes: `edge-deploy serve --foreground`
(the bundled tritonserver, the model installed by the real `edge-deploy install` as a
Python-backend ONNX Runtime model) serves several LaneDetClient processes (half over
system shared memory, half over plain gRPC) at a steady rate. In the middle the server is
stopped and started again (SIGTERM, then `serve --foreground` again); every
--install-every minutes a new version is installed with `--keep 2` and hot-loaded.
Every --interval seconds it records the RSS of tritonserver, its Python-backend stubs,
the `serve --foreground` process and the clients, their open file descriptors, the
/dev/shm these processes hold, and the requests that failed.

The served model has LaneATT's I/O (input [B, 3, 360, 640] FP32 -> predict_lanes
[B, 1000, 77]) with negligible compute (tests/support/small_artifact.py), so the soak
measures the serving stack (server, backend, transport, client), not the network.

Slopes are least-squares fits after a warm-up, per server lifetime (before and after the
restart), with +-2 standard errors: a slope whose interval holds 0 is indistinguishable
from zero. Prints a JSON summary and writes a PNG plot.

    nice -n 10 python3 benchmarks/soak.py [--minutes 10] [--clients 4] [--rate 4] \\
        [--install-every 3] [--interval 5] [--plot benchmarks/soak.png] [--json soak.json]
"""
from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import queue
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
ANCHORS = ROOT / "tests" / "data" / "laneatt" / "anchors_2784x77.npy"
MiB = 2**20


# ---------------------------------------------------------------- clients (one process each)


def client_worker(url: str, transport: str, rate: float, seed: int, stop, results) -> None:  # noqa: ANN001
    """Call detect() `rate` times a second until `stop` is set; report (time, latency, error) once a second."""
    sys.path.insert(0, str(ROOT))
    from edge_deploy.client.sync_client import LaneDetClient
    from edge_deploy.errors import ClientError
    from edge_deploy.synthetic.roads import road_scene

    frames = [road_scene(1640, 590, seed=seed * 10 + i)[0] for i in range(4)]
    batch: list[tuple[float, float, str]] = []
    client = LaneDetClient(url, "lanedet", transport=transport, retry_deadline=30.0, conf_threshold=0.2)
    period, next_at, sent_at = 1.0 / rate, time.monotonic(), time.monotonic()
    i = 0
    with client:
        while not stop.is_set():
            start = time.monotonic()
            try:
                client.detect(frames[i % len(frames)])
                error = ""
            except ClientError as exc:
                error = f"{type(exc).__name__}: {exc}"[:300]
            batch.append((time.time(), time.monotonic() - start, error))
            i += 1
            if time.monotonic() - sent_at >= 1.0:
                results.put((os.getpid(), transport, batch))
                batch, sent_at = [], time.monotonic()
            next_at += period
            time.sleep(max(0.0, next_at - time.monotonic()))
            next_at = max(next_at, time.monotonic() - period)  # no burst to catch up after a stall
    results.put((os.getpid(), transport, batch))


# ---------------------------------------------------------------- the server


@dataclass
class Server:
    """`edge-deploy serve --foreground` on the soak's repository."""

    repo: Path
    port: int
    env: dict[str, str]
    log: Path
    proc: subprocess.Popen | None = None

    def start(self, timeout: float = 180) -> float:
        """Start and wait until it serves; seconds it took."""
        started = time.monotonic()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "edge_deploy", "serve", "--foreground", "--user", "--repository", str(self.repo),
             "--grpc-port", str(self.port), "--exit-timeout", "10", "--wait", str(int(timeout))],
            env=self.env, cwd=ROOT, stdout=subprocess.PIPE, stderr=open(self.log, "ab"), text=True,
        )
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if "serving" in line:
                break
        else:
            raise RuntimeError(f"serve --foreground exited with {self.proc.wait()}; see {self.log}")
        return time.monotonic() - started

    def stop(self) -> int:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(60)

    def pids(self) -> dict[str, list[int]]:
        """{"foreground": [pid], "tritonserver": [pid], "stubs": [...]} now."""
        from edge_deploy.serve.leftovers import descendants

        if self.proc is None or self.proc.poll() is not None:
            return {"foreground": [], "tritonserver": [], "stubs": []}
        below = descendants(self.proc.pid)
        triton = [p for p in below if _comm(p) == "tritonserver"]
        stubs = [p for p in below if p not in triton]
        return {"foreground": [self.proc.pid], "tritonserver": triton, "stubs": stubs}


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def rss_mib(pids: list[int]) -> float:
    total = 0
    for pid in pids:
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1]) * 1024
        except OSError:
            continue
    return total / MiB


def fd_count(pids: list[int]) -> int:
    total = 0
    for pid in pids:
        try:
            total += len(os.listdir(f"/proc/{pid}/fd"))
        except OSError:
            continue
    return total


def shm_mib(server_pids: list[int], client_pids: list[int]) -> float:
    """/dev/shm held by the soak: the server's Python-backend regions and the clients' regions (allocated bytes)."""
    from edge_deploy.serve.leftovers import mapped_regions

    paths = set(mapped_regions(server_pids))
    for pid in client_pids:
        paths |= set(Path("/dev/shm").glob(f"edge_deploy_{pid}_*"))
    total = 0
    for path in paths:
        try:
            total += path.stat().st_blocks * 512
        except OSError:
            continue
    return total / MiB


# ---------------------------------------------------------------- analysis


@dataclass
class Run:
    samples: list[dict] = field(default_factory=list)
    requests: list[tuple[float, float, str, str]] = field(default_factory=list)  # (time, latency, error, transport)
    restart: tuple[float, float] | None = None  # wall-clock stop sent, serving again
    installs: list[tuple[float, float, bool, str]] = field(default_factory=list)  # start, seconds, ok, message


def slope(t: np.ndarray, y: np.ndarray) -> dict[str, float] | None:
    """Least-squares slope per hour with its standard error; None with fewer than 4 points."""
    if len(t) < 4 or np.ptp(t) == 0:
        return None
    if np.ptp(y) == 0:  # flat: exactly zero (a fit would give 1e-12 noise)
        return {"per_hour": 0.0, "se": 0.0, "zero_within_2se": True, "points": int(len(t))}
    hours = (t - t[0]) / 3600.0
    a, b = np.polyfit(hours, y, 1)
    residuals = y - (a * hours + b)
    se = float(np.sqrt(residuals @ residuals / (len(t) - 2) / np.sum((hours - hours.mean()) ** 2)))
    return {"per_hour": float(f"{a:.3g}"), "se": float(f"{se:.3g}"), "zero_within_2se": bool(abs(a) <= 2 * se),
            "points": int(len(t))}


SERIES = {
    "rss_tritonserver_mib": "tritonserver RSS (MiB)", "rss_stubs_mib": "backend stubs RSS (MiB)",
    "rss_foreground_mib": "serve --foreground RSS (MiB)", "rss_clients_mib": "clients RSS (MiB)",
    "shm_mib": "/dev/shm held (MiB)", "fds_server": "server fds", "fds_clients": "client fds",
}


def lifetime_slopes(t: np.ndarray, samples: list[dict], start: float, restart: tuple[float, float] | None,
                    warmup: float) -> dict[str, dict]:
    """Slopes of each series per server lifetime (before and after the restart), `warmup` s after each start."""
    stop, ready = restart if restart else (np.inf, np.inf)
    slopes: dict[str, dict] = {}
    for name, (lo, hi) in {"before_restart": (start + warmup, stop), "after_restart": (ready + warmup, np.inf)}.items():
        keep = (t >= lo) & (t < hi)
        slopes[name] = {key: slope(t[keep], np.array([s[key] for s in samples])[keep]) for key in SERIES}
        slopes[name]["seconds"] = float(t[keep][-1] - t[keep][0]) if keep.sum() > 1 else 0.0
    return slopes


def analyse(run: Run, t0: float, warmup: float) -> dict:
    """Failures, latency and slopes per server lifetime."""
    t = np.array([s["t"] for s in run.samples])
    stop, ready = run.restart if run.restart else (np.inf, np.inf)
    slopes = lifetime_slopes(t, run.samples, t0, run.restart, warmup)
    window = (stop, ready + 5.0)  # failures allowed while the server is down (and 5 s after it serves)
    failed = [r for r in run.requests if r[2]]
    outside = [r for r in failed if not window[0] <= r[0] <= window[1]]
    latencies = np.array([r[1] for r in run.requests if not r[2]]) * 1e3
    return {
        "requests": len(run.requests),
        "failed": len(failed),
        "failed_outside_restart_window": len(outside),
        "failures_outside_window": sorted({r[2] for r in outside})[:5],
        "latency_ms": {"p50": float(np.percentile(latencies, 50)), "p99": float(np.percentile(latencies, 99)),
                       "max": float(latencies.max())} if len(latencies) else None,
        "restart": {"down_seconds": ready - stop} if run.restart else None,
        "installs": [{"at_s": round(a - t0), "seconds": round(b, 1), "ok": ok, "message": m}
                     for a, b, ok, m in run.installs],
        "slopes": slopes,
    }


def refit(saved: dict, warmup: float) -> dict:
    """The slopes per server lifetime of a saved run (its "samples"), leaving `warmup` s out after each start."""
    t = np.array([x["t_s"] for x in saved["samples"]])
    restart = tuple(saved["restart_at_s"]) if saved["restart_at_s"] else None
    return {"warmup_s": warmup, "slopes": lifetime_slopes(t, saved["samples"], 0.0, restart, warmup)}


def plot(run: Run, t0: float, path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t = (np.array([s["t"] for s in run.samples]) - t0) / 60.0
    fig, axes = plt.subplots(4, 1, figsize=(9, 11), sharex=True)
    panels = [
        (axes[0], ["rss_tritonserver_mib", "rss_stubs_mib", "rss_foreground_mib", "rss_clients_mib"], "RSS (MiB)"),
        (axes[1], ["shm_mib"], "/dev/shm (MiB)"),
        (axes[2], ["fds_server", "fds_clients"], "open fds"),
    ]
    for ax, keys, label in panels:
        for key in keys:
            ax.plot(t, [s[key] for s in run.samples], label=SERIES[key])
        ax.set_ylabel(label)
        ax.legend(fontsize=7, loc="upper left")
        ax.grid(alpha=0.3)
    times = (np.array([r[0] for r in run.requests]) - t0) / 60.0
    edges = np.arange(0, max(t[-1], times.max(initial=0)) + 0.5, 0.5)
    errors = np.array([bool(r[2]) for r in run.requests])
    axes[3].hist(times[~errors], bins=edges, label="requests ok (per 30 s)", color="tab:green", alpha=0.6)
    axes[3].hist(times[errors], bins=edges, label="failed (per 30 s)", color="tab:red")
    axes[3].set_ylabel("requests")
    axes[3].set_xlabel("minutes")
    axes[3].legend(fontsize=7, loc="upper left")
    for ax in axes:
        if run.restart:
            ax.axvspan((run.restart[0] - t0) / 60, (run.restart[1] - t0) / 60, color="grey", alpha=0.3)
        for start, *_ in run.installs:
            ax.axvline((start - t0) / 60, color="tab:purple", lw=0.8, ls="--")
    axes[0].set_title(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


# ---------------------------------------------------------------- main


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--clients", type=int, default=4, help="client processes, half shm and half gRPC")
    parser.add_argument("--rate", type=float, default=4.0, help="requests per second per client")
    parser.add_argument("--install-every", type=float, default=3.0, help="minutes between installs (0: none)")
    parser.add_argument("--interval", type=float, default=5.0, help="seconds between samples")
    parser.add_argument("--warmup", type=float, default=60.0, help="seconds after each start left out of slopes")
    parser.add_argument("--plot", type=Path, default=ROOT / "benchmarks" / "soak.png")
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--keep-work", action="store_true")
    parser.add_argument("--refit", type=Path, metavar="JSON",
                        help="no run: fit the slopes of a saved --json run again, after --warmup seconds")
    args = parser.parse_args()
    if args.refit:
        print(json.dumps(refit(json.loads(args.refit.read_text()), args.warmup), indent=2))
        return 0
    if args.minutes <= 0 or args.clients < 1 or args.rate <= 0 or args.interval <= 0:
        parser.error("--minutes, --clients, --rate and --interval must be positive")

    sys.path.insert(0, str(ROOT))
    sys.path.insert(0, str(ROOT / "tests" / "support"))
    from small_artifact import make_artifact

    from edge_deploy.deploy.install import install
    from edge_deploy.deploy.options import InstallOptions

    work = Path(tempfile.mkdtemp(prefix="edge-deploy-soak-"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("EDGE_DEPLOY_")}
    env.update(HOME=str(work / "home"), EDGE_DEPLOY_STATE_DIR=str(work / "state"), PYTHONPATH=str(ROOT))
    os.environ["EDGE_DEPLOY_STATE_DIR"] = str(work / "state")
    artifacts = [make_artifact(work / f"artifact{i}", ANCHORS, n=1000, seed=i) for i in range(2)]
    repo = work / "repo"
    install(InstallOptions(artifacts[0], repo, "lanedet", runtime="python"))
    server = Server(repo, _free_port(), env, work / "serve.log")
    run = Run()
    ctx = mp.get_context("spawn")
    stop, results = ctx.Event(), ctx.Queue()
    workers = []
    try:
        first_start = server.start()
        url = f"127.0.0.1:{server.port}"
        for i in range(args.clients):
            transport = "shm" if i % 2 == 0 else "grpc"
            proc = ctx.Process(target=client_worker, args=(url, transport, args.rate, i, stop, results), daemon=True)
            proc.start()
            workers.append(proc)
        t0 = time.time()
        end = t0 + args.minutes * 60
        restart_at = t0 + args.minutes * 60 / 2
        next_install = t0 + args.install_every * 60 if args.install_every > 0 else float("inf")
        installs_done = 0
        while time.time() < end:
            time.sleep(max(0.0, args.interval - (time.time() - (run.samples[-1]["t"] if run.samples else t0))))
            _drain(results, run)
            pids = server.pids()
            client_pids = [w.pid for w in workers if w.is_alive()]
            server_pids = pids["tritonserver"] + pids["stubs"]
            run.samples.append({
                "t": time.time(),
                "rss_tritonserver_mib": rss_mib(pids["tritonserver"]), "rss_stubs_mib": rss_mib(pids["stubs"]),
                "rss_foreground_mib": rss_mib(pids["foreground"]), "rss_clients_mib": rss_mib(client_pids),
                "shm_mib": shm_mib(server_pids, client_pids),
                "fds_server": fd_count(server_pids), "fds_clients": fd_count(client_pids),
                "stubs": len(pids["stubs"]),
            })
            if run.restart is None and time.time() >= restart_at:
                stopped = time.time()
                code = server.stop()
                took = server.start()
                run.restart = (stopped, time.time())
                print(f"restart: stopped with {code}, serving again after {took:.1f} s", file=sys.stderr)
            elif time.time() >= next_install and time.time() < end - 30:
                installs_done += 1
                started = time.time()
                done = subprocess.run(
                    [sys.executable, "-m", "edge_deploy", "install", str(artifacts[installs_done % 2]),
                     "--repository", str(repo), "--name", "lanedet", "--runtime", "python", "--keep", "2"],
                    env=env, cwd=ROOT, capture_output=True, text=True)
                message = (done.stdout.strip().splitlines() or [""])[-1] if done.returncode == 0 else done.stderr.strip()
                run.installs.append((started, time.time() - started, done.returncode == 0, message[:200]))
                print(f"install {installs_done}: {message}", file=sys.stderr)
                next_install += args.install_every * 60
        stop.set()
        for worker in workers:
            worker.join(40)
        _drain(results, run)
    finally:
        stop.set()
        for worker in workers:
            if worker.is_alive():
                worker.kill()
        if server.proc is not None and server.proc.poll() is None:
            server.stop()
        if not args.keep_work:
            shutil.rmtree(work, ignore_errors=True)

    summary = analyse(run, t0, args.warmup)
    summary["setup"] = {
        "minutes": args.minutes, "clients": args.clients, "transports": "half shm, half gRPC",
        "rate_per_client": args.rate, "install_every_min": args.install_every, "interval_s": args.interval,
        "warmup_s": args.warmup, "first_start_s": round(first_start, 1), "cpus": os.cpu_count(),
    }
    text = json.dumps(summary, indent=2)
    print(text)
    if args.json:  # with every sample, so the slopes can be fitted again (another warm-up, another window)
        samples = [{"t_s": round(x["t"] - t0, 2), **{key: x[key] for key in SERIES}} for x in run.samples]
        restart = [round(v - t0, 2) for v in run.restart] if run.restart else None
        args.json.write_text(json.dumps({**summary, "restart_at_s": restart, "samples": samples}, indent=1) + "\n")
    plot(run, t0, args.plot, f"soak: {args.minutes:g} min, {args.clients} clients x {args.rate:g} req/s, "
                             f"restart (grey), installs (dashed)")
    print(f"plot: {args.plot}", file=sys.stderr)
    return 0 if summary["failed_outside_restart_window"] == 0 else 1


def _drain(results, run: Run) -> None:  # noqa: ANN001
    while True:
        try:
            _pid, transport, batch = results.get_nowait()
        except queue.Empty:
            return
        run.requests += [(t, latency, error, transport) for t, latency, error in batch]


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


if __name__ == "__main__":
    sys.exit(main())
