"""storage/ has no import cycles, deferred and type-only imports included, and imports nothing
from the layers above it (bot/, handlers/, playground/).

The graph is read from the source (every ``import`` statement, wherever it is: in a function,
under ``if TYPE_CHECKING``), as import-linter and grimp read it."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.support.serve_process import ROOT

STORAGE = Path(ROOT) / "storage"
ABOVE = ("bot", "handlers", "playground", "bench", "tests")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(STORAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def storage_modules() -> dict[str, Path]:
    return {
        module_name(path): path
        for path in STORAGE.rglob("*.py")
        if "migrations" not in path.relative_to(STORAGE).parts
    }


def imported(path: Path, modules: dict[str, Path]) -> set[str]:
    """The modules ``path`` imports: ``from a.b import c`` is ``a.b.c`` when that is a module."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for alias in node.names:
                candidate = f"{node.module}.{alias.name}"
                found.add(candidate if candidate in modules else node.module)
    return found


def test_storage_imports_nothing_above_it() -> None:
    modules = storage_modules()
    upward = {
        (name, target)
        for name, path in modules.items()
        for target in imported(path, modules)
        if target.split(".")[0] in ABOVE
    }
    assert not upward


def test_storage_has_no_import_cycles() -> None:
    modules = storage_modules()
    edges = {name: imported(path, modules) & set(modules) for name, path in modules.items()}
    # Tarjan's strongly connected components: any with two modules or more is a cycle.
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        for target in edges[module]:
            if target not in index:
                visit(target)
                low[module] = min(low[module], low[target])
            elif target in stack:
                low[module] = min(low[module], index[target])
        if low[module] == index[module]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == module:
                    break
            if len(component) > 1 or module in edges[module]:
                cycles.append(sorted(component))

    for module in sorted(modules):
        if module not in index:
            visit(module)
    assert not cycles
