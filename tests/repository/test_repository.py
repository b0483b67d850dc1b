"""install / versions / prune / rollback on real files, and the bad-input promises (no server here)."""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
import cli_process
from manifest_files import manifest_json, write_manifest_json
from small_artifact import make_artifact

from edge_deploy.artifact.manifest import Manifest, file_entry
from edge_deploy.errors import RepositoryError
from edge_deploy.lanedet import contract
from edge_deploy.repository.files import TMP_PREFIX, clean_leftovers
from edge_deploy.deploy.install import install
from edge_deploy.deploy.options import InstallOptions
from edge_deploy.artifact.precision import Precision
from edge_deploy.deploy.rollback import prune, rollback
from edge_deploy.deploy.models import list_models
from edge_deploy.core.triton_layout import read_config, versions
from edge_deploy.serve import admin
from edge_deploy.serve import server_record as control


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory, laneatt_data) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("artifacts")
    anchors = laneatt_data / "anchors_2784x77.npy"
    return {
        "a": make_artifact(root / "a", anchors, n=300, seed=0),
        "b": make_artifact(root / "b", anchors, n=200, seed=1),
    }


@pytest.fixture(autouse=True)
def _no_server_records(tmp_path, monkeypatch) -> None:
    # Keep record lookups away from this machine's real state dirs.
    monkeypatch.setenv("EDGE_DEPLOY_STATE_DIR", str(tmp_path / "state"))


def tree_hash(root: Path) -> str:
    """Hash of every path, type, mode and file content under root (root included)."""
    digest = hashlib.sha256()
    root = Path(root)
    paths = [root, *sorted(root.rglob("*"))] if root.is_dir() else [root]
    for path in paths:
        st = path.lstat()
        digest.update(f"{path.relative_to(root.parent)}|{st.st_mode}|".encode())
        if path.is_file():
            digest.update(path.read_bytes())
    return digest.hexdigest()


def run_cli(*args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "EDGE_DEPLOY_DEBUG"}
    return cli_process.run_cli(args, env=env)


def assert_one_line_error(proc: subprocess.CompletedProcess, *needles: str) -> None:
    assert proc.returncode != 0
    lines = proc.stderr.strip().splitlines()
    assert lines and lines[-1].startswith("error: "), proc.stderr
    assert "Traceback" not in proc.stderr and "Traceback" not in proc.stdout
    errors = [ln for ln in lines if ln.startswith("error: ")]
    assert len(errors) == 1
    for needle in needles:
        assert needle in errors[0], errors[0]


def test_install_writes_a_complete_version_and_config(tmp_path, artifacts) -> None:
    repo = tmp_path / "repo"
    result = install(InstallOptions(artifacts["a"], repo, "lane", runtime="python", instances=2))
    assert result.version == 1 and result.runtime == "python" and result.served is None
    vdir = repo / "lane" / "1"
    assert sorted(p.name for p in vdir.iterdir()) == ["install.json", "manifest.json", "model.onnx", "model.py"]
    assert (vdir / "manifest.json").read_bytes() == (artifacts["a"] / "manifest.json").read_bytes()
    assert (vdir / "model.onnx").read_bytes() == (artifacts["a"] / "model.onnx").read_bytes()
    assert json.loads((vdir / "install.json").read_text())["options"]["instances"] == 2
    config = read_config(repo, "lane")
    assert config.name == "lane" and config.backend == "python" and config.max_batch_size == 4
    assert list(config.output[0].dims) == [300, 77]
    manifest_sha = hashlib.sha256((vdir / "manifest.json").read_bytes()).hexdigest()
    assert config.parameters[contract.PARAM_MANIFEST_SHA256].string_value == manifest_sha
    # nothing left behind: only the model, the lock file, no staging directories
    assert sorted(p.name for p in repo.iterdir()) == [".edge-deploy.lock", "lane"]
    assert not any(p.name.startswith(".") for p in (repo / "lane").iterdir())
    assert not list(tmp_path.glob(".repo.edge-deploy-staging*"))


