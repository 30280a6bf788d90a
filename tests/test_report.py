"""The report: tables and figures from runs recognised by their stored configs, and the paper's numbers beside ours."""
import json
import re
from pathlib import Path

import pytest
import yaml

from ark.report.figures import budget_grid
from ark.report.paper import stark_tables
from ark.report.runs import RunData, load_runs
from ark.report.tables.table5 import table5, table5_all
from tests.test_page import chromium  # noqa: F401  (a fixture)
from tests.conftest import compose_cfg


def write_run(root: Path, name: str, config: dict, hit1: float, invalid: float | None = None, n: int = 50) -> Path:
    d = root / name
    d.mkdir(parents=True)
    (d / "config.yaml").write_text(yaml.safe_dump(config))
    metrics = {"hit@1": hit1, "hit@5": hit1, "recall@20": hit1, "mrr": hit1, "n_queries": n, "n_incomplete": 0}
    (d / "metrics.json").write_text(json.dumps(metrics))
    (d / "stats.json").write_text(json.dumps({} if invalid is None else {"invalid_call_rate": invalid}))
    (d / "scores.jsonl").write_text("".join(json.dumps({"id": f"q{i}", **{m: hit1 for m in ("hit@1", "hit@5", "recall@20", "mrr")}})
                                            + "\n" for i in range(n)))
    if invalid is not None:  # an agent run: one agent per query making 50 calls, this share of them invalid
        agent = {"agent": 0, "messages": [], "tool_calls": {"finish": 50}, "invalid_calls": round(50 * invalid)}
        (d / "records.jsonl").write_text("".join(json.dumps({"id": f"q{i}", "query": "q", "ranking": [],
                                                             "agents": [agent]}) + "\n" for i in range(n)))
    return d


