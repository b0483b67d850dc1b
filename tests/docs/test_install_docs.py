"""The install lines of README.md and docs/ install what exists today (issue 34 item 19): edge-deploy is not on
PyPI, so they install from a checkout or from a wheel built from one, which must work outside the tree; the
published form (`pip install 'edge-deploy[...]'`) is shown only as what comes once it is published."""
from __future__ import annotations

import re
import subprocess
import sys
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
EDGE_DEPLOY_INSTALL = re.compile(r"pip install '([^']*(?:edge-deploy|edge_deploy|^\.)[^']*|\.\[[^']*)'")


def install_lines() -> list[tuple[str, str, str]]:
    """(file, line, the line before) for every line of the docs that pip-installs edge-deploy itself."""
    found = []
    for page in DOCS:
        lines = page.read_text().splitlines()
        for before, line in zip(["", *lines], lines):
            if EDGE_DEPLOY_INSTALL.search(line):
                found.append((page.name, line.strip(), before))
    return found


def test_install_lines_install_from_a_checkout_or_a_wheel() -> None:
    lines = install_lines()
    assert len(lines) >= 5, lines
    for page, line, before in lines:
        targets = EDGE_DEPLOY_INSTALL.findall(line)
        published = "published" in line + before  # "Once it is published: pip install 'edge-deploy[...]'"
        for target in targets:
            assert target.startswith((".[", "dist/")) or published, f"{page}: {line}"
    # `certs` needs the tls extra: an install line says how to get it.
    assert any("tls" in target for _, line, _ in lines for target in EDGE_DEPLOY_INSTALL.findall(line)
               if target.startswith(".[")), lines


def test_the_wheel_built_as_documented_works_outside_the_tree(tmp_path) -> None:
    install_md = (REPO / "docs" / "install.md").read_text()
    assert "    pip wheel --no-deps -w dist .\n" in install_md
    # As documented, plus --no-build-isolation: the machine running the tests may reach no package index (the
    # build backend is the one installed here).
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w",
                            str(tmp_path / "dist"), str(REPO)], capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stderr[-2000:]
    wheel = next((tmp_path / "dist").glob("edge_deploy-*.whl"))
    assert f"dist/{wheel.name}[torch,tls]" in install_md, f"docs/install.md does not name {wheel.name}"
    target = tmp_path / "site"
    # --no-deps: the requirements are this interpreter's already; what is tested is the wheel's own content.
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target), str(wheel)],
                   check=True, capture_output=True, timeout=300)
    code = ("import edge_deploy, importlib.resources as r; print(edge_deploy.__file__); "
            "print(all((r.files('edge_deploy') / p).is_file() for p in ('repository/triton_models/bls_model.py', "
            "'fleet/ansible/rollout.yml', 'py.typed', 'ros/msg/edge_deploy_msgs/msg/LaneMarkers.msg', "
            "'ros/msg/edge_deploy_msgs/package.xml', 'ros/msg/edge_deploy_msgs/CMakeLists.txt')))")
    away = tmp_path / "elsewhere"
    away.mkdir()
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(target), "HOME": str(away)}
    shown = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=away, env=env, timeout=120)
    assert shown.stdout.splitlines() == [str(target / "edge_deploy" / "__init__.py"), "True"], shown.stderr
    for args in (["--version"], ["certs", "--help"], ["serve", "--print-unit", "--repository", str(away)]):
        done = subprocess.run([sys.executable, "-m", "edge_deploy", *args], capture_output=True, text=True, cwd=away,
                              env=env, timeout=120)
        assert done.returncode == 0, (args, done.stderr)
    assert "edge_deploy/serve/templates/" in " ".join(zipfile.ZipFile(wheel).namelist())