def test_versions_keep_and_rollback(tmp_path, artifacts) -> None:
    repo = tmp_path / "repo"
    for art in ("a", "a", "b"):
        install(InstallOptions(artifacts[art], repo, "lane", runtime="python"))
    assert versions(repo, "lane") == [1, 2, 3]
    assert list(read_config(repo, "lane").output[0].dims) == [200, 77]

    back = rollback(repo, "lane")  # default: the newest version below the served one
    assert (back.version, back.previous) == (2, [3])
    config = read_config(repo, "lane")
    assert list(config.version_policy.specific.versions) == [2]
    assert list(config.output[0].dims) == [300, 77]  # rebuilt from version 2's own manifest
    assert versions(repo, "lane") == [1, 2, 3]  # newer files stay

    # --keep never removes the version the config serves, nor the newest (a version number is never reused)
    assert prune(repo, "lane", 1) == {"lane": [1]}
    assert versions(repo, "lane") == [2, 3]
    infos = list_models(repo, "lane")
    assert [(i.name, [v.version for v in i.versions], i.policy, i.served) for i in infos] == [("lane", [2, 3], [2], None)]

    # 3 was rolled back from: it does not count towards K and goes first
    result = install(InstallOptions(artifacts["a"], repo, "lane", runtime="python", keep=2))
    assert result.version == 4 and result.pruned == {"lane": [3]} and result.kept == {"lane": [2, 4]}
    assert "pruned lane versions 3 (kept 2, 4)" in result.summary()
    assert versions(repo, "lane") == [2, 4]
    assert read_config(repo, "lane").version_policy.latest.num_versions == 1
    # the version an install replaced (4, what a rollback returns to) stays whatever K
    result = install(InstallOptions(artifacts["a"], repo, "lane", runtime="python", keep=1))
    assert result.pruned == {"lane": [2]} and versions(repo, "lane") == [4, 5]


def test_of_two_healthy_versions_that_served_the_newer_is_kept(tmp_path, artifacts) -> None:
    # Only `history.last_good` decides here: 6 is newest (and what the config selects), keep=1 keeps it, and of the
    # two versions that served and were never rolled back from (2 and 4), the newer must stay, the older may go.
    from edge_deploy.repository.history import VersionHistory, record_served
    from edge_deploy.repository.prune import prune_versions

    assert VersionHistory(served=[2, 4]).last_good([1, 2, 3, 4, 5]) == 4
    assert VersionHistory(served=[2, 4], failed={4: "rolled back to version 2"}).last_good([1, 2, 3, 4]) == 2
    repo = tmp_path / "repo"
    for _ in range(6):
        install(InstallOptions(artifacts["a"], repo, "lane", runtime="python"))
    record_served(repo, "lane", [2, 4])
    assert prune_versions(repo, "lane", 1) == [1, 2, 3, 5]
    assert versions(repo, "lane") == [4, 6]


def test_the_newest_version_that_served_is_kept_and_rollback_skips_failed_versions(tmp_path, artifacts) -> None:
    # What a server confirmed is recorded by install/rollback (against the real server in
    # tests/deploy/test_install_safety.py); here the record is written as install writes it, and versions are added
    # while the server is down (files only, never served): the last version that served must stay.
    from edge_deploy.repository.history import STATE_NAME, read_history, record_served

    repo = tmp_path / "repo"
    for _ in range(2):
        install(InstallOptions(artifacts["a"], repo, "lane", runtime="python"))
    record_served(repo, "lane", [2])
    assert install(InstallOptions(artifacts["b"], repo, "lane", runtime="python", keep=2)).pruned == {"lane": [1]}
    assert install(InstallOptions(artifacts["b"], repo, "lane", runtime="python", keep=2)).pruned == {}
    assert versions(repo, "lane") == [2, 3, 4]  # 2 served last; 3 is what the install replaced; 4 is new
    assert install(InstallOptions(artifacts["b"], repo, "lane", runtime="python", keep=2)).pruned == {"lane": [3]}
    assert versions(repo, "lane") == [2, 4, 5]

    # rollback's default skips versions that failed before: 5 is rolled back from, so from 6 it goes to 4
    assert rollback(repo, "lane").version == 4
    assert read_history(repo, "lane").failed == {5: "rolled back to version 4"}
    install(InstallOptions(artifacts["a"], repo, "lane", runtime="python"))
    assert rollback(repo, "lane").version == 4
    assert sorted(read_history(repo, "lane").failed) == [5, 6]
    # the record sits where Triton looks for model directories only, and forgets pruned versions
    assert sorted(p.name for p in repo.iterdir()) == sorted([".edge-deploy.lock", STATE_NAME, "lane"])
    assert prune(repo, "lane", 1) == {"lane": [5]}  # 4 is served, 2 served last, 6 is the newest
    history = json.loads((repo / STATE_NAME).read_text())["models"]["lane"]
    assert history == {"served": [2], "failed": {"6": "rolled back to version 4"}}


