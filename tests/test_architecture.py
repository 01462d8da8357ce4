"""The package's shape, checked from its source (ARCHITECTURE.md states the same rules).

- no import cycle between qkvcli's modules, counting imports inside functions and
  under ``TYPE_CHECKING`` (a cycle hidden in a function is still a cycle);
- no module over 300 lines;
- no ``_private`` name imported from another module;
- each layer imports only the layers ARCHITECTURE.md allows it.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "qkvcli"
MAX_LINES = 300

# What each folder may import (besides itself). The top-level package and ``__main__``
# are the public face and may name anything.
ALLOWED: dict[str, set[str]] = {
    "core": set(),
    "fixtures": {"core"},
    "gradcheck": {"core"},
    "checks": {"core", "fixtures", "gradcheck"},
    "attention": {"core", "fixtures", "gradcheck", "checks"},
    "learn": {"core", "fixtures", "checks", "attention"},
    "authoring": {"core", "fixtures"},
    "conformance": {"core", "fixtures", "gradcheck"},
    "render": {"core", "fixtures", "gradcheck", "checks", "attention", "learn", "conformance"},
    "cli": {"core", "fixtures", "gradcheck", "checks", "attention", "learn", "authoring",
            "conformance", "render", "data"},
    "data": set(),
}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def resolve(importer: str, node: ast.ImportFrom) -> str:
    if node.level == 0:
        return node.module or ""
    package = importer.split(".")
    if not MODULES[importer].name == "__init__.py":
        package = package[:-1]
    base = package[: len(package) - (node.level - 1)]
    return ".".join([*base, node.module] if node.module else base)


def imports_of(name: str) -> list[tuple[str, str, int]]:
    """(imported module, imported name or "", line) for every import in a module."""
    tree = ast.parse(MODULES[name].read_text(encoding="utf-8"))
    found: list[tuple[str, str, int]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(alias.name, "", node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            module = resolve(name, node)
            for alias in node.names:
                submodule = f"{module}.{alias.name}"
                if submodule in MODULES:
                    found.append((submodule, "", node.lineno))
                else:
                    found.append((module, alias.name, node.lineno))
    return [item for item in found if item[0] == "qkvcli" or item[0].startswith("qkvcli.")]


def graph() -> dict[str, set[str]]:
    edges: dict[str, set[str]] = {}
    for name in MODULES:
        targets = set()
        for module, _, _ in imports_of(name):
            while module not in MODULES and "." in module:
                module = module.rsplit(".", 1)[0]
            if module != name and module != "qkvcli":
                targets.add(module)
        edges[name] = targets
    return edges


def find_cycle(edges: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for target in sorted(edges.get(node, ())):
            if state.get(target) == 1:
                return [*stack[stack.index(target):], target]
            if target not in state:
                cycle = visit(target)
                if cycle:
                    return cycle
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(edges):
        if node not in state:
            cycle = visit(node)
            if cycle:
                return cycle
    return None


def test_no_import_cycle() -> None:
    assert find_cycle(graph()) is None


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


@pytest.mark.parametrize("name", sorted(MODULES), ids=str)
def test_module_is_small(name: str) -> None:
    lines = len(MODULES[name].read_text(encoding="utf-8").splitlines())
    assert lines <= MAX_LINES, f"{name} has {lines} lines"


def test_no_private_name_crosses_modules() -> None:
    crossing = [
        f"{name}:{line} imports {module}.{imported}"
        for name in MODULES
        for module, imported, line in imports_of(name)
        if imported.startswith("_") and not imported.startswith("__") and module != name
    ]
    assert crossing == []


def test_layers_import_only_what_they_may() -> None:
    wrong = []
    for name in MODULES:
        parts = name.split(".")
        if len(parts) < 3:  # qkvcli, qkvcli.__main__ and the layer packages' own __init__
            if len(parts) < 2 or parts[1] not in ALLOWED:
                continue
        layer = parts[1]
        for module, _, line in imports_of(name):
            target = module.split(".")
            if len(target) < 2 or target[1] == layer:
                continue
            if target[1] == "__version__" or (len(target) == 2 and target[1] not in ALLOWED):
                continue  # ``from qkvcli import __version__``
            if target[1] not in ALLOWED[layer]:
                wrong.append(f"{name}:{line} imports {module}")
    assert wrong == []
