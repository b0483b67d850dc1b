"""Check (or re-make) the figures the docs quote from a command: each one is re-measured with the command the doc
names beside it and compared with the doc's text.

    python scripts/docs_figures.py out/demo/lanedet           # after scripts/demo.sh: exit 1 when a figure drifted
    python scripts/docs_figures.py out/demo/lanedet --write   # write the figures the commands give now into the docs

ARTIFACT is the demo's artifact (`scripts/demo.sh` converts the demo weights into out/demo/lanedet). tests/test_demo.py
runs the check after the demo (EDGE_DEPLOY_DEMO_TESTS=1), so a code change that moves a quoted figure fails there
until the doc is re-made. The picture beside the README's figure is drawn by scripts/readme_picture.py.
"""
from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Figure:
    """A number a doc quotes: where (`page`, `pattern`'s one group), the command that gives it, and how it is read
    from that command's JSON report and written."""

    page: str
    pattern: str
    command: Callable[[Path, Path], list[str]]  # (artifact, JSON report path) -> argv
    value: Callable[[dict], float]
    digits: int

    def quoted(self) -> str:
        found = re.findall(self.pattern, (ROOT / self.page).read_text())
        if len(found) != 1:
            raise SystemExit(f"docs_figures: {self.page} quotes {len(found)} figures matching {self.pattern!r}; "
                             "expected exactly one")
        return found[0]

    def measure(self, artifact: Path) -> str:
        with tempfile.TemporaryDirectory() as tmp:
            report = Path(tmp) / "report.json"
            argv = self.command(artifact, report)
            subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)
            return f"{self.value(json.loads(report.read_text())):.{self.digits}f}"

    def write(self, value: str) -> None:
        page = ROOT / self.page
        text = page.read_text()
        match = re.search(self.pattern, text)
        assert match is not None
        page.write_text(text[:match.start(1)] + value + text[match.end(1):])


def _evaluate(frames: int) -> Callable[[Path, Path], list[str]]:
    return lambda artifact, report: [sys.executable, "-m", "edge_deploy", "evaluate", str(artifact), "--synthetic",
                                     str(frames), "--json", str(report)]


FIGURES = [
    # README: "F1 0.911 over all 200 (`edge-deploy evaluate out/demo/lanedet --synthetic 200`, ...)"
    Figure("README.md", r"F1 (\d\.\d{3}) over all 200 \(`edge-deploy evaluate out/demo/lanedet --synthetic 200`",
           _evaluate(200), lambda report: report["culane"][0]["f1"], 3),
]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("artifact", type=Path, help="the demo's artifact directory (out/demo/lanedet)")
    parser.add_argument("--write", action="store_true", help="write the measured figures into the docs")
    args = parser.parse_args(argv)
    drifted = []
    for figure in FIGURES:
        quoted, measured = figure.quoted(), figure.measure(args.artifact)
        if quoted == measured:
            print(f"{figure.page}: {quoted} (as measured)")
            continue
        if args.write:
            figure.write(measured)
            print(f"{figure.page}: {quoted} -> {measured} (written)")
        else:
            drifted.append(f"{figure.page} quotes {quoted}, its command gives {measured}")
    if drifted:
        print("docs_figures: " + "; ".join(drifted) + "; re-make them with --write", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
