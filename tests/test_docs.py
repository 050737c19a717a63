"""The README stays a quick start: short, linking to docs/ pages that exist, naming no commits."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()


def test_readme_is_short():
    assert len(README.splitlines()) <= 150, "README.md is a quick start: move reference material to docs/"


def test_readme_starts_with_the_two_commands():
    first_block = README.split("```bash", 1)[1].split("```", 1)[0]
    assert "make run" in first_block and "make test" in first_block


def test_every_link_of_the_readme_exists():
    links = re.findall(r"\]\(([^)#]+)\)", README)
    local = [link for link in links if not link.startswith("http")]
    assert any(link.startswith("docs/") for link in local)
    missing = [link for link in local if not (ROOT / link).exists()]
    assert missing == []


def test_every_docs_page_is_linked_from_the_readme():
    pages = sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "docs").glob("*.md"))
    assert [p for p in pages if p not in README] == [], "link each docs/ page from README's 'Read more'"


def test_readme_names_no_commit():
    # Upgrade notes that name commits belong in CHANGELOG.md.
    hashes = re.findall(r"\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]{7,40}\b", README)
    assert hashes == []
