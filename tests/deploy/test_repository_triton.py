"""install/rollback against the REAL bundled tritonserver (Python backend, ONNX Runtime on CPU)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from cli_process import run_cli
from small_artifact import make_artifact, make_unloadable
from triton_helpers import failed_loads

from edge_deploy.repository import model_config as mc
from edge_deploy.core.triton_layout import parse_config, policy_versions
from edge_deploy.deploy.install import install
from edge_deploy.deploy.options import InstallOptions

pytestmark = pytest.mark.triton


@pytest.fixture(scope="module")
def artifact(tmp_path_factory, laneatt_data) -> Path:
    return make_artifact(tmp_path_factory.mktemp("artifact"), laneatt_data / "anchors_2784x77.npy", n=1000)


@pytest.fixture(scope="module")
def two_installed(tmp_path_factory, artifact, laneatt_data):
    """(server, repository, install result of `lane`): one server (model control none) for the two tests that only
    read what it serves: `lane` (install's options: queue delay 500 us, one instance) and `fixed` (a fixed batch of 1,
    with warmup), both installed before it starts."""
    from conftest import free_port

    from edge_deploy.serve.argv import ServerOptions
    from edge_deploy.serve.discovery import find_tritonserver
    from edge_deploy.serve.process import TritonProcess

    work = tmp_path_factory.mktemp("two_installed")
    repo = work / "repo"
    result = install(InstallOptions(artifact, repo, "lane", runtime="python", max_queue_delay_us=500, instances=1))
    fixed = make_artifact(work / "fixed", laneatt_data / "anchors_2784x77.npy", n=50, dynamic=False)
    install(InstallOptions(fixed, repo, "fixed", runtime="python", warmup=True))
    options = ServerOptions(model_repository=repo, grpc_port=free_port())
    server = TritonProcess(find_tritonserver(cache_dir=work / "cache"), options, work / "triton.log").start()
    try:
        server.wait_ready(90)
        yield server, repo, result
    finally:
        server.stop(timeout=15)


def _infer(url: str, model: str, x: np.ndarray, version: str = "") -> np.ndarray:
    import tritonclient.grpc as grpcclient

    client = grpcclient.InferenceServerClient(url)
    try:
        inp = grpcclient.InferInput("input", list(x.shape), "FP32")
        inp.set_data_from_numpy(x)
        return client.infer(model, [inp], model_version=version).as_numpy("predict_lanes")
    finally:
        client.close()


def test_server_loads_install_and_python_ort_matches_onnxruntime(artifact, two_installed) -> None:
    import onnxruntime as ort
    import tritonclient.grpc as grpcclient

    server, repo, result = two_installed
    assert (result.version, result.runtime) == (1, "python")
    client = grpcclient.InferenceServerClient(server.url)
    served = client.get_model_config("lane").config
    written = parse_config((repo / "lane" / "config.pbtxt").read_text())
    assert served.name == written.name == "lane"
    assert served.max_batch_size == written.max_batch_size == 4
    assert [(t.name, t.data_type, list(t.dims)) for t in served.input] == [("input", mc.data_type("FP32"), [3, 360, 640])]
    assert [(t.name, t.data_type, list(t.dims)) for t in served.output] == [
        ("predict_lanes", mc.data_type("FP32"), [1000, 77])
    ]
    assert served.dynamic_batching.max_queue_delay_microseconds == 500
    assert dict(served.parameters) == dict(written.parameters)
    client.close()

    rng = np.random.default_rng(1)
    x = rng.random((3, 3, 360, 640), dtype=np.float32)
    session = ort.InferenceSession(str(artifact / "model.onnx"), providers=["CPUExecutionProvider"])
    expected = session.run(None, {"input": x})[0]
    np.testing.assert_array_equal(_infer(server.url, "lane", x), expected)
    np.testing.assert_array_equal(_infer(server.url, "lane", x[:1]), expected[:1])


def test_fixed_batch_model_loads_with_max_batch_size_zero(two_installed) -> None:
    import tritonclient.grpc as grpcclient

    server, repo, _ = two_installed
    assert "max_batch_size: 0\n" in (repo / "fixed" / "config.pbtxt").read_text()
    client = grpcclient.InferenceServerClient(server.url)
    config = client.get_model_config("fixed").config
    assert config.max_batch_size == 0 and list(config.input[0].dims) == [1, 3, 360, 640]
    assert not config.HasField("dynamic_batching") and len(config.model_warmup) == 1
    client.close()
    x = np.full((1, 3, 360, 640), 0.5, np.float32)
    assert _infer(server.url, "fixed", x).shape == (1, 50, 77)


KEY_HEADER = "edge-deploy-key"


def _served_output_rows(url: str) -> int:
    return _infer(url, "lane", np.full((1, 3, 360, 640), 0.25, np.float32)).shape[1]


def test_explicit_mode_with_key_install_rollback_and_refused_load(tmp_path, laneatt_data, start_triton, monkeypatch) -> None:
    import tritonclient.grpc as grpcclient
    from tritonclient.utils import InferenceServerException

    from edge_deploy.errors import RepositoryError
    from edge_deploy.deploy.rollback import rollback
    from edge_deploy.repository.versions import read_config
    from edge_deploy.serve import admin
    from edge_deploy.serve import server_record as control

    monkeypatch.setenv("EDGE_DEPLOY_STATE_DIR", str(tmp_path / "state"))
    anchors = laneatt_data / "anchors_2784x77.npy"
    arts = {n: make_artifact(tmp_path / f"art{n}", anchors, n=n, seed=n) for n in (100, 200)}
    repo = tmp_path / "repo"
    install(InstallOptions(arts[100], repo, "lane", runtime="python"))
    key = "k-" + "7" * 30
    key_file = tmp_path / "key"
    key_file.write_text(key + "\n")
    server = start_triton(repo, model_control="explicit", restricted_key=(KEY_HEADER, key))
    control.save_record(control.ServerRecord(url=server.url, repository=repo, key_header=KEY_HEADER,
                                             key_file=key_file, scope="user"))
    assert _served_output_rows(server.url) == 100

    # install asks the server (with the key) to load the new version, and says what it serves
    result = install(InstallOptions(arts[200], repo, "lane", runtime="python"))
    assert result.version == 2 and result.served == {"lane": [2]} and result.server_url == server.url
    assert _served_output_rows(server.url) == 200

    # nobody without the key can load or unload models
    client = grpcclient.InferenceServerClient(server.url)
    for headers in (None, {KEY_HEADER: key}, {f"triton-grpc-protocol-{KEY_HEADER}": "wrong"}):
        with pytest.raises(InferenceServerException):
            client.load_model("lane", headers=headers)
        with pytest.raises(InferenceServerException):
            client.unload_model("lane", headers=headers)
    assert client.is_model_ready("lane", "2")

    # rollback re-loads version 1
    back = rollback(repo, "lane")
    assert (back.version, back.previous, back.served) == (1, [2], {"lane": [1]})
    assert _served_output_rows(server.url) == 100

    # a version the server cannot load: the command fails with the server's reason, version 1 keeps serving,
    # and the config stays pinned to the version that is served
    broken = make_unloadable(tmp_path / "broken", anchors, n=100)
    with pytest.raises(RepositoryError, match="did not load lane") as info:
        install(InstallOptions(broken, repo, "lane", runtime="python"))
    assert "\n" not in str(info.value)
    assert client.is_model_ready("lane", "1") and not client.is_model_ready("lane", "3")
    assert admin.served_versions(server.url, "lane") == [1]
    assert _served_output_rows(server.url) == 100
    assert list(read_config(repo, "lane").version_policy.specific.versions) == [1]
    # a rollback to that version is refused the same way: the config says again what is served
    pinned = (repo / "lane" / "config.pbtxt").read_bytes()
    with pytest.raises(RepositoryError, match="did not load lane"):
        rollback(repo, "lane", 3)
    assert (repo / "lane" / "config.pbtxt").read_bytes() == pinned
    assert client.is_model_ready("lane", "1") and _served_output_rows(server.url) == 100

    # a key the user cannot read: one line, before anything is written
    control.save_record(control.ServerRecord(url=server.url, repository=repo, key_header=KEY_HEADER,
                                             key_file=tmp_path / "unreadable.key", scope="user"))
    before = sorted(str(p) for p in repo.rglob("*"))
    with pytest.raises(RepositoryError, match="run as root or a member of group edge-deploy"):
        install(InstallOptions(arts[200], repo, "lane", runtime="python"))
    assert sorted(str(p) for p in repo.rglob("*")) == before
    control.save_record(control.ServerRecord(url=server.url, repository=repo, key_header=KEY_HEADER,
                                             key_file=key_file, scope="user"))

    # the CLI reports the served version too
    proc = run_cli(["install", str(arts[200]), "--repository", str(repo), "--name", "lane", "--keep", "2"])
    assert proc.returncode == 0, proc.stderr
    assert f"server {server.url} now serves: lane 4" in proc.stdout
    assert _served_output_rows(server.url) == 200
    models = run_cli(["models", "--repository", str(repo), "--json"])
    (info_json,) = json.loads(models.stdout)
    # --keep 2 let the failed versions go (2 rolled back from, 3 refused), never 1, the version it replaced
    assert info_json["served"] == [4] and [v["version"] for v in info_json["versions"]] == [1, 4]
    client.close()


class Inferrer:
    """A client thread that keeps inferring on `lane` and records failures."""

    def __init__(self, url: str, rows: set[int]) -> None:
        import threading

        self.url, self.rows = url, rows
        self.count, self.errors = 0, []
        self.stop_event = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self) -> None:
        x = np.full((1, 3, 360, 640), 0.5, np.float32)
        while not self.stop_event.is_set():
            try:
                out = _infer(self.url, "lane", x)
                if out.shape[1] not in self.rows:
                    self.errors.append(f"unexpected output shape {out.shape}")
                self.count += 1
            except Exception as exc:  # noqa: BLE001 - every failure is recorded and fails the test
                self.errors.append(str(exc))

    def __enter__(self) -> "Inferrer":
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop_event.set()
        self.thread.join(30)


def wait_served(url: str, name: str, version: int, timeout: float = 60.0) -> None:
    import time

    from edge_deploy.serve.admin import served_versions

    deadline = time.monotonic() + timeout
    while served_versions(url, name) != [version]:
        assert time.monotonic() < deadline, f"server never served {name} version {version}: {served_versions(url, name)}"
        time.sleep(0.3)


@pytest.mark.slow
def test_poll_mode_twenty_installs_while_a_client_infers(tmp_path, laneatt_data, start_triton) -> None:
    import time

    # New weights, same I/O signature: what retraining produces. (A polling server reads config.pbtxt
    # per model, not per version, so an install that changes dims can be seen half-done in poll mode;
    # explicit mode, the `serve` default, loads only once everything is written.)
    anchors = laneatt_data / "anchors_2784x77.npy"
    arts = [make_artifact(tmp_path / f"art{seed}", anchors, n=100, seed=seed) for seed in (1, 2)]
    repo = tmp_path / "repo"
    install(InstallOptions(arts[0], repo, "lane", runtime="python"))
    server = start_triton(repo, model_control="poll", repository_poll_secs=1)
    rng = np.random.default_rng(20)
    with Inferrer(server.url, {100}) as client:
        for i in range(20):
            # one of them brings three new models (the pipeline): new model directories appear atomically too
            install(InstallOptions(arts[(i + 1) % 2], repo, "lane", runtime="python", pipeline=i == 9))
            time.sleep(float(rng.uniform(0.0, 0.8)))  # let polls land before, during and after writes
        wait_served(server.url, "lane", 21)
        wait_served(server.url, "lane_pipeline", 11)
        time.sleep(0.5)
    assert client.errors == []
    assert client.count >= 20
    assert failed_loads(server.log_path) == []


def complete(vdir: Path) -> bool:
    """Whether a version directory holds every file its runtime needs, as its manifest lists them."""
    from edge_deploy.artifact.manifest import sha256_file

    record = json.loads((vdir / "install.json").read_text())
    manifest = json.loads((vdir / "manifest.json").read_text())
    needed = ["model.plan"] if record["runtime"] == "tensorrt" else ["model.onnx"]
    if record["runtime"] == "python":
        assert (vdir / "model.py").stat().st_size > 0
    return all(sha256_file(vdir / name) == manifest["files"][name]["sha256"] for name in needed)


def assert_repository_valid(repo: Path) -> None:
    """No staging directory among the models, every config parses, every numeric version is complete."""
    from edge_deploy.core.triton_layout import read_config, versions

    for model_dir in (p for p in repo.iterdir() if p.is_dir()):
        assert not model_dir.name.startswith("."), f"staging directory inside the repository: {model_dir}"
        assert read_config(repo, model_dir.name).name == model_dir.name
        for v in versions(repo, model_dir.name):
            assert complete(model_dir / str(v)), f"{model_dir / str(v)} is partial"


def config_version(repo: Path, model: str = "lane") -> int:
    """The one version the config selects, checked to be the version the config was written for.

    The config must describe that version (its output dims and manifest sha256), and it
    is the newest version unless the config pins an older one, which is what a publish
    interrupted between the new version's rename and its config leaves (files.py).
    """
    from edge_deploy.artifact.manifest import sha256_file
    from edge_deploy.lanedet import contract
    from edge_deploy.core.triton_layout import read_config, versions

    assert_repository_valid(repo)
    config, avail = read_config(repo, model), versions(repo, model)
    selected = policy_versions(config, avail)
    assert len(selected) == 1, (selected, avail)
    (v,) = selected
    vdir = repo / model / str(v)
    manifest = json.loads((vdir / "manifest.json").read_text())
    assert config.parameters[contract.PARAM_MANIFEST_SHA256].string_value == sha256_file(vdir / "manifest.json")
    assert list(config.output[0].dims) == manifest["io"]["outputs"][0]["shape"][1:]
    if v != avail[-1]:
        assert config.version_policy.WhichOneof("policy_choice") == "specific" and v == avail[-2], (v, avail)
    return v


def rows_of(repo: Path, version: int, model: str = "lane") -> int:
    return json.loads((repo / model / str(version) / "manifest.json").read_text())["io"]["outputs"][0]["shape"][1]


@pytest.fixture
def keyed_server(tmp_path, start_triton, monkeypatch):
    """Factory: an explicit-mode server on `repo` with a model-repository key, recorded as `serve` records it."""
    from edge_deploy.serve import server_record as control

    monkeypatch.setenv("EDGE_DEPLOY_STATE_DIR", str(tmp_path / "state"))  # the install subprocesses find it too

    def start(repo: Path):
        key = "kill-test-key-0123456789"
        (tmp_path / "key").write_text(key + "\n")
        server = start_triton(repo, model_control="explicit", restricted_key=(KEY_HEADER, key))
        record = control.ServerRecord(url=server.url, repository=repo, key_header=KEY_HEADER,
                                      key_file=tmp_path / "key", scope="user")
        control.save_record(record)
        return server, record

    return start


def assert_loads_what_the_config_says(repo: Path, server, record) -> None:
    """After a killed install: the config describes a complete version, and an explicit load serves it."""
    from edge_deploy.serve import admin

    v = config_version(repo)
    admin.load_models(record, ["lane"])
    assert admin.served_versions(server.url, "lane") == [v]
    assert _served_output_rows(server.url) == rows_of(repo, v)


def install_argv(art: Path, repo: Path) -> list[str]:
    return ["install", str(art), "--repository", str(repo), "--name", "lane", "--runtime", "python"]


@pytest.mark.slow
def test_sigkill_of_install_at_random_points(tmp_path, laneatt_data, keyed_server) -> None:
    import time

    # Two artifacts with different output dims, installed in turn: a config left describing
    # another version than the one it selects cannot go unnoticed.
    anchors = laneatt_data / "anchors_2784x77.npy"
    arts = [make_artifact(tmp_path / f"art{n}", anchors, n=n, seed=n) for n in (2784, 1500)]
    repo = tmp_path / "repo"
    install(InstallOptions(arts[0], repo, "lane", runtime="python"))
    server, record = keyed_server(repo)
    start = time.monotonic()
    subprocess.run([sys.executable, "-m", "edge_deploy", *install_argv(arts[1], repo)], check=True, capture_output=True)
    full = time.monotonic() - start
    rng = np.random.default_rng(1234)
    outcomes = []
    for _ in range(3):  # random points; test_sigkill_of_install_at_every_rename walks every publish step
        before = config_version(repo)
        art = arts[0] if rows_of(repo, before) != 2784 else arts[1]
        proc = subprocess.Popen([sys.executable, "-m", "edge_deploy", *install_argv(art, repo)],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(float(rng.uniform(0.3, 1.1)) * full)
        proc.kill()
        outcomes.append(proc.wait())
        assert_loads_what_the_config_says(repo, server, record)
    assert -9 in outcomes  # at least some runs really were killed mid-way
    final = install(InstallOptions(arts[0], repo, "lane", runtime="python"))
    assert not list(tmp_path.glob(".repo.edge-deploy-staging*"))
    assert not [p for p in (repo / "lane").iterdir() if p.name.startswith(".")]
    assert final.served == {"lane": [final.version]}
    assert failed_loads(server.log_path) == []


# Runs `edge-deploy ARGS` and SIGKILLs it on entering its Nth os.rename/os.replace: the
# publish steps of install are renames, so N = 1, 2, ... stops it between each pair of them.
KILL_AT_RENAME = """
import os, signal, sys
limit, calls = int(sys.argv[1]), [0]
def killing(real):
    def call(*args, **kwargs):
        calls[0] += 1
        if calls[0] == limit:
            os.kill(os.getpid(), signal.SIGKILL)
        return real(*args, **kwargs)
    return call
