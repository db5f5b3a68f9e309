"""The tests of a discovery extension's settings file, run without a node.

A test module subclasses :class:`SettingsFileContract`, names the package and its README, and
says one settings file the extension refuses; the package exports ``NAME``, ``create_plugin``,
``CONFIG_ENV``, ``CONFIG_FILE_NAME``, ``KEYS`` (the keys the file may have) and
``settings_from(settings, source)`` (checked settings from ``parse_properties``), as Hive's S3 and
Consul discovery do. ``settings(text)`` and ``readme_example()`` serve the module's own tests.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Any, ClassVar

import pytest

from hive_ext_api import ExtensionContext, ExtensionRefused, parse_properties


class SettingsFileContract:
    """The tests (see the module docstring); the subclass sets the class attributes."""

    MODULE: ClassVar[Any] = None
    """The package, as its entry point loads it."""
    README: ClassVar[Path | None] = None
    """Its README: it documents every key (in backquotes) and has a ```properties example."""
    REFUSED: ClassVar[tuple[str, str]] = ("", "")
    """A settings file's text the extension refuses to start with, and a pattern of the
    refusal's words."""
    IN_THE_FOLDER: ClassVar[str | None] = None
    """The text of a settings file in the extension's data folder that the extension refuses, or
    None where no file there is refused (a missing file is not always wrong)."""

    @classmethod
    def settings(cls, text: str) -> Any:
        """The settings of a settings file's ``text``, as the extension reads them."""
        name = cls.MODULE.CONFIG_FILE_NAME
        return cls.MODULE.settings_from(parse_properties(text, name, cls.MODULE.KEYS), name)

    @classmethod
    def readme_example(cls) -> str:
        """The README's ```properties example."""
        assert cls.README is not None
        found = re.search(r"```properties\n(.*?)```", cls.README.read_text(), re.DOTALL)
        assert found, f"{cls.README.name} has no ```properties example"
        return found.group(1)

    def context(self, tmp_path: Path) -> ExtensionContext:
        """What the extension gets at start, without a node (its data folder under
        ``tmp_path``)."""
        return ExtensionContext(name=self.MODULE.NAME, data_dir=tmp_path / "ext",
                                services=None,  # type: ignore[arg-type]
                                log=logging.getLogger("test"))

    def test_every_key_is_in_the_readme(self) -> None:
        assert self.README is not None
        text = self.README.read_text()
        missing = [key for key in self.MODULE.KEYS if f"`{key}`" not in text]
        assert not missing, f"{self.README.name} does not document {missing}"

    def test_the_extension_refuses_to_start_naming_the_setting(
            self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        text, refusal = self.REFUSED
        path = tmp_path / "elsewhere.properties"
        path.write_text(text)
        monkeypatch.setenv(self.MODULE.CONFIG_ENV, str(path))
        with pytest.raises(ExtensionRefused, match=refusal):
            self.MODULE.create_plugin().hive_extension_start(self.context(tmp_path))

    def test_without_the_variable_the_file_is_in_the_extension_folder(
            self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.delenv(self.MODULE.CONFIG_ENV, raising=False)
        context = self.context(tmp_path)
        path = context.data_dir / self.MODULE.CONFIG_FILE_NAME
        if self.IN_THE_FOLDER is not None:
            context.data_dir.mkdir()
            path.write_text(self.IN_THE_FOLDER)
        with pytest.raises(ExtensionRefused, match=re.escape(str(path))):
            self.MODULE.create_plugin().hive_extension_start(context)
