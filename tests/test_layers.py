"""Layers import downward only (DESIGN §3): stages/cli -> report -> runs -> agent -> tools/llm -> index -> graph -> io.

Every ``import ark…`` in src/ark, at module level or inside a function, is read from the source. The arrows that
still point the wrong way are listed in KNOWN (issue 20 removes them); the test fails on a new one, and on a listed
one that is gone, so that the list only shrinks."""
import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
KNOWN = {
    ("ark.agent.workers", "ark.build"),       # worker processes build their objects themselves
    ("ark.stages.collect", "ark.stages.evaluate"),  # collect runs the evaluation loop of another stage
}


def imports() -> set[tuple[str, str]]:
    edges = set()
    for path in SRC.rglob("*.py"):
        module = ".".join(path.relative_to(SRC).with_suffix("").parts).removesuffix(".__init__")
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            else:
                continue
            edges |= {(module, name) for name in names if name.startswith("ark.") and is_module(name)}
    return edges


def is_module(name: str) -> bool:
    """Whether ``ark.x.y`` names a module or package (not a function or class imported from one)."""
    path = SRC.joinpath(*name.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def upward(edges) -> set[tuple[str, str]]:
    wrong = set()
    for src, dst in edges:
        if src.startswith("ark.report") and dst.startswith(("ark.cli", "ark.stages")):
            wrong.add((src, dst))
        if src.startswith(("ark.agent", "ark.tools", "ark.llm", "ark.index", "ark.graph")) and \
                dst.startswith(("ark.build", "ark.cli", "ark.report", "ark.stages", "ark.runs.execute")):
            wrong.add((src, dst))
        if src.startswith("ark.stages.") and dst.startswith("ark.stages.") and dst.count(".") == 2 and dst != src:
            wrong.add((src, dst))
        if dst == "ark.cli" and src != "ark.cli":
            wrong.add((src, dst))
    return wrong


def test_no_new_import_points_up_a_layer():
    assert upward(imports()) == KNOWN


def test_the_checker_sees_a_wrong_arrow():
    assert upward({("ark.report.show", "ark.cli"), ("ark.agent.loop", "ark.build"), ("ark.index.bm25", "ark.io"),
                   ("ark.stages.collect", "ark.stages.evaluate"), ("ark.stages.report", "ark.report.show")}) == {
        ("ark.report.show", "ark.cli"), ("ark.agent.loop", "ark.build"), ("ark.stages.collect", "ark.stages.evaluate")}
