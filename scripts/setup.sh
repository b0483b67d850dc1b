#!/usr/bin/env bash
# Create .venv with edge-deploy and everything its demo and tests need (idempotent).
# Fresh-machine assumptions: Debian, Python >= 3.10, PyPI and Debian packages reachable.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
# Each step says what it does (a fresh machine takes minutes: pip downloads torch and the rest, with its progress).
STEPS=4
step() { echo "setup: [$1/$STEPS] $2"; }

# systemd provides the user manager the serve tests run units under.
step 1 "systemd (the user manager the serve tests run units under)"
if ! [ -x /lib/systemd/systemd ] || ! command -v systemd-analyze >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ]; then
    echo "setup: installing systemd with apt-get"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq systemd >/dev/null
  else
    echo "setup: systemd is missing; install it with: sudo apt-get install systemd" >&2
  fi
fi

# OpenSSH (server and client) and iproute2 (`ip netns`): the TLS and fleet tests put servers, clients and
# vehicles' sshd in network namespaces.
step 2 "OpenSSH and iproute2 (the TLS and fleet tests' network namespaces)"
if ! [ -x /usr/sbin/sshd ] || ! command -v ssh >/dev/null 2>&1 || ! command -v ip >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ]; then
    echo "setup: installing openssh-server, openssh-client and iproute2 with apt-get"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
      openssh-server openssh-client iproute2 >/dev/null
  else
    echo "setup: sshd/ssh/ip are missing (TLS and fleet tests skip); sudo apt-get install openssh-server iproute2" >&2
  fi
fi

[ -x .venv/bin/python ] || { echo "setup: creating .venv with $PY"; "$PY" -m venv .venv; }
PIP=".venv/bin/python -m pip"
# torch first and pinned: a CPU build is available locally; an unpinned torch pulls CUDA wheels.
step 3 "torch 2.13.0 into .venv (pip, with its progress)"
$PIP install torch==2.13.0
# The dev extra includes nvidia-pytriton, whose bundled tritonserver the tests start.
step 4 "edge-deploy and its dev extra into .venv (pip: nvidia-pytriton's tritonserver, onnx, onnxruntime, ...)"
$PIP install -e '.[dev]'
echo "setup: done; activate it with: source .venv/bin/activate (then \`edge-deploy\` is on PATH)"
