#!/usr/bin/env bash
# The suite on Python 3.10 (JetPack 6's Python) with the oldest versions pyproject.toml allows
# (ci/constraints-py310-lowest.txt), in .venv310. Extra arguments go to pytest.
#
# No torch here: the only local torch file is a CPU build for Python 3.11, and on 3.10 pip would pull
# the CUDA build from PyPI (several GB). Tests that need torch (export from PyTorch, the LaneATT model
# and its reference checks, training, and the served tests built on a converted LaneATT artifact) skip
# with that reason; the served tests on small ONNX artifacts run (the lowest tritonclient and grpcio
# against the bundled tritonserver). The exact list, and the torch-free ONNX coverage: docs/testing.md.
set -euo pipefail
cd "$(dirname "$0")/.."

# $PYTHON310, else pyenv's newest 3.10, else python3.10 on PATH (a pyenv shim there may not run: each is tried).
candidates=("${PYTHON310:-}")
if command -v pyenv >/dev/null 2>&1; then
  while IFS= read -r found; do candidates+=("$found"); done \
    < <(ls -d "$(pyenv root)"/versions/3.10*/bin/python3.10 2>/dev/null | sort -rV)
fi
candidates+=("$(command -v python3.10 || true)")
PY310=""
for candidate in "${candidates[@]}"; do
  if [ -n "$candidate" ] && "$candidate" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 10))' 2>/dev/null; then
    PY310=$candidate
    break
  fi
done
if [ -z "$PY310" ]; then
  echo "test_py310: no Python 3.10 found (\$PYTHON310, pyenv, PATH); set PYTHON310=/path/to/python3.10" >&2
  exit 1
fi

[ -x .venv310/bin/python ] || "$PY310" -m venv .venv310
PIP=".venv310/bin/python -m pip"
CONSTRAINTS=ci/constraints-py310-lowest.txt
# The build backend at pyproject's lower bound (setuptools < 70.1 needs `wheel` for bdist_wheel): a test
# builds the wheel with --no-build-isolation.
$PIP install -q -c "$CONSTRAINTS" setuptools wheel
$PIP install -q -c "$CONSTRAINTS" -e '.[test]'
# Only the bundled tritonserver of nvidia-pytriton is used, not its Python API, whose requirement
# tritonclient~=2.50 would lift tritonclient above the lowest version under test.
$PIP install -q --no-deps -c "$CONSTRAINTS" nvidia-pytriton
# onnxruntime 1.16.3, the version of the oldest onnxruntime builds for Jetson, in a directory of its own
# (.venv310 itself keeps onnxruntime at pyproject's lower bound): tests/export/test_onnx_target.py loads
# every ONNX variant convert writes in it, in a subprocess with $EDGE_DEPLOY_OLDEST_ORT first on PYTHONPATH.
# It imports and runs with numpy alone (.venv310's); coloredlogs, flatbuffers, packaging, protobuf and
# sympy, its other requirements, serve only its tools, hence --no-deps.
OLDEST_ORT=.venv310/ort116
if ! PYTHONPATH=$OLDEST_ORT .venv310/bin/python -c \
    'import sys, onnxruntime; sys.exit(onnxruntime.__version__ != "1.16.3")' 2>/dev/null; then
  rm -rf "$OLDEST_ORT"
  $PIP install -q --no-deps --target "$OLDEST_ORT" onnxruntime==1.16.3
fi
export EDGE_DEPLOY_OLDEST_ORT="$PWD/$OLDEST_ORT"
.venv310/bin/python - "$CONSTRAINTS" <<'EOF'
# Fail when an installed version is not the pinned lowest one (a stale .venv310, a resolver surprise).
import sys
from importlib.metadata import version
from pathlib import Path

wrong = []
for line in Path(sys.argv[1]).read_text().splitlines():
    line = line.split("#")[0].strip()
    if "==" in line:
        name, pinned = (part.strip() for part in line.split("=="))
        if version(name) != pinned:
            wrong.append(f"{name} {version(name)} (constraint {pinned})")
if wrong:
    sys.exit("test_py310: not the lowest versions: " + ", ".join(wrong))
print(f"test_py310: Python {sys.version.split()[0]} with the lowest versions of {sys.argv[1]}")
EOF
# Three pytest-xdist workers, a test file at a time, as scripts/test.sh. Every `edge-deploy` call of the tests
# starts a new interpreter here (the 3.11 run forks a warm one: tests/support/cli_process.py), so CI sees both.
export EDGE_DEPLOY_TEST_NEW_INTERPRETER=1
exec .venv310/bin/python -m pytest -q -p no:cacheprovider -n 3 --durations=15 "$@"
