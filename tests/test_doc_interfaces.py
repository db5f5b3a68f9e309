"""docs/architecture.md lists every member of the broker's ports and roles
(``broker/_ports.py``): the page is where a reader learns what crosses the seam between broker
and cluster, so it may not name fewer than the code has."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


PORTS = ROOT / "hive_core" / "broker" / "_ports.py"


def protocols() -> list[str]:
    """Every class of the ports module that is a Protocol."""
    tree = ast.parse(PORTS.read_text(encoding="utf-8"))
    return [n.name for n in tree.body if isinstance(n, ast.ClassDef)
            and any(isinstance(b, ast.Name) and b.id == "Protocol" for b in n.bases)]


def members(protocol: str) -> set[str]:
    tree = ast.parse(PORTS.read_text(encoding="utf-8"))
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


def test_the_ports_are_all_found() -> None:
    assert {"ClusterPort", "BrokerPort", "SessionHolder", "ReplicaSource"} <= set(protocols())


@pytest.mark.parametrize("protocol", protocols())
def test_the_architecture_page_names_every_member_of_the_port(protocol: str) -> None:
    assert members(protocol) - listed(protocol) == set()