def test_only_version_directories_are_versions(tmp_path, artifacts) -> None:
    # Triton serves numeric directories only: a stray file named like a version ("5", a copied-in
    # tarball, an editor's save) or a zero-padded directory must not move install's next version or
    # become a rollback target.
    repo = tmp_path / "repo"
    install(InstallOptions(artifacts["a"], repo, "lane", runtime="python"))
    (repo / "lane" / "5").write_text("not a version\n")
    (repo / "lane" / "07").mkdir()
    assert versions(repo, "lane") == [1]
    assert install(InstallOptions(artifacts["b"], repo, "lane", runtime="python")).version == 2
    assert rollback(repo, "lane").version == 1


def test_a_refused_load_pins_the_newest_version_served_before(tmp_path, artifacts) -> None:
    # What install does when the server refuses the new version (the load itself is tested against the
    # real server in tests/deploy/test_repository_triton.py): with a hand-edited policy serving several versions,
    # the config goes back to the newest of them, with that version's own I/O.
    from edge_deploy.repository.pinning import pin_previous

    repo = tmp_path / "repo"
    for art in ("b", "a", "b"):
        install(InstallOptions(artifacts[art], repo, "lane", runtime="python"))
    pin_previous(repo, {"lane": [1, 2]})
    config = read_config(repo, "lane")
    assert list(config.version_policy.specific.versions) == [2]
    assert list(config.output[0].dims) == [300, 77]  # version 2's ("a"), not version 3's


def test_rollback_rebuilds_the_config_from_that_versions_manifest_and_install_options(tmp_path, artifacts) -> None:
    from edge_deploy.repository import model_config as mc

    repo = tmp_path / "repo"
    install(InstallOptions(artifacts["a"], repo, "lane", runtime="onnxruntime", instances=2, max_queue_delay_us=100, warmup=True))
    install(InstallOptions(artifacts["b"], repo, "lane", runtime="python"))

    def expected(art: str, version: int, **kw):
        vdir = repo / "lane" / str(version)
        return mc.model_config(Manifest.read(artifacts[art]), name="lane",
                               manifest_sha256=hashlib.sha256((vdir / "manifest.json").read_bytes()).hexdigest(), **kw)

    assert read_config(repo, "lane") == expected("b", 2, runtime="python")
    rollback(repo, "lane")
    options = mc.ConfigOptions(max_queue_delay_us=100, instances=2, warmup=True)
    assert read_config(repo, "lane") == expected("a", 1, runtime="onnxruntime", options=options, version_policy=1)
    rollback(repo, "lane", 2)
    assert read_config(repo, "lane") == expected("b", 2, runtime="python", version_policy=2)


def test_rollback_to_a_version_whose_install_record_lost_its_runtime_names_the_record(tmp_path, artifacts) -> None:
    repo = tmp_path / "repo"
    install(InstallOptions(artifacts["a"], repo, "lane", runtime="python"))
    install(InstallOptions(artifacts["b"], repo, "lane", runtime="python"))
    record = repo / "lane" / "1" / "install.json"
    record.write_text(json.dumps({k: v for k, v in json.loads(record.read_text()).items() if k != "runtime"}))
    before = tree_hash(repo)
    with pytest.raises(RepositoryError, match=r"lane/1/install\.json names no runtime"):
        rollback(repo, "lane", 1)
    assert tree_hash(repo) == before  # refused before anything is written


