"""The README is a front door and docs/ holds one page per topic: every relative
link of either lands on a file that exists (and on a heading that exists, when
it names one), and `make bench` finds the markers it writes between."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from bench import report, shares, snapshots

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
PAGES = sorted([README, *DOCS.glob("*.md")])
README_MAX_LINES = 300

LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
HEADING = re.compile(r"^#{1,6} (.+)$")
FENCE = "```"


def prose(page: Path) -> list[str]:
    """The page's lines outside fenced code blocks."""
    lines, fenced = [], False
    for line in page.read_text().splitlines():
        if line.startswith(FENCE):
            fenced = not fenced
        elif not fenced:
            lines.append(line)
    return lines


def anchors(page: Path) -> set[str]:
    """The anchors a code host gives the page's headings (GitHub's rule)."""
    found: set[str] = set()
    for line in prose(page):
        match = HEADING.match(line)
        if not match:
            continue
        slug = re.sub(r"[^\w\- ]", "", match.group(1).strip().lower()).replace(" ", "-")
        n, unique = 0, slug
        while unique in found:
            n += 1
            unique = f"{slug}-{n}"
        found.add(unique)
    return found


def relative_links(page: Path) -> list[str]:
    return [
        target
        for line in prose(page)
        for target in LINK.findall(re.sub(r"`[^`]*`", "", line))
        if not re.match(r"^[a-z][a-z0-9+.-]*:", target)  # http:, mailto: ...
    ]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(page: Path) -> None:
    broken = []
    for target in relative_links(page):
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists():
            broken.append(f"{target}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(f"{target}: no such heading")
    assert not broken, f"{page.relative_to(ROOT)}: {broken}"


def test_the_readme_is_short_and_every_docs_page_is_one_click_away() -> None:
    assert len(README.read_text().splitlines()) <= README_MAX_LINES
    linked = {(ROOT / t.partition("#")[0]).resolve() for t in relative_links(README)}
    assert [p.name for p in DOCS.glob("*.md") if p.resolve() not in linked] == []


@pytest.mark.parametrize(
    ("page", "start", "end"),
    [
        (README, report.HEADLINE_START, report.HEADLINE_END),
        (DOCS / "benchmarks.md", report.BENCH_START, report.BENCH_END),
        (DOCS / "benchmarks.md", report.TENANTS_START, report.TENANTS_END),
        (DOCS / "benchmarks.md", snapshots.START, snapshots.END),
        (DOCS / "benchmarks.md", shares.START, shares.END),
    ],
)
def test_bench_finds_the_markers_it_writes_between(page: Path, start: str, end: str) -> None:
    text = page.read_text()
    assert text.count(start) == 1 and text.count(end) == 1
    assert text.index(start) < text.index(end)
