"""docs/architecture.md lists every member of the broker's two ports (``broker/_ports.py``):
the page is where a reader learns what crosses the seam between broker and cluster, so it may
not name fewer than the code has."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def members(protocol: str) -> set[str]:
    tree = ast.parse((ROOT / "hive_core" / "broker" / "_ports.py").read_text(encoding="utf-8"))
    [node] = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == protocol]
    names = {n.name for n in node.body
             if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)
             and not n.name.startswith("_")}
    names |= {n.target.id for n in node.body
              if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)}
    return names


def listed(protocol: str) -> set[str]:
    doc = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    match = re.search(rf"^- `{protocol}` \(.*?(?=^- |\Z)", doc, re.MULTILINE | re.DOTALL)
    assert match, f"docs/architecture.md has no bullet for {protocol}"
    return set(re.findall(r"`(\w+)", match[0])) - {protocol}


@pytest.mark.parametrize("protocol", ["ClusterPort", "BrokerPort"])
def test_the_architecture_page_names_every_member_of_the_port(protocol: str) -> None:
    assert members(protocol) - listed(protocol) == set()
