"""`edge-deploy bench` against the real bundled tritonserver: one module-scoped server serving the small LaneATT-I/O
model (tests/support/small_artifact.py) twice, each with its BLS pipeline; `bad_pipeline` is planted to decode with
top_k 1 (its pipeline.json), so its lanes differ from `bad`'s."""
from __future__ import annotations

import json
import struct

import pytest
from small_artifact import make_artifact
from triton_helpers import run_cli, serving

from edge_deploy.deploy.install import install
from edge_deploy.deploy.options import InstallOptions

pytestmark = pytest.mark.triton

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def server(tmp_path_factory, laneatt_data):
    work = tmp_path_factory.mktemp("bench")
    artifact = make_artifact(work / "artifact", laneatt_data / "anchors_2784x77.npy", n=300)
    repo = work / "repo"
    install(InstallOptions(artifact, repo, "lane", runtime="python", pipeline="bls"))
    install(InstallOptions(artifact, repo, "bad", runtime="python", pipeline="bls"))
    spec_path = repo / "bad_pipeline" / "1" / "pipeline.json"
    spec = json.loads(spec_path.read_text())
    spec["decode"]["top_k"] = 1  # the plant: this pipeline keeps one lane where `bad` keeps up to four
    spec_path.write_text(json.dumps(spec))
    with serving(repo, work) as proc:
        yield proc


def test_short_run_over_two_pipelines_json_and_plot(server, tmp_path) -> None:
    plot = tmp_path / "bench.png"
    run = run_cli(tmp_path, "bench", "--url", server.url, "--model", "lane", "--model", "lane_pipeline",
                  "--seconds", "0.5", "--warmup", "0.2", "--concurrency", "1,2", "--json", "--plot", str(plot))
    assert run.returncode == 0, run.stderr
    report = json.loads(run.stdout)
    assert report["lanes_check"].startswith("lanes-equal check passed: lane = lane_pipeline"), report["lanes_check"]
    cells = {(c["model"], c["concurrency"]): c for c in report["cells"]}
    assert sorted(cells) == [("lane", 1), ("lane", 2), ("lane_pipeline", 1), ("lane_pipeline", 2)]
    raw, bls = cells["lane", 1], cells["lane_pipeline", 2]
    assert (raw["pipeline"], bls["pipeline"]) == ("client-side", "bls")
    assert (raw["client"], bls["client"]) == ("LaneDetClient", "AsyncLaneDetClient")
    for cell in cells.values():
        assert cell["frames"] > 0 and 0.45 < cell["seconds"] < 3, cell  # each cell timed for about --seconds
        assert cell["frames_per_s"] == pytest.approx(cell["frames"] / cell["seconds"])
        lat = cell["latency"]
        assert 0 < lat["p50_ms"] <= lat["p90_ms"] <= lat["p99_ms"]
        split = cell["client_split"]
        assert split["request_ms"] > 0 and split["preprocess_ms"] > 0 and split["decode_ms"] > 0
        assert split["preprocess_ms"] + split["request_ms"] + split["decode_ms"] <= lat["mean_ms"] * cell["concurrency"]
        assert cell["client_cpu_ms_per_frame"] > 0
        assert cell["server_cpu_ms_per_frame"] is not None and cell["server_cpu_ms_per_frame"] > 0
        assert cell["jetson"] is None
    # The server's own statistics: the raw cell's requests all went to `lane`; the BLS cell's to the pipeline
    # and, through BLS, to `lane` as well.
    assert set(raw["server"]) == {"lane"} and raw["server"]["lane"]["requests"] == raw["frames"]
    assert {"lane", "lane_pipeline"} <= set(bls["server"])
    assert bls["server"]["lane_pipeline"]["compute_ms"] > bls["server"]["lane"]["compute_ms"]
    # Which side preprocesses is the cell's `pipeline` ("client-side" for the raw model) asserted above; the two
    # preprocessing times are not compared: on this small model they are within 1 % of each other, and under load
    # either may be the larger (issue 44: no test depends on timing).
    assert "neither tegrastats nor jtop" in report["jetson"]
    assert report["server_cpu"].startswith("tritonserver PID")
    assert set(report["machine"]) >= {"cpus", "load_average_start", "load_average_end"}
    data = plot.read_bytes()
    assert data[:8] == PNG_MAGIC
    width, height = struct.unpack(">II", data[16:24])
    assert width == 1200 and height > 600


def test_every_served_lane_model_table_and_planted_difference(server, tmp_path) -> None:
    run = run_cli(tmp_path, "bench", "--url", server.url, "--seconds", "1", "--concurrency", "1")
    assert run.returncode != 0
    line = run.stderr.strip()
    assert "\n" not in line, line
    assert line.startswith("error: bad_pipeline and bad give different lanes on frame road-"), line
    assert "1 lanes against" in line
    assert "Traceback" not in run.stderr


def test_unknown_model_and_bad_options_are_one_line(server, tmp_path) -> None:
    run = run_cli(tmp_path, "bench", "--url", server.url, "--model", "nope", "--seconds", "1")
    assert run.returncode != 0 and run.stderr.startswith("error: --model nope cannot be benched"), run.stderr
    assert len(run.stderr.strip().splitlines()) == 1
    run = run_cli(tmp_path, "bench", "--url", server.url, "--concurrency", "1,zero")
    assert run.returncode != 0 and "--concurrency '1,zero' is not a list" in run.stderr, run.stderr


def test_realtime_streams_report_latency_drops_and_cpu_per_camera(server, tmp_path) -> None:
    """Issue 42: `bench --realtime --cameras 1,2`: a row per stream with capture -> lanes latency, frames dropped
    and the states seen, and the process CPU per detected frame."""
    run = run_cli(tmp_path, "bench", "--url", server.url, "--model", "lane", "--realtime", "--fps", "20",
                  "--cameras", "1,2", "--seconds", "1", "--warmup", "0.3", "--max-age", "0.5", "--json")
    assert run.returncode == 0, run.stderr
    report = json.loads(run.stdout)
    assert report["mode"] == "realtime"
    cells = {c["cameras"]: c for c in report["cells"]}
    assert sorted(cells) == [1, 2] and all(c["model"] == "lane" for c in cells.values())
    for count, cell in cells.items():
        assert [s["camera"] for s in cell["streams"]] == list(range(count))
        assert cell["client_cpu_ms_per_frame"] > 0
        for stream in cell["streams"]:
            assert stream["frames_processed"] > 0 and stream["states"].get("ok", 0) > 0, stream
            assert stream["frames_read"] >= stream["frames_processed"] + stream["frames_dropped"] - 1
            assert 0 < stream["latency_p50_ms"] <= stream["latency_p99_ms"]
            assert stream["frames_per_s"] <= 20 * 1.5  # never more than the camera delivers
    bad = run_cli(tmp_path, "bench", "--url", server.url, "--realtime", "--cameras", "two")
    assert bad.returncode == 2 and "--cameras 'two' is not a list" in bad.stderr