@pytest.mark.e2e  # composes every Table 5 row file: ~10 CPU-s
def test_the_backbone_table_finds_its_runs_by_its_row_files(tmp_path, monkeypatch):
    """Table 5's rows are the runs whose stored settings are what conf/experiment/table5/*.yaml compose to (the
    student's adapter by its content), BM25's the baseline run its row file composes to."""
    from ark.report.runs import experiment_spec
    from ark.build import spec
    from ark.runs.identity import identity

    monkeypatch.chdir(tmp_path)  # the student rows name their adapter relative to the project root
    adapter = tmp_path / "data" / "students" / "embedded"
    adapter.mkdir(parents=True)
    (adapter / "adapter_model.safetensors").write_bytes(b"weights")
    (tmp_path / "distill" / "embedded").mkdir(parents=True)
    (tmp_path / "distill" / "embedded" / "report.json").write_text(json.dumps({"report": {"train_samples": 96}}))
    queries = tmp_path / "data" / "queries" / "biokg" / "synthetic"  # the intervals resample the runs' queries
    queries.mkdir(parents=True)
    (queries / "test.jsonl").write_text("".join(json.dumps({"id": f"q{i}", "query": "q", "answer_ids": [0]}) + "\n"
                                                for i in range(50)))

    def row(experiment: str, stage: str = "evaluate", **change) -> dict:
        config = identity(experiment_spec(experiment, "biokg", "synthetic", ()), stage)
        for key, value in change.items():
            config["agent" if key in ("T_max", "n_agents") else key][key] = value
        return config

    runs = tmp_path / "runs"
    write_run(runs, "a", row("table5/bm25", "baseline"), 0.1)
    write_run(runs, "a2", {**row("table5/bm25", "baseline"), "eval.limit": 20}, 0.1)  # not the row's BM25
    write_run(runs, "b", row("table5/teacher"), 0.4, 0.0)
    write_run(runs, "c", row("table5/base"), 0.0, 0.9, n=20)
    write_run(runs, "d", row("table5/student"), 0.3, 0.02)
    write_run(runs, "e", row("table5/student", T_max=20), 0.5)  # other settings: not a row of this table
    write_run(runs, "f", row("table1/ark"), 0.5)  # another table's row
    on_lpo = identity(experiment_spec("table5/teacher", "biokg_lpo", "synthetic", ()), "evaluate")
    write_run(runs, "f2", on_lpo, 0.9)  # the teacher on another graph than the table scores synthetic on
    (adapter / "adapter_model.safetensors").write_bytes(b"retrained")
    write_run(runs, "g", row("table5/student"), 0.9)  # the retrained adapter's run...
    (adapter / "adapter_model.safetensors").write_bytes(b"weights")  # ...is not the student's now in data/
    t = table5_all(load_runs([runs]), tmp_path / "distill", {"synthetic": "biokg"})
    # one comparison per run length: the first 20 queries (every run, those of 50 on their first 20), then 50
    assert [Path(dirs[0]).name for dirs in t.runs.values()] == ["a", "b", "c", "d", "a", "b", "d"]
    assert [row[1] for row in t.rows] == [20, 20, 20, 20, 50, 50, 50]
    assert [row[2] for row in t.rows] == [20, 20, 20, 20, 50, 50, 50]  # publications: a synthetic query is its own
    assert t.rows[1][3] == "teacher: rules policy, temperature 0.7, answers of up to 5 nodes"
    assert t.rows[2][3] == "SmolLM2-135M base, grammar-constrained"
    student = t.rows[3][4:]  # the student on its first 20: scores (with intervals) and records
    # every query scores the same: the interval is still no point (ark.report.intervals)
    assert all(e.value == 30.0 and e.lo < 30.0 < e.hi for e in student[:4]) and student[4:] == [2.0, 75]
    student = t.rows[-1]
    assert "96 trajectories" in student[3] and "free decoding" in student[3]
    assert student[-1] == 75  # % of the teacher's Hit@1 on the same 50 queries
    shown = t.markdown()  # in blocks of at most 200 columns, each naming its rows
    student_lines = [line for line in shown.splitlines() if line.startswith("| synthetic | 50 | 50 | student: LoRA")]
    assert len(student_lines) == 2 and " ".join(student_lines).count(" 30.00 [") == 4 \
        and "[30.0, 30.0]" not in " ".join(student_lines)
    assert "| 2.00 |" in " ".join(student_lines) and student_lines[-1].endswith("| 75 |") and max(len(line) for line in shown.splitlines()) <= 200
    # at a glance: the student, then each method with the student's paired difference from it, each on the queries
    # both ran (the base model ran 20)
    glance = table5(load_runs([runs]), tmp_path / "distill", {"synthetic": "biokg"})
    assert [(row[1], row[2]) for row in glance.rows] == [
        ("student: LoRA on SmolLM2, 96 trajectories", 50), ("teacher: rules policy", 50), ("SmolLM2-135M base", 20),
        ("BM25", 50)]
    assert glance.rows[0][5:] == [None, None] and [round(row[5].value, 2) for row in glance.rows[1:]] == [
        -10.0, 30.0, 20.0]
    assert [(row[5].better, row[5].worse) for row in glance.rows[1:]] == [(0, 50), (20, 0), (50, 0)]
    shown = glance.markdown().split("\n\n")
    assert len(shown[1].splitlines()) <= 25 and max(len(line) for line in shown[1].splitlines()) <= 200
    assert " +20/-0 |" in shown[1]


def fake_run(config: dict, **metrics) -> RunData:
    return RunData(Path("/runs/x"), config, metrics, {})


@pytest.mark.e2e  # composes the STaRK rows: ~4 CPU-s
def test_stark_tables_put_ours_beside_the_papers_numbers():
    """A paper row's cells are the runs of our row file that names it (conf/experiment/stark/<table>/), by identity."""
    from ark.build import spec
    from ark.report.runs import experiment_spec
    from ark.runs.identity import identity

    def stark_identity(experiment: str, dataset: str, stage: str = "evaluate") -> dict:
        return identity(experiment_spec(experiment, dataset, "stark", ()), stage)

    paper = [{"table": "Table 1", "caption": "main", "row": "BM25", "column": c, "value": v, "version": "v2",
              "source": "arXiv x v2"}
             for c, v in (("PRIME Hit@1", "12.75"), ("MAG Hit@1", "25.85"), ("Average Hit@1", "27.85"))]
    paper += [{"table": "Table 1", "caption": "main", "row": "ARK", "column": c, "value": "48.20", "version": "v2",
               "source": "arXiv x v2"} for c in ("PRIME Hit@1", "MAG Hit@1")]
    bm25 = fake_run(stark_identity("stark/table1/bm25", "stark_prime", "baseline"), **{"hit@1": 0.2})
    other = fake_run({**stark_identity("stark/table1/bm25", "stark_mag", "baseline"), "split": "test-0.1"},
                     **{"hit@1": 0.9})
    ark = fake_run(stark_identity("stark/table1/ark", "stark_prime"), **{"hit@1": 0.5})
    ark_t30 = fake_run(stark_identity("stark/table8/A1T30", "stark_mag"), **{"hit@1": 0.7})  # Table 8's, not ARK's
    table = next(t for t in stark_tables([bm25, other, ark, ark_t30], paper) if t.name == "stark_table1")
    assert table.columns == ["row", "PRIME Hit@1", "MAG Hit@1", "Average Hit@1"]
    assert table.rows[0] == ["BM25", "12.75 / 20.00 (+7.25)", "25.85 / –", "27.85 / –"]  # the 10% run is not "test"
    assert table.rows[1] == ["ARK", "48.20 / 50.00 (+1.80)", "48.20 / –", ""]
    assert table.runs == {"BM25": ["/runs/x"], "ARK": ["/runs/x"]}


