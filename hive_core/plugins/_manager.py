"""Finding, checking and registering extensions: built-ins by module, the rest by entry point."""

from __future__ import annotations

import importlib
import logging
import os
from collections.abc import Iterable
from dataclasses import dataclass
from importlib.metadata import EntryPoint, entry_points
from types import ModuleType
from typing import Any

import pluggy
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import Version

from hive_core import __version__ as hive_version
from hive_core.plugins._local import module_version
from hive_ext_api import API_VERSION, ENTRY_POINT_GROUP, PROJECT_NAME, hookspecs

log = logging.getLogger("hive.extensions")

BUILTIN_PLUGINS: tuple[str, ...] = (
    "hive_core.plugins.file_persistence",
    "hive_core.plugins.static_discovery",
    "hive_core.plugins.multicast_discovery",
    "hive_core.plugins.broadcast_discovery",
    "hive_core.plugins.dns_discovery",
)
"""Hive's own plugins, registered like any installed extension (and disabled the same way)."""

DISABLED_ENV = "HIVE_DISABLED_EXTENSIONS"
DISABLED_BY_OPERATOR = "disabled by the operator"  # the reason of an extension left out by name
"""Comma-separated extension names not to load, on top of <extensions><disabled>."""


@dataclass(slots=True)
class ExtensionRecord:
    """One extension as ``hive extensions`` shows it."""

    name: str
    version: str
    source: str  # "built-in" or the entry point's "module" value
    active: bool
    reason: str = ""  # why it is not active
    module: ModuleType | None = None


class ExtensionLoadError(Exception):
    """An extension could not be imported; the message names what to install when it can."""


def _module_version(module: ModuleType, entry_point: EntryPoint | None) -> str:
    if entry_point is not None and entry_point.dist is not None:
        return entry_point.dist.version
    return str(getattr(module, "__version__", hive_version))


def _api_range_problem(name: str, module: Any) -> str | None:
    """Why this extension's declared API range excludes this Hive, or None when it fits."""
    declared = getattr(module, "HIVE_API", None)
    if declared is None:
        return None
    try:
        accepted = SpecifierSet(str(declared))
    except InvalidSpecifier:
        return f"extension {name} declares HIVE_API {declared!r}, which is not a version range"
    if Version(API_VERSION) in accepted:
        return None
    return (f"extension {name} supports Hive extension API {declared}, but this Hive "
            f"{hive_version} provides extension API {API_VERSION}")


def _import_problem(name: str, exc: ImportError) -> str:
    missing = getattr(exc, "name", None)
    if missing == "hive_ext_api" or str(missing).startswith("hive_ext_api."):
        # a name added to the API after this Hive: its HIVE_API cannot be read before the import
        return (f"extension {name} cannot be loaded: it needs a newer Hive extension API than "
                f"this Hive {hive_version} provides ({API_VERSION}): {exc}")
    if missing:
        return (f"extension {name} cannot be loaded: it needs the Python package {missing!r} "
                f"(pip install {missing.split('.')[0]})")
    return f"extension {name} cannot be loaded: {exc}"


