"""The house's layers: every import in `runtime/` points down (CONTRIBUTING's map).

Read from the source with `ast` (nothing is imported), so an import inside a
function or under TYPE_CHECKING counts like any other: it still ties the
modules together.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

RUNTIME = Path(__file__).resolve().parents[2] / "runtime"

# Top to bottom: a module imports only from its own floor or the floors below.
# A unit is a folder of `runtime/` or a module at its top level. The agent
# runs inside the sandbox and imports nothing of the daemon, so it sits at
# the ground floor with the shared constants and errors.
LAYERS: tuple[frozenset[str], ...] = tuple(
    frozenset(floor.split())
    for floor in (
        "__main__ cli integrations",
        "fronts server",
        "core",
        "admin audit network_audit",
        "snapshots",
        "sessions",
        "tools",
        "egress",
        "sandbox",
        "dialects state observability auth",
        "config",
        "policy models cpu secret_store client images",
        "constants errors json_shape clock descriptors queued agent",
    )
)
FLOOR = {unit: level for level, floor in enumerate(LAYERS) for unit in floor}
# Floors a unit must not reach past, though they are below it: the gRPC
# transport converts the domain the session layer answers with (one view of
# a session, live or closed), never the stored records under it.
NOT_REACHED = {"server": {"state"}}
# Only the in-sandbox agent may keep cycles between its files (its loop and
# its operations register with each other).
CYCLES_ALLOWED_UNDER = "runtime.agent"


def module_name(path: Path) -> str:
    parts = path.relative_to(RUNTIME.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(path): path for path in RUNTIME.rglob("*.py") if "_proto" not in path.parts}


def imported_by(module: str, source: str, is_package: bool = False) -> Iterator[str]:
    """The modules of `runtime` that `module` imports (a name imported from a
    package is that package's submodule when there is one)."""
    package = module if is_package else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names if alias.name in MODULES)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            for alias in node.names:
                if f"{base}.{alias.name}" in MODULES:
                    yield f"{base}.{alias.name}"
                elif base in MODULES and base != "runtime":
                    yield base


def unit_of(module: str) -> str:
    return module.split(".")[1] if "." in module else module


GRAPH = {
    module: set(imported_by(module, path.read_text(), path.name == "__init__.py")) - {module}
    for module, path in MODULES.items()
}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in graph.get(node, ()):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_every_unit_of_runtime_has_a_floor():
    units = {unit_of(module) for module in MODULES} - {"runtime"}
    assert units - FLOOR.keys() == set(), "add the new folder or module to LAYERS"
    assert FLOOR.keys() - units == set(), "LAYERS names a unit that is gone"


def test_no_module_imports_from_a_floor_above_it():
    upward = sorted(
        f"{module} -> {target}"
        for module, targets in GRAPH.items()
        for target in targets
        if module != "runtime" and FLOOR.get(unit_of(target), 0) < FLOOR.get(unit_of(module), 0)
    )
    assert not upward, "imports running up the floors:\n" + "\n".join(upward)


def test_the_transport_does_not_reach_past_the_sessions():
    reached = sorted(
        f"{module} -> {target}"
        for module, targets in GRAPH.items()
        for target in targets
        if unit_of(target) in NOT_REACHED.get(unit_of(module), set())
    )
    assert not reached, "\n".join(reached)


def test_the_folders_of_runtime_import_each_other_without_a_cycle():
    folders: dict[str, set[str]] = {}
    for module, targets in GRAPH.items():
        if module == "runtime":
            continue
        folders.setdefault(unit_of(module), set()).update(
            unit_of(t) for t in targets if unit_of(t) != unit_of(module)
        )
    found = cycles(folders)
    assert not found, f"folders importing each other: {found}"


def test_no_cycle_between_files_outside_the_agent():
    outside = [
        component
        for component in cycles(GRAPH)
        if not all(module.startswith(CYCLES_ALLOWED_UNDER + ".") for module in component)
    ]
    assert not outside, f"files importing each other: {outside}"


@pytest.mark.parametrize(
    ("graph", "expected"),
    [
        ({"a": {"b"}, "b": {"a"}}, [["a", "b"]]),
        ({"a": {"b"}, "b": {"c"}, "c": set()}, []),
        ({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}, [["a", "b", "c"]]),
    ],
)
def test_the_cycle_finder_finds_cycles(graph, expected):
    assert cycles(graph) == expected


def test_imports_inside_functions_and_relative_ones_are_seen():
    source = (
        "import runtime.errors\n"
        "from runtime import cpu\n"
        "def later():\n"
        "    from ..server import interceptor\n"
        "    from . import validation\n"
    )
    assert set(imported_by("runtime.tools.example", source)) == {
        "runtime.errors",
        "runtime.cpu",
        "runtime.server.interceptor",
        "runtime.tools.validation",
    }


def test_no_test_module_imports_another():
    # Shared helpers go to tests/helpers.py (or fuzzing.py, checks.py): a test
    # module imported by another runs its module-level code, and its tests
    # are collected in two places when imported with a star.
    tests = RUNTIME.parent / "tests"
    found = sorted(
        f"{path.relative_to(tests.parent)} -> {node.module}"
        for path in tests.rglob("test_*.py")
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.ImportFrom)
        and (node.module or "").rpartition(".")[2].startswith("test_")
    )
    assert not found, "\n".join(found)