def test_the_budget_heatmap_keeps_the_complete_rows_of_its_sweep():
    runs = [fake_run({"agent": {"T_max": T, "n_agents": n}}) for T in (1, 2) for n in (1, 3)]
    runs.append(fake_run({"agent": {"T_max": 20, "n_agents": 3}}))  # another table's run of the same setting
    Ts, agents, cells = budget_grid(runs)
    assert Ts == [1, 2] and agents == [1, 3] and len(cells) == 5


@pytest.fixture
def tiny_runs(tiny_project, tmp_path):
    """Runs on the tiny graph as the DVC matrix makes them: BM25, ARK (3 sampled agents), two ablations on
    test-0.1 and a 2 x 2 budget sweep; queries of two types."""
    from ark.io import write_jsonl
    from ark.stages import baseline, build_index, evaluate

    base = tiny_project + ["eval.progress=false"]
    cfg = compose_cfg(base)
    write_jsonl(Path(cfg.dataset.queries_dir) / "test.jsonl", [
        {"id": "q1", "query": "Which phenotype is slender fingers?", "answer_ids": [3], "meta": {"template": "a"}},
        {"id": "q2", "query": "Which phenotype is the lens of the eye?", "answer_ids": [4, 0],
         "meta": {"template": "a"}},
        {"id": "q3", "query": "Which disease has long fingers?", "answer_ids": [2], "meta": {"template": "b"}},
    ])
    build_index.run(cfg)
    results = tmp_path / "results" / "runs"
    baseline.run(compose_cfg(base + [f"run.root={results}/baseline/bm25"]))
    ark = base + ["+experiment=table1/ark"]  # the report finds each row's runs by its experiment file
    evaluate.run(compose_cfg(ark + [f"run.root={results}/evaluate/ark"]))
    for ablation in ("none", "no_neighbors"):
        evaluate.run(compose_cfg(base + [f"+experiment=table2/{ablation}", f"run.root={results}/evaluate/{ablation}"]))
    for T in (1, 3):
        for n in (1, 2):
            evaluate.run(compose_cfg(ark + [f"agent.T_max={T}", f"agent.n_agents={n}",
                                            f"run.root={results}/budget/synthetic"]))
    return base + ["report.query_sets=[synthetic]", "report.graphs=[biokg]"]


