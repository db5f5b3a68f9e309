"""Every public name of ``hive_ext_api`` (its ``__all__``) and every public method or property
of its classes says what it is: the docstrings are the extension guide's reference."""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any

import hive_ext_api


def _doc(obj: Any) -> str:
    return (inspect.getdoc(obj) or "").strip()


def undocumented() -> list[str]:
    missing = []
    for name in hive_ext_api.__all__:
        obj = getattr(hive_ext_api, name)
        if not (inspect.isclass(obj) or inspect.isfunction(obj)):
            continue  # constants and version strings
        own = obj.__doc__ or ""
        # a dataclass without a docstring gets its signature as one
        if not own.strip() or (inspect.isclass(obj) and own.startswith(f"{obj.__name__}(")):
            missing.append(name)
        if not inspect.isclass(obj):
            continue
        for attr, member in vars(obj).items():
            if attr.startswith("_"):
                continue
            if isinstance(member, property):
                member = member.fget
            elif isinstance(member, staticmethod | classmethod):
                member = member.__func__
            elif not inspect.isfunction(member):
                continue
            if not (member.__doc__ or "").strip():
                missing.append(f"{name}.{attr}")
    return missing


def test_every_public_name_of_the_extension_api_has_a_docstring() -> None:
    assert undocumented() == []


def test_the_extension_guide_names_every_error_an_extension_raises() -> None:
    guide = (Path(__file__).resolve().parent.parent / "docs" / "extensions.md").read_text(
        encoding="utf-8")
    errors = [name for name in hive_ext_api.__all__
              if inspect.isclass(getattr(hive_ext_api, name))
              and issubclass(getattr(hive_ext_api, name), Exception)]
    assert errors, "hive_ext_api exports no error types"
    assert [name for name in errors if f"`hive_ext_api.{name}`" not in guide
            and f"`{name}`" not in guide] == []
