#!/usr/bin/env bash
# Set up .venv (scripts/setup.sh) and run the test suite. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/python -m pytest -q --durations=25 "$@"