def test_pipeline_models_share_the_version_and_follow_rollback(tmp_path, artifacts) -> None:
    repo = tmp_path / "repo"
    install(InstallOptions(artifacts["a"], repo, "lane", runtime="python", pipeline=True))
    install(InstallOptions(artifacts["b"], repo, "lane", runtime="python", pipeline=False))
    result = install(InstallOptions(artifacts["b"], repo, "lane", runtime="python"))  # default: the pipeline follows
    assert result.models == ["lane", "lane_preprocess", "lane_postprocess", "lane_pipeline"]
    assert versions(repo, "lane") == [1, 2, 3]
    for suffix in ("_preprocess", "_postprocess", "_pipeline"):
        assert versions(repo, "lane" + suffix) == [1, 3]
    assert list(read_config(repo, "lane_postprocess").input[0].dims) == [1, 200, 77]
    pre = repo / "lane_preprocess" / "3"
    src = Path(__file__).resolve().parents[2] / "edge_deploy" / "lanedet"
    assert (pre / "preprocess.py").read_bytes() == (src / "preprocess.py").read_bytes()
    assert (repo / "lane_postprocess" / "3" / "decode.py").read_bytes() == (src / "laneatt" / "decode.py").read_bytes()
    assert (repo / "lane_postprocess" / "3" / "lane.py").read_bytes() == (src / "lane.py").read_bytes()
    # version 2 had no pipeline: a rollback to it pins the lane model only
    configs = {m: (repo / m / "config.pbtxt").read_bytes() for m in result.models[1:]}
    assert rollback(repo, "lane", 2).models == ["lane"]
    assert {m: (repo / m / "config.pbtxt").read_bytes() for m in result.models[1:]} == configs
    result = rollback(repo, "lane", 1)
    assert result.models == ["lane", "lane_preprocess", "lane_postprocess", "lane_pipeline"]
    for model in result.models:
        assert list(read_config(repo, model).version_policy.specific.versions) == [1]
    assert list(read_config(repo, "lane_postprocess").input[0].dims) == [1, 300, 77]


def test_leftovers_of_a_killed_install_are_ignored_and_cleaned(tmp_path, artifacts) -> None:
    repo = tmp_path / "repo"
    install(InstallOptions(artifacts["a"], repo, "lane", runtime="python"))
    stale = repo / "lane" / f"{TMP_PREFIX}dead"
    (stale / "v").mkdir(parents=True)
    (stale / "v" / "model.onnx").write_bytes(b"half")
    outside = tmp_path / ".repo.edge-deploy-staging" / "lane-x"
    outside.mkdir(parents=True)
    half_config = repo / "lane" / ".config.pbtxt.x1y2z3.tmp"  # write_bytes_atomic's, killed before its rename
    half_config.write_text("name: ")
    assert versions(repo, "lane") == [1]
    result = install(InstallOptions(artifacts["a"], repo, "lane", runtime="python"))
    assert result.version == 2
    assert not stale.exists() and not outside.exists() and not half_config.exists()
    assert clean_leftovers(repo) == []


def test_runtime_follows_artifact_and_server(tmp_path, artifacts) -> None:
    repo = tmp_path / "repo"
    # The bundled server has no onnxruntime backend: model.onnx becomes a Python-backend ORT model.
    assert install(InstallOptions(artifacts["a"], repo, "auto")).runtime == "python"
    result = install(InstallOptions(artifacts["a"], repo, "ort", runtime="onnxruntime"))
    assert read_config(repo, "ort").platform == "onnxruntime_onnx"
    assert sorted(p.name for p in (repo / "ort" / "1").iterdir()) == ["install.json", "manifest.json", "model.onnx"]
    assert result.runtime == "onnxruntime"
    with pytest.raises(RepositoryError, match="needs model.plan"):
        install(InstallOptions(artifacts["a"], repo, "trt", runtime="tensorrt"))


