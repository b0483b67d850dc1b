#!/usr/bin/env bash
# Set up .venv (scripts/setup.sh) and run the test suite. Extra arguments go to pytest.
# Three pytest-xdist workers on CI's two cores (with two, the cores idle while tests wait for servers, SSH and
# subprocesses: docs/testing.md), a test file at a time (`--dist loadfile` in pyproject.toml: a file's module
# fixtures are made once and its tests keep their order). What the workers share and lock:
# tests/support/xdist_shared.py, docs/testing.md. `-n 0` runs the suite serially.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/python -m pytest -q -n 3 --durations=25 "$@"
