"""Each DVC stage depends on every source file it runs: the modules its entry point imports, transitively (at
module level or inside a function), and the modules of the classes its config groups name in ``_target_`` (the
groups in the stage's ``GROUPS``, and backbone and retriever for whatever reaches ``ark.build``, which builds
those). A missing dependency means ``dvc repro`` would not rerun a stage whose code changed.
``python -m tests.test_stage_deps`` rewrites the ``src/ark`` deps of both pipelines to what this derives."""
import importlib
import re
from pathlib import Path

import pytest
import yaml

from tests.helpers import imported, module_file

ROOT = Path(__file__).resolve().parents[1]
PIPELINES = [ROOT / "dvc.yaml", ROOT / "stark" / "dvc.yaml"]


def targets(groups) -> set[str]:
    """The modules of every ``_target_`` in conf/<group>/ that names an ark class."""
    found = set()
    for path in (p for group in groups for p in (ROOT / "conf" / group).glob("*.yaml")):
        for target in re.findall(r"^\s*_target_:\s*(ark\.[\w.]+)", path.read_text(encoding="utf-8"), re.M):
            module = target.rsplit(".", 1)[0]
            found.add(module)
    return found


def closure(entry: str) -> set[Path]:
    """The source files ``entry`` runs: its imports, theirs, and (through ark.build) the configured classes'."""
    todo, seen = [entry] + sorted(targets(importlib.import_module(entry).GROUPS)), set()
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        parts = name.split(".")
        todo += [".".join(parts[:i]) for i in range(1, len(parts))]  # importing a.b.c runs a/__init__ and a.b's
        path = module_file(name)
        if path is None:
            continue
        todo += sorted(imported(path))
        if name == "ark.build":
            todo += sorted(targets(("backbone", "retriever")))
    return {module_file(n).relative_to(ROOT) for n in seen if module_file(n)}


def stages() -> list[tuple[str, str, list[str]]]:
    """(pipeline:stage, entry module, src deps) of every stage that runs an ark entry point."""
    rows = []
    for pipeline in PIPELINES:
        spec = yaml.safe_load(pipeline.read_text(encoding="utf-8"))["stages"]
        for name, stage in spec.items():
            body = stage.get("do", stage)
            entry = re.search(r"python -m (ark[\w.]+)", " ".join(str(body["cmd"]).split()))
            if entry is None:
                continue
            deps = [str(d) for d in body.get("deps", []) if str(d).startswith("src/")]  # from the root (wdir)
            rows.append((f"{pipeline.relative_to(ROOT)}:{name}", entry.group(1), deps))
    return rows


def needed(entry: str) -> list[str]:
    """The fewest paths that cover what ``entry`` runs: a package directory where it runs all of it."""
    files = closure(entry)
    out = set()
    for f in files:
        package = f.parent
        whole = all(p.relative_to(ROOT) in files for p in (ROOT / package).glob("*.py"))
        out.add(str(package) if whole and package != Path("src/ark") else str(f))
    return sorted(out)


def covered(path: Path, deps: list[str]) -> bool:
    return any(path == Path(d) or Path(d) in path.parents for d in deps)


@pytest.mark.parametrize("stage, entry, deps", stages(), ids=[s for s, _, _ in stages()])
def test_a_stage_depends_on_every_source_file_it_runs(stage, entry, deps):
    missing = sorted(str(p) for p in closure(entry) if not covered(p, deps))
    assert not missing, (f"{stage} runs these files but does not depend on them: {missing}; its src deps could be "
                         f"{needed(entry)}")


def test_the_checker_sees_a_missing_dependency():
    files = closure("ark.stages.evaluate")
    assert Path("src/ark/llm/protocol.py") in files and Path("src/ark/agent/backbones.py") in files
    assert not covered(Path("src/ark/llm/protocol.py"), ["src/ark/agent", "src/ark/stages/evaluate.py"])
    assert covered(Path("src/ark/llm/protocol.py"), ["src/ark/llm"])


def rewrite(pipeline: Path) -> None:
    """Replace each stage's ``src/ark`` deps in ``pipeline`` with what ``needed`` derives (other lines kept)."""
    entries = {s.split(":", 1)[1]: e for s, e, _ in stages() if s.split(":", 1)[0] == str(pipeline.relative_to(ROOT))}
    out, stage, done = [], None, False
    for line in pipeline.read_text(encoding="utf-8").split("\n"):
        named = re.match(r"^  (\w+):\s*$", line)
        if named:
            stage, done = named.group(1), False
        if stage in entries and re.match(r"^\s+- src/ark\S*\s*$", line):
            if not done:
                indent = line[: line.index("-")]
                out += [f"{indent}- {d}" for d in needed(entries[stage])]
                done = True
            continue
        out.append(line)
    pipeline.write_text("\n".join(out), encoding="utf-8")


if __name__ == "__main__":  # python -m tests.test_stage_deps: rewrite the src deps of both pipelines
    for path in PIPELINES:
        rewrite(path)