os.rename, os.replace = killing(os.rename), killing(os.replace)
sys.argv = ["edge-deploy", *sys.argv[2:]]
from edge_deploy.cli import main
main()
"""


@pytest.mark.slow
def test_sigkill_of_install_at_every_rename(tmp_path, laneatt_data, keyed_server) -> None:
    anchors = laneatt_data / "anchors_2784x77.npy"
    arts = [make_artifact(tmp_path / f"art{n}", anchors, n=n, seed=n) for n in (300, 200)]
    repo = tmp_path / "repo"
    install(InstallOptions(arts[0], repo, "lane", runtime="python"))
    server, record = keyed_server(repo)
    for point in range(1, 20):
        # every killed install starts from a finished one (config `latest`) and changes the dims
        art = arts[0] if rows_of(repo, config_version(repo)) != 300 else arts[1]
        proc = subprocess.run([sys.executable, "-c", KILL_AT_RENAME, str(point), *install_argv(art, repo)],
                              capture_output=True, text=True)
        if proc.returncode == 0:
            break  # fewer renames than `point`: the install ran to its end (and loaded its version)
        assert proc.returncode == -9, proc.stderr
        assert_loads_what_the_config_says(repo, server, record)
        assert install(InstallOptions(art, repo, "lane", runtime="python")).served == {"lane": [max(versions_of(repo))]}
    assert proc.returncode == 0 and point >= 3, point  # killed at two renames at least: version, config
    assert admin_served(server.url) == [config_version(repo)] == [max(versions_of(repo))]
    assert not [p.name for p in (repo / "lane").iterdir() if p.name.startswith(".")]  # leftovers cleaned
    assert failed_loads(server.log_path) == []


def admin_served(url: str) -> list[int]:
    from edge_deploy.serve.admin import served_versions

    return served_versions(url, "lane")


def versions_of(repo: Path) -> list[int]:
    from edge_deploy.core.triton_layout import versions

    return versions(repo, "lane")
