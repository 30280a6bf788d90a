"""Layers import downward only (DESIGN §3), and the import graph has no circle.

Every ``import ark…`` in src/ark, at module level or inside a function, is read from the source. A package may
import packages of lower layers only (and its own modules); no stage imports another stage."""
from tests.helpers import SRC, imported

LAYERS = [  # lowest first; DESIGN §3: stages/cli -> report -> runs.execute -> agent -> tools/llm -> index -> graph -> io
    ("ark.errors",),
    ("ark.secrets", "ark.io", "ark.config", "ark.machine", "ark.settings"),
    ("ark.fetch", "ark.tracking"),
    ("ark.graph",),
    ("ark.data", "ark.index"),
    ("ark.tools", "ark.llm"),
    ("ark.agent",),
    ("ark.eval",),  # metrics, and scoring a run's records (ark.agent.records)
    ("ark.build",),
    ("ark.runs",),
    ("ark.distill",),
    ("ark.status",),  # the stale stages of a pipeline, for `ark status` and for `make check` (ark.report.check)
    ("ark.report",),
    ("ark.serve", "ark.api"),  # the model server and the Python API, which the CLI and notebooks use
    ("ark.stages", "ark.cli", "ark.stage_deps"),
]
RANK = {package: i for i, layer in enumerate(LAYERS) for package in layer}


def imports() -> set[tuple[str, str]]:
    edges = set()
    for path in SRC.rglob("*.py"):
        module = ".".join(path.relative_to(SRC).with_suffix("").parts).removesuffix(".__init__")
        edges |= {(module, name) for name in imported(path) if name.startswith("ark.")}
    return edges


def package(module: str) -> str:
    return ".".join(module.split(".")[:2])


def wrong_way(edges) -> set[tuple[str, str]]:
    wrong = set()
    for src, dst in edges:
        if package(src) != package(dst) and RANK[package(dst)] >= RANK[package(src)]:
            wrong.add((src, dst))
        if src.startswith("ark.stages.") and dst.startswith("ark.stages.") and dst.count(".") == 2 and dst != src:
            wrong.add((src, dst))
    return wrong


def circles(edges) -> list[set[str]]:
    """The strongly connected components of more than one node (Tarjan)."""
    graph: dict[str, set[str]] = {}
    for src, dst in edges:
        graph.setdefault(src, set()).add(dst)
        graph.setdefault(dst, set())
    index, low, stack, on, found = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = set()
            while True:
                w = stack.pop()
                on.discard(w)
                component.add(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(component)

    for v in list(graph):
        if v not in index:
            visit(v)
    return found


def test_every_package_has_a_layer():
    assert {package(m) for edge in imports() for m in edge} <= set(RANK)


def test_no_import_points_up_a_layer():
    assert wrong_way(imports()) == set()


def test_no_circle_between_modules_or_packages():
    edges = imports()
    assert circles(edges) == []
    assert circles({(package(a), package(b)) for a, b in edges if package(a) != package(b)}) == []


def test_the_checkers_see_a_wrong_arrow_and_a_circle():
    assert wrong_way({("ark.report.show", "ark.cli"), ("ark.agent.loop", "ark.build"), ("ark.index.bm25", "ark.io"),
                      ("ark.stages.collect", "ark.stages.evaluate"), ("ark.stages.report", "ark.report.show"),
                      ("ark.graph.graph", "ark.llm.client")}) == {
        ("ark.report.show", "ark.cli"), ("ark.agent.loop", "ark.build"), ("ark.stages.collect", "ark.stages.evaluate"),
        ("ark.graph.graph", "ark.llm.client")}
    assert circles({("a", "b"), ("b", "c"), ("c", "a"), ("c", "d")}) == [{"a", "b", "c"}]