def test_fp16_installs_model_fp16_with_onnx_runtime(tmp_path, artifacts) -> None:
    from edge_deploy.export.fp16_onnx import make_fp16_onnx

    art = tmp_path / "art"
    shutil.copytree(artifacts["a"], art)
    with pytest.raises(RepositoryError, match="--fp16 needs model_fp16.onnx"):
        install(InstallOptions(art, tmp_path / "repo", "lane", precision=Precision.FP16))
    manifest = Manifest.read(art)
    make_fp16_onnx(art, manifest, fp16_io=True)
    manifest.write(art)
    repo = tmp_path / "repo"
    result = install(InstallOptions(art, repo, "lane", precision=Precision.FP16))
    assert result.runtime == "python"
    assert (repo / "lane" / "1" / "model.onnx").read_bytes() == (art / "model_fp16.onnx").read_bytes()
    config = read_config(repo, "lane")
    assert [t.data_type for t in config.input] == [mc_data_type("FP16")]
    record = json.loads((repo / "lane" / "1" / "install.json").read_text())
    assert record["options"]["fp16"] is True
    with pytest.raises(RepositoryError, match="--pipeline needs"):
        install(InstallOptions(art, repo, "piped", precision=Precision.FP16, pipeline=True))
    with pytest.raises(RepositoryError, match="--fp16 serves model_fp16.onnx"):
        install(InstallOptions(art, repo, "lane", precision=Precision.FP16, runtime="tensorrt"))
    install(InstallOptions(art, repo, "lane"))  # version 2: model.onnx again
    rollback(repo, "lane", to=1)  # the config is rebuilt from version 1's record: FP16 again
    assert [t.data_type for t in read_config(repo, "lane").input] == [mc_data_type("FP16")]


@pytest.mark.parametrize("fp16_io", [False, True])
def test_install_follows_the_precision_convert_recorded(tmp_path, artifacts, fp16_io) -> None:
    """An FP16 artifact (convert's default) serves model_fp16.onnx where no plan is served; --no-fp16 serves
    model.onnx; a pipeline, which needs FP32 I/O, gets model.onnx from an FP16-I/O artifact and says why."""
    from edge_deploy.export.fp16_onnx import make_fp16_onnx
    from edge_deploy.artifact.precision import Precision
    from trt_double import Recording

    art = tmp_path / "art"
    shutil.copytree(artifacts["a"], art)
    manifest = Manifest.read(art)
    make_fp16_onnx(art, manifest, fp16_io=fp16_io)
    manifest.precision = Precision.FP16  # what convert --precision fp16 records
    manifest.write(art)
    repo = tmp_path / "repo"
    reporter = Recording()
    install(InstallOptions(art, repo, "lane"), reporter)
    assert (repo / "lane" / "1" / "model.onnx").read_bytes() == (art / "model_fp16.onnx").read_bytes()
    assert any("model_fp16.onnx: the artifact was converted for fp16" in line for line in reporter.infos)
    install(InstallOptions(art, repo, "lane", precision=Precision.FP32))
    assert (repo / "lane" / "2" / "model.onnx").read_bytes() == (art / "model.onnx").read_bytes()
    reporter = Recording()
    install(InstallOptions(art, repo, "piped", pipeline=True), reporter)
    served = (repo / "piped" / "1" / "model.onnx").read_bytes()
    if fp16_io:
        assert served == (art / "model.onnx").read_bytes()
        assert any("the pipeline needs FP32 I/O" in line for line in reporter.infos)
    else:
        assert served == (art / "model_fp16.onnx").read_bytes()
    (art / "model_fp16.onnx").unlink()
    with pytest.raises(RepositoryError, match="is listed in the manifest but missing"):
        install(InstallOptions(art, repo, "lane"))


def mc_data_type(name: str) -> int:
    from edge_deploy.repository.model_config import data_type

    return data_type(name)


