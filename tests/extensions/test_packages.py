"""The repository's extension packages stand on the public API alone, in the shape the guide
gives: examples/*, extensions/* and spark_ext import ``hive_ext_api``, never ``hive_core``
(their tests neither: they use hive-broker's pytest fixtures and the `hive` command)."""

from __future__ import annotations

import ast
import re
import tomllib
from pathlib import Path

import pytest
from packaging.specifiers import SpecifierSet
from packaging.version import Version

from hive_ext_api import API_VERSION

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = sorted(path.parent for pattern in ("examples/*/pyproject.toml",
                                              "extensions/*/pyproject.toml",
                                              "spark_ext/pyproject.toml")
                  for path in ROOT.glob(pattern))
EXTENSIONS = [path for path in PACKAGES if path.parent.name == "extensions"]


def _imported(path: Path) -> set[str]:
    """The top-level modules a Python file imports (absolute imports only)."""
    modules = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            modules.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            modules.add(node.module.split(".")[0])
    return modules


def test_the_packages_are_found() -> None:
    names = {path.name for path in PACKAGES}
    assert {"file-discovery", "hive-ext-s3", "hive-ext-consul"} <= names


def _python_files(package: Path) -> list[Path]:
    """The package's own Python files, whatever its layout (not build output)."""
    return [path for path in package.rglob("*.py")
            if not any(part.startswith(".") or part in ("build", "dist")
                       for part in path.relative_to(package).parts[:-1])]


@pytest.mark.parametrize("package", PACKAGES, ids=lambda path: str(path.relative_to(ROOT)))
def test_a_package_never_imports_the_core(package: Path) -> None:
    files = _python_files(package)
    assert files, f"{package} has no Python files"
    offenders = [str(path.relative_to(ROOT)) for path in files if "hive_core" in _imported(path)]
    assert not offenders, f"these import hive_core, not hive_ext_api: {offenders}"


def test_the_check_sees_an_import_of_the_core(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text("import os\nfrom hive_core.cluster import Cluster\n")
    assert "hive_core" in _imported(sample)


@pytest.mark.parametrize("package", EXTENSIONS, ids=lambda path: path.name)
def test_an_extension_package_has_the_guides_shape(package: Path) -> None:
    project = tomllib.loads((package / "pyproject.toml").read_text())["project"]
    entry_points = project["entry-points"]["hive.extensions"]
    assert entry_points, "no entry point in the group hive.extensions"
    for target in entry_points.values():
        source = package / "src" / re.split(r"[.:]", target)[0]
        assert (source / "py.typed").is_file(), f"{source} has no py.typed"
        declared = re.search(r'^HIVE_API = "(>=1\.\d+,<2)"(  # .*)?$',
                             (source / "__init__.py").read_text(), re.M)
        assert declared, f"{source} declares no HIVE_API of major version 1"
        assert Version(API_VERSION) in SpecifierSet(declared.group(1)), declared.group(1)
    assert (package / "README.md").is_file() and list((package / "tests").glob("test_*.py"))
    assert "hive-broker" in project["dependencies"]
