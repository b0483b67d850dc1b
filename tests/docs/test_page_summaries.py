"""The two long pages open with a summary a reader can take in on one screen (issue 56, item 11): docs/design.md a
table of its sections (what each decides, the bounds it sets), each row linking its section, every numbered section
in it; BENCHMARKS.md, after its table of figures against targets (each row linking its section), the list of its
sections in order."""
from __future__ import annotations

import re
from pathlib import Path

from test_doc_pages import LINK, heading_anchors

REPO = Path(__file__).resolve().parents[2]


def _sections(text: str) -> list[str]:
    return re.findall(r"^## (.+)$", text, re.M)


def test_design_opens_with_a_table_of_its_sections() -> None:
    text = (REPO / "docs" / "design.md").read_text(encoding="utf-8")
    sections = _sections(text)
    assert sections[0] == "Summary", sections[:2]
    summary = text.split("\n## Summary\n", 1)[1].split("\n## ", 1)[0]
    assert len(summary.strip().splitlines()) <= 30, "not one screen"
    anchors = heading_anchors(text)
    linked = [anchor for target, anchor in LINK.findall(summary) if target == ""]
    assert all(anchor in anchors for anchor in linked), linked
    numbered = [s for s in sections if re.match(r"\d+\. ", s)]
    assert len(numbered) >= 15 and len(linked) == len(numbered), (linked, numbered)


def test_benchmarks_summary_lists_every_section_in_order() -> None:
    text = (REPO / "BENCHMARKS.md").read_text(encoding="utf-8")
    summary = text.split("\n## ", 2)[1]
    assert "The sections, in order:" in summary
    listed = [anchor for target, anchor in LINK.findall(summary.split("The sections, in order:", 1)[1])
              if target == ""]
    slugs = [re.sub(r"[^\w\- ]", "", s.lower()).replace(" ", "-") for s in _sections(text)[1:]]
    assert listed == slugs, (listed, slugs)  # every section, in the page's order
    assert set(slugs) <= heading_anchors(text)
