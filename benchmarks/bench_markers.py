"""Lane markers (issue 35): geometry exactness, the served model's markers, the tracker, the cost.

1. Geometry exactness, no model: the generator's TRUE lane polylines of 200 held-out scenes (evaluation
   seeds EVAL_SEED_BASE + 0..199, 1640x590) -> each scene's own camera (synthetic.scene_truth) -> markers,
   against the true cubics: c0 within 2 cm and heading within 0.1 deg at the vehicle, curvature (y'') within
   5 % over the visible range, ego left/right right on every frame. Then the same with a calibration that
   ignores the roll (roll_deg 0): what the flat-ground model cannot hold without knowing the camera's tilt.
2. The demo weights through the served model (bundled tritonserver, as bench_evaluate.py), the same 200
   frames: ego lane found (both ego markers within 0.5 m) where both are visible, c0 error p50/p95 per
   condition (evaluate's MarkerEvaluator).
3. The tracker on the synthetic drive (150 frames, 20 m/s, 30 frames/s): std of c0 - truth of the ego
   markers with and without it.
4. Cost: to_markers for one frame's lanes (the model's lanes of part 2); LaneDetClient.detect p50 with and
   without markers (detect_markers vs detect), interleaved in one run, and their ratio: with the demo
   weights, and with bench_client.py's negligible-compute model (where the client's own work is most of
   a detect, so the markers' share shows).

    nice python3 benchmarks/bench_markers.py [--frames 200] [--url HOST:PORT] [--skip-served] [--cost-only]
        [--json out.json]
    nice python3 benchmarks/bench_markers.py --to-markers-only [--frames 200] [--baseline REV]
    nice python3 benchmarks/bench_markers.py --cost-only [--url HOST:PORT | --demo-model] [--baseline REV]

--url uses a server already serving `lanedet` (the demo weights) instead of starting one; --demo-model with
--cost-only starts that server (as the full run does) to time part 4b on the demo weights too.
--to-markers-only: part 4a alone, without a model: to_markers and LaneGeometry.frame_markers on the frames' true
polylines resampled to 45 points a lane (about what LaneATT's lanes have), and with --baseline REV the
edge_deploy.geometry of git revision REV timed beside today's, interleaved (their markers checked to agree).
--cost-only --baseline REV: part 4b with a third call interleaved, detect then REV's frame_markers. Part 4b also
reports a paired figure: each request's detect time plus the frame_markers right after it on its lanes (today's,
and REV's), p50 of the sums over p50 of detect: the markers' share without the noise between requests.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from edge_deploy.geometry import Camera, LaneGeometry, MarkerTracker, StreamPlausibility, to_markers  # noqa: E402
from edge_deploy.lanedet.lane import Lane  # noqa: E402
from edge_deploy.synthetic.roads import EVAL_SEED_BASE, drive, drive_truth, scene, scene_truth  # noqa: E402


def _stats(values: list[float]) -> dict[str, float | None]:
    if not values:
        return {"p50": None, "p95": None, "max": None}
    return {"p50": float(np.percentile(values, 50)), "p95": float(np.percentile(values, 95)),
            "max": float(np.max(values))}


def exactness(seeds: list[int], ignore_roll: bool = False) -> dict[str, Any]:
    """Part 1: markers of the true polylines against the true cubics."""
    per_tag: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    failures: dict[str, int] = defaultdict(int)
    ego_wrong = missing_frames = 0
    for seed in seeds:
        shown, truth = scene(seed), scene_truth(seed)
        mapping = dict(truth.camera)
        if ignore_roll:
            mapping["mounting"] = {**mapping["mounting"], "roll_deg": 0.0}
        camera = Camera.from_mapping(mapping)
        markers = to_markers([Lane(p, 1.0) for p in shown.lanes], camera)
        visible = [i for i, v in enumerate(truth.visible) if v]
        errors = {"c0_m": [], "heading_deg": [], "curvature_rel": []}
        for marker in markers:
            i = min(visible, key=lambda k: abs(truth.markings[k][0] - marker.c0))
            c0, c1, c2, c3 = truth.markings[i]
            errors["c0_m"].append(abs(marker.c0 - c0))
            errors["heading_deg"].append(abs(math.degrees(math.atan(marker.c1) - math.atan(c1))))
            xs = np.linspace(marker.longitude_start, marker.longitude_end, 25)
            true_k, got_k = 2 * c2 + 6 * c3 * xs, 2 * marker.c2 + 6 * marker.c3 * xs
            # relative to the bend's size; a straight road (|y''| < 1e-4 1/m, R > 10 km) counts as 1e-4
            errors["curvature_rel"].append(float(np.abs(got_k - true_k).max() / max(np.abs(true_k).max(), 1e-4)))
        want = {"left": truth.ego_left if truth.ego_left is not None and truth.visible[truth.ego_left] else None,
                "right": truth.ego_right if truth.ego_right is not None and truth.visible[truth.ego_right] else None}
        got = {"left": markers.ego_left, "right": markers.ego_right}
        wrong = any((want[s] is None) != (got[s] is None) or
                    (got[s] is not None and abs(got[s].c0 - truth.markings[want[s]][0]) > 0.05) for s in want)
        missing = len(markers) != len(visible)  # a visible marking without its marker (or one too many)
        ego_wrong += wrong
        missing_frames += missing
        bad = (max(errors["c0_m"], default=0) > 0.02 or max(errors["heading_deg"], default=0) > 0.1
               or max(errors["curvature_rel"], default=0) > 0.05 or wrong or missing)
        for tag in ("all", *shown.conditions):
            for key, values in errors.items():
                per_tag[tag][key] += values
            failures[tag] += int(bad)
            per_tag[tag]["frames"].append(1)
    return {
        "frames": len(seeds), "ego_wrong_frames": ego_wrong, "frames_missing_a_marker": missing_frames,
        "by_condition": {tag: {"frames": len(v["frames"]), "frames_failing": failures[tag],
                               **{k: _stats(v[k]) for k in ("c0_m", "heading_deg", "curvature_rel")}}
                         for tag, v in sorted(per_tag.items())},
    }


def served_markers(url: str, seeds: list[int]) -> tuple[dict[str, Any], list[tuple[list[Lane], Camera]]]:
    """Part 2: the served model's markers scored against the truth; returns the lanes for part 4 too."""
    from edge_deploy.evaluate.marker_score import MarkerEvaluator
    from edge_deploy.evaluate.runners import ServedRunner

    runner = ServedRunner(url, "lanedet")
    evaluator = MarkerEvaluator()
    kept = []
    try:
        for seed in seeds:
            shown, truth = scene(seed), scene_truth(seed)
            camera = Camera.from_mapping(truth.camera)
            lanes = runner.detect(shown.frame)
            evaluator.add(to_markers(lanes, camera), truth, shown.conditions)
            kept.append((lanes, camera))
    finally:
        runner.close()
    return evaluator.result().to_dict(), kept


