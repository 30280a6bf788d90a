"""Your own case reports (docs/data.md, "Your own case reports"), followed as the docs say: three GA4GH phenopacket
.json files (docs/examples/my_cases/) become a query set with a test split, its evaluation is shown by ``ark show``.
The graph is BioKG built from its committed source subset (tests/fixtures/biokg_mini), which has every term and
disease of the three cases, so make_queries prints what the docs show."""
import json
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ark.cli import main
from ark.errors import UserError
from ark.io import read_jsonl
from tests.conftest import ROOT, compose_cfg

DOCS = ROOT / "docs" / "data.md"


def docs_blocks() -> list[tuple[str, str]]:
    """(language, text) of each code block of the docs' section, in order."""
    section = DOCS.read_text().split("\n## Your own case reports\n", 1)[1].split("\n## ", 1)[0]
    return [(lang, text.strip()) for lang, text in re.findall(r"```(\w*)\n(.*?)```", section, re.S)]


def commands() -> list[list[str]]:
    return [shlex.split(line) for lang, text in docs_blocks() if lang == "sh" for line in text.splitlines()]


def block_starting(prefix: str) -> str:
    return next(text for _, text in docs_blocks() if text.startswith(prefix))


@pytest.fixture
def project(tmp_path, monkeypatch):
    """The current directory: a project with BioKG built and indexed (the fixture subset) and the docs."""
    from ark.stages import build_index
    from tests.helpers import biokg_mini_graph

    (tmp_path / "docs").symlink_to(ROOT / "docs")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("PROJECT_ROOT", raising=False)
    cfg = compose_cfg(["logger=none"])
    biokg_mini_graph().save(cfg.dataset.graph_dir)
    build_index.run(cfg)
    return tmp_path


@pytest.mark.e2e  # a Python subprocess
def test_the_docs_make_three_json_phenopackets_a_query_set_with_a_test_split(project):
    make = commands()[0]
    assert make[:3] == ["python", "-m", "ark.stages.make_queries"]
    source = next(a.split("=", 1)[1] for a in make if a.startswith("queries.source="))
    assert sorted(p.name for p in Path(source).iterdir()) == ["case1.json", "case2.json", "case3.json"]
    assert all(len(p.read_text().splitlines()) > 1 for p in Path(source).iterdir())  # pretty-printed, not JSON Lines
    out = subprocess.run([sys.executable, *make[1:]], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    printed = block_starting("biokg/my_cases: ")
    assert out.stdout.strip() == printed and "'test': 3" in printed
    rows = read_jsonl(project / "data/queries/biokg/my_cases/test.jsonl")
    assert [r["id"] for r in rows] == ["my-case-1", "my-case-2", "my-case-3"]
    first = json.loads(block_starting('{"id": "my-case-1"'))
    assert {k: rows[0][k] for k in ("query", "meta")} == {k: first[k] for k in ("query", "meta")}
    assert not (project / "data/queries/biokg/phenopackets").exists()


def test_an_empty_test_split_and_another_query_sets_name_are_one_line_each(project, capsys):
    from ark.stages import evaluate, make_queries

    args = commands()[0][3:]
    without_fractions = [a for a in args if not a.startswith("queries.split_fractions=")]
    counts = make_queries.run(compose_cfg(without_fractions))["queries"]
    assert counts == {"train": 3, "val": 0, "test": 0}  # the case ids hash into train
    assert capsys.readouterr().err.strip() == block_starting("warning: ")
    with pytest.raises(UserError, match=r"test\.jsonl: the split is empty \(queries\.split_fractions .*"
                                        r"queries\.split_fractions=\[0,0,1\] for test"):
        evaluate.run(compose_cfg(without_fractions + ["backbone=rules", "agent.n_agents=1"]))

    with pytest.raises(UserError) as e:
        make_queries.run(compose_cfg([a for a in args if not a.startswith("queries.name=")]))
    assert f"error: {e.value}" == block_starting("error: ")
    assert not (project / "data/queries/biokg/phenopackets").exists()


@pytest.mark.e2e  # a docs walkthrough
def test_a_query_set_of_conf_queries_keeps_its_own_source(project):
    from ark.stages.make_queries import check_own_name

    check_own_name(compose_cfg(["queries=phenopackets"]))  # the pipeline's own file
    default = compose_cfg(["queries=phenopackets"]).queries.source
    check_own_name(compose_cfg(["queries=phenopackets", f"queries.source={default}"]))  # the same, spelt out
    check_own_name(compose_cfg(["queries=phenopackets", "queries.name=mine", "queries.source=docs"]))
    for name in ("phenopackets_gene", "synthetic"):  # another query set's directory, with or without a source
        with pytest.raises(UserError, match=f"not the source of the query set '{name}'.* queries.name=my_cases$"):
            check_own_name(compose_cfg(["queries=phenopackets", f"queries.name={name}",
                                        "queries.source=docs/examples/my_cases/"]))
    with pytest.raises(UserError, match="queries.name=my_phenopackets$"):  # never suggests a taken name
        check_own_name(compose_cfg(["queries=phenopackets", "queries.source=cases/phenopackets.jsonl.gz"]))


@pytest.mark.e2e  # a docs walkthrough
def test_ark_show_reads_a_run_of_a_query_set_named_on_the_command_line(project, capsys):
    from ark.report.runs import _queries
    from ark.stages import evaluate, make_queries

    make, evaluate_command, show_command = commands()
    make_queries.run(compose_cfg(make[3:]))
    assert evaluate_command[:3] == ["python", "-m", "ark.stages.evaluate"] and show_command[:2] == ["ark", "show"]
    result = evaluate.run(compose_cfg(evaluate_command[3:] + ["eval.progress=false"]))
    (run_dir,) = Path().glob(show_command[2])
    assert run_dir.resolve() == Path(result["run_dir"]).resolve()

    assert main(["show", str(run_dir)]) == 0
    listing = capsys.readouterr().out
    assert "biokg/my_cases/test" in listing and all(f"my-case-{i}" in listing for i in (1, 2, 3))
    assert main(["show", str(run_dir), "my-case-1"]) == 0
    text = capsys.readouterr().out
    assert text.startswith("run ") and "gold   1 node" in text and "✓" in text  # gold found by the set's name

    shutil.rmtree(project / "data/queries/biokg/my_cases")  # the query set cannot be rebuilt: no gold marks
    _queries.cache_clear()  # as a new `ark show` process would find it
    assert main(["show", str(run_dir), "my-case-1"]) == 0
    text = capsys.readouterr().out
    assert text.startswith("(without gold marks: no query file ") and "gold   unknown" in text and "✓" not in text
    assert "Marfan syndrome" in text  # node names: the graph is there

    assert main(["show", str(run_dir), "my-case-1", "queries=nowhere"]) == 2  # a config Hydra cannot compose
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "queries/nowhere" in err and len(err.splitlines()) == 1
