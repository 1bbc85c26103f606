"""The documentation's shape: the top-level README is an overview of at most 300 lines, every page of
docs/ is reachable from it, and every relative link between the READMEs and docs/ lands on a file and,
where it names one, a heading (issue 30)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
TOP = ROOT / "README.md"
PAGES = [TOP, *sorted((ROOT / "docs").glob("*.md")), *sorted((ROOT / "packages").glob("*/README.md"))]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def _prose(path: Path) -> str:
    """The page without its fenced code blocks (a `#` there is a shell comment, not a heading)."""
    return re.sub(r"^```.*?^```", "", path.read_text(encoding="utf-8"), flags=re.S | re.M)


def _anchors(path: Path) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces as hyphens."""
    headings = re.findall(r"^#{1,6} (.+)$", _prose(path), flags=re.M)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in headings}


def test_the_top_readme_is_an_overview_of_at_most_300_lines():
    lines = TOP.read_text(encoding="utf-8").count("\n")
    assert lines <= 300, f"README.md has {lines} lines: move the detail to a package README or docs/"


def test_every_relative_link_lands_on_a_file_and_heading():
    broken = []
    for page in PAGES:
        for target in LINK.findall(_prose(page)):
            if re.match(r"[a-z]+:", target):
                continue  # https:, mailto:
            file_part, _, anchor = target.partition("#")
            dest = (page.parent / file_part).resolve() if file_part else page
            if not dest.exists():
                broken.append(f"{page.relative_to(ROOT)}: {target} (no such file)")
            elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
                broken.append(f"{page.relative_to(ROOT)}: {target} (no such heading)")
    assert not broken, "\n".join(broken)


def test_every_docs_page_is_linked_from_the_top_readme():
    linked = {(ROOT / t.partition("#")[0]).resolve() for t in LINK.findall(_prose(TOP))}
    orphans = [p.name for p in (ROOT / "docs").glob("*.md") if p.resolve() not in linked]
    assert not orphans, f"docs/ pages the top README does not link: {orphans}"