@pytest.mark.e2e
def test_the_report_writes_every_table_and_figure_and_recomputes_voting_exactly(tiny_runs, tmp_path):
    from ark.stages import report

    cfg = compose_cfg(tiny_runs)
    out = report.run(cfg)
    tables, figures = Path(cfg.report.tables), Path(cfg.report.figures)
    for name in [f"table{i}" for i in range(1, 11)] + ["table5_behaviour", "stark_table1", "stark_table2", "stark_table5"]:
        assert (tables / f"{name}.md").read_text().startswith("**") and (tables / f"{name}.csv").exists(), name
    assert sorted(out["figures"]) == ["figure2_hit1.png", "figure2_latency.png", "figure2_recall20.png",
                                      "figure3_tool_use_by_query_type.png", "figure5_neighborhood_calls.png"]
    assert all((figures / f).read_bytes()[:4] == b"\x89PNG" for f in out["figures"])
    metrics = json.loads((tables / "numbers.json").read_text())
    ark = metrics["table1"]["ARK (rules_sampled)"]
    headline = {p.stem: json.loads(p.read_text()) for p in Path(cfg.report.metrics).glob("*.json")}  # dvc metrics show
    assert headline and all(headline[q]["hit@1"]["ark"] == ark[f"{q} Hit@1"] for q in headline)
    assert all(headline[q]["hit@1"]["ark_lo"] <= headline[q]["hit@1"]["ark"] <= headline[q]["hit@1"]["ark_hi"]
               for q in headline)
    # Table 3 re-fuses the stored per-agent lists: its voting row must equal the run's own scores
    assert {k: v for k, v in metrics["table3"]["voting"].items()} == {k: ark[k] for k in metrics["table3"]["voting"]}
    assert set(metrics["table2"]) == {"full toolset", "without neighborhood search"}
    runs = json.loads((tables / "runs.json").read_text())  # make check judges each row by the stages of these
    assert set(runs) == set(metrics) and set(runs["table1"]) == set(metrics["table1"])
    assert all(Path(cfg.paths.root, d).is_dir() or Path(d).is_dir() for d in runs["table1"]["ARK (rules_sampled)"])
    table9 = (tables / "table9.csv").read_text().splitlines()
    assert table9[1].startswith("all,synthetic,9,")  # 3 queries x 3 agents
    # the site: every table, each row linking to pages of its runs that exist
    site = Path(cfg.report.site)
    index = (site / "index.html").read_text()
    assert all(f'<section id="{name}">' in index for name in ("table1", "table2", "table9"))
    links = re.findall(r'href="(runs/[^"]+\.html)"', index)
    assert links and all((site / link).is_file() for link in links)
    assert "../figures/figure2_hit1.png" in index and "ARK (rules_sampled)" in index
    # the same runs give the same bytes (DVC hashes the outputs)
    first = {p.name: p.read_bytes() for d in (tables, figures, site, site / "runs") for p in sorted(d.iterdir())
             if p.is_file()}
    report.run(cfg)
    assert first == {p.name: p.read_bytes() for d in (tables, figures, site, site / "runs") for p in sorted(d.iterdir())
                     if p.is_file()}


@pytest.mark.e2e
def test_the_report_site_opens_in_a_browser_with_every_row_linked(tiny_runs, chromium):
    from ark.stages import report
    from tests.test_page import render

    cfg = compose_cfg(tiny_runs)
    report.run(cfg)
    site = Path(cfg.report.site)
    dom, console = render(chromium, site / "index.html")
    assert console == [] and "Table 1: retrieval on BioKG" in dom
    table1 = dom.split('<section id="table1">')[1].split("</section>")[0]
    rows = [r for r in re.findall(r"<tr>(.*?)</tr>", table1, flags=re.S) if "<td" in r]
    assert len(rows) == 2 and all('href="runs/' in r for r in rows)  # BM25 and ARK, each linked to its run's page
    page, _ = render(chromium, site / re.search(r'href="(runs/[^"]+)"', dom).group(1))
    assert "agent 0:" in page or "ranking (top" in page


def test_the_committed_headline_is_table1s_ark_row():
    """``results/metrics/<query set>.json`` (what ``dvc metrics show`` prints) holds the Hit@1 of Table 1's BM25 row
    and of its ARK row, with their intervals, the row of the report's ARK row file (``report.ark``), not another row
    whose label starts with ARK; and the graph each query set is scored on."""
    import csv

    from ark.report.runs import row_settings
    from ark.report.tables.cells import scored_on
    from tests.conftest import ROOT, compose_cfg

    report = compose_cfg([]).report
    ark_label = row_settings(report.ark)["label"]
    with open(ROOT / "results/tables/table1.csv", newline="") as f:
        rows = {r["method"]: r for r in csv.DictReader(f)}
    headline = {p.stem: json.loads(p.read_text()) for p in (ROOT / "results/metrics").glob("*.json")}
    assert sorted(headline) == sorted(report.query_sets)
    graphs = scored_on(dict(report.graph_of), report.query_sets)
    for q, numbers in headline.items():
        assert numbers["graph"] == graphs[q]
        for method, label in (("bm25", "BM25"), ("ark", ark_label)):
            for end in ("", " lo", " hi"):
                assert numbers["hit@1"][method + end.replace(" ", "_")] == float(rows[label][f"{q} Hit@1{end}"]), \
                    (q, method, end)


def test_the_readme_results_blocks_are_the_reports_tables(tmp_path):
    from ark.report.readme import ROOT, main, sync

    # README.md's and docs/*.md's blocks equal their generated files, and no number is written by hand
    assert main(["--check"]) == 0
    readme = tmp_path / "README.md"
    readme.write_text("x\n<!-- results/tables/table1.md -->\nold numbers\n<!-- end -->\n")
    assert sync(readme, ROOT, check=True) == ["results/tables/table1.md"]
    sync(readme, ROOT)
    assert "old numbers" not in readme.read_text() and sync(readme, ROOT, check=True) == []


