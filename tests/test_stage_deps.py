"""The generated deps (``make deps``, ``ark.stage_deps``): DVC's resolution of both pipelines gives every entry the
files its run executes and the config files it composes; the generated files are what the tool writes; the reading
of a module's imports follows what runs (a definition, not its whole module); and a real run imports no ark module
that its entry does not depend on."""
import contextlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from ark import stage_deps
from ark.stage_deps import BODY, PIPELINES, ROOT, covered, entries, files

DATA_STAGES = stage_deps.DATA_STAGES


@pytest.fixture(scope="module")
def dvc_entries() -> dict[str, tuple[str, set[str], set[str]]]:
    """{pipeline:entry: (entry module, deps, params files)} as DVC resolves both pipelines (paths from the root)."""
    from dvc.repo import Repo

    out = {}
    with contextlib.chdir(ROOT), Repo(str(ROOT)) as repo:
        for s in repo.index.stages:
            entry = re.search(r"python -m (ark[\w.]+)", s.cmd or "")
            if entry is None:
                continue
            path = {d: os.path.relpath(os.path.join(s.wdir, d.def_path), ROOT) for d in s.deps}
            params = {p for d, p in path.items() if d.__class__.__name__ == "ParamsDependency"}
            out[f"{Path(s.path).relative_to(ROOT)}:{s.addressing.split(':')[-1]}"] = (entry.group(1),
                                                                                     set(path.values()), params)
    return out


@pytest.fixture(scope="module")
def all_entries() -> dict:
    return {f"{p.relative_to(ROOT)}:{e.name}": e for p in PIPELINES for es in entries(p).values() for e in es}


def test_every_entry_depends_on_every_source_and_config_file_it_runs(all_entries, dvc_entries):
    assert len(all_entries) > 90 and set(all_entries) <= set(dvc_entries)
    wrong = []
    for name, entry in sorted(all_entries.items()):
        module, deps, params = dvc_entries[name]
        assert module == entry.module
        missing = sorted(str(p) for p in entry.files() if not covered(p, deps))
        unlisted = sorted(set(entry.conf()) - params) if entry.key is not None and entry.stage not in DATA_STAGES \
            else []
        if missing or unlisted:
            wrong.append(f"{name}: runs {missing}, composes {unlisted} without depending on them")
    assert not wrong, "\n".join(wrong)


def test_the_generated_deps_are_up_to_date():
    """Both pipelines and their deps.yaml are what ``make deps`` writes (CI also runs ``make deps CHECK=1``)."""
    for pipeline in PIPELINES:
        text, generated = stage_deps.render(pipeline)
        assert pipeline.read_text(encoding="utf-8") == text, f"{pipeline}: stale; run make deps"
        assert (pipeline.parent / "deps.yaml").read_text(encoding="utf-8") == generated, \
            f"{pipeline.parent / 'deps.yaml'}: stale; run make deps"


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


TRACE = """
import json, sys
from ark.stages import {stage} as stage
from ark.config import compose
stage.run(compose({overrides!r}))
print(json.dumps(sorted(m for m in sys.modules if m == "ark" or m.startswith("ark."))))
"""


@pytest.mark.parametrize("stage,entry,extra", [("evaluate", "evaluate@rules-synthetic", ["backbone=rules"]),
                                               ("baseline", "baseline@synthetic-bm25", [])])
@pytest.mark.e2e
def test_a_run_imports_nothing_its_entry_does_not_depend_on(stage, entry, extra, tiny_project, all_entries):
    """The reading of the source against what a real run imports: every ark module in ``sys.modules`` after a rules
    evaluation and a BM25 baseline (on the tiny graph, with the entry's own groups) is among the entry's deps."""
    from tests.helpers import tiny_graph, tiny_index
    from ark.config import compose
    from ark.io import write_json

    cfg = compose(tiny_project)
    index = tiny_index(tiny_graph())
    index.save(cfg.dataset.index_dir)
    from ark.index import index_settings
    from ark.config import resolved
    from ark.io import checksums

    write_json(Path(cfg.dataset.index_dir) / "info.json", {"retriever": "bm25", "num_docs": 31, "files": checksums(
        Path(cfg.dataset.index_dir)), "settings": index_settings(resolved(cfg.retriever))})
    overrides = tiny_project + ["split=test", "eval.concurrency=1", *extra]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", TRACE.format(stage=stage, overrides=overrides)], env=env,
                          capture_output=True, text=True, cwd=ROOT, timeout=240)
    assert done.returncode == 0, done.stderr[-2000:]
    modules = json.loads(done.stdout.strip().splitlines()[-1])
    deps = [str(p) for p in all_entries[f"dvc.yaml:{entry}"].files()]
    outside = [m for m in modules if stage_deps.module_file(m) and not covered(
        stage_deps.module_file(m).relative_to(ROOT), deps)]
    assert not outside, f"{entry} imports {outside} but does not depend on them"


@pytest.mark.e2e
def test_the_tool_checks_and_rewrites(tmp_path, capsys):
    """``--check`` exits 1 naming a stale file and changes nothing; without it the file is rewritten."""
    copies = []
    for pipeline in PIPELINES:
        target = tmp_path / pipeline.relative_to(ROOT)
        target.parent.mkdir(parents=True, exist_ok=True)
        for name in ("dvc.yaml", "deps.yaml", "params.yaml"):
            (target.parent / name).write_text((pipeline.parent / name).read_text())
        copies.append(target)
    deps = tmp_path / "deps.yaml"
    deps.write_text(deps.read_text().replace("src/ark/data/synthetic.py", "src/ark/data/stark.py"))
    assert stage_deps.main(["--check"], copies) == 1
    assert "deps.yaml" in capsys.readouterr().err and "stark.py" in deps.read_text()
    assert stage_deps.main([], copies) == 0 and deps.read_text() == (ROOT / "deps.yaml").read_text()
    assert stage_deps.main(["--check"], copies) == 0
