"""Set-up shared by the TensorRT-stage and doctor tests: a Jetson that is not here, TensorRT that cannot be.

- `board`: a copy of a fake Jetson root from tests/data/jetson_root (real-looking
  /etc, /proc, /sys files and a stand-in `nvpmodel` printing saved `nvpmodel -q` output);
- `no_tensorrt`: neither the tensorrt module, pycuda nor trtexec, whatever this machine has;
- `fake_trt`: the recording tensorrt double of tests/support/trt_double.py, installed;
- `fake_trtexec`: a stand-in `trtexec` script on $TRTEXEC (NVIDIA's tool cannot be
  installed here) that behaves like trtexec at the process boundary;
- `artifact`: tests/support/lane_onnx.py's real ONNX model and manifest in a directory.

Test modules load it as a plugin: `pytest_plugins = ["jetson_fixtures"]`; plain helpers
(Recording, settings, ENGINE_IO) are in tests/support/trt_double.py.
"""
from __future__ import annotations

import json
import shutil
import stat
import sys
from pathlib import Path

import pytest
from lane_onnx import lane_manifest, write_lane_onnx
from trt_double import ENGINE_IO, ROWS, make_tensorrt

from edge_deploy.engine import trtexec

FIXTURES = Path(__file__).resolve().parents[1] / "data" / "jetson_root"


@pytest.fixture
def board(tmp_path: Path):
    """Factory: a board's fake root copied under tmp_path (tests may change it), nvpmodel stand-in executable."""

    def make(name: str) -> Path:
        root = tmp_path / "roots" / name
        if not root.exists():
            shutil.copytree(FIXTURES / name, root)
            tool = root / "usr" / "sbin" / "nvpmodel"
            if tool.exists():
                tool.chmod(tool.stat().st_mode | stat.S_IXUSR)
        return root

    return make


@pytest.fixture
def no_tensorrt(monkeypatch):
    """Neither the tensorrt module nor pycuda nor trtexec, whatever this machine has."""
    for module in ("tensorrt", "pycuda", "pycuda.driver"):
        monkeypatch.setitem(sys.modules, module, None)
    monkeypatch.delenv(trtexec.TRTEXEC_ENV, raising=False)
    monkeypatch.setattr(trtexec, "TRTEXEC_DEFAULT", Path("/nonexistent/trtexec"))
    real_which = shutil.which
    monkeypatch.setattr(shutil, "which", lambda name, *a, **k: None if name == "trtexec" else real_which(name, *a, **k))


@pytest.fixture
def fake_trt(monkeypatch, no_tensorrt):
    """Factory: install the recording tensorrt double (see tests/support/trt_double.py for why it is a double)."""

    def install(version: str = "8.6.1", **kwargs):
        kwargs.setdefault("engine", ENGINE_IO)
        module = make_tensorrt(version, **kwargs)
        monkeypatch.setitem(sys.modules, "tensorrt", module)
        return module

    return install


@pytest.fixture
def artifact(tmp_path: Path) -> tuple[Path, dict]:
    """A directory with tests/support/lane_onnx.py's model.onnx (ROWS lane rows), its manifest and,
    as `convert --precision fp16` makes it, model_fp16.onnx (node "head" kept FP32, FP32 I/O)."""
    from edge_deploy.export.fp16_onnx import make_fp16_onnx

    directory = tmp_path / "artifact"
    directory.mkdir()
    write_lane_onnx(directory / "model.onnx", rows=ROWS)
    manifest = lane_manifest(directory, ROWS)
    make_fp16_onnx(directory, manifest)
    return directory, manifest


