"""The extension guide documents every hook (model: datasette's hooks-are-documented test)."""

from __future__ import annotations

import ast
import dataclasses
import importlib
import inspect
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import hive_ext_api
from hive_ext_api import hookspecs

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "extensions.md"


def _hookspec_names() -> list[str]:
    return sorted(name for name, value in vars(hookspecs).items()
                  if name.startswith("hive_") and inspect.isfunction(value))


def _documented(name: str, text: str) -> bool:
    return re.search(rf"`{re.escape(name)}\(", text) is not None


def test_there_are_hookspecs() -> None:
    assert len(_hookspec_names()) >= 19


@pytest.mark.parametrize("name", _hookspec_names())
def test_hook_is_documented(name: str) -> None:
    assert _documented(name, GUIDE.read_text()), f"{name} is missing from {GUIDE.name}"


@pytest.mark.parametrize("name", _hookspec_names())
def test_hook_has_a_docstring(name: str) -> None:
    doc = inspect.getdoc(getattr(hookspecs, name))
    assert doc and len(doc) > 20, f"{name} has no docstring"


def test_every_hookspec_is_marked() -> None:
    for name in _hookspec_names():
        assert hasattr(getattr(hookspecs, name), "hive_spec"), f"{name} is not a @hookspec"


def test_check_fails_on_a_missing_hook() -> None:
    text = GUIDE.read_text().replace("`hive_intercept_unsubscribe(", "`something_else(")
    assert not _documented("hive_intercept_unsubscribe", text)
    assert _documented("hive_intercept_subscribe", text)


# ---------------------------------------------------------------------------- the guide's code


def _python_blocks(text: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", text, re.DOTALL)


def _block_after(text: str, caption: str) -> str:
    """The fenced block right after the line naming a file (`` `tests/test_x.py`: ``)."""
    found = re.search(rf"`{re.escape(caption)}`:\n\n```\w*\n(.*?)```", text, re.DOTALL)
    assert found, f"no code block after `{caption}` in {GUIDE.name}"
    return found.group(1)


def test_every_import_of_the_api_in_the_guide_works() -> None:
    imports = []
    for block in _python_blocks(GUIDE.read_text()):
        for node in ast.walk(ast.parse(block)):
            if isinstance(node, ast.ImportFrom | ast.Import):
                names = [node.module or ""] if isinstance(node, ast.ImportFrom) else [
                    a.name for a in node.names]
                if any(n.split(".")[0] == "hive_ext_api" for n in names):
                    imports.append(ast.unparse(node))
    assert imports, "the guide imports nothing from hive_ext_api"
    for statement in imports:
        exec(statement, {})  # raises ImportError when the guide is wrong


def test_every_dotted_api_name_in_the_guide_resolves() -> None:
    names = set(re.findall(r"hive_ext_api(?:\.\w+)+", GUIDE.read_text()))
    assert "hive_ext_api.hookspecs" in names
    for dotted in sorted(names):
        parts = dotted.split(".")
        target: object = importlib.import_module(parts[0])
        for depth, part in enumerate(parts[1:], start=2):
            try:
                target = getattr(target, part)
            except AttributeError:
                target = importlib.import_module(".".join(parts[:depth]))
    import hive_ext_api.hookspecs as as_written  # the module itself, as `import` spells it

    assert as_written is hookspecs


def _api_dataclasses() -> list[type]:
    return [value for name in hive_ext_api.__all__
            if dataclasses.is_dataclass(value := getattr(hive_ext_api, name))
            and isinstance(value, type)]


@pytest.mark.parametrize("kind", _api_dataclasses(), ids=lambda kind: kind.__name__)
def test_every_field_of_the_data_types_is_documented(kind: type) -> None:
    text = GUIDE.read_text()
    section = text[text.index("## Data types"):]
    section = section[:section.index("\n## ", 1)]
    at = section.find(f"`{kind.__name__}`")
    assert at >= 0, f"{kind.__name__} is missing from the data types of {GUIDE.name}"
    missing = [f.name for f in dataclasses.fields(kind) if f"`{f.name}`" not in section[at:]]
    assert not missing, f"fields of {kind.__name__} not documented: {missing}"


def test_the_guides_extension_passes_the_guides_tests(tmp_path: Path) -> None:
    """The package of sections 1 to 3, as the guide writes it, with its tests run by pytest."""
    text = GUIDE.read_text()
    package = tmp_path / "src" / "hive_ext_gatekeeper"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(_block_after(text, "src/hive_ext_gatekeeper/__init__.py"))
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_gatekeeper.py").write_text(
        _block_after(text, "tests/test_gatekeeper.py"))
    environment = {**os.environ, "PYTHONPATH": str(tmp_path / "src")}
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "-p", "no:xdist", "tests"], cwd=tmp_path, env=environment,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert re.search(r"\b3 passed\b", done.stdout), done.stdout
