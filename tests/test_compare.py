"""``ark compare``: two real runs on the tiny graph (BM25 and the scripted policy), compared query by query."""
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from ark.cli import main
from ark.errors import UserError
from ark.report.compare import compare
from ark.report.intervals import paired
from tests.conftest import compose_cfg, copy_project, tiny_project_at


@pytest.fixture(scope="module")
def built_runs(tmp_path_factory):
    """A tiny project with BM25's and the rules policy's runs on its 3 test queries, built once for the module:
    (its root, the two run directories relative to it)."""
    from ark.stages import baseline, build_index, evaluate

    root = tmp_path_factory.mktemp("project")
    base = tiny_project_at(root) + ["eval.progress=false", "retriever.params.stemmer=null"]
    build_index.run(compose_cfg(base))
    results = root / "results" / "runs"
    bm25 = baseline.run(compose_cfg(base + [f"run.root={results}/baseline/bm25"]))["run_dir"]
    rules = evaluate.run(compose_cfg(base + ["backbone=rules", f"run.root={results}/evaluate/rules"]))["run_dir"]
    return root, Path(bm25).relative_to(root), Path(rules).relative_to(root)


@pytest.fixture
def two_runs(built_runs, tmp_path):
    """(BM25's run directory, the rules policy's, overrides): in this test's own copy of the module's project."""
    root, bm25, rules = built_runs
    return tmp_path / bm25, tmp_path / rules, copy_project(root, tmp_path)


def scores(run_dir: Path) -> dict:
    return {s["id"]: s for s in map(json.loads, (run_dir / "scores.jsonl").read_text().splitlines())}


def test_the_difference_is_the_paired_one_on_the_queries_both_scored(two_runs):
    bm25, rules, overrides = two_runs
    result = compare([str(bm25), str(rules)], tuple(overrides))
    (c,) = result["comparisons"]
    a, b = scores(bm25), scores(rules)
    assert c["n"] == 3 and c["only_in_run"] == c["only_in_first"] == 0
    for metric in ("hit@1", "mrr"):
        ids = sorted(a)
        expected = paired([b[i][metric] for i in ids], [a[i][metric] for i in ids], ids).scaled(100)
        got = c["difference"][metric]
        assert (got["value"], got["lo"], got["hi"], got["p"]) == (expected.value, expected.lo, expected.hi, expected.p)
        assert got["value"] == pytest.approx(100 * np.mean([b[i][metric] - a[i][metric] for i in ids]), abs=0.01)
    assert [r["metrics"]["hit@1"]["lo"] <= r["metrics"]["hit@1"]["value"] <= r["metrics"]["hit@1"]["hi"]
            for r in result["runs"]] == [True, True]


def test_the_cli_prints_the_comparison_and_writes_json(two_runs, capsys, tmp_path):
    bm25, rules, overrides = two_runs
    out = tmp_path / "compare.json"
    assert main(["compare", str(bm25), str(rules), "--json", str(out), "--paths", *overrides]) == 0
    printed = capsys.readouterr().out
    written = json.loads(out.read_text())
    hit1 = written["comparisons"][0]["difference"]["hit@1"]
    assert f"{rules} minus {bm25} on the 3 queries both scored" in " ".join(printed.split())  # wrapped prose
    assert max(map(len, printed.splitlines())) <= max(160, len(str(rules)) + 20)
    assert f"hit@1      {hit1['value']:.2f} [{hit1['lo']:.1f}, {hit1['hi']:.1f}]" in printed