def test_hand_written_measured_numbers_are_found_outside_blocks_fences_and_code():
    from ark.report.readme import prose_numbers

    text = ("Took 2.4 h and 34 min; 86 % of it, 48.00 here, 1.64× faster, 9.1 GB peak, 160 tokens/s.\n"
            "Release 0.1.24, `3.11`, T_max 20, 3 agents, Table 5, hit@1, 2 cores.\n"
            "```\npython x.py --sizes 100000 0.5 --timeout 30s\n```\n"
            "<!-- results/tables/table1.md -->\n| 11.16 | 5 % |\n<!-- end -->\nlast 7.5, 96,059 nodes\n")
    assert prose_numbers(text) == [(1, "2.4 h"), (1, "34 min"), (1, "86 %"), (1, "48.00"), (1, "1.64×"),
                                   (1, "9.1 GB"), (1, "160 tokens/s"), (9, "7.5"), (9, "96,059")]


def test_a_same_named_twin_ranked_first_is_a_hit_only_twin_aware(monkeypatch):
    from types import SimpleNamespace

    from ark.report import twins as tw

    names = ["Achondroplasia", "achondroplasia ", "Cystic fibrosis", "Achondroplasia"]
    graph = SimpleNamespace(num_nodes=4, name=names, type_name=lambda v: "gene" if v == 3 else "disease")
    twins = tw.twins_of(graph)
    assert twins == {0: frozenset({1}), 1: frozenset({0})}  # case and spaces aside; a gene is no disease's twin
    gold = {"a": [0], "b": [2], "c": [1], "d": [0]}
    monkeypatch.setattr(tw, "queries_of_run", lambda config, paths, limit: [
        {"id": q, "answer_ids": g} for q, g in gold.items()])
    records = [SimpleNamespace(id="a", ranking=[1, 0]), SimpleNamespace(id="b", ranking=[2]),
               SimpleNamespace(id="c", ranking=[2, 3]), SimpleNamespace(id="d", ranking=[2, 1])]
    hits = tw.twin_hits(SimpleNamespace(config={}, paths=(), records=records), twins)
    assert hits == {"a": (0, 1, 1, 0), "b": (1, 1, 0, 0), "c": (0, 0, 0, 0), "d": (0, 0, 0, 1)}


def test_the_report_settings_are_typed_and_check_themselves():
    from ark.config import resolved
    from ark.errors import UserError
    from ark.report.settings import report_settings
    from tests.conftest import compose_cfg

    r = report_settings(resolved(compose_cfg([]).report))
    assert r.biokg is True and r.every_case.graph == "biokg_lpo_all" and "synthetic" in r.query_sets
    for override, key in (("report.biokg=maybe", "report.biokg"), ("report.query_sets=[1]", "report.query_sets"),
                          ("+report.tabels=x", "tabels"), ("report.graph_of={a: 1}", "report.graph_of")):
        with pytest.raises(UserError, match=key):
            report_settings(resolved(compose_cfg([override]).report))


def test_the_behaviour_table_reads_what_each_trajectory_did_and_no_gold(tmp_path):
    """Table 5's companion: global searches, neighborhood calls by their node_type filter, steps and the first
    answer's node type, per trajectory, from its messages and answer alone."""
    from ark.report.tables.tool_use import behaviour_rows, neighborhood_types

    def call(name: str, **args) -> dict:
        return {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c", "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}]}

    observation = {"role": "tool", "tool_call_id": "c", "content": "..."}
    explorer = {"agent": 0, "answer": [7, 3], "steps": 4, "tool_calls": {"search_in_graph": 1},
                "messages": [{}, {}, call("search_in_graph", query="x"), observation,
                             call("search_in_neighborhood", node_index=1, node_type="gene/protein"), observation,
                             call("search_in_neighborhood", node_index=2, node_type=["disease", "gene/protein"]),
                             observation, call("search_in_neighborhood", node_index=2), observation,
                             call("search_in_neighborhood", node_index=9, node_type="disease")]}  # never ran
    quitter = {"agent": 0, "answer": [], "steps": 1, "tool_calls": {}, "messages": [{}, {}, call("finish")]}
    d = tmp_path / "run"
    d.mkdir()
    (d / "records.jsonl").write_text("".join(json.dumps({"id": i, "query": "q", "ranking": [], "agents": [a]}) + "\n"
                                             for i, a in (("q1", explorer), ("q2", quitter))))
    (d / "config.yaml").write_text("{}")
    run = RunData(d, {}, {}, {})
    types = {7: "gene/protein", 3: "disease"}
    rows = behaviour_rows(run, types.__getitem__)
    assert rows == [{"query": "q1", "global_calls": 1, "neighborhood": ["gene/protein", "disease+gene/protein", "any"],
                     "steps": 4, "first_answer": "gene/protein"},
                    {"query": "q2", "global_calls": 0, "neighborhood": [], "steps": 1, "first_answer": None}]
    assert neighborhood_types("not json") == "any" and neighborhood_types({"node_type": []}) == "any"
    assert neighborhood_types({"node_type": 5}) == "any" and neighborhood_types({"node_type": ["drug", 5]}) == "drug"


