"""Finding extensions: built-ins, entry points, disabling, API ranges, missing packages, the CLI."""

from __future__ import annotations

import importlib
import importlib.metadata
import os
import subprocess
import sys
import textwrap
import types
import uuid
from pathlib import Path
from typing import Any

import paho.mqtt.client as mqtt
import pytest

from hive_core import __version__ as hive_version
from hive_core.config import parse_config
from hive_core.plugins import BUILTIN_PLUGINS, DISABLED_ENV, ExtensionManager, Extensions
from hive_ext_api import API_VERSION, ENTRY_POINT_GROUP, hookimpl

GOOD_EXTENSION = """
from hive_ext_api import AuthDecision, hookimpl

HIVE_API = ">=1.0,<2"

@hookimpl
def hive_authenticate(connect):
    if connect.username == "blocked":
        return AuthDecision.refuse(0x8A, "blocked by {name}")
    return None
"""


class Distributions:
    """Installed-looking distributions in a folder on sys.path (module + .dist-info)."""

    def __init__(self, folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        self.folder = folder
        self.monkeypatch = monkeypatch
        folder.mkdir(exist_ok=True)
        monkeypatch.syspath_prepend(str(folder))

    def add(self, name: str, source: str, version: str = "1.0") -> str:
        """A distribution ``hive-ext-<name>`` whose entry point ``name`` is a fresh module."""
        module = f"hive_ext_{name}_{uuid.uuid4().hex[:8]}"
        (self.folder / f"{module}.py").write_text(textwrap.dedent(source.format(name=name)))
        info = self.folder / f"hive_ext_{name}-{version}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(
            f"Metadata-Version: 2.1\nName: hive-ext-{name}\nVersion: {version}\n")
        (info / "entry_points.txt").write_text(f"[{ENTRY_POINT_GROUP}]\n{name} = {module}\n")
        self.monkeypatch.delitem(sys.modules, module, raising=False)
        return module


