"""``hive run --extension``: an extension that is not installed, by module name or by path.

Accepted: an importable module name (``my_ext``, ``pkg.my_ext``), the path of a ``.py`` file
(``./my_ext.py``), or the path of a package folder holding ``__init__.py`` (``./my_ext/``).
Anything else is refused with a :class:`LocalExtensionError` saying what is accepted.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import traceback
from importlib.metadata import packages_distributions, version
from pathlib import Path
from types import ModuleType

__all__ = ["ACCEPTED", "LocalExtensionError", "import_local_extension", "module_version"]

ACCEPTED = ("an importable module name (my_ext, pkg.my_ext), the path of a .py file "
            "(./my_ext.py) or of a package folder with an __init__.py (./my_ext/)")


class LocalExtensionError(Exception):
    """The extension given could not be loaded; the message says why and what is accepted."""


def _looks_like_a_path(target: str) -> bool:
    return target.endswith(".py") or "/" in target or "\\" in target or Path(target).is_dir()


def _where(exc: BaseException) -> str:
    """``file.py, line 3: NameError: x`` for an error raised while the module ran."""
    frames = traceback.extract_tb(exc.__traceback__)
    if isinstance(exc, SyntaxError):
        return f"{exc.filename}, line {exc.lineno}: SyntaxError: {exc.msg}"
    own = [f for f in frames if "importlib" not in f.filename] or frames
    if not own:
        return f"{type(exc).__name__}: {exc}"
    return f"{own[-1].filename}, line {own[-1].lineno}: {type(exc).__name__}: {exc}"


def _from_path(target: str) -> ModuleType:
    path = Path(target).expanduser().resolve()
    if path.is_dir():
        init = path / "__init__.py"
        if not init.is_file():
            raise LocalExtensionError(f"{target} is a folder without __init__.py; give "
                                      f"{ACCEPTED}")
        name, file, search = path.name, init, [str(path)]
    elif path.suffix == ".py" and path.is_file():
        name, file, search = path.stem, path, None
    elif path.suffix == ".py":
        raise LocalExtensionError(f"{target}: no such file")
    else:
        raise LocalExtensionError(f"{target} is neither a .py file nor a package folder; give "
                                  f"{ACCEPTED}")
    if not name.isidentifier():
        raise LocalExtensionError(f"{target}: {name!r} is not a valid module name; rename it")
    if name in sys.modules:
        raise LocalExtensionError(f"{target}: a module named {name!r} is already imported "
                                  f"({getattr(sys.modules[name], '__file__', 'built in')}); "
                                  "rename the file")
    spec = importlib.util.spec_from_file_location(name, file,
                                                  submodule_search_locations=search)
    if spec is None or spec.loader is None:
        raise LocalExtensionError(f"{target}: cannot be loaded as a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # as an import would: dataclasses and pickle look it up
    try:
        spec.loader.exec_module(module)
    except ImportError as exc:
        del sys.modules[name]
        missing = f" (pip install {exc.name.split('.')[0]})" if exc.name else ""
        raise LocalExtensionError(f"{target}: {exc}{missing}") from exc
    except Exception as exc:
        del sys.modules[name]
        raise LocalExtensionError(f"{target} failed while loading: {_where(exc)}") from exc
    return module


def import_local_extension(target: str) -> ModuleType:
    """The module ``target`` names (see the module docstring), imported."""
    if _looks_like_a_path(target):
        return _from_path(target)
    try:
        return importlib.import_module(target)
    except ModuleNotFoundError as exc:
        if exc.name is not None and (target == exc.name or target.startswith(exc.name + ".")):
            raise LocalExtensionError(f"no module named {exc.name!r} on the Python path; give "
                                      f"{ACCEPTED}") from exc
        raise LocalExtensionError(f"{target} needs the Python package {exc.name!r} (pip "
                                  f"install {(exc.name or '').split('.')[0]})") from exc
    except (ImportError, ValueError, TypeError) as exc:  # "relative import" and the like
        raise LocalExtensionError(f"{target}: {exc}; give {ACCEPTED}") from exc
    except Exception as exc:
        raise LocalExtensionError(f"{target} failed while loading: {_where(exc)}") from exc


def module_version(module: ModuleType) -> str:
    """``__version__``, else the version of the installed distribution holding the module,
    else "unknown"."""
    declared = getattr(module, "__version__", None)
    if declared:
        return str(declared)
    top = module.__name__.split(".")[0]
    for distribution in packages_distributions().get(top, []):
        try:
            return version(distribution)
        except Exception:  # a broken installation: no version to tell
            continue
    return "unknown"
