"""The generated deps (``make deps``, ``ark.stage_deps``): DVC's resolution of both pipelines gives every entry the
fingerprint of the code it runs and the config files it composes; the generated files are what the tool writes; the
reading of a module's imports follows what runs (a definition, not its whole module); a comment, docstring, reformat
or move changes no fingerprint and a behaviour change changes those of the entries that run it; and a real run
executes no function and imports no module that its entry's fingerprint leaves out."""
import contextlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from ark import stage_deps
from ark.stage_deps import BODY, PIPELINES, ROOT, covered, entries, files

DATA_STAGES = stage_deps.DATA_STAGES


@pytest.fixture(scope="module")
def dvc_entries() -> dict[str, tuple[str, set[str], set[str], dict]]:
    """{pipeline:entry: (entry module, deps, params files, {params file: its keys})} as DVC resolves both pipelines
    (paths from the root)."""
    from dvc.repo import Repo

    out = {}
    with contextlib.chdir(ROOT), Repo(str(ROOT)) as repo:
        for s in repo.index.stages:
            entry = re.search(r"python -m (ark[\w.]+)", s.cmd or "")
            if entry is None:
                continue
            path = {d: os.path.relpath(os.path.join(s.wdir, d.def_path), ROOT) for d in s.deps}
            params = {p for d, p in path.items() if d.__class__.__name__ == "ParamsDependency"}
            keys = {p: list(d.params or []) for d, p in path.items() if d.__class__.__name__ == "ParamsDependency"}
            out[f"{Path(s.path).relative_to(ROOT)}:{s.addressing.split(':')[-1]}"] = (entry.group(1),
                                                                                     set(path.values()), params, keys)
    return out


@pytest.fixture(scope="module")
def all_entries() -> dict:
    return {f"{p.relative_to(ROOT)}:{e.name}": e for p in PIPELINES for es in entries(p).values() for e in es}


@pytest.mark.e2e  # every stage entry (make deps CHECK=1 checks the file in CI)
def test_every_entry_depends_on_its_code_fingerprint_and_every_config_file_it_composes(all_entries, dvc_entries):
    """As DVC resolves both pipelines: each entry's params hold its key of code.yaml, whose value is the fingerprint of
    what it runs, and the config files it composes; no entry depends on a source file (its code is the fingerprint)."""
    assert len(all_entries) > 90 and set(all_entries) <= set(dvc_entries)
    code = {p: yaml.safe_load((p.parent / "code.yaml").read_text()) for p in PIPELINES}
    wrong = []
    for name, entry in sorted(all_entries.items()):
        module, deps, params, keys = dvc_entries[name]
        assert module == entry.module
        pipeline = ROOT / name.split(":")[0]
        path = str((pipeline.parent / "code.yaml").relative_to(ROOT))
        value = code[pipeline][entry.stage]
        value = value[entry.key] if entry.key is not None else value
        if keys.get(path) != [f"{entry.stage}.{entry.key}" if entry.key is not None else entry.stage]:
            wrong.append(f"{name}: does not read its fingerprint from {path}")
        if value != entry.fingerprint():
            wrong.append(f"{name}: {path} holds {value}, its code's fingerprint is {entry.fingerprint()}")
        if any(d.startswith("src/") and d.endswith(".py") for d in deps):
            wrong.append(f"{name}: depends on a source file")
        unlisted = sorted(set(entry.conf()) - params) if entry.key is not None and entry.stage not in DATA_STAGES \
            else []
        if unlisted:
            wrong.append(f"{name}: composes {unlisted} without depending on them")
    assert not wrong, "\n".join(wrong)


def test_the_generated_deps_are_up_to_date():
    """Both pipelines, their deps.yaml and code.yaml are what ``make deps`` writes (CI runs ``make deps CHECK=1``)."""
    for pipeline in PIPELINES:
        text, generated, fingerprints = stage_deps.render(pipeline)
        assert pipeline.read_text(encoding="utf-8") == text, f"{pipeline}: stale; run make deps"
        for name, content in (("deps.yaml", generated), ("code.yaml", fingerprints)):
            assert (pipeline.parent / name).read_text(encoding="utf-8") == content, \
                f"{pipeline.parent / name}: stale; run make deps"