def test_a_paired_cell_prints_its_counts_and_a_bound_never_hides_its_side_of_0():
    """cell_text: +a/-b after p; a bound of 0.04 prints as 0.04, not 0.0 (beside p < 0.05 it would look like a
    disagreement); flat() gives the counts their own CSV columns; blocks() splits a query set too wide for one."""
    from ark.report.intervals import Estimate
    from ark.report.tables.table import Table, bound_text, cell_text

    assert cell_text(Estimate(2.0, 0.04, 4.1, 0.03, 5, 1)) == "2.00 [0.04, 4.1] p=0.030 +5/-1"
    assert cell_text(Estimate(2.0, -0.3, 4.1)) == "2.00 [-0.3, 4.1]"
    assert (bound_text(0.0), bound_text(-0.004), bound_text(12.34)) == ("0.0", "-0.004", "12.3")
    t = Table("t", "title", ["method", "x diff"], keys=1)
    t.add(["a", Estimate(2.0, 0.5, 4.0, 0.01, 3, 0)])
    assert t.flat() == (["method", "x diff", "x diff lo", "x diff hi", "x diff p", "x diff better", "x diff worse"],
                        [["a", 2.0, 0.5, 4.0, 0.01, 3, 0]])
    wide = Table("w", "title", ["method"] + [f"phenopackets column {i} " + "y" * 40 for i in range(6)], keys=1)
    wide.add(["a"] + [1.0] * 6)
    assert len(wide.blocks()) > 1 and max(map(len, wide.markdown().splitlines())) <= 200


def test_a_run_behind_every_row_is_listed_once_before_the_rows_own():
    from ark.report.tables.table import Table

    t = Table("t", "ARK minus each", ["compared with", "x diff"])
    for label, own in (("BM25", "runs/bm25"), ("dense", "runs/dense")):
        t.add([label, 1.0], [RunData(Path("runs/ark"), {}, {}, {}), RunData(Path(own), {}, {}, {})])
    runs = t.markdown().split("Runs (")[1].splitlines()[1:]
    assert runs == ["- every row:", "  `runs/ark`", "- BM25:", "  `runs/bm25`", "- dense:", "  `runs/dense`"]


def test_no_published_p_disagrees_with_its_interval():
    """Every paired cell of the committed tables: p < 0.05 exactly where the interval excludes 0, and it says on how
    many queries each method scored higher (ark.report.intervals.paired)."""
    import csv

    from tests.conftest import ROOT

    cells = 0
    for path in sorted((ROOT / "results" / "tables").glob("*.csv")):
        with open(path, newline="") as f:
            for row in csv.DictReader(f):
                for column in [c[: -len(" p")] for c in row if c.endswith(" p") and row[c]]:
                    lo, hi, p = (float(row[f"{column}{s}"]) for s in (" lo", " hi", " p"))
                    assert (p < 0.05) == (lo > 0 or hi < 0), (path.name, column, lo, hi, p)
                    assert row[f"{column} better"] and row[f"{column} worse"], (path.name, column)
                    cells += 1
    assert cells > 50


def test_every_published_table_fits_in_200_columns():
    from tests.conftest import ROOT

    wide = [(p.name, len(line)) for p in sorted((ROOT / "results" / "tables").glob("*.md"))
            for line in p.read_text().splitlines() if len(line) > 200]
    assert not wide, wide
