"""What a newcomer needs from the README and docs/install.md (issue 56, items 8-10), each claim checked against the
product where it can be:

- after the demo, `edge-deploy` is in `.venv`, not on PATH: the README's demo section and the demo's last line say
  to activate it (item 8);
- `doctor`'s exit statuses and `--for STAGE` are documented, and `doctor` exits as documented (item 9);
- the README's install block gets PyTorch's CPU build first, and pyproject.toml's opencv range resolves with its
  `numpy<2` without pip downloading wheels it must discard (item 10).
"""
from __future__ import annotations

import os
import re
from pathlib import Path

from cli_process import run_cli
from packaging.specifiers import SpecifierSet

pytest_plugins = ["jetson_fixtures"]  # board

REPO = Path(__file__).resolve().parents[2]
README = (REPO / "README.md").read_text(encoding="utf-8")
CPU_TORCH = "pip install torch --index-url https://download.pytorch.org/whl/cpu"


def test_the_readme_and_the_demo_say_to_activate_the_venv() -> None:
    demo_section = README.split("\n## The demo\n", 1)[1].split("\n## ", 1)[0]
    assert "    source .venv/bin/activate" in demo_section, demo_section
    last = [line for line in (REPO / "scripts" / "demo.sh").read_text().splitlines() if line.strip()][-2:]
    assert "source .venv/bin/activate" in " ".join(last), last


def test_doctor_exits_as_documented(board, tmp_path) -> None:
    page = (REPO / "docs" / "install.md").read_text(encoding="utf-8")
    documented = dict(re.findall(r"^\| ([012]) \| (.+) \|$", page, re.M))
    assert set(documented) == {"0", "1", "2"} and "`--for STAGE`" in page, documented
    assert "not ready" in documented["1"] and "--for bogus" in documented["2"]
    root = str(board("orin_nano_jp62"))  # tritonserver is this machine's bundled one; no TensorRT here
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache"), "TRTEXEC": str(tmp_path / "no-trtexec")}
    env.pop("TRITONSERVER", None)
    codes = {args: run_cli(["doctor", "--root", root, *args], env=env, timeout=120)
             for args in (("--for", "serve"), ("--for", "convert"), ("--for", "bogus"))}
    assert {args[1]: done.returncode for args, done in codes.items()} == {"serve": 0, "convert": 1, "bogus": 2}, {
        args[1]: done.stdout[-300:] + done.stderr for args, done in codes.items()}
    assert "convert: not ready (plan builder" in codes[("--for", "convert")].stdout


def test_the_install_block_gets_the_cpu_torch_first() -> None:
    block = README.split("\n## Install\n", 1)[1].strip("\n").split("\n\n", 1)[0]
    lines = [line.strip() for line in block.splitlines()]
    first_torch = next(i for i, line in enumerate(lines) if line.startswith("pip install '.[torch"))
    assert any(line.startswith(CPU_TORCH) for line in lines[:first_torch]), lines


def test_the_opencv_range_fits_numpy_below_2() -> None:
    pyproject = (REPO / "pyproject.toml").read_text()
    numpy = SpecifierSet(re.search(r'"numpy([^"]*)"', pyproject).group(1))
    opencv = SpecifierSet(re.search(r'"opencv-python-headless([^"]*)"', pyproject).group(1))
    assert not numpy.contains("2.0.0")
    # From PyPI's metadata (pip install --dry-run with numpy<2, 2026-11-28): 4.11.0.86 takes numpy >= 1.21.2 on
    # Python 3.10+; 4.12.0.88 and every later release (4.13.0.90/92, 4.14.0.94, 5.0.0.93) require numpy >= 2.
    assert opencv.contains("4.8.0.76") and opencv.contains("4.11.0.86")
    assert not any(opencv.contains(v) for v in ("4.12.0.88", "4.13.0.92", "4.14.0.94", "5.0.0.93")), opencv