def tracker_jitter(url: str, frames: int = 150, seed: int = EVAL_SEED_BASE + 500) -> dict[str, Any]:
    """Part 3: std of c0 - truth of the ego markers, raw and tracked, on one drive."""
    from edge_deploy.client.sync_client import LaneDetClient

    truths = list(drive_truth(seed, frames, speed=20.0, fps=30.0))
    camera = Camera.from_mapping(truths[0].camera)
    tracker = MarkerTracker()
    residuals: dict[str, dict[str, list[float]]] = {"raw": defaultdict(list), "tracked": defaultdict(list)}
    with LaneDetClient(url, "lanedet") as client:
        for shown, truth in zip(drive(seed, frames, speed=20.0, fps=30.0), truths):
            raw = to_markers(client.detect(shown.frame), camera)
            tracked = tracker.update(raw, speed_mps=20.0, dt_s=1 / 30.0)
            for name, markers in (("raw", raw), ("tracked", tracked)):
                for side, index in (("left", truth.ego_left), ("right", truth.ego_right)):
                    got = markers.ego_left if side == "left" else markers.ego_right
                    if got is not None and index is not None and abs(got.c0 - truth.markings[index][0]) < 0.5:
                        residuals[name][side].append(got.c0 - truth.markings[index][0])
    out: dict[str, Any] = {"frames": frames, "drive_seed": seed}
    for name, sides in residuals.items():
        out[name] = {side: {"frames": len(v), "std_c0_minus_truth_m": float(np.std(v)) if v else None,
                            "frame_to_frame_std_m": float(np.std(np.diff(v))) if len(v) > 2 else None}
                     for side, v in sides.items()}
    return out


