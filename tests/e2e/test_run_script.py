"""scripts/run.sh sets up only when it must, and quietly (issue 9: it reinstalled Hive and printed
60 lines of pip on every start).

The script runs in a copy of the repository's layout whose scripts/setup.sh and .venv/bin/hive
stand in for the real ones (they note that they ran), so the project's own .venv is never
touched while other tests use it. The last test runs the real script against the real .venv,
which scripts/setup.sh has stamped.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from pathlib import Path

import pytest
from conftest import free_port, render_config

pytestmark = pytest.mark.timeout(60)

ROOT = Path(__file__).resolve().parents[2]
SETUP = """#!/usr/bin/env bash
set -e
echo "pip: Collecting lots of things ..."
echo setup >> calls.txt
[ "${FAIL_SETUP:-}" = 1 ] && { echo "pip: ERROR: no such package" >&2; exit 1; }
mkdir -p .venv/bin
printf '#!/usr/bin/env bash\\necho "hive $*"\\necho hive >> calls.txt\\n' > .venv/bin/hive
chmod +x .venv/bin/hive
sha256sum pyproject.toml > .venv/.hive-setup-stamp
"""


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    (tmp_path / "scripts").mkdir()
    shutil.copy(ROOT / "scripts" / "run.sh", tmp_path / "scripts" / "run.sh")
    (tmp_path / "scripts" / "setup.sh").write_text(SETUP)
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "hive-broker"\n')
    return tmp_path


def run(tree: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", str(tree / "scripts" / "run.sh"), *args], cwd=tree / "..",
                          capture_output=True, text=True, timeout=30, env={**os.environ, **env})


def calls(tree: Path) -> list[str]:
    path = tree / "calls.txt"
    return path.read_text().split() if path.exists() else []


def test_the_first_start_sets_up_quietly_then_runs(tree: Path) -> None:
    done = run(tree, "--data-dir", "d")
    assert done.returncode == 0, done.stderr
    assert calls(tree) == ["setup", "hive"]
    assert done.stdout == "hive run --data-dir d\n"  # no pip output
    assert "pip" not in done.stderr and "setting Hive up" in done.stderr


def test_later_starts_do_not_set_up_again(tree: Path) -> None:
    run(tree)
    again = run(tree, "--config", "c.xml")
    assert calls(tree) == ["setup", "hive", "hive"]
    assert again.stdout == "hive run --config c.xml\n" and again.stderr == ""


def test_a_changed_pyproject_sets_up_again(tree: Path) -> None:
    run(tree)
    with (tree / "pyproject.toml").open("a") as project:
        project.write('dependencies = ["something-new"]\n')
    run(tree)
    assert calls(tree) == ["setup", "hive", "setup", "hive"]


def test_a_failed_setup_shows_its_output_and_stops(tree: Path) -> None:
    done = run(tree, FAIL_SETUP="1")
    assert done.returncode == 1
    assert "pip: ERROR: no such package" in done.stderr
    assert "scripts/setup.sh failed" in done.stderr
    assert calls(tree) == ["setup"]


def test_the_real_script_starts_the_real_node_without_pip(tmp_path: Path) -> None:
    assert (ROOT / ".venv" / ".hive-setup-stamp").is_file(), "scripts/setup.sh stamps .venv"
    config = tmp_path / "config.xml"
    config.write_text(render_config(free_port()))
    proc = subprocess.Popen(["bash", str(ROOT / "scripts" / "run.sh"), "--config", str(config),
                             "--data-dir", str(tmp_path / "data")], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    try:
        assert proc.stdout is not None
        lines = []
        for line in proc.stdout:
            lines.append(line)
            if "Started Hive in" in line:
                break
        assert any("Started Hive in" in line for line in lines), "".join(lines)
        assert not any("pip" in line or "setting Hive up" in line for line in lines), lines
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGTERM)  # exec: the PID is the node's
        proc.wait(15)
