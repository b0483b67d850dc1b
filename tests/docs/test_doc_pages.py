"""The shape issue 47 #9 gave the docs: the README short and opening with the two commands, BENCHMARKS.md opening with
one summary table whose rows link to their sections, and every `page.md#heading` link of the docs resolving."""
from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PAGES = [REPO / "README.md", REPO / "BENCHMARKS.md", *sorted((REPO / "docs").glob("*.md"))]
LINK = re.compile(r"\]\(([^)#\s]*)#([^)\s]+)\)")


def heading_anchors(text: str) -> set[str]:
    """The anchors GitHub gives a page's headings: lower case, punctuation dropped, spaces to hyphens, a repeated one
    numbered (-1, -2, ...); headings inside fenced code are none."""
    anchors: set[str] = set()
    seen: dict[str, int] = {}
    fenced = False
    for line in text.splitlines():
        if line.startswith("```"):
            fenced = not fenced
        if fenced or not re.match(r"#{1,6} ", line):
            continue
        slug = re.sub(r"[^\w\- ]", "", line.lstrip("#").strip().lower()).replace(" ", "-")
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        anchors.add(slug if count == 0 else f"{slug}-{count}")
    return anchors


def test_every_link_to_a_heading_resolves() -> None:
    broken = []
    for page in PAGES:
        for target, anchor in LINK.findall(page.read_text(encoding="utf-8")):
            dest = (page.parent / target).resolve() if target else page
            if not dest.is_file() or anchor not in heading_anchors(dest.read_text(encoding="utf-8")):
                broken.append(f"{page.relative_to(REPO)}: ({target}#{anchor})")
    assert broken == []


def test_the_readme_opens_with_the_two_commands_and_stays_short() -> None:
    lines = (REPO / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 200, f"README.md has {len(lines)} lines: move detail to its stage page in docs/"
    commands = [line for line in lines[:4] if line.startswith("    ")]
    assert [line.split()[:2] for line in commands] == [["bash", "scripts/demo.sh"], ["bash", "scripts/test.sh"]]


def test_benchmarks_open_with_the_summary_each_row_linking_to_its_section() -> None:
    text = (REPO / "BENCHMARKS.md").read_text(encoding="utf-8")
    first_section = re.search(r"^## (.*)$", text, re.M)
    assert first_section is not None and first_section.group(1).startswith("Summary"), first_section
    summary = text[first_section.end():].split("\n## ", 1)[0]
    rows = [line for line in summary.splitlines() if line.startswith("| ") and not line.startswith("| figure")]
    assert len(rows) >= 10, rows
    anchors = heading_anchors(text)
    for row in rows:
        links = LINK.findall(row)
        assert links and all(target == "" and anchor in anchors for target, anchor in links), row
        assert row.count("|") - row.count("\\|") == 6, row  # figure, target, measured, met?, where and when
