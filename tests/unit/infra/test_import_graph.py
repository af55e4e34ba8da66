"""adarl's import graph has no cycle, between modules nor between its top-level components
(`adarl.learner`, `adarl.weight_sync`, `adarl.session`, ...).

Static, with `ast`: every import of an adarl module counts, wherever it is written (module
level, inside a function, under `if TYPE_CHECKING:`), since a function-local or type-only import
is still a dependency that only hides the cycle. Importing `adarl.a.b` from outside `adarl.a` also
runs `adarl/a/__init__.py`, so it is an edge to `adarl.a` too; a package's `__init__` importing its
own modules is not a cycle. `importlib.import_module` counts when its argument is a literal."""

from __future__ import annotations

import ast
import itertools
from collections import defaultdict
from collections.abc import Iterator, Mapping, Set
from pathlib import Path

import adarl

PACKAGE_DIR = Path(adarl.__file__).resolve().parent
REPO_ROOT = PACKAGE_DIR.parent

# (importer, imported) -> where the import is written, "adarl/x.py:12" (sorted, no repeats)
Edges = Mapping[tuple[str, str], list[str]]


def module_files() -> dict[str, Path]:
    """Dotted module name -> file, for every module of the package."""
    modules = {}
    for path in sorted(PACKAGE_DIR.rglob("*.py")):
        parts = list(path.relative_to(REPO_ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        modules[".".join(parts)] = path
    return modules


def _imported_names(
    tree: ast.Module, module: str, is_package: bool, known: Set[str]
) -> Iterator[tuple[str, int]]:
    """The adarl modules one file imports, with the line of each import."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                # the package a relative import is relative to, then `level - 1` packages up
                base = module.split(".") if is_package else module.split(".")[:-1]
                base = base[: len(base) - (node.level - 1)]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            for alias in node.names:
                # `from adarl.x import y` imports the submodule adarl.x.y when there is one
                submodule = f"{source}.{alias.name}"
                yield (submodule if submodule in known else source), node.lineno
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "import_module"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            yield node.args[0].value, node.lineno


def _known_module(name: str, known: Set[str]) -> str | None:
    """The longest known module that `name` names or lies in (None outside adarl)."""
    parts = name.split(".")
    while parts:
        if ".".join(parts) in known:
            return ".".join(parts)
        parts.pop()
    return None


def import_edges() -> dict[tuple[str, str], list[str]]:
    files = module_files()
    known = set(files)
    edges: dict[tuple[str, str], set[str]] = defaultdict(set)
    for module, path in files.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        is_package = path.name == "__init__.py"
        for name, line in _imported_names(tree, module, is_package, known):
            target = _known_module(name, known)
            if target is None:
                continue
            parts = target.split(".")
            # the target, and the packages whose __init__ importing it runs: not the importer's own
            for depth in range(1, len(parts) + 1):
                imported = ".".join(parts[:depth])
                if module == imported or module.startswith(imported + "."):
                    continue
                edges[module, imported].add(f"{path.relative_to(REPO_ROOT)}:{line}")
    return {edge: sorted(where, key=_file_then_line) for edge, where in edges.items()}


def _file_then_line(where: str) -> tuple[str, int]:
    path, _, line = where.rpartition(":")
    return path, int(line)


def component(module: str) -> str:
    """`adarl.learner.group` -> `adarl.learner`; `adarl` itself is its own component."""
    return ".".join(module.split(".")[:2])


def component_edges(edges: Edges) -> dict[tuple[str, str], list[str]]:
    lifted: dict[tuple[str, str], set[str]] = defaultdict(set)
    for (source, target), where in edges.items():
        if component(source) != component(target):
            lifted[component(source), component(target)].update(where)
    return {edge: sorted(where, key=_file_then_line) for edge, where in lifted.items()}


def strongly_connected(nodes: Set[str], graph: Mapping[str, Set[str]]) -> list[list[str]]:
    """Tarjan's components of more than one node, iteratively (no recursion limit)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []
    for root in sorted(nodes):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.get(root, ()))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                members = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    members.append(member)
                    if member == node:
                        break
                if len(members) > 1:
                    found.append(sorted(members))
    return found


def shortest_cycle(start: str, members: Set[str], graph: Mapping[str, Set[str]]) -> list[str]:
    """A shortest chain start -> ... -> start inside one strongly connected component."""
    parent: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for child in sorted(graph.get(node, ())):
                if child not in members:
                    continue
                if child == start:
                    chain = [node]
                    while chain[-1] != start:
                        chain.append(parent[chain[-1]])
                    return [*reversed(chain), start]
                if child not in parent:
                    parent[child] = node
                    following.append(child)
        frontier = following
    raise AssertionError(f"{start} is on no cycle of {sorted(members)}")


def cycle_report(edges: Edges) -> str:
    """Every cycle, one per strongly connected component, with where each import is written;
    empty when the graph is acyclic."""
    graph: dict[str, set[str]] = defaultdict(set)
    for source, target in edges:
        graph[source].add(target)
    nodes = set(graph) | {target for _, target in edges}
    lines = []
    for members in strongly_connected(nodes, graph):
        chain = shortest_cycle(members[0], set(members), graph)
        lines.append(" -> ".join(chain) + f"   (all of: {', '.join(members)})")
        for source, target in itertools.pairwise(chain):
            lines.append(f"    {source} -> {target}: {', '.join(edges[source, target])}")
    return "\n".join(lines)


def test_the_checker_sees_imports_of_every_kind() -> None:
    """A checker that parsed nothing would pass: pin edges of each kind it must resolve."""
    edges = import_edges()
    expected = {
        ("adarl.session", "adarl.driver"),  # module level, `from adarl.x import Y`
        ("adarl.session", "adarl.learner"),  # the package __init__ a submodule import runs
        ("adarl.learner.build", "adarl.config.learner"),  # under `if TYPE_CHECKING:`
        ("adarl.run", "adarl.session"),  # inside a function
        ("adarl.weight_sync", "adarl.weight_sync.base"),  # an __init__ re-exporting
    }
    assert expected <= set(edges), expected - set(edges)
    # an __init__ importing its own package's modules is no edge back into the package
    assert ("adarl.learner.build", "adarl.learner") not in edges


def test_the_checker_reports_a_cycle() -> None:
    edges = {
        ("adarl.a.x", "adarl.b.y"): ["adarl/a/x.py:3"],
        ("adarl.b.y", "adarl.c"): ["adarl/b/y.py:4"],
        ("adarl.c", "adarl.a.x"): ["adarl/c.py:9"],
        ("adarl.c", "adarl.d"): ["adarl/c.py:10"],
    }
    report = cycle_report(edges)
    assert "adarl.a.x -> adarl.b.y -> adarl.c -> adarl.a.x" in report
    assert "adarl/c.py:9" in report
    assert "adarl.d" not in report.splitlines()[0]
    assert cycle_report({("adarl.a", "adarl.b"): ["adarl/a.py:1"]}) == ""


def test_no_import_cycle_between_modules() -> None:
    report = cycle_report(import_edges())
    assert not report, f"import cycles between adarl modules:\n{report}"


def test_no_import_cycle_between_components() -> None:
    report = cycle_report(component_edges(import_edges()))
    assert not report, f"import cycles between adarl's components:\n{report}"


def test_reward_does_not_stand_on_the_allocator() -> None:
    """The allocator consumes rewards: the records both sides of a pool reward stage use
    (`FinishedPool`, `RescoredPool`) live in adarl/types.py, so reward never imports it."""
    edges = component_edges(import_edges())
    assert ("adarl.reward", "adarl.allocator") not in edges, edges.get(
        ("adarl.reward", "adarl.allocator")
    )
