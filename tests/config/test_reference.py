"""docs/configuration.md is what the models say: regenerate it with
``hive config reference --out docs/configuration.md`` when a model changes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from hive_core.config import reference_markdown

ROOT = Path(__file__).resolve().parents[2]
REFERENCE = ROOT / "docs" / "configuration.md"


def test_the_committed_reference_is_what_the_models_generate() -> None:
    assert REFERENCE.read_text() == reference_markdown(), (
        "docs/configuration.md differs from the config models: run "
        "`hive config reference --out docs/configuration.md` and commit it")


def test_every_value_element_is_in_it_with_its_default() -> None:
    from config.test_every_field import _value_fields

    text = reference_markdown()
    for field, path in _value_fields().items():
        relative = path.removeprefix("hivemq/")
        assert f"`{relative}" in text.replace("[]", ""), f"{field} ({relative}) is missing"
    assert "| `mqtt/packets/max-packet-size` | an integer between 1 and 268435460 | 268435460 |" \
        in text
    assert "| `restrictions/incoming-bandwidth-throttling` | a non-negative integer | 0 |" in text


def test_the_command_writes_the_same(tmp_path: Path) -> None:
    out = tmp_path / "configuration.md"
    done = subprocess.run([sys.executable, "-m", "hive_core.cli", "config", "reference",
                           "--out", str(out)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert out.read_text() == reference_markdown()
    printed = subprocess.run([sys.executable, "-m", "hive_core.cli", "config", "reference"],
                             capture_output=True, text=True, timeout=60)
    assert printed.stdout == reference_markdown()


def test_the_readme_links_it() -> None:
    assert "(docs/configuration.md)" in (ROOT / "README.md").read_text()