def markers_cost(kept: list[tuple[list[Lane], Camera]]) -> dict[str, Any]:
    """Part 4a: to_markers for one frame's lanes, every call timed (frames x 20 calls)."""
    per_call = []
    for lanes, camera in kept:
        for _ in range(20):
            start = time.perf_counter()
            to_markers(lanes, camera)
            per_call.append((time.perf_counter() - start) * 1000.0)
    return {"to_markers_ms_per_frame": _stats(per_call), "lanes_per_frame": float(np.mean([len(k[0]) for k in kept])),
            "load_average": os.getloadavg()[0]}


def resampled_true_lanes(seeds: list[int], points: int = 45) -> list[tuple[list[Lane], Camera]]:
    """Each frame's true polylines, `points` evenly spaced points a lane, and the frame's camera."""
    kept = []
    for seed in seeds:
        shown, truth = scene(seed), scene_truth(seed)
        lanes = [Lane(p[np.linspace(0, len(p) - 1, min(points, len(p))).round().astype(int)], 0.9)
                 for p in shown.lanes]
        kept.append((lanes, Camera.from_mapping(truth.camera)))
    return kept


def markers_cost_side_by_side(kept: list[tuple[list[Lane], Camera]], baseline: str | None,
                              calls: int = 20) -> dict[str, Any]:
    """Part 4a without a model: to_markers and frame_markers (markers + figures) per frame, today's and (with
    `baseline`) REV's interleaved call by call; the two versions' markers must agree to 1e-9."""
    versions = {"new": (Camera, LaneGeometry, to_markers)}
    if baseline:
        from baseline import load_package_at

        old = load_package_at(baseline, "edge_deploy/geometry", "edge_deploy/errors.py", "edge_deploy/core/fsutil.py")
        versions["old"] = (old.Camera, old.LaneGeometry, old.to_markers)
    # fps: the calls are a stream's frames, so today's verdicts judge the offset's jump too (REV ignores it)
    frames = {name: [(lanes, cam_cls.from_mapping(camera.to_mapping()), geo_cls(cam_cls.from_mapping(
        camera.to_mapping()), fps=30.0), np.empty((camera.height, camera.width, 0), np.uint8))
        for lanes, camera in kept] for name, (cam_cls, geo_cls, _) in versions.items()}
    if baseline:
        for a, b in zip(frames["new"], frames["old"]):
            new, old = list(to_markers(a[0], a[1])), list(versions["old"][2](b[0], b[1]))
            assert len(new) == len(old)
            for m, o in zip(new, old):
                for key in ("c0", "c1", "c2", "c3", "longitude_start", "longitude_end", "quality", "rms_m", "score"):
                    assert abs(getattr(m, key) - getattr(o, key)) <= 1e-9 * max(1.0, abs(getattr(o, key))), key
                assert m.model_degree == o.model_degree
                np.testing.assert_allclose(m.covariance, o.covariance, rtol=1e-9, atol=1e-15)
    times: dict[str, dict[str, list[float]]] = {name: {"to_markers": [], "frame_markers": []} for name in versions}
    times["new"]["plausibility"] = []  # the verdict alone (lane_width, offset_jump, markers_crossing) of a frame
    stream = StreamPlausibility()
    for i in range(len(kept)):
        for _ in range(calls):
            for name in (list(versions) if _ % 2 == 0 else list(versions)[::-1]):
                lanes, camera, geometry, frame = frames[name][i]
                start = time.perf_counter()
                versions[name][2](lanes, camera)
                middle = time.perf_counter()
                found = geometry.frame_markers(lanes, frame)
                end = time.perf_counter()
                times[name]["to_markers"].append((middle - start) * 1000.0)
                times[name]["frame_markers"].append((end - middle) * 1000.0)
                if name == "new":
                    start = time.perf_counter()
                    stream.check(found.markers, found.figures, dt_s=1 / 30.0)
                    times[name]["plausibility"].append((time.perf_counter() - start) * 1000.0)
    return {"lanes_per_frame": float(np.mean([len(k[0]) for k in kept])),
            "points_per_lane": float(np.mean([len(lane.points) for k in kept for lane in k[0]])),
            **{f"{name}_{what}_ms": _stats(v) for name, per in times.items() for what, v in per.items()},
            "baseline": baseline, "load_average": os.getloadavg()}


