"""The dependency rules of architecture section 2.2, read from the source with ``ast``.

Modules of the orchestration never import each other in a circle (imports inside functions
count: a lazy import is still a dependency); the analysis has no circle at import time. A
package's ``__init__`` is a pass-through: importing a package means importing what its
``__init__`` imports.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: Source folder -> the package it is installed as (``analysis`` is ``ncclbot_sweep.analysis``).
SOURCES = {ROOT / "ncclbot_sweep": "ncclbot_sweep", ROOT / "analysis": "ncclbot_sweep.analysis"}


def _modules() -> dict[str, tuple[Path, bool]]:
    """Dotted name -> (file, is a package ``__init__``), for every module of both source folders."""
    found = {}
    for folder, package in SOURCES.items():
        for path in folder.rglob("*.py"):
            parts = path.relative_to(folder).with_suffix("").parts
            init = parts[-1] == "__init__"
            found[".".join((package, *(parts[:-1] if init else parts)))] = (path, init)
    return found


def _type_checking_only(tree: ast.AST) -> set[int]:
    """Nodes under ``if TYPE_CHECKING:``: never executed, so no dependency."""
    return {id(node) for branch in ast.walk(tree)
            if isinstance(branch, ast.If) and "TYPE_CHECKING" in ast.unparse(branch.test)
            for stmt in branch.body for node in ast.walk(stmt)}


def _imports(name: str, path: Path, init: bool, modules: dict, *, lazy: bool) -> set[str]:
    """The package's modules that ``name`` imports (at module level only unless ``lazy``)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skip = _type_checking_only(tree)
    nodes = ast.walk(tree) if lazy else iter(tree.body)
    package = name if init else name.rpartition(".")[0]
    out = set()
    for node in nodes:
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            out |= {alias.name for alias in node.names if alias.name in modules}
        elif isinstance(node, ast.ImportFrom):
            base = package.split(".")[:len(package.split(".")) - node.level + 1] if node.level else []
            source = ".".join(base + ([node.module] if node.module else []))
            for alias in node.names:
                target = f"{source}.{alias.name}"
                out.add(target if target in modules else source)
    return (out & set(modules)) - {name}


@functools.cache
def _graph(*, lazy: bool) -> dict[str, set[str]]:
    """Edges between modules that are not ``__init__`` (packages expanded to what they import)."""
    modules = _modules()
    edges = {name: _imports(name, path, init, modules, lazy=lazy) for name, (path, init) in modules.items()}

    def expand(target: str, seen: frozenset[str] = frozenset()) -> set[str]:
        if not modules[target][1]:
            return {target}
        return set().union(set(), *(expand(t, seen | {target}) for t in edges[target] if t not in seen))

    return {name: set().union(set(), *(expand(t) for t in targets)) - {name}
            for name, targets in edges.items() if not modules[name][1]}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
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
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def _orchestration(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    return {name: targets for name, targets in graph.items() if not name.startswith("ncclbot_sweep.analysis")}


def test_the_cycle_finder_finds_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_orchestration_modules_never_import_each_other_in_a_circle():
    graph = _orchestration(_graph(lazy=True))
    assert {"ncclbot_sweep.sweep.runner", "ncclbot_sweep.sweep.collect", "ncclbot_sweep.sweep.executors.slurm"} <= set(graph)
    assert _cycles(graph) == []


def test_the_campaign_folder_sits_below_the_runner_collect_and_the_executors():
    graph = _graph(lazy=True)
    above = {"ncclbot_sweep.sweep.runner", "ncclbot_sweep.sweep.collect"} | {
        name for name in graph if name.startswith("ncclbot_sweep.sweep.executors.")}
    reach, todo = set(), ["ncclbot_sweep.sweep.campaign_folder"]
    while todo:
        for target in graph[todo.pop()] - reach:
            reach.add(target)
            todo.append(target)
    assert not reach & above, sorted(reach & above)
    assert "ncclbot_sweep.sweep.campaign_folder" in graph["ncclbot_sweep.sweep.runner"] & graph["ncclbot_sweep.sweep.collect"]


def test_the_analysis_has_no_circle_at_import_time():
    assert _cycles(_graph(lazy=False)) == []