MODULES = sorted(".".join(p.relative_to(stage_deps.SRC).with_suffix("").parts).removesuffix(".__init__")
                 for p in (stage_deps.SRC / "ark").rglob("*.py"))


def commented(text: str) -> str:
    """``text`` with a comment at the end of every logical line and a comment line before the first."""
    import io
    import tokenize

    ends = [t.start for t in tokenize.generate_tokens(io.StringIO(text).readline) if t.type == tokenize.NEWLINE]
    lines = text.split("\n")
    for row, col in reversed(ends):
        lines[row - 1] = lines[row - 1][:col] + "  # a comment" + lines[row - 1][col:]
    return "# a comment\n" + "\n".join(lines)


def redocumented(text: str) -> str:
    """``text`` reformatted (``ast.unparse``: its own layout, no comment) with a new docstring on the module and on
    every class and function."""
    import ast

    tree = ast.parse(text)
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            node.body.insert(0, ast.Expr(ast.Constant("A docstring that says something new.")))
    return ast.unparse(tree)


@pytest.mark.e2e  # every module of src/ark parsed and rewritten: ~10 CPU-s
def test_no_comment_docstring_or_layout_changes_what_any_module_contributes():
    """Every module of src/ark, edited by a comment on every line and blank lines, or by a new docstring everywhere
    and its own reformat: what each unit reaches and each unit's hash are unchanged, so no fingerprint of either
    pipeline changes."""
    changed = []
    for module in MODULES:
        text = stage_deps.module_file(module).read_text(encoding="utf-8")
        original = stage_deps.parse_units(module, text)
        for edit in (lambda t: commented(t) + "\n\n", redocumented):
            if stage_deps.parse_units(module, edit(text)) != original:
                changed.append(f"{module} ({edit.__name__})")
    assert len(MODULES) > 80 and changed == []


def test_a_definition_hashes_the_same_in_any_module():
    """A move: the same source parsed as another module gives every unit the same hash."""
    for module in ("ark.runs.rank", "ark.agent.loop", "ark.io"):
        text = stage_deps.module_file(module).read_text(encoding="utf-8")
        assert stage_deps.parse_units(module, text)[1] == stage_deps.parse_units("ark.elsewhere", text)[1]


def test_a_unit_hashes_the_module_level_values_it_reads_and_the_body_its_imports():
    """A function reading a module constant: its hash changes with the constant's value, so moving it into a module
    where the name has another value changes it too; another package's imports are part of the body, in order."""
    def hashes(text: str) -> dict:
        return stage_deps.parse_units("ark.somewhere", text)[1]

    one, two = hashes("X = 1\ndef f():\n    return X\n"), hashes("X = 2\ndef f():\n    return X\n")
    assert one["f"] != two["f"]
    assert hashes("X = 1\ndef f():\n    return 0\n")["f"] == hashes("X = 2\ndef f():\n    return 0\n")["f"]
    use_first = hashes("import matplotlib\nmatplotlib.use('Agg')\nimport matplotlib.pyplot as plt\n")
    plot_first = hashes("import matplotlib\nimport matplotlib.pyplot as plt\nmatplotlib.use('Agg')\n")
    assert use_first[BODY] != plot_first[BODY]


def test_the_report_reaches_what_its_notebooks_import(all_entries):
    """The report executes notebooks/ in a kernel of its own (no profiler sees it): their ark imports are its code."""
    reached = stage_deps.reached(*all_entries["dvc.yaml:report"].roots())
    assert {("ark.report.notebook", "bars"), ("ark.report.notebook", "figure"), ("ark.report.notebook", "table")} \
        <= reached


def changed_by(all_entries, module: str, function: str, statement: str) -> set[str]:
    """The entries whose fingerprint changes when ``statement`` is put first in ``function`` of ``module``."""
    import ast

    text = stage_deps.module_file(module).read_text(encoding="utf-8")
    tree = ast.parse(text)
    node = next(n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
                and n.name == function)
    node.body.insert(0, ast.parse(statement).body[0])
    before = {name: e.fingerprint() for name, e in all_entries.items()}
    with stage_deps.edited({module: ast.unparse(tree)}):
        return {name for name, e in all_entries.items() if e.fingerprint() != before[name]}