def client_overhead(url: str, requests: int = 100, baseline: str | None = None) -> dict[str, Any]:
    """Part 4b: LaneDetClient.detect p50 vs detect_markers p50 on the same frames, interleaved. With `baseline`,
    a third call beside them: detect, then REV's LaneGeometry.frame_markers on its lanes (what detect_markers did
    with REV's edge_deploy.geometry)."""
    from edge_deploy.client.sync_client import LaneDetClient

    seeds = [EVAL_SEED_BASE + i for i in range(10)]
    frames = [scene(s).frame for s in seeds]
    camera = Camera.from_mapping(scene_truth(seeds[0]).camera)  # one camera: the frames share the size
    plain, marked, before = [], [], []
    with LaneDetClient(url, "lanedet", camera=camera) as client:  # one client: the same buffers and channel
        calls = [(plain, client.detect), (marked, client.detect_markers)]
        if baseline:
            from baseline import load_package_at

            old = load_package_at(baseline, "edge_deploy/geometry", "edge_deploy/errors.py", "edge_deploy/core/fsutil.py")
            old_geometry = old.LaneGeometry(old.Camera.from_mapping(camera.to_mapping()))
            calls.append((before, lambda frame: old_geometry.frame_markers(client.detect(frame), frame)))
        for frame in frames[:3]:  # warm all
            for _, call in calls:
                call(frame)
        geometries = {"new": client.geometry, **({"old": old_geometry} if baseline else {})}
        paired: dict[str, list[float]] = {"detect": [], **{name: [] for name in geometries}}
        for i in range(requests):
            frame = frames[i % len(frames)]
            for times, call in calls[i % len(calls):] + calls[:i % len(calls)]:
                start = time.perf_counter()
                call(frame)
                times.append((time.perf_counter() - start) * 1000.0)
            # paired: one detect, then each version's frame_markers on its lanes (first one alternating)
            start = time.perf_counter()
            lanes = client.detect(frame)
            paired["detect"].append((time.perf_counter() - start) * 1000.0)
            for name in list(geometries) if i % 2 == 0 else list(geometries)[::-1]:
                start = time.perf_counter()
                geometries[name].frame_markers(lanes, frame)
                paired[name].append(paired["detect"][-1] + (time.perf_counter() - start) * 1000.0)
    p50_plain, p50_marked = float(np.percentile(plain, 50)), float(np.percentile(marked, 50))
    out = {"detect_p50_ms": p50_plain, "detect_markers_p50_ms": p50_marked, "ratio": p50_marked / p50_plain,
           "requests": requests, "load_average": os.getloadavg()[0]}
    detect = np.array(paired["detect"])
    out["paired"] = {"detect_p50_ms": float(np.percentile(detect, 50)),
                     **{f"{name}_frame_markers_p50_ms": float(np.percentile(np.array(v) - detect, 50))
                        for name, v in paired.items() if name != "detect"},
                     **{f"{name}_ratio": float(np.percentile(v, 50) / np.percentile(detect, 50))
                        for name, v in paired.items() if name != "detect"}}
    if baseline:
        p50_before = float(np.percentile(before, 50))
        out.update({"baseline": baseline, "baseline_detect_markers_p50_ms": p50_before,
                    "baseline_ratio": p50_before / p50_plain})
    return out