class ExtensionManager:
    """The pluggy manager with Hive's hookspecs, and what was loaded into it and why."""

    def __init__(self, disabled: Iterable[str] = (), builtins: Iterable[str] = BUILTIN_PLUGINS,
                 discover_installed: bool = True) -> None:
        self.pm = pluggy.PluginManager(PROJECT_NAME)
        self.pm.add_hookspecs(hookspecs)
        env = os.environ.get(DISABLED_ENV, "")
        self.disabled = {n.strip() for n in [*disabled, *env.split(",")] if n.strip()}
        self.records: list[ExtensionRecord] = []
        for module_name in builtins:
            self._load(module_name.rsplit(".", 1)[-1], "built-in", module_name, None)
        if discover_installed:
            for entry_point in entry_points(group=ENTRY_POINT_GROUP):
                self._load(entry_point.name, entry_point.value, entry_point.value, entry_point)

    def register(self, name: str, plugin: Any, version: str = "") -> ExtensionRecord:
        """Register a module or object directly (``--extension``, the pytest plugin's fixtures).

        ``version`` defaults to the module's ``__version__``, else the version of the installed
        distribution that holds it, else "unknown".
        """
        if not version:
            version = module_version(plugin) if isinstance(plugin, ModuleType) else str(
                getattr(plugin, "__version__", "") or "unknown")
        if name in self.disabled:
            log.info("Extension %s is disabled by the operator", name)
            record = ExtensionRecord(name, version, "registered", False, DISABLED_BY_OPERATOR)
        else:
            problem = _api_range_problem(name, plugin)
            record = ExtensionRecord(name, version, "registered", problem is None, problem or "",
                                     None)
            if problem is None:
                problem = self._register_checked(name, plugin)
            if problem is not None:
                record.active, record.reason = False, problem
                log.error("%s", problem)
        self.records.append(record)
        return record

    def _register_checked(self, name: str, plugin: Any) -> str | None:
        """Register with pluggy; why not (a name taken, a hook that does not exist), or None."""
        loaded_as = self.pm.get_name(plugin) if self.pm.is_registered(plugin) else next(
            (r.name for r in self.records if r.active and r.module is plugin), None)
        if loaded_as is not None:  # e.g. installed, and also given with --extension
            return (f"extension {name} is already registered as {loaded_as}: each extension "
                    "is loaded once")
        if self.pm.has_plugin(name):
            return (f"an extension named {name} is already registered "
                    f"({self.pm.get_plugin(name)!r}): each extension needs a name of its own")
        try:
            self.pm.register(plugin, name=name)
        except (ValueError, pluggy.PluginValidationError) as exc:
            return f"extension {name} does not fit the hookspecs: {exc}"
        wrappers = sorted(caller.name for caller in self.pm.get_hookcallers(plugin) or ()
                          for impl in caller.get_hookimpls()
                          if impl.plugin is plugin and (impl.wrapper or impl.hookwrapper))
        if wrappers:  # the facade walks the chain itself: there is nothing to wrap
            self.pm.unregister(plugin, name=name)
            return f"extension {name} declares hook wrappers, which Hive does not support: " \
                   f"{', '.join(wrappers)}"
        # pluggy accepts an implementation of an unknown hook (a typo) and never calls it.
        unknown = sorted(caller.name for caller in self.pm.get_hookcallers(plugin) or ()
                         if caller.spec is None and any(
                             not impl.optionalhook for impl in caller.get_hookimpls()
                             if impl.plugin is plugin))
        if unknown:
            self.pm.unregister(plugin, name=name)
            return (f"extension {name} implements {', '.join(unknown)}, which "
                    f"{'is not a Hive hook' if len(unknown) == 1 else 'are not Hive hooks'}")
        return None

    def _load(self, name: str, source: str, target: str, entry_point: EntryPoint | None) -> None:
        if name in self.disabled:
            log.info("Extension %s is disabled by the operator", name)
            self.records.append(ExtensionRecord(name, "", source, False, DISABLED_BY_OPERATOR))
            return
        try:
            loaded = entry_point.load() if entry_point is not None else importlib.import_module(
                target)
        except ImportError as exc:
            reason = _import_problem(name, exc)
            log.error("%s", reason)
            self.records.append(ExtensionRecord(name, "", source, False, reason))
            return
        except Exception as exc:  # a broken extension must not stop the node
            reason = f"extension {name} failed to import: {exc!r}"
            log.exception("%s", reason)
            self.records.append(ExtensionRecord(name, "", source, False, reason))
            return
        module = loaded if isinstance(loaded, ModuleType) else None
        version = _module_version(module, entry_point) if module else hive_version
        problem = _api_range_problem(name, module) if module else None
        factory = getattr(loaded, "create_plugin", None)
        if problem is None and module is not None and callable(factory):
            loaded = factory()  # a plugin with state: one instance per node
        if problem is None:
            problem = self._register_checked(name, loaded)
        if problem is not None:
            log.error("%s", problem)
            self.records.append(ExtensionRecord(name, version, source, False, problem, module))
            return
        self.records.append(ExtensionRecord(name, version, source, True, "", module))

    def deactivate(self, name: str, reason: str) -> None:
        """Take an extension out (it refused to start, say); its hooks are never called again."""
        plugin = self.pm.get_plugin(name)
        if plugin is not None:
            self.pm.unregister(plugin, name=name)
        for record in self.records:
            if record.name == name:
                record.active = False
                record.reason = reason

    def active(self) -> list[ExtensionRecord]:
        return [r for r in self.records if r.active]