def plan_artifact(root: Path, source: Path, *, gpu: str) -> Path:
    """An artifact holding only a (fake) model.plan: TensorRT cannot exist here, the bytes are never run."""
    art = root / f"plan-{gpu}"
    art.mkdir()
    (art / "model.plan").write_bytes(b"not a real engine: TensorRT is unavailable in this environment")
    manifest = manifest_json(source)
    manifest["files"] = {"model.plan": file_entry(art / "model.plan").to_dict()}
    manifest["plan"] = {"tensorrt": "10.3.0", "cuda": "12.6", "gpu": gpu, "compute_capability": "8.7",
                        "l4t": "36.4.0", "precision": "fp16"}
    write_manifest_json(art, manifest)
    return art


def test_plan_with_foreign_fingerprint_needs_force(tmp_path, artifacts) -> None:
    art = plan_artifact(tmp_path, artifacts["a"], gpu="Orin")
    repo = tmp_path / "repo"
    install(InstallOptions(artifacts["a"], repo, "lane", runtime="python"))
    before = tree_hash(repo)
    proc = run_cli("install", str(art), "--repository", str(repo), "--name", "lane")
    assert_one_line_error(proc, "does not fit this machine", "GPU", "--force")
    assert tree_hash(repo) == before
    result = install(InstallOptions(art, repo, "lane", force=True))
    assert result.runtime == "tensorrt" and result.version == 2
    assert read_config(repo, "lane").platform == "tensorrt_plan"
    assert (repo / "lane" / "2" / "model.plan").read_bytes() == (art / "model.plan").read_bytes()
    (info,) = list_models(repo, "lane")
    assert info.versions[1].plan.gpu == "Orin" and any("GPU" in d for d in info.versions[1].plan_mismatch)
    assert info.versions[0].plan is None and info.versions[0].plan_mismatch is None
    table = run_cli("models", "lane", "--repository", str(repo))
    assert "does not fit this machine" in table.stdout


def _broken_copy(src: Path, dst: Path, how: str) -> Path:
    shutil.copytree(src, dst)
    if how == "no-manifest":
        (dst / "manifest.json").unlink()
    elif how == "sha256":
        with open(dst / "model.onnx", "ab") as fh:
            fh.write(b"\0")
    return dst


@pytest.mark.parametrize(
    "case, needles",
    [
        ("no-manifest", ["no manifest.json", "edge-deploy convert"]),
        ("sha256", ["does not match its manifest"]),
        ("bad-name", ["illegal model name", "letters, digits"]),
        ("repo-is-file", ["not a directory"]),
        ("rollback-missing", ["has no version 9", "versions: 1"]),
        ("rollback-unknown-model", ["has no model"]),
    ],
)
def test_bad_input_is_one_line_and_leaves_the_repository_untouched(tmp_path, artifacts, case, needles) -> None:
    repo = tmp_path / "repo"
    install(InstallOptions(artifacts["a"], repo, "lane", runtime="python"))
    art = artifacts["a"]
    args = ["install", str(art), "--repository", str(repo), "--name", "lane"]
    target = repo
    if case in ("no-manifest", "sha256"):
        args[1] = str(_broken_copy(art, tmp_path / case, case))
    elif case == "bad-name":
        args[-1] = "lane/../x"
    elif case == "repo-is-file":
        target = tmp_path / "file-repo"
        target.write_text("not a directory\n")
        args[3] = str(target)
    elif case == "rollback-missing":
        args = ["rollback", "lane", "--to", "9", "--repository", str(repo)]
    elif case == "rollback-unknown-model":
        args = ["rollback", "nolane", "--repository", str(repo)]
    before = tree_hash(target)
    assert_one_line_error(run_cli(*args), *needles)
    assert tree_hash(target) == before