def short(names) -> set[str]:
    return {n.split(":")[-1] for n in names}


AGENT_STAGES = ("evaluate@", "collect@", "budget@", "table_evaluate@")
RANKING_STAGES = ("baseline@", "hpo_baseline@")


def test_a_behaviour_change_reruns_what_executes_it_and_nothing_else(all_entries):
    """One statement added inside the agent loop: every agent entry of both pipelines, no baseline or data stage;
    inside the ranking engine: every baseline, no agent entry; inside a function no root entry runs: nothing."""
    loop = short(changed_by(all_entries, "ark.agent.loop", "run_agent", "T_max = T_max + 0"))
    agents = {n for n in short(all_entries) if n.startswith(AGENT_STAGES)}
    assert agents <= loop and not {n for n in loop if n.startswith(RANKING_STAGES)}
    assert not {n for n in loop if n.split("@")[0] in DATA_STAGES | {"distill"}}
    ranking = short(changed_by(all_entries, "ark.runs.rank", "execute_ranking", "stage = stage + ''"))
    baselines = {n for n in short(all_entries) if n.startswith(RANKING_STAGES)}
    assert baselines <= ranking and not {n for n in ranking if n.startswith(AGENT_STAGES)}
    tables = changed_by(all_entries, "ark.report.tables.table5", "table5", "runs = runs")
    assert tables == {"dvc.yaml:report", "stark/dvc.yaml:tables"}  # one entry point, biokg tables or not


def test_a_definition_counts_only_what_it_reaches():
    rules = files(("ark.agent.backbones", "RulesBackbone"))
    local = files(("ark.agent.backbones", "LocalBackbone"))
    assert Path("src/ark/agent/policies.py") in rules and Path("src/ark/agent/rules_v1.py") in rules
    assert Path("src/ark/llm/decoding.py") not in rules and Path("src/ark/llm/server.py") not in rules
    assert {Path("src/ark/llm/decoding.py"), Path("src/ark/llm/server.py")} <= local
    # an import inside a function counts where the function is reached; a TYPE_CHECKING import never
    assert Path("src/ark/llm/cache.py") in files(("ark.build", "check_files"))
    assert Path("src/ark/llm/cache.py") not in files(("ark.build", BODY))
    assert Path("src/ark/index/dense.py") not in files(("ark.build", BODY))
    assert not covered(Path("src/ark/llm/protocol.py"), ["src/ark/agent", "src/ark/stages/evaluate.py"])
    assert covered(Path("src/ark/llm/protocol.py"), ["src/ark/llm"])


def test_an_entry_runs_the_classes_its_config_selects_and_no_other(all_entries):
    rules = all_entries["dvc.yaml:evaluate@rules-synthetic"].files()
    assert Path("src/ark/data/synthetic.py") in rules and Path("src/ark/data/biokg.py") in rules
    assert Path("src/ark/data/stark.py") not in rules and Path("src/ark/llm/decoding.py") not in rules
    assert Path("src/ark/data/synthetic.py") not in all_entries["dvc.yaml:evaluate@rules-phenopackets"].files()
    assert Path("src/ark/data/stark.py") in all_entries["stark/dvc.yaml:evaluate@prime"].files()
    assert Path("src/ark/llm/decoding.py") in all_entries["dvc.yaml:evaluate@student-synthetic"].files()
    bm25 = all_entries["dvc.yaml:baseline@synthetic-bm25"].files()
    assert Path("src/ark/agent/backbones.py") not in bm25 and Path("src/ark/index/dense.py") not in bm25
    assert Path("src/ark/index/dense.py") not in all_entries["dvc.yaml:build_index@biokg-bm25"].files()
    dense = all_entries["dvc.yaml:evaluate@dense-synthetic"]
    assert dense.index() == "data/index/biokg/dense" and "conf/retriever/dense.yaml" in dense.conf()