@pytest.fixture
def dists(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Distributions:
    monkeypatch.delenv(DISABLED_ENV, raising=False)
    return Distributions(tmp_path / "site", monkeypatch)


def record(manager: ExtensionManager, name: str) -> Any:
    found = [r for r in manager.records if r.name == name]
    assert len(found) == 1, manager.records
    return found[0]


def test_builtins_are_registered_like_any_extension(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(DISABLED_ENV, raising=False)
    manager = ExtensionManager(discover_installed=False)
    assert [r.name for r in manager.records] == [m.rsplit(".", 1)[-1] for m in BUILTIN_PLUGINS]
    persistence = record(manager, "file_persistence")
    assert persistence.active and persistence.source == "built-in"
    assert persistence.version == hive_version
    assert manager.pm.get_plugin("file_persistence") is not None
    assert Extensions(manager)._impls["hive_session_store"]


def test_builtin_can_be_disabled(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(DISABLED_ENV, raising=False)
    manager = ExtensionManager(["file_persistence"], discover_installed=False)
    persistence = record(manager, "file_persistence")
    assert not persistence.active and "disabled" in persistence.reason
    assert manager.pm.get_plugin("file_persistence") is None


def test_entry_point_extension_is_discovered_with_its_version(dists: Distributions) -> None:
    module = dists.add("demo", GOOD_EXTENSION, version="1.0")
    manager = ExtensionManager()
    demo = record(manager, "demo")
    assert demo.active, demo.reason
    assert demo.version == "1.0"
    assert demo.source == module
    assert manager.pm.get_plugin("demo") is not None
    assert Extensions(manager).authenticates


def test_disabled_by_name_in_config(dists: Distributions) -> None:
    dists.add("demo", GOOD_EXTENSION)
    dists.add("other", GOOD_EXTENSION)
    config = parse_config("<hivemq><extensions><disabled><extension>demo</extension>"
                          "</disabled></extensions></hivemq>")
    manager = ExtensionManager(config.extensions.disabled)
    demo = record(manager, "demo")
    assert not demo.active and demo.reason == "disabled by the operator"
    assert manager.pm.get_plugin("demo") is None
    assert record(manager, "other").active


def test_disabled_by_environment(dists: Distributions, monkeypatch: pytest.MonkeyPatch) -> None:
    dists.add("demo", GOOD_EXTENSION)
    dists.add("other", GOOD_EXTENSION)
    dists.add("third", GOOD_EXTENSION)
    monkeypatch.setenv(DISABLED_ENV, " demo , other,")
    manager = ExtensionManager()
    assert not record(manager, "demo").active
    assert not record(manager, "other").active
    assert record(manager, "third").active
    assert not Extensions(ExtensionManager(["third"])).authenticates


def test_directly_registered_extension_can_be_disabled(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(DISABLED_ENV, "mine")
    manager = ExtensionManager(builtins=(), discover_installed=False)
    assert not manager.register("mine", object()).active


def test_incompatible_api_range_is_refused_naming_both_versions(dists: Distributions) -> None:
    dists.add("future", GOOD_EXTENSION.replace('">=1.0,<2"', '">=2.0,<3"'))
    manager = ExtensionManager()
    future = record(manager, "future")
    assert not future.active
    assert ">=2.0,<3" in future.reason and f"extension API {API_VERSION}" in future.reason
    assert manager.pm.get_plugin("future") is None


def test_invalid_api_range_is_refused(dists: Distributions) -> None:
    dists.add("sloppy", GOOD_EXTENSION.replace('">=1.0,<2"', '"version one"'))
    sloppy = record(ExtensionManager(), "sloppy")
    assert not sloppy.active and "version one" in sloppy.reason


def test_missing_package_is_named(dists: Distributions) -> None:
    dists.add("needy", "import hive_missing_dependency_xyz.sub\n" + GOOD_EXTENSION)
    needy = record(ExtensionManager(), "needy")
    assert not needy.active
    assert "pip install hive_missing_dependency_xyz" in needy.reason



def test_a_name_newer_than_this_api_says_hive_is_too_old(dists: Distributions) -> None:
    # An extension built for a later API imports a name this Hive lacks: its HIVE_API is never
    # read, so the import error itself must say what is wrong (not "pip install hive_ext_api").
    dists.add("ahead", "from hive_ext_api import SomethingFromTheFuture\n" + GOOD_EXTENSION)
    ahead = record(ExtensionManager(), "ahead")
    assert not ahead.active
    assert "needs a newer Hive extension API" in ahead.reason
    assert f"provides ({API_VERSION})" in ahead.reason and "SomethingFromTheFuture" in ahead.reason
    assert "pip install" not in ahead.reason

def test_extension_that_fails_to_import_is_refused(dists: Distributions) -> None:
    dists.add("broken", "raise RuntimeError('not today')\n")
    dists.add("demo", GOOD_EXTENSION)
    manager = ExtensionManager()
    broken = record(manager, "broken")
    assert not broken.active and "not today" in broken.reason
    assert record(manager, "demo").active


def test_extension_with_an_unknown_hook_is_refused(dists: Distributions) -> None:
    dists.add("typo", "from hive_ext_api import hookimpl\n\n"
                      "@hookimpl\ndef hive_authenticat(connect):\n    return None\n")
    typo = record(ExtensionManager(), "typo")
    assert not typo.active and "hive_authenticat" in typo.reason


def test_installed_extension_runs_in_a_node(dists: Distributions, hive_node_factory: Any) -> None:
    dists.add("demo", GOOD_EXTENSION)
    node = hive_node_factory(load_installed=True)
    assert record(node.extensions.manager, "demo").active
    client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id="c1",
                         protocol=mqtt.MQTTv5)
    client.username_pw_set("blocked", "x")
    result: list[Any] = []
    client.on_connect = lambda c, u, f, reason, props: result.append((reason.value, props))
    client.connect(node.host, node.port)
    client.loop_start()
    try:
        for _ in range(100):
            if result:
                break
            __import__("time").sleep(0.05)
    finally:
        client.loop_stop()
    assert result and result[0][0] == 0x8A
    assert result[0][1].ReasonString == "blocked by demo"


def test_node_applies_config_disabled(dists: Distributions, hive_node_factory: Any,
                                      caplog: pytest.LogCaptureFixture) -> None:
    dists.add("demo", GOOD_EXTENSION)
    with caplog.at_level("INFO"):
        node = hive_node_factory(load_installed=True, config_xml=(
            "<extensions><disabled><extension>demo</extension></disabled></extensions>"))
    demo = record(node.extensions.manager, "demo")
    assert not demo.active and demo.reason == "disabled by the operator"
    assert not node.extensions.authenticates
    said = [(r.levelname, r.getMessage()) for r in caplog.records if "demo" in r.getMessage()]
    assert said == [("INFO", "Extension demo is disabled by the operator")]  # once, no WARNING


def test_a_registered_extension_disabled_by_name_says_so_once_at_info(
        hive_node_factory: Any, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setenv(DISABLED_ENV, "demo_module")
    demo = types.ModuleType("demo_module")
    with caplog.at_level("INFO"):
        node = hive_node_factory(extensions=[demo])
    assert not record(node.extensions.manager, "demo_module").active
    said = [(r.levelname, r.getMessage()) for r in caplog.records
            if "demo_module" in r.getMessage()]
    assert said == [("INFO", "Extension demo_module is disabled by the operator")]


def _hive_extensions(folder: Path, *args: str) -> str:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(folder), env.get("PYTHONPATH")]))
    env.pop(DISABLED_ENV, None)
    done = subprocess.run([sys.executable, "-m", "hive_core.cli", "extensions", *args],
                          capture_output=True, text=True, timeout=60, env=env, cwd=folder.parent)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_cli_lists_name_version_active_and_reason(dists: Distributions) -> None:
    demo = dists.add("demo", GOOD_EXTENSION, version="1.0")
    dists.add("future", GOOD_EXTENSION.replace('">=1.0,<2"', '">=2.0,<3"'), version="3.1")
    dists.add("needy", "import hive_missing_dependency_xyz\n", version="0.2")
    output = _hive_extensions(dists.folder)
    assert f"extension API {API_VERSION}" in output.splitlines()[0]
    rows = {line.split()[0]: line for line in output.splitlines()[2:] if line.strip()}
    assert rows["demo"].split()[:3] == ["demo", "1.0", "yes"]
    assert demo in rows["demo"]
    assert rows["future"].split()[:3] == ["future", "3.1", "no"]
    assert ">=2.0,<3" in rows["future"] and API_VERSION in rows["future"]
    assert rows["needy"].split()[2] == "no"
    assert "pip install hive_missing_dependency_xyz" in rows["needy"]
    assert rows["file_persistence"].split()[2] == "yes"


def test_cli_applies_config_disabled(dists: Distributions, tmp_path: Path) -> None:
    dists.add("demo", GOOD_EXTENSION)
    config = tmp_path / "config.xml"
    config.write_text("<hivemq><extensions><disabled><extension>demo</extension></disabled>"
                      "</extensions></hivemq>")
    output = _hive_extensions(dists.folder, "--config", str(config))
    row = next(line for line in output.splitlines() if line.startswith("demo "))
    assert row.split()[2] == "no" and "disabled by the operator" in row


def test_hook_wrappers_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    from hive_ext_api import hookimpl

    monkeypatch.delenv(DISABLED_ENV, raising=False)

    class Wrapper:
        @hookimpl(wrapper=True)
        def hive_authenticate(self) -> Any:
            return (yield)

    manager = ExtensionManager(builtins=(), discover_installed=False)
    wrapped = manager.register("wrapper", Wrapper())
    assert not wrapped.active and "hive_authenticate" in wrapped.reason
    assert not Extensions(manager).authenticates


def test_a_taken_name_is_refused_not_fatal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(DISABLED_ENV, raising=False)
    manager = ExtensionManager(builtins=(), discover_installed=False)
    assert manager.register("same", object()).active
    second = manager.register("same", object())
    assert not second.active and "same" in second.reason


def test_registered_object_declaring_another_api_is_refused(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(DISABLED_ENV, raising=False)

    class Future:
        HIVE_API = ">=9"

    manager = ExtensionManager(builtins=(), discover_installed=False)
    future = manager.register("future", Future())
    assert not future.active and ">=9" in future.reason and API_VERSION in future.reason


def test_a_second_registration_of_one_extension_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 9: it said "does not fit the hookspecs: Plugin already registered ..."."""
    monkeypatch.delenv(DISABLED_ENV, raising=False)
    module = types.ModuleType("gatekeeper")
    module.hive_authenticate = hookimpl(lambda connect: None)  # type: ignore[attr-defined]
    manager = ExtensionManager(builtins=(), discover_installed=False)
    assert manager.register("gatekeeper", module).active
    again = manager.register("gatekeeper-2", module)
    assert not again.active
    assert again.reason == ("extension gatekeeper-2 is already registered as gatekeeper: each "
                            "extension is loaded once")
    assert "hookspecs" not in again.reason
    assert len(manager.pm.hook.hive_authenticate.get_hookimpls()) == 1


def test_an_installed_extension_given_again_with_extension_says_so(
        dists: Distributions, hive_node_factory: Any) -> None:
    module_name = dists.add("twice", GOOD_EXTENSION, version="3.1")
    module = importlib.import_module(module_name)
    node = hive_node_factory(extensions=[module], load_installed=True)
    installed = [r for r in node.extensions.manager.records if r.name == "twice"]
    again = [r for r in node.extensions.manager.records if r.name == module_name]
    assert installed[0].active and installed[0].version == "3.1"
    assert not again[0].active
    assert again[0].reason == (f"extension {module_name} is already registered as twice: each "
                               "extension is loaded once")


def test_a_module_registered_directly_has_a_version(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(DISABLED_ENV, raising=False)
    manager = ExtensionManager(builtins=(), discover_installed=False)
    plain = types.ModuleType("plain")
    versioned = types.ModuleType("versioned")
    versioned.__version__ = "4.2"  # type: ignore[attr-defined]
    assert manager.register("plain", plain).version == "unknown"
    assert manager.register("versioned", versioned).version == "4.2"
    # a module of an installed distribution without __version__: the distribution's version
    assert manager.register("pluggy", importlib.import_module("pluggy._hooks")).version == \
        importlib.metadata.version("pluggy")
