"""The dependency rules of architecture section 2.2, read from the source with ``ast``.

The data go one way, sweep -> ingest -> analysis -> report/export, and so do the imports: no
module imports a later stage, and no modules of the package (the analysis included) import
each other in a circle. Imports inside functions count: a lazy import is still a dependency.
A package's ``__init__`` is a pass-through: importing a package means importing what its
``__init__`` imports. Each failure names the offending imports.
"""

from __future__ import annotations

import ast
import functools
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _sources() -> dict[Path, str]:
    """Source folder -> the package it is installed as (the package-dir mappings the wheel uses)."""
    mapped = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
    return {ROOT / "ncclbot_sweep": "ncclbot_sweep", **{ROOT / folder: package for package, folder in mapped.items()}}


#: The stages in the order the data flow through them; a module imports only its own stage and
#: earlier ones. The simulator stands apart on the leaves; the CLI and the demo are the top.
STAGES = ("leaves", "sim", "sweep", "ingest", "analysis", "report", "top")
#: Where each stage lives (a dotted prefix); a module under none of them is a leaf.
HOMES = {
    "ncclbot_sweep.sim": "sim",
    "ncclbot_sweep.sweep": "sweep",
    "ncclbot_sweep.ingest": "ingest",
    "ncclbot_sweep.analysis": "analysis",
    "ncclbot_sweep.analysis.report": "report",
    "ncclbot_sweep.analysis.export": "report",
    "ncclbot_sweep.cli": "top",
    "ncclbot_sweep.demo": "top",
    "ncclbot_sweep.__main__": "top",
}


def _stage(module: str) -> str:
    homes = [prefix for prefix in HOMES if module == prefix or module.startswith(prefix + ".")]
    return HOMES[max(homes, key=len)] if homes else "leaves"


def _modules() -> dict[str, tuple[Path, bool]]:
    """Dotted name -> (file, is a package ``__init__``), for every module of every source folder."""
    found = {}
    for folder, package in _sources().items():
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


def _imports(name: str, path: Path, init: bool, modules: dict) -> set[str]:
    """The package's modules that ``name`` imports, inside functions too."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skip = _type_checking_only(tree)
    package = name if init else name.rpartition(".")[0]
    out = set()
    for node in ast.walk(tree):
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
def _graph() -> dict[str, set[str]]:
    """Every module -> the modules it imports, an imported package standing for what its ``__init__`` imports."""
    modules = _modules()
    edges = {name: _imports(name, path, init, modules) for name, (path, init) in modules.items()}

    def expand(target: str, seen: frozenset[str] = frozenset()) -> set[str]:
        if not modules[target][1]:
            return {target}
        return set().union(set(), *(expand(t, seen | {target}) for t in edges[target] if t not in seen))

    return {name: set().union(set(), *(expand(t) for t in targets)) - {name} for name, targets in edges.items()}


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


def _circle_edges(graph: dict[str, set[str]], component: list[str]) -> list[str]:
    """The imports inside one circle, as ``a -> b`` lines."""
    members = set(component)
    return [f"{a} -> {b}" for a in component for b in sorted(graph[a] & members)]


def _upward(graph: dict[str, set[str]]) -> list[str]:
    """Every import of a later stage, as ``a (stage) -> b (stage)`` lines."""
    rank = {stage: n for n, stage in enumerate(STAGES)}
    return [f"{a} ({_stage(a)}) -> {b} ({_stage(b)})" for a in sorted(graph) for b in sorted(graph[a])
            if rank[_stage(b)] > rank[_stage(a)]]


def test_the_checks_name_what_breaks_the_rules():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []
    assert _circle_edges({"a": {"b", "d"}, "b": {"a"}, "d": set()}, ["a", "b"]) == ["a -> b", "b -> a"]
    graph = {"ncclbot_sweep.sweep.runner": {"ncclbot_sweep.ingest.walk", "ncclbot_sweep.names"},
             "ncclbot_sweep.ingest.walk": {"ncclbot_sweep.sweep.manifest"},
             "ncclbot_sweep.names": {"ncclbot_sweep.sim.fabric"}}
    assert _upward(graph) == ["ncclbot_sweep.names (leaves) -> ncclbot_sweep.sim.fabric (sim)",
                              "ncclbot_sweep.sweep.runner (sweep) -> ncclbot_sweep.ingest.walk (ingest)"]
    assert [_stage(m) for m in ("ncclbot_sweep.analysis.report.build", "ncclbot_sweep.analysis.export",
                                "ncclbot_sweep.analysis.study.tune", "ncclbot_sweep.parsers.common",
                                "ncclbot_sweep.resources.plugin", "ncclbot_sweep.demo")] == [
        "report", "report", "analysis", "leaves", "leaves", "top"]


def test_the_graph_holds_every_stage_and_lazy_imports():
    graph = _graph()
    assert {_stage(name) for name in graph} == set(STAGES)
    # make_executor imports the Slurm executor inside the function
    assert "ncclbot_sweep.sweep.executors.slurm" in graph["ncclbot_sweep.sweep.runner"]


def test_no_module_imports_a_later_stage():
    upward = _upward(_graph())
    assert not upward, "imports against the flow sweep -> ingest -> analysis -> report/export:\n" + "\n".join(upward)


def test_no_modules_import_each_other_in_a_circle():
    graph = _graph()
    circles = ["\n".join(_circle_edges(graph, component)) for component in _cycles(graph)]
    assert not circles, "import circles:\n" + "\n\n".join(circles)


def test_live_and_study_never_import_each_other():
    graph = _graph()
    sides = ("ncclbot_sweep.analysis.live.", "ncclbot_sweep.analysis.study.")
    crossing = [f"{a} -> {b}" for a in sorted(graph) for b in sorted(graph[a])
                for here, there in (sides, sides[::-1]) if a.startswith(here) and b.startswith(there)]
    assert not crossing, crossing


def test_the_campaign_folder_sits_below_the_runner_collect_and_the_executors():
    graph, folder = _graph(), "ncclbot_sweep.sweep.campaign_folder"
    above = {"ncclbot_sweep.sweep.runner", "ncclbot_sweep.sweep.collect"} | {
        name for name in graph if name.startswith("ncclbot_sweep.sweep.executors.")}
    reach, todo = set(), [folder]
    while todo:
        for target in graph[todo.pop()] - reach:
            reach.add(target)
            todo.append(target)
    assert not reach & above, sorted(reach & above)
    assert folder in graph["ncclbot_sweep.sweep.runner"] & graph["ncclbot_sweep.sweep.collect"]
