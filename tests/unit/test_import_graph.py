"""No import cycle in sparkctl/ or the lab (issue 23).

The graph is read statically with `ast`, so a cycle is found whether or not a test happens to
import the modules in the order that breaks. What counts as an edge A -> B:
  - every `import B` / `from B import x` in A, at module level AND inside functions: a lazy import
    (the tree imports lazily for the no-op `up` budget) still runs, and still makes the two modules
    one unit that cannot be understood or changed apart; issue 23's cycles ran partly through them.
  - `from P import n` is an edge to P.n when P/n is a module, else to P (n is a name P defines).
Not edges:
  - imports under `if TYPE_CHECKING:`: they never run; they exist to name a type across layers.
  - the implicit import of a module's parent packages (importing sparkctl.checks.ssh runs
    sparkctl/checks/__init__.py, which imports every check to register it: that registration
    pattern is how packages work, not a dependency of ssh on its siblings).
  - `importlib.import_module(...)` (cli/app.py loads commands by name; it is a table, not a cycle).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
# package name -> the directory that holds it
ROOTS = {"sparkctl": REPO / "sparkctl", "sparkctl_lab": REPO / "lab" / "sparkctl_lab"}


@dataclass(frozen=True)
class Edge:
    target: str
    where: str  # "sparkctl/reload.py:42" (the import statement)
    lazy: bool  # inside a function


def _modules() -> dict[str, Path]:
    mods: dict[str, Path] = {}
    for pkg, root in ROOTS.items():
        for path in sorted(root.rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            mods[".".join((pkg, *parts))] = path
    return mods


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.Module):
    """(node, lazy) for every import statement that can run: skips `if TYPE_CHECKING:` bodies."""

    def walk(node: ast.AST, lazy: bool):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                yield child, lazy
            elif isinstance(child, ast.If) and _is_type_checking(child.test):
                for stmt in child.orelse:
                    yield from walk(ast.Module(body=[stmt], type_ignores=[]), lazy)
            else:
                inner = lazy or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
                yield from walk(child, inner)

    yield from walk(tree, False)


def _graph(mods: dict[str, Path]) -> dict[str, list[Edge]]:
    graph: dict[str, list[Edge]] = {}
    for name, path in mods.items():
        is_pkg = path.name == "__init__.py"
        package = name if is_pkg else name.rpartition(".")[0]
        tree = ast.parse(path.read_text(), filename=str(path))
        edges = []
        for node, lazy in _imports(tree):
            where = f"{path.relative_to(REPO)}:{node.lineno}"
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")
                    anchor = anchor[: len(anchor) - (node.level - 1)]
                    base = ".".join([*anchor, *([base] if base else [])])
                for alias in node.names:
                    sub = f"{base}.{alias.name}"
                    targets.append(sub if sub in mods else base)
            for target in targets:
                # `import sparkctl.steps.record` may be written as a longer dotted name than a module
                while target and target not in mods:
                    target = target.rpartition(".")[0]
                if target and target != name:
                    edges.append(Edge(target, where, lazy))
        graph[name] = edges
    return graph


_parsed: dict[str, dict[str, list[Edge]]] = {}


def _tree_graph() -> dict[str, list[Edge]]:
    """The tree's graph, parsed once for the module's tests (~1 s of ast per parse); a copy each time."""
    if "tree" not in _parsed:
        _parsed["tree"] = _graph(_modules())
    return {name: list(edges) for name, edges in _parsed["tree"].items()}


def _cycles(graph: dict[str, list[Edge]]) -> list[tuple[list[str], list[str]]]:
    """(one shortest cycle, every module of the component) per strongly connected component
    (Tarjan, iterative): breaking the one cycle shown may leave another in the component."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    sccs: list[set[str]] = []
    counter = 0
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(graph[start]))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, it = work[-1]
            edge = next(it, None)
            if edge is not None:
                t = edge.target
                if t not in index:
                    index[t] = low[t] = counter
                    counter += 1
                    stack.append(t)
                    on_stack.add(t)
                    work.append((t, iter(graph[t])))
                elif t in on_stack:
                    low[node] = min(low[node], index[t])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                scc = set()
                while True:
                    m = stack.pop()
                    on_stack.discard(m)
                    scc.add(m)
                    if m == node:
                        break
                if len(scc) > 1:
                    sccs.append(scc)
    cycles = []
    for scc in sccs:
        start = min(scc)
        # BFS inside the component for the shortest way back to start
        prev: dict[str, str] = {}
        frontier = [start]
        found = None
        while frontier and found is None:
            nxt = []
            for n in frontier:
                for e in graph[n]:
                    if e.target == start:
                        found = n
                        break
                    if e.target in scc and e.target not in prev and e.target != start:
                        prev[e.target] = n
                        nxt.append(e.target)
                if found:
                    break
            frontier = nxt
        path = [found]
        while path[-1] != start:
            path.append(prev[path[-1]])
        cycles.append(([*reversed(path), start], sorted(scc)))
    return cycles