def unit_of(path: str, qualname: str, function: bool) -> tuple[str, str | None]:
    """The unit a code object executed from ``path`` belongs to: its top-level definition's, or the module's body (a
    class's body runs when its module is imported: what it defines counts where the class is used)."""
    module = ".".join(Path(path).relative_to(stage_deps.SRC).with_suffix("").parts).removesuffix(".__init__")
    top = qualname.split(".")[0]
    return module, None if top.startswith("<") or not function else top


def traced(out: Path, module: str, overrides: list[str]) -> dict:
    """What running ``module``'s stage with ``overrides`` executed and imported (tests/trace_stage.py)."""
    done = subprocess.run([sys.executable, str(ROOT / "tests" / "trace_stage.py"), str(out), module, *overrides],
                          capture_output=True, text=True, cwd=ROOT, timeout=600,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(out.read_text())


def outside(entry, found: dict) -> list[str]:
    """What a traced run executed or imported that ``entry``'s fingerprint leaves out."""
    reached = stage_deps.reached(*entry.roots())
    missing = {f"{m}.{n or '<body>'}" for m, n in (unit_of(*e) for e in found["executed"]) if (m, n) not in reached}
    missing |= {f"{m} (imported)" for m in found["modules"] if stage_deps.module_file(m) and (m, BODY) not in reached}
    return sorted(missing)


@pytest.mark.e2e
def test_every_function_a_stage_executes_is_inside_its_entry_fingerprint(tiny_project, all_entries, tmp_path):
    """One small run of each family on the tiny graph, each under a profiler (tests/trace_stage.py): a BM25 baseline,
    a rules evaluation, a rules collection, the distill stage (smoke recipe, a tiny random model) and the report.
    Every project function it executed, and every module it imported, is inside what its entry's fingerprint
    hashes (``reached``), as the entry of dvc.yaml whose config selects the same classes."""
    from ark.io import write_jsonl
    from ark.stages import build_index
    from tests.conftest import compose_cfg

    base = tiny_project + ["retriever.params.stemmer=null", "eval.progress=false"]
    cfg = compose_cfg(base)
    build_index.run(cfg)
    write_jsonl(Path(cfg.dataset.queries_dir) / "train.jsonl", [
        {"id": "t1", "query": "Which phenotype of Marfan disease", "answer_ids": [2]},
        {"id": "t2", "query": "long fingers", "answer_ids": [3]}])
    collect_root = tmp_path / "collect"
    runs = [("baseline@synthetic-bm25", "ark.stages.baseline", ["split=test"]),
            ("evaluate@rules-synthetic", "ark.stages.evaluate", ["split=test", "backbone=rules"]),
            ("collect@rules-synthetic", "ark.stages.collect", ["backbone=rules", f"run.root={collect_root}"]),
            ("distill", "ark.stages.distill:tiny", ["distill=smoke", f"distill.teacher={collect_root}",
                                                     f"distill.out={tmp_path}/student"]),
            ("report", "ark.stages.report", [])]
    wrong = {}
    for entry, module, extra in runs:
        found = traced(tmp_path / f"{entry}.json", module, base + extra)
        assert len(found["executed"]) > 20, entry
        if missing := outside(all_entries[f"dvc.yaml:{entry}"], found):
            wrong[entry] = missing
    assert not wrong, wrong


@pytest.mark.e2e
def test_the_tool_checks_and_rewrites(tmp_path, capsys):
    """``--check`` exits 1 naming a stale file and changes nothing; without it the file is rewritten."""
    copies = []
    for pipeline in PIPELINES:
        target = tmp_path / pipeline.relative_to(ROOT)
        target.parent.mkdir(parents=True, exist_ok=True)
        for name in ("dvc.yaml", "deps.yaml", "params.yaml", "code.yaml"):
            (target.parent / name).write_text((pipeline.parent / name).read_text())
        copies.append(target)
    code = tmp_path / "code.yaml"
    fingerprint = yaml.safe_load(code.read_text())["report"]
    code.write_text(code.read_text().replace(fingerprint, "0" * 16))
    assert stage_deps.main(["--check"], copies) == 1
    assert "code.yaml" in capsys.readouterr().err and "0" * 16 in code.read_text()
    assert stage_deps.main([], copies) == 0 and code.read_text() == (ROOT / "code.yaml").read_text()
    assert stage_deps.main(["--check"], copies) == 0