def tiny_model_overhead(requests: int, baseline: str | None = None) -> dict[str, Any]:
    """Part 4b on bench_client.py's negligible-compute model, where the client's own time is most of detect."""
    from bench_client import start_server

    with tempfile.TemporaryDirectory(prefix="bench-markers-tiny-") as tmp:
        server, _ = start_server(Path(tmp))
        try:
            return client_overhead(server.url, requests, baseline)
        finally:
            server.stop(timeout=15)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--frames", type=int, default=200)
    parser.add_argument("--url", help="a server already serving the demo weights as lanedet")
    parser.add_argument("--skip-served", action="store_true", help="part 1 only (no model)")
    parser.add_argument("--cost-only", action="store_true",
                        help="part 4b only: on the negligible-compute model (and on --url's model when given)")
    parser.add_argument("--demo-model", action="store_true",
                        help="with --cost-only and no --url: serve the demo weights and time part 4b on them too")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--to-markers-only", action="store_true",
                        help="part 4a alone on the true polylines resampled to 45 points a lane (no model)")
    parser.add_argument("--baseline", metavar="REV",
                        help="with --to-markers-only or --cost-only: edge_deploy.geometry at REV beside today's")
    args = parser.parse_args()
    seeds = [EVAL_SEED_BASE + i for i in range(args.frames)]
    report: dict[str, Any] = {}
    if args.to_markers_only:
        report["cost"] = markers_cost_side_by_side(resampled_true_lanes(seeds), args.baseline)
        _dump(report, args.json)
        print(json.dumps(report, indent=1))
        return
    if not args.cost_only:
        report = {"exactness": exactness(seeds), "exactness_roll_ignored": exactness(seeds, True)}
        _dump(report, args.json)
    if not (args.skip_served or args.cost_only):
        with contextlib.ExitStack() as stack:
            url = args.url
            if url is None:
                from bench_evaluate import served_demo_model

                work = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-markers-")))
                url, _ = stack.enter_context(served_demo_model(work))
            report["served"], kept = served_markers(url, seeds)
            _dump(report, args.json)
            report["tracker"] = tracker_jitter(url)
            _dump(report, args.json)
            report["cost"] = {**markers_cost(kept), "demo_model": client_overhead(url)}
            _dump(report, args.json)
    if not args.skip_served or args.cost_only:
        if args.cost_only and args.url:
            report.setdefault("cost", {})["demo_model"] = client_overhead(args.url, baseline=args.baseline)
        elif args.cost_only and args.demo_model:
            from bench_evaluate import served_demo_model

            with tempfile.TemporaryDirectory(prefix="bench-markers-") as work:
                with served_demo_model(Path(work)) as (url, _):
                    report.setdefault("cost", {})["demo_model"] = client_overhead(url, baseline=args.baseline)
        report.setdefault("cost", {})["negligible_compute_model"] = tiny_model_overhead(300, args.baseline)
        _dump(report, args.json)
    print(json.dumps(report, indent=1))


def _dump(report: dict[str, Any], path: Path | None) -> None:
    if path is not None:  # after each part, so a long run leaves what it has
        path.write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
