"""The installed package: its entry point, `hive extensions`, the API boundary, and how a real
node reports settings it cannot run with (and keeps running)."""

from __future__ import annotations

import ast
import re
import subprocess
from importlib.metadata import entry_points, version
from pathlib import Path
from typing import Any

import pytest

import hive_ext_docker
from _testbed import HIVE, loopback_prefix

SOURCE = Path(hive_ext_docker.__file__).parent


def test_installed_under_the_extensions_entry_point() -> None:
    (entry_point,) = entry_points(group="hive.extensions", name="docker-discovery")
    assert entry_point.load() is hive_ext_docker
    assert version("hive-ext-docker") == hive_ext_docker.__version__
    assert (SOURCE / "py.typed").exists()


def test_hive_extensions_lists_it_as_active() -> None:
    listing = subprocess.run([str(HIVE), "extensions"], capture_output=True, text=True,
                             timeout=60, check=True).stdout
    row = next(line.split() for line in listing.splitlines() if line.startswith("docker-discovery"))
    assert row[1:4] == [hive_ext_docker.__version__, "yes", "hive_ext_docker"], listing


def test_imports_the_extension_api_only() -> None:
    for path in SOURCE.glob("*.py"):
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            names = ([alias.name for alias in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            assert not any(n.split(".")[0] == "hive_core" for n in names), f"{path}: {names}"


def test_a_node_with_no_settings_keeps_the_extension_idle_with_one_info_line(
        hive_processes: Any) -> None:
    """Installed beside other discovery extensions and not set up: idle, no ERROR."""
    node = hive_processes.add(host=f"{loopback_prefix()}.10").start()
    assert node.members() == {node.node_id}  # serving, alone
    node.stop()
    lines = [line for line in node.log.splitlines() if "docker-discovery" in line]
    idle = [line for line in lines if "docker-discovery: idle: no settings of its own" in line]
    assert len(idle) == 1 and " INFO " in idle[0], lines
    assert not [line for line in lines if " ERROR " in line or " WARNING " in line], lines


def test_a_node_naming_it_without_settings_refuses_the_extension(hive_processes: Any) -> None:
    node = hive_processes.add(host=f"{loopback_prefix()}.10", discovery_xml=(
        "<discovery><extension><reload-interval>1</reload-interval>"
        "<name>docker-discovery</name></extension></discovery>")).start()
    node.stop()
    assert re.search("Extension docker-discovery refused to start: not configured: no "
                     ".*docker-discovery.properties and no HIVE_DOCKER_DISCOVERY_", node.log), \
        node.log


@pytest.mark.parametrize(("environment", "reason"), [
    ({"HIVE_DOCKER_DISCOVERY_MODE": "engine", "HIVE_DOCKER_DISCOVERY_LABEL": "a",
      "HIVE_DOCKER_DISCOVERY_NETWORK": "n", "HIVE_DOCKER_DISCOVERY_API_TIMEOUT": "10"},
     r"api-timeout='10' \(\$HIVE_DOCKER_DISCOVERY_API_TIMEOUT\): seconds, more than 0 and at "
     "most 4"),
])
def test_a_node_with_bad_settings_refuses_the_extension_and_runs_on(
        hive_processes: Any, environment: dict[str, str], reason: str) -> None:
    node = hive_processes.add(host=f"{loopback_prefix()}.10", env=environment).start()
    assert node.members() == {node.node_id}  # serving, alone
    node.stop()
    assert re.search(f"Extension docker-discovery refused to start: {reason}", node.log), node.log
