"""Links in the README and docs/ lead to files of this repository (issue 9: `../shared/...`
pointed outside it, to files a clone does not have)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = sorted([ROOT / "README.md", *(ROOT / "docs").glob("*.md"), *(ROOT / "examples").rglob(
    "README.md")])
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def _relative_links(doc: Path) -> list[str]:
    return [target for target in LINK.findall(doc.read_text())
            if not re.match(r"[a-z]+:", target) and not target.startswith("#")]


@pytest.mark.parametrize("doc", DOCS, ids=lambda doc: str(doc.relative_to(ROOT)))
def test_every_relative_link_resolves_inside_the_repository(doc: Path) -> None:
    for target in _relative_links(doc):
        path = (doc.parent / target.split("#")[0]).resolve()
        assert path.is_relative_to(ROOT), f"{doc.name}: {target} leaves the repository"
        assert path.exists(), f"{doc.name}: {target} does not exist"


@pytest.mark.parametrize("doc", DOCS, ids=lambda doc: str(doc.relative_to(ROOT)))
def test_no_path_outside_the_repository_is_named(doc: Path) -> None:
    text = doc.read_text()
    assert "../shared" not in text and "/work/" not in text, f"{doc.name} names a path outside"