FAKE_TRTEXEC = r'''#!{python}
# Stand-in for NVIDIA's trtexec (TensorRT cannot be installed here): it checks nothing about the
# model; it only behaves like trtexec at the process boundary (banner, [E] lines, exit codes,
# --saveEngine and --timingCacheFile files) so the subprocess plumbing can be tested.
# Like trtexec it fails on an option its version does not parse (samples/common/sampleOptions.cpp of
# NVIDIA/TensorRT release/8.5, 8.6, 10.0, 10.16, 11.0, 11.1: --buildOnly until 8.6, --skipInference and
# --builderOptimizationLevel from 8.6, --stronglyTyped from 10.0; 11.0 removed --fp16, --int8, --calib,
# --precisionConstraints, --layerPrecisions and --layerOutputTypes); only the options edge-deploy may pass
# are listed. Like sampleEngines.cpp it rejects a --layerOutputTypes list whose length is not the layer's
# output count (FAKE_TRTEXEC_LAYER_OUTPUTS="name:count,..."; unnamed layers have one output).
import json, os, sys
banner = int(os.environ.get("FAKE_TRTEXEC_BANNER", "{banner}"))
version = (banner // 10000, banner // 100 % 100) if banner >= 100000 else (banner // 1000, banner // 100 % 10)
args = dict(a[2:].split("=", 1) if "=" in a else (a[2:], "") for a in sys.argv[1:])
print("&&&& RUNNING TensorRT.trtexec [TensorRT v%d] # trtexec " % banner + " ".join(sys.argv[1:]))
if "help" in args:
    sys.exit(0)
known = {{"onnx", "saveEngine", "memPoolSize", "minShapes", "optShapes", "maxShapes", "useDLACore",
         "allowGPUFallback", "timingCacheFile"}}
if version < (11, 0):
    known |= {{"fp16", "int8", "calib", "precisionConstraints", "layerPrecisions", "layerOutputTypes"}}
known |= {{"buildOnly"}} if version < (10, 0) else set()
known |= {{"skipInference", "builderOptimizationLevel"}} if version >= (8, 6) else set()
known |= {{"stronglyTyped"}} if version >= (10, 0) else set()
unknown = [name for name in args if name not in known]
if unknown:
    for name in unknown:
        print("[11/22/2026-07:00:00] [E] Unknown option: --%s %s" % (name, args[name]))
    print("&&&& FAILED TensorRT.trtexec")
    sys.exit(1)
with open(os.environ["FAKE_TRTEXEC_LOG"], "a") as log:
    log.write(json.dumps(sys.argv[1:]) + "\n")
counts = dict(p.split(":") for p in os.environ.get("FAKE_TRTEXEC_LAYER_OUTPUTS", "").split(",") if p)
for spec in filter(None, args.get("layerOutputTypes", "").split(",")):
    name, types = spec.rsplit(":", 1)
    have = int(counts.get(name, 1))
    if "+" in types and len(types.split("+")) != have:
        print("[11/22/2026-07:00:00] [E] Layer %s has %d outputs but %d output types are given in "
              "--layerOutputTypes flag." % (name, have, len(types.split("+"))))
        print("&&&& FAILED TensorRT.trtexec")
        sys.exit(1)
cache = args.get("timingCacheFile")
if cache and os.path.exists(cache) and open(cache, "rb").read().startswith(b"CORRUPT"):
    print("[11/22/2026-07:00:00] [E] Error[1]: [timingCache.cpp::load::512] Error Code 1: corrupt timing cache")
    print("&&&& FAILED TensorRT.trtexec")
    sys.exit(1)
mode = os.environ.get("FAKE_TRTEXEC_MODE", "ok")
if mode == "fail":
    print("[11/22/2026-07:00:00] [I] Start parsing network model.")
    print("[11/22/2026-07:00:01] [E] Error[4]: [network.cpp::validate::3100] Error Code 4: Internal Error (bad profile)")
    print("[11/22/2026-07:00:01] [E] Engine could not be created from network")
    sys.stderr.write("some library noise\n")
    sys.exit(1)
if mode == "crash":
    sys.stderr.write("Segmentation fault (core dumped)\n")
    sys.exit(139)
if mode != "noengine":
    open(args["saveEngine"], "wb").write(b"PLAN-from-trtexec")
if cache:
    open(cache, "wb").write(b"CACHE-from-trtexec")
print("&&&& PASSED TensorRT.trtexec")
'''


@pytest.fixture
def fake_trtexec(tmp_path: Path, monkeypatch, no_tensorrt):
    """The stand-in trtexec (TensorRT 8.6.2) on $TRTEXEC; returns a function listing the argv of its builds.

    FAKE_TRTEXEC_MODE=fail|crash|noengine makes it fail like trtexec does; FAKE_TRTEXEC_BANNER=8502
    (NV_TENSORRT_VERSION, here 8.5.2) makes it another TensorRT version.
    """
    tool = tmp_path / "bin" / "trtexec"
    tool.parent.mkdir()
    tool.write_text(FAKE_TRTEXEC.format(python=sys.executable, banner="8602"))
    tool.chmod(0o755)
    log = tmp_path / "trtexec-calls.jsonl"
    monkeypatch.setenv(trtexec.TRTEXEC_ENV, str(tool))
    monkeypatch.setenv("FAKE_TRTEXEC_LOG", str(log))

    def calls() -> list[list[str]]:
        return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []

    return calls
