"""The layers of docs/architecture.md, checked from the imports (``TYPE_CHECKING`` ones included).

A failure here means a module imports upward, forms an import loop, or reaches into a private
module of another package. The allow-list of private reaches may only shrink.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CORE = "hive_core"

# Which parts of hive_core a part may import (besides hive_ext_api and itself). A part missing
# here may import nothing of hive_core.
ALLOWED: dict[str, set[str]] = {
    "mqtt": set(),
    "config": set(),
    "certs": {"exit_codes"},
    "exit_codes": set(),
    "persistence": set(),
    "plugins": {"persistence"},
    "broker": {"mqtt", "persistence", "plugins"},
    "net": {"mqtt", "broker", "config"},
    "cluster": {"mqtt", "broker", "net", "plugins", "persistence"},
    "admin": {"config", "broker", "cluster", "net", "plugins", "exit_codes"},
    "node_views": {"mqtt", "broker", "cluster", "plugins"},
    "node": {"mqtt", "broker", "cluster", "net", "config", "persistence", "plugins", "admin",
             "node_views"},
    "cli": {"node", "config", "certs", "plugins", "admin", "cluster", "net", "persistence",
            "broker", "mqtt", "exit_codes"},
    "testing": {"node", "config", "broker"},
}

# The permissions above, counted: a new one is a change of the design (docs/architecture.md
# says which part may use which); raise this with the doc, never to make a test pass.
PERMISSIONS = 46

# module -> private module of another package it imports. May only shrink.
PRIVATE_REACHES: set[tuple[str, str]] = set()

IO_MODULES = {"asyncio", "anyio", "socket", "ssl", "selectors", "uvloop", "trio"}


def _modules(package: str) -> Iterator[tuple[str, Path]]:
    base = ROOT / package
    for path in sorted(base.rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        yield ".".join(parts), path


def _imports(module: str, path: Path, known: set[str] | None = None) -> set[str]:
    """Every module ``module`` imports, as absolute dotted names (relative imports resolved).

    ``from package import name`` counts as an import of ``package.name`` when that is a module
    of ``known``, else of ``package``.
    """
    tree = ast.parse(path.read_text(), str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                target = ".".join([*base, node.module] if node.module else base)
            else:
                target = node.module or ""
            for alias in node.names:
                submodule = f"{target}.{alias.name}"
                found.add(submodule if known is not None and submodule in known else target)
    return found


def _part(module: str) -> str:
    """hive_core.broker._outbox -> broker; hive_core.node -> node."""
    return module.split(".")[1] if module.count(".") >= 1 else ""


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    modules = dict(_modules(CORE)) | dict(_modules("hive_ext_api"))
    edges: dict[str, set[str]] = {}
    for module, path in modules.items():
        targets = set()
        for imported in _imports(module, path, set(modules)):
            # an import names a module, or a name inside one: keep the longest known module
            candidate = imported
            while candidate and candidate not in modules:
                candidate = candidate.rpartition(".")[0]
            if candidate and candidate != module:
                targets.add(candidate)
        edges[module] = targets
    return edges


def test_no_import_loop(graph: dict[str, set[str]]) -> None:
    """Tarjan's strongly connected components: every one must be a single module."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    loops: list[list[str]] = []
    counter = [0]

    def visit(node: str) -> None:
        work = [(node, iter(sorted(graph[node])))]
        index[node] = low[node] = counter[0]
        counter[0] += 1
        stack.append(node)
        on_stack.add(node)
        while work:
            current, children = work[-1]
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter[0]
                    counter[0] += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                    break
                if child in on_stack:
                    low[current] = min(low[current], index[child])
            else:
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[current])
                if low[current] == index[current]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == current:
                            break
                    if len(component) > 1:
                        loops.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    assert not loops, f"import loops: {loops}"


def test_no_layer_imports_upward(graph: dict[str, set[str]]) -> None:
    wrong = []
    for module, targets in graph.items():
        if not module.startswith(CORE + "."):
            continue
        part = _part(module)
        allowed = ALLOWED.get(part, set()) | {part}
        for target in targets:
            if target.startswith(CORE + ".") and _part(target) not in allowed:
                wrong.append(f"{module} -> {target}")
    assert not wrong, "imports against the layers:\n" + "\n".join(sorted(wrong))


def test_the_extension_api_imports_nothing_of_the_core(graph: dict[str, set[str]]) -> None:
    wrong = [f"{m} -> {t}" for m, targets in graph.items() if m.startswith("hive_ext_api")
             for t in targets if t.startswith(CORE)]
    assert not wrong, wrong


def test_no_private_module_of_another_package(graph: dict[str, set[str]]) -> None:
    reaches = set()
    for module, targets in graph.items():
        for target in targets:
            package, _, last = target.rpartition(".")
            private = last.startswith("_") and not last.startswith("__")
            if private and package not in (module, module.rpartition(".")[0]):
                reaches.add((module, target))
    new = reaches - PRIVATE_REACHES
    assert not new, f"private modules of other packages imported: {sorted(new)}"
    gone = PRIVATE_REACHES - reaches
    assert not gone, f"fixed, take them off PRIVATE_REACHES: {sorted(gone)}"


def test_the_codec_does_no_io(graph: dict[str, set[str]]) -> None:
    for module, path in _modules(f"{CORE}/mqtt"):
        imported = {name.split(".")[0] for name in _imports(module, path)}
        assert not imported & IO_MODULES, f"{module} imports {imported & IO_MODULES}"

# The client connection's protocol, sans-IO in h11's sense: the time comes from the broker's
# clocks, and what must wait runs as broker/_steps.py's coroutines, started by the broker.
SANS_IO = ("hive_core.broker._channel", "hive_core.broker._connect", "hive_core.broker._handlers",
           "hive_core.broker._host", "hive_core.broker._inbound")


def test_the_channel_does_no_io_and_reads_no_clock() -> None:
    modules = dict(_modules(CORE))
    for module in SANS_IO:
        imported = {name.split(".")[0] for name in _imports(module, modules[module])}
        assert not imported & (IO_MODULES | {"time"}), \
            f"{module} imports {imported & (IO_MODULES | {'time'})}"


# Extension packages (examples/, extensions/, spark_ext/) importing hive_ext_api only: see
# tests/extensions/test_packages.py.


def test_the_layer_permissions_are_frozen() -> None:
    count = sum(len(allowed) for allowed in ALLOWED.values())
    assert count == PERMISSIONS, (
        f"{count} permissions between parts of hive_core, {PERMISSIONS} recorded: a new one is a "
        "design change (update docs/architecture.md and PERMISSIONS); one fewer, lower the count")
