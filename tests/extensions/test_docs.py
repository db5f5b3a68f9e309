"""The extension guide documents every hook (model: datasette's hooks-are-documented test)."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest

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
