"""Extension packages (examples/*, extensions/*, spark_ext) import hive_ext_api, never hive_core.

The extension guide promises that an extension sees only the public API; this holds every
package in the repository to it (tests excluded: they may start nodes with the core's helpers).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = sorted([*ROOT.glob("examples/*/src"), *ROOT.glob("extensions/*/src"),
                   *ROOT.glob("spark_ext/src")])


def imported_modules(path: Path) -> list[tuple[int, str]]:
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.lineno, node.module))
    return found


def test_there_are_packages_to_check() -> None:
    assert any("spark_ext" in str(p) for p in PACKAGES)
    assert any("examples" in str(p) for p in PACKAGES)


@pytest.mark.parametrize("src", PACKAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_extension_package_imports_hive_core(src: Path) -> None:
    offenders = [f"{path.relative_to(ROOT)}:{line} imports {module}"
                 for path in sorted(src.rglob("*.py"))
                 for line, module in imported_modules(path)
                 if module == "hive_core" or module.startswith("hive_core.")]
    assert not offenders, "\n".join(offenders)