def test_runs_on_other_queries_are_refused_in_one_line_unless_asked(two_runs, capsys, tmp_path):
    bm25, rules, overrides = two_runs
    other = tmp_path / "other"
    other.mkdir()
    for f in bm25.iterdir():
        (other / f.name).write_bytes(f.read_bytes())
    config = (other / "config.yaml").read_text()
    (other / "config.yaml").write_text(config.replace("split: test", "split: val"))
    queries = Path(compose_cfg(overrides).dataset.queries_dir)  # the same questions, filed as the val split
    (queries / "val.jsonl").write_text((queries / "test.jsonl").read_text())
    assert main(["compare", str(bm25), str(other), "--paths", *overrides]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "--any-queries" in err and len(err.splitlines()) == 1
    assert main(["compare", str(bm25), str(other), "--any-queries", "--paths", *overrides]) == 0
    assert main(["compare", str(bm25), "--paths", *overrides]) == 2
    assert main(["compare", str(bm25), str(tmp_path / "nowhere"), "--paths", *overrides]) == 2


@pytest.mark.e2e
# two stages regenerated in a fresh copy: 202 s alone on a 2-vCPU AVX2 EPYC, over 300 beside other work
@pytest.mark.timeout(1200)
def test_the_published_pair_compares_as_table1_paired_shows_it(tmp_path, shared_dir):
    """`ark compare` on ARK's and BM25's published case-report runs prints the difference, interval and p that the
    committed table1_paired.md prints for that pair: in a fresh copy with no data (from the shipped scores), and
    again after regenerating the two runs there."""
    import csv
    import os
    import subprocess
    import sys

    from tests.conftest import ROOT, load_benchmark

    load_benchmark("quickstart").fresh_copy(tmp_path)
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
           "PYTHONPATH": str(tmp_path / "src"), "ARK_MIRROR": str(shared_dir)}
    pair = ["baseline@phenopackets-lpo-bm25", "evaluate@ark-phenopackets-lpo"]
    with open(ROOT / "results" / "tables" / "table1_paired.csv") as f:
        row = next(r for r in csv.DictReader(f) if r["compared with"] == "BM25")

    def shows_the_table_cells() -> None:
        shown = subprocess.run([sys.executable, "-m", "ark.cli", "compare", *pair, "--json", str(tmp_path / "c.json")],
                               cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
        assert shown.returncode == 0, shown.stderr[-3000:]
        comparison = json.loads((tmp_path / "c.json").read_text())["comparisons"][0]
        assert comparison["n"] == int(row["phenopackets n"])
        for metric, column in (("hit@1", "phenopackets Hit@1 diff"), ("mrr", "phenopackets MRR diff")):
            e = comparison["difference"][metric]
            assert [round(e[k], 2) for k in ("value", "lo", "hi")] == [float(row[column + s]) for s in ("", " lo", " hi")]
            assert round(e["p"], 3) == float(row[column + " p"])
            cell = f"{float(row[column]):.2f} [{float(row[column + ' lo']):.1f}, {float(row[column + ' hi']):.1f}] " \
                   f"p={float(row[column + ' p']):.3f}"
            assert f"{metric:<10} {cell}" in shown.stdout  # as the table's Markdown prints it

    data = [p for d in ("graph", "index", "queries") for p in (tmp_path / "data" / d).rglob("*")
            if p.is_file() and p.name != ".gitignore"]
    runs = [p for p in (tmp_path / "results" / "runs").rglob("*") if p.is_file() and p.name != ".gitignore"]
    assert not data and not runs  # no graph, no run directory
    shows_the_table_cells()  # from results/scores, shipped with the published entries
    repro = subprocess.run([sys.executable, "-m", "dvc", "repro", *pair], cwd=tmp_path, env=env, capture_output=True,
                           text=True, timeout=1800)
    assert repro.returncode == 0, repro.stdout[-3000:] + repro.stderr[-3000:]
    shows_the_table_cells()  # from the regenerated run directories


def _rewrite(name: str, change):
    def damage(run_dir: Path) -> None:
        path = run_dir / name
        path.write_text(change(path.read_text()))
    return damage


def _scores_change(change):
    def rows(text: str) -> str:
        lines = [json.loads(line) for line in text.splitlines()]
        change(lines)
        return "\n".join(json.dumps(r) for r in lines) + "\n"
    return _rewrite("scores.jsonl", rows)


DAMAGED = {  # what a damaged or edited run directory holds -> the file and words of its one error line
    "metrics-cut": (_rewrite("metrics.json", lambda t: t[: len(t) // 2]), "metrics.json: not a readable metrics file"),
    "metrics-nested": (_rewrite("metrics.json", lambda t: json.dumps({"hit@1": {"a": 1}})), "metrics.json: hit@1 is"),
    "metrics-list": (_rewrite("metrics.json", lambda t: "[1, 2]"), "metrics.json: metrics file must be a mapping"),
    "metrics-edited": (_rewrite("metrics.json", lambda t: json.dumps({**json.loads(t), "hit@1": 0.99})),
                       "but its scores.jsonl's mean is"),
    "config-unclosed": (_rewrite("config.yaml", lambda t: "a: [1, 2\n"), "config.yaml: not a readable run config"),
    "config-empty": (_rewrite("config.yaml", lambda t: ""), "config.yaml: run config must be a mapping"),
    "config-nested": (_rewrite("config.yaml", lambda t: "a: " + "[" * 5000 + "]" * 5000 + "\n"),
                      "config.yaml: not a readable run config"),
    "scores-cut": (_rewrite("scores.jsonl", lambda t: t[: len(t) // 2]), "scores.jsonl: not readable scores"),
    "scores-nan": (_scores_change(lambda rows: rows[0].update({"mrr": float("nan")})), "mrr is 'nan', not a number"),
    "scores-unknown-id": (_scores_change(lambda rows: rows[0].update({"id": "not-a-query"})),
                          "scored queries are not in the query set"),
}


def published(run_dir: Path, results: Path) -> Path:
    """A published entry results/<stage>/<entry>/ of a run directory results/runs/<stage>/<entry>/<run>/."""
    entry = results / run_dir.parent.parent.name / run_dir.parent.name
    entry.mkdir(parents=True)
    for name in ("config.yaml", "metrics.json", "stats.json"):
        (entry / name).write_bytes((run_dir / name).read_bytes())
    return entry


def test_shipped_scores_compare_as_the_runs_do_where_the_runs_are_gone(two_runs, tmp_path):
    """The report's shipped scores (unit and question hash per query) are enough for ark compare: the same result
    as from the run directories, after those are removed."""
    import yaml

    from ark.report.runs import load_runs
    from ark.report.shipped import write_shipped

    bm25, rules, overrides = two_runs
    results = bm25.parent.parent.parent.parent
    paths = tuple(overrides) + (f"paths.results={results}",)
    entries = [published(d, results) for d in (bm25, rules)]
    roots = [results / "runs" / "baseline", results / "runs" / "evaluate"]
    written = write_shipped(load_runs(roots, paths), roots, results / "scores")
    assert sorted(p.relative_to(results / "scores").as_posix() for p in written) == [
        f"baseline/bm25/{bm25.name}.jsonl", f"evaluate/rules/{rules.name}.jsonl"]
    assert write_shipped(load_runs(roots[:1], paths), roots[:1], results / "scores", replace=False) == written[:1]
    assert all(p.is_file() for p in written)  # a clone holding only some runs keeps the others' shipped scores
    assert "2 runs" in (results / "scores" / "README.md").read_text()
    row = json.loads(written[0].read_text().splitlines()[0])
    assert set(row) >= {"id", "question", "hit@1", "mrr"} and len(row["question"]) == 16
    specs = ["baseline@bm25", "evaluate@rules"]
    here = compare(specs, paths)
    shutil.rmtree(results / "runs")
    shipped = compare(specs, paths)
    assert shipped["comparisons"] == here["comparisons"] and here["comparisons"][0]["n"] == 3
    assert [r["metrics"] for r in shipped["runs"]] == [r["metrics"] for r in here["runs"]]
    config = yaml.safe_load((entries[1] / "config.yaml").read_text())
    config["agent"]["T_max"] += 1  # the entry now names another run
    (entries[1] / "config.yaml").write_text(yaml.safe_dump(config))
    with pytest.raises(UserError, match="no shipped scores"):  # another run's entry: its shipped file is not there
        compare(specs, paths)


def test_queries_with_the_same_id_but_another_question_are_not_paired(two_runs, capsys):
    bm25, rules, overrides = two_runs
    records = rules / "records.jsonl"
    rows = [json.loads(line) for line in records.read_text().splitlines()]
    rows[0]["query"] += " (rewritten)"
    records.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert main(["compare", str(bm25), str(rules), "--paths", *overrides]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "another question" in err and rows[0]["id"][:20] in err
    (c,) = compare([str(bm25), str(rules)], tuple(overrides), any_queries=True)["comparisons"]
    assert c["n"] == 2 and c["other_question"] == 1


# the first kind of damage in make test, all of them in make test-e2e (each case is a run copied and read)
@pytest.mark.parametrize("case", [pytest.param(c, marks=[] if i == 0 else pytest.mark.e2e)
                                  for i, c in enumerate(DAMAGED)], ids=list(DAMAGED))
def test_a_damaged_run_is_one_error_line_naming_its_file(two_runs, capsys, case):
    """ark compare reads a run's files through one checked reader: a cut, nested or edited file is exit 2 and one
    `error:` line naming it, never a traceback or a number computed from it."""
    bm25, rules, overrides = two_runs
    damage, words = DAMAGED[case]
    damage(rules)
    assert main(["compare", str(bm25), str(rules), "--paths", *overrides]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and words in err[0], err
    assert str(rules) in err[0]


def test_a_difference_interval_stays_within_what_the_metric_can_be():
    from ark.report.compare import _plain
    from ark.report.intervals import Estimate

    assert _plain(Estimate(-20.0, -115.0, 75.0, 0.5)) == {"value": -20.0, "lo": -100.0, "hi": 75.0, "p": 0.5}
    assert _plain(Estimate(3.0, -2.0, 104.0), 0.0) == {"value": 3.0, "lo": 0.0, "hi": 100.0}