def test_read_only_repository_is_refused_untouched(tmp_path, artifacts) -> None:
    # Tests run as root, which ignores permission bits: a read-only bind mount really refuses writes.
    repo = tmp_path / "repo"
    install(InstallOptions(artifacts["a"], repo, "lane", runtime="python"))
    before = tree_hash(repo)
    mounted = subprocess.run(["mount", "--bind", str(repo), str(repo)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot bind-mount here: {mounted.stderr.decode().strip()}")
    try:
        subprocess.run(["mount", "-o", "remount,bind,ro", str(repo)], check=True, capture_output=True)
        for args in (
            ["install", str(artifacts["b"]), "--repository", str(repo), "--name", "lane"],
            ["install", str(artifacts["b"]), "--repository", str(repo), "--name", "other"],
            ["install", str(artifacts["b"]), "--repository", str(repo / "sub"), "--name", "lane"],
        ):
            # Issue 34 item 14: named as a read-only mount (root too), not "not writable ...; run as its owner".
            assert_one_line_error(run_cli(*args), "is on a file system mounted read-only (")
        assert_one_line_error(run_cli("rollback", "lane", "--to", "1", "--repository", str(repo)), "mounted read-only")
    finally:
        subprocess.run(["umount", str(repo)], check=True)
    assert tree_hash(repo) == before


def test_new_model_in_a_mounted_repository_is_staged_inside_it(tmp_path, artifacts) -> None:
    # A repository that is its own mount (a volume, an SD card): renames from beside it fail with EXDEV.
    repo = tmp_path / "repo"
    install(InstallOptions(artifacts["a"], repo, "lane", runtime="python"))
    mounted = subprocess.run(["mount", "--bind", str(repo), str(repo)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot bind-mount here: {mounted.stderr.decode().strip()}")
    try:
        result = install(InstallOptions(artifacts["b"], repo, "other", runtime="python", pipeline=True))
        assert result.version == 1
        for model in result.models:
            assert versions(repo, model) == [1] and (repo / model / "config.pbtxt").is_file()
        assert sorted(p.name for p in repo.iterdir()) == sorted([".edge-deploy.lock", "lane", *result.models])
    finally:
        subprocess.run(["umount", str(repo)], check=True)


def test_models_command_lists_versions_and_fingerprints(tmp_path, artifacts) -> None:
    repo = tmp_path / "repo"
    install(InstallOptions(artifacts["a"], repo, "lane", runtime="python"))
    install(InstallOptions(artifacts["b"], repo, "lane", runtime="python"))
    proc = run_cli("models", "--repository", str(repo), "--json")
    assert proc.returncode == 0, proc.stderr
    (info,) = json.loads(proc.stdout)
    assert info["name"] == "lane" and info["policy"] == [2] and info["served"] is None
    shas = [v["manifest_sha256"] for v in info["versions"]]
    assert shas == [hashlib.sha256((artifacts[k] / "manifest.json").read_bytes()).hexdigest() for k in ("a", "b")]
    table = run_cli("models", "lane", "--repository", str(repo))
    assert table.returncode == 0 and "by config" in table.stdout and shas[1][:16] in table.stdout


def test_server_records_round_trip(tmp_path, monkeypatch) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    key = tmp_path / "key"
    key.write_text("s3cret\n")
    record = control.ServerRecord(url="127.0.0.1:1", repository=repo, key_header="edge-deploy-key",
                                  key_file=key, scope="user", unit="edge-deploy-triton.service")
    path = control.save_record(record)
    assert path.parent == tmp_path / "state" / "servers"
    found = control.find_record(tmp_path / "." / "repo")
    assert found == control.ServerRecord(**{**record.__dict__, "repository": repo.resolve()})
    assert control.read_key(found) == "s3cret"
    assert admin.live_server(repo) is None  # nothing listens on port 1
    key.unlink()
    with pytest.raises(RepositoryError, match="run as root or a member of group edge-deploy"):
        control.read_key(found)
    control.remove_record(found)
    assert control.find_record(repo) is None


def test_state_dir_defaults(monkeypatch, tmp_path) -> None:
    monkeypatch.delenv("EDGE_DEPLOY_STATE_DIR")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "cfg"))
    assert control.state_dir("system") == Path("/etc/edge-deploy")
    assert control.state_dir("user") == tmp_path / "cfg" / "edge-deploy"


def test_foreign_model_directory_is_not_overwritten(tmp_path, artifacts) -> None:
    repo = tmp_path / "repo"
    (repo / "lane" / "1").mkdir(parents=True)
    (repo / "lane" / "1" / "model.savedmodel").write_text("someone else's model")
    before = tree_hash(repo)
    assert_one_line_error(run_cli("install", str(artifacts["a"]), "--repository", str(repo), "--name", "lane"),
                          "has no config.pbtxt")
    assert tree_hash(repo) == before


def test_recorded_server_that_does_not_answer_means_files_only(tmp_path, artifacts) -> None:
    repo = tmp_path / "repo"
    install(InstallOptions(artifacts["a"], repo, "lane", runtime="python"))
    control.save_record(control.ServerRecord(url="127.0.0.1:1", repository=repo, key_header="edge-deploy-key",
                                             key_file=tmp_path / "missing.key", scope="user"))
    result = install(InstallOptions(artifacts["a"], repo, "lane", runtime="python"))
    assert result.served is None and result.version == 2
    assert "no running edge-deploy server" in result.summary()


def test_versions_past_9_are_ordered_as_numbers(tmp_path, artifacts) -> None:
    # Version 10 is newer than 9: as strings it would sort between 1 and 2, and --keep would remove it.
    repo = tmp_path / "repo"
    for _ in range(11):
        install(InstallOptions(artifacts["a"], repo, "lane", runtime="python"))
    assert versions(repo, "lane") == list(range(1, 12))
    assert [v.version for v in list_models(repo, "lane")[0].versions] == list(range(1, 12))
    assert prune(repo, "lane", 2) == {"lane": list(range(1, 10))}
    assert versions(repo, "lane") == [10, 11]


def test_a_new_version_is_above_every_pipeline_companion_left_on_disk(tmp_path, artifacts) -> None:
    # The lane model removed by hand, its pipeline models left: the next version must be above theirs,
    # never a number one of them already has.
    repo = tmp_path / "repo"
    for _ in range(2):
        install(InstallOptions(artifacts["a"], repo, "lane", runtime="python", pipeline=True))
    shutil.rmtree(repo / "lane")
    result = install(InstallOptions(artifacts["b"], repo, "lane", runtime="python", pipeline=True))
    assert result.version == 3
    assert versions(repo, "lane") == [3]
    for suffix in ("_preprocess", "_postprocess", "_pipeline"):
        assert versions(repo, "lane" + suffix) == [1, 2, 3]
    assert list(read_config(repo, "lane_postprocess").input[0].dims) == [1, 200, 77]


def test_prune_spares_the_version_the_server_still_serves(tmp_path, artifacts, monkeypatch) -> None:
    # A polling server that has not picked up version 3 yet still serves 2: --keep 1 must leave 2 on disk.
    repo = tmp_path / "repo"
    for art in ("a", "a", "b"):
        install(InstallOptions(artifacts[art], repo, "lane", runtime="python"))

    class Record:
        url = "127.0.0.1:1"

        def client_tls(self):
            return None

    monkeypatch.setattr(admin, "live_server", lambda repository: Record())
    monkeypatch.setattr(admin, "served_versions", lambda url, name, tls=None: [2] if name == "lane" else [])
    assert prune(repo, "lane", 1) == {"lane": [1]}
    assert versions(repo, "lane") == [2, 3]


def test_writers_of_one_repository_wait_for_each_other(tmp_path, artifacts) -> None:
    # While one writer holds the repository lock, an install waits, then completes with the next version.
    import threading

    from edge_deploy.repository.files import repository_lock

    repo = tmp_path / "repo"
    install(InstallOptions(artifacts["a"], repo, "lane", runtime="python"))
    done: list[int] = []
    with repository_lock(repo):
        writer = threading.Thread(target=lambda: done.append(install(InstallOptions(artifacts["b"], repo, "lane", runtime="python")).version))
        writer.start()
        writer.join(1.5)
        assert writer.is_alive() and done == [] and versions(repo, "lane") == [1]
    writer.join(60)
    assert done == [2] and versions(repo, "lane") == [1, 2]