def _describe(cycle: list[str], members: list[str], graph: dict[str, list[Edge]]) -> str:
    lines = [" -> ".join(cycle)]
    if len(members) > len(cycle) - 1:
        lines.append(f"    (in a component of {len(members)} modules: {', '.join(members)})")
    for a, b in zip(cycle, cycle[1:]):
        e = next(e for e in graph[a] if e.target == b)
        lines.append(f"    {a} -> {b}  ({e.where}{', inside a function' if e.lazy else ''})")
    return "\n".join(lines)


def test_the_graph_sees_the_tree():
    """The walker finds the modules and the edges it must (so an empty graph cannot pass)."""
    mods = _modules()
    graph = _graph(mods)
    assert {"sparkctl.reload", "sparkctl.steps.record", "sparkctl_lab.faults"} <= set(mods)
    assert any(e.target == "sparkctl.runner" for e in graph["sparkctl.converge"])
    assert sum(len(v) for v in graph.values()) > 300


def test_no_import_cycle():
    graph = _tree_graph()
    cycles = _cycles(graph)
    assert not cycles, "import cycles (put the shared concept in a module of its own):\n" + "\n".join(
        _describe(c, m, graph) for c, m in cycles
    )


def test_the_fleet_layer_never_imports_the_cli():
    """fleet/ runs what the single-cluster commands run through the domain modules they share
    (converge, history, ...), never through cli/: a CLI command is an edge of the program, not a library."""
    graph = _tree_graph()
    fleet = [(name, e) for name, edges in graph.items() if name.startswith("sparkctl.fleet") for e in edges]
    assert fleet, "the walker sees no import of sparkctl.fleet at all"
    into_cli = [f"{e.where} imports {e.target}" for _, e in fleet if e.target.startswith("sparkctl.cli")]
    assert not into_cli, "sparkctl/fleet imports the CLI:\n" + "\n".join(into_cli)


# The layers (docs/architecture.md), bottom first: a module imports its own layer and those below.
LAYERS = {
    0: {
        "errors",
        "resources",
        "templates",
        "httpclient",
        "data",
        "waits",
        "interrupts",
        "runbooks",
        "sse",
        "",
    },  # "": sparkctl/__init__.py
    1: {"transport", "inventory", "launch"},
    2: {"facts", "session", "state", "lock", "reload_outcome", "records", "placement"},
    3: {"checks", "steps", "runner", "runtime", "weights"},
    4: {"reload", "converge", "cluster_status", "history", "keeper", "fleet", "bench", "alerts", "gateway"},
    5: {"cli", "__main__"},
}
LAYER_OF = {top: n for n, tops in LAYERS.items() for top in tops}
# Upward imports the tree still has, each a concept that belongs lower (docs/architecture.md "The
# rule"): none left, and it stays so. A new upward import fails the test below.
KNOWN_UPWARD: set[tuple[str, str]] = set()


def _upward(graph: dict[str, list[Edge]]) -> dict[tuple[str, str], str]:
    """(importing package, imported package) -> one import statement, for every import up the layers."""
    out: dict[tuple[str, str], str] = {}
    for name, edges in graph.items():
        if name.partition(".")[0] != "sparkctl":
            continue
        a = (name.split(".") + [""])[1]
        for e in edges:
            if not e.target.startswith("sparkctl."):
                continue
            b = e.target.split(".")[1]
            if LAYER_OF[b] > LAYER_OF[a]:
                out.setdefault((a, b), e.where)
    return out


def test_every_package_has_a_layer():
    tops = {(m.split(".") + [""])[1] for m in _modules() if m.partition(".")[0] == "sparkctl"}
    assert not tops - set(LAYER_OF), f"packages with no layer in LAYERS (docs/architecture.md): {tops - set(LAYER_OF)}"


def test_no_new_import_goes_up_the_layers():
    upward = _upward(_tree_graph())
    new = {pair: where for pair, where in upward.items() if pair not in KNOWN_UPWARD}
    assert not new, "imports up the layers (docs/architecture.md: move the shared concept down instead):\n" + "\n".join(
        f"  {a} (layer {LAYER_OF[a]}) -> {b} (layer {LAYER_OF[b]}): {where}" for (a, b), where in sorted(new.items())
    )
    gone = KNOWN_UPWARD - set(upward)
    assert not gone, f"no longer imported upward, drop them from KNOWN_UPWARD: {sorted(gone)}"


def test_the_layer_check_fails_on_an_upward_import():
    """It can fail: an import of the CLI from the fact layer is named."""
    graph = _tree_graph()
    graph["sparkctl.facts.system"] = [*graph["sparkctl.facts.system"], Edge("sparkctl.cli.app", "made up", False)]
    assert ("facts", "cli") in _upward(graph)
