"""A user's own graph from tables (``ark.data.tables``, docs/own_graph.md): the tables read and checked, the graph and
its questions, the rules policy's vocabulary taken from the graph, and the walkthrough page run as written."""
import asyncio
import io
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from ark.agent.backbones import Serving
from ark.agent.loop import run_agent
from ark.agent.policies import graph_type_words
from ark.config import make
from ark.data.tables import TableGraph, TableQueries
from ark.errors import UserError
from ark.tools.toolbox import Toolbox
from tests.conftest import ROOT, compose_cfg
from tests.helpers import tiny_index

EXAMPLE = ROOT / "docs" / "examples" / "own_graph"
PAGE = ROOT / "docs" / "own_graph.md"
BIOKG_TYPES = ["disease", "gene/protein", "effect/phenotype", "biological_process", "molecular_function",
               "cellular_component", "mode_of_inheritance", "clinical_course", "clinical_modifier", "frequency",
               "past_medical_history", "blood_group", "hpo_other"]


def dataset(tmp_path, files=EXAMPLE, **settings) -> TableGraph:
    return TableGraph(name="mine", raw_dir=str(tmp_path / "raw"), graph_dir=str(tmp_path / "graph"),
                      files=str(files), documents=settings.pop("documents", {"relation_types": "all",
                                                                             "max_per_relation": 100}), **settings)


def write(folder: Path, **tables: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in tables.items():
        (folder / name.replace("_", ".")).write_text(text)
    return folder


NODES = "id,type,name,note\n007,city,Lyon,on the Rhone\nx,person,Ada,\ny,person,,a writer\n"
EDGES = "source,relation,target\nx,lives in,007\ny,lives in,007\nx,lives in,007\n"
QUESTIONS = "question,answer_ids\nWho lives in Lyon?,x; y\n"


def test_tables_become_a_graph_that_keeps_the_users_ids(tmp_path):
    ds = dataset(tmp_path, write(tmp_path / "in", nodes_csv=NODES, edges_csv=EDGES, questions_csv=QUESTIONS))
    copied = ds.download()
    assert sorted(copied) == ["edges", "nodes", "questions"]
    assert all(Path(p).read_text() == (tmp_path / "in" / Path(p).name).read_text() for p in copied.values())
    g = ds.build_graph()
    assert list(g.key) == ["007", "x", "y"]  # row order; a string id stays a string
    assert list(g.name) == ["Lyon", "Ada", "y"]  # an empty name is the id
    assert g.node_type_names == ["city", "person"] and g.relation_names == ["lives in"]
    assert g.num_edges == 2  # the repeated edge counts once
    assert g.node_fields(0) == {"note": "on the Rhone"} and g.node_fields(1) == {}
    assert "- relations:" in g.doc[0] and "Ada" in g.doc[0]  # relation_types: all
    g = dataset(tmp_path, documents={"relation_types": [], "max_per_relation": 100}).build_graph()
    assert "- relations:" not in g.doc[0]


def test_parquet_tables_read_as_their_csv(tmp_path):
    import pandas as pd

    folder = tmp_path / "pq"
    folder.mkdir()
    pd.DataFrame({"id": ["007", "x", "y"], "type": ["city", "person", "person"], "name": ["Lyon", "Ada", ""],
                  "note": ["on the Rhone", "", "a writer"]}).to_parquet(folder / "nodes.parquet")
    pd.read_csv(io.StringIO(EDGES), dtype=str).to_parquet(folder / "edges.parquet")
    pd.DataFrame({"question": ["Who lives in Lyon?"], "answer_ids": [["x", "y"]]}).to_parquet(
        folder / "questions.parquet")
    from_parquet = dataset(tmp_path / "a", folder)
    from_parquet.download()
    from_csv = dataset(tmp_path / "b", write(tmp_path / "in", nodes_csv=NODES, edges_csv=EDGES,
                                             questions_csv=QUESTIONS))
    from_csv.download()
    a, b = from_parquet.build_graph(), from_csv.build_graph()
    assert list(a.key) == list(b.key) and list(a.doc) == list(b.doc) and a.num_edges == b.num_edges


@pytest.mark.parametrize("tables, message", [
    ({"nodes_csv": "id,type\nx,person\n", "edges_csv": EDGES}, r"nodes\.csv: no column name"),
    ({"nodes_csv": NODES, "edges_csv": "source,relation,target\nx,knows,z\n"},
     r"edges\.csv:2: target 'z' is not an id of nodes\.csv"),
    ({"nodes_csv": NODES + "x,city,Paris\n", "edges_csv": EDGES}, r"nodes\.csv:5: duplicate id 'x' \(first at .*:3\)"),
    ({"nodes_csv": NODES, "edges_csv": EDGES, "questions_csv": "question,answer_ids\nWho?,x;q\n"},
     r"questions\.csv:2: answer 'q' is not a node id"),
    ({"nodes_csv": "", "edges_csv": EDGES}, r"nodes\.csv: empty file"),
    ({"nodes_csv": NODES, "edges_csv": "source,relation,target\n"}, r"edges\.csv: no rows below its header"),
    ({"nodes_csv": NODES}, r"no edges\.csv or edges\.parquet"),
    ({"nodes_csv": NODES, "nodes_parquet": "", "edges_csv": EDGES}, r"both nodes\.csv and nodes\.parquet"),
])
def test_bad_tables_stop_the_download_with_one_line_and_write_nothing(tmp_path, tables, message):
    ds = dataset(tmp_path, write(tmp_path / "in", **tables))
    with pytest.raises(UserError, match=message) as e:
        ds.download()
    assert "\n" not in str(e.value)
    assert not Path(ds.raw_dir).exists()


def test_questions_are_split_by_the_pipeline_and_answer_with_graph_ids(tmp_path):
    ds = dataset(tmp_path)
    ds.download()
    ds.build_graph().save(ds.graph_dir)
    config = {"raw_dir": ds.raw_dir, "graph_dir": ds.graph_dir}
    from omegaconf import OmegaConf

    splits, stats = TableQueries(name="tables").make(OmegaConf.create(config))
    assert {s: len(rows) for s, rows in splits.items()} == {"train": 8, "val": 4, "test": 4}
    graph = ds.build_graph()
    first = next(q for rows in splits.values() for q in rows if q["id"] == "1")
    assert first["query"] == "Which books did Mara Quill write?"
    assert [graph.key[v] for v in first["answer_ids"]] == ["b1", "b2"]
    splits, _ = TableQueries(name="tables", split_fractions=[0, 0, 1]).make(OmegaConf.create(config))
    assert len(splits["test"]) == 16


def test_graph_type_words_keep_the_given_words_of_the_graphs_types_only():
    rules = yaml.safe_load((ROOT / "conf" / "backbone" / "rules.yaml").read_text())["type_words"]
    biokg = graph_type_words(rules, BIOKG_TYPES)
    # BioKG's own entries as the file gives them, in its order; the types it does not name by their own names
    assert list(biokg.items())[:6] == [(t, w) for t, w in rules.items() if t in BIOKG_TYPES]
    assert biokg["mode_of_inheritance"] == ["mode of inheritance"] and "drug" not in biokg
    assert graph_type_words(rules, ["author", "gene/protein"]) == {"gene/protein": ["gene", "protein"],
                                                                   "author": ["author"]}
    assert graph_type_words({}, ["field_of_study"]) == {"field_of_study": ["field of study"]}


def test_rules_policy_never_asks_a_graph_for_a_type_it_does_not_have(tmp_path):
    """The issue's failure: on a graph of its own types, the BioKG vocabulary asked for molecular_function."""
    ds = dataset(tmp_path)
    ds.download()
    graph = ds.build_graph()
    tools = Toolbox(graph, tiny_index(graph))
    backbone = make(compose_cfg(["backbone=rules"]).backbone, "backbone")  # BioKG's and STaRK's type_words
    questions = ["Which function does the book about a lighthouse keeper have?",
                 "Which disease, gene or drug appears in The Salt Lantern?",
                 "Which pathway, process or phenotype links Port Selen to its authors?",
                 "Which paper or product did Mara Quill write?", "Which books did Mara Quill write?"]
    asked = set()
    with backbone.policy(tools, 0, Serving()) as policy:
        for q in questions:
            traj = asyncio.run(run_agent(policy.session(q, 0, 10), tools, q, T_max=10, agent=0))
            for m in traj.messages:
                for tc in m.get("tool_calls") or []:
                    asked.add(json.loads(tc["function"]["arguments"]).get("node_type"))
                if m["role"] == "tool":
                    assert not m["content"].startswith("Error"), m["content"]
    assert "book" in asked and asked - {None} <= set(graph.node_type_names)


def test_type_words_for_a_new_type_are_one_documented_override():
    cfg = compose_cfg(["backbone=rules", "+backbone.type_words.author=[author, writer, who]"])
    assert cfg.backbone.type_words.author == ["author", "writer", "who"]
    assert "disease" in cfg.backbone.type_words  # the file's other entries stay, unused on a graph without them


# ------------------------------------------------------------------ the walkthrough page, as written

def blocks(kind: str) -> list[str]:
    return re.findall(rf"^```{kind}\n(.*?)^```", PAGE.read_text(encoding="utf-8"), flags=re.S | re.M)


def test_the_pages_tables_are_the_example_files():
    assert blocks("csv") == [(EXAMPLE / f).read_text() for f in ("nodes.csv", "edges.csv", "questions.csv")]


def test_the_pages_params_line_is_the_pipelines_template():
    """The page's params.yaml lines: the example entry as params.yaml has it, and one of the same shape."""
    (page,) = blocks("yaml")
    entries = yaml.safe_load(page)["table_graphs"]
    shipped = yaml.safe_load((ROOT / "params.yaml").read_text())["table_graphs"]
    assert entries["example"] == shipped["example"] and set(entries["my_graph"]) == set(shipped["example"])
    stages = yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"]
    assert {s for s, body in stages.items() if body.get("foreach") == "${table_graphs}"} == {
        "table_download", "table_build_graph", "table_build_index", "table_make_queries", "table_evaluate"}


@pytest.mark.e2e  # the whole docs walkthrough: ~4 CPU-s
def test_the_walkthroughs_commands_run_in_process(tmp_path, monkeypatch, capsys):
    """The page's commands, each stage's ``run(cfg)`` and ``ark ask`` called in this process with the overrides the
    page gives (fast; the test below runs them as processes): the graph, index, splits, answers and metrics."""
    import importlib
    import shlex

    from ark.cli import ask
    from ark.config import compose

    shutil.copytree(EXAMPLE, tmp_path / "docs" / "examples" / "own_graph")
    monkeypatch.chdir(tmp_path)  # paths.root is the working directory
    variables, answers, results = {}, [], {}
    for line in "\n".join(b for b in blocks("bash") if not b.startswith("dvc ")).splitlines():
        assignment = re.fullmatch(r'(\w+)="(.*)"', line)
        if assignment:
            variables[assignment.group(1)] = assignment.group(2)
            continue
        argv = shlex.split(re.sub(r"\$(\w+)", lambda m: variables[m.group(1)], line))
        if argv[:2] == ["python", "-m"]:
            results[argv[2]] = importlib.import_module(argv[2]).run(compose(argv[3:] + ["logger=none"]))
        elif argv[:2] == ["ark", "ask"]:
            answers.append(ask(argv[2], argv[3:] + ["logger=none"], out=sys.stdout).ranking)
        else:
            subprocess.run(line, shell=True, check=True)
    capsys.readouterr()
    assert results["ark.stages.build_graph"]["num_nodes"] == 19
    assert results["ark.stages.make_queries"]["queries"] == {"train": 8, "val": 4, "test": 4}
    assert answers == [[14, 13], [0, 1, 2, 3]]
    metrics = json.loads((Path(results["ark.stages.evaluate"]["run_dir"]) / "metrics.json").read_text())
    assert metrics["n_queries"] == 4 and metrics["hit@1"] == 0.75
    # ark show rebuilds the run's own graph from its stored settings (dataset=tables dataset.name=...): names, marks
    from ark.report.show import show

    run_dir = results["ark.stages.evaluate"]["run_dir"]
    records = [json.loads(line)["id"] for line in (Path(run_dir) / "records.jsonl").read_text().splitlines()]
    shown = io.StringIO()
    show(run_dir, "#0", out=shown)
    text = shown.getvalue()
    assert "(without" not in text and f"#0 {records[0]}" in text and "✓" in text
    shown = io.StringIO()
    show(run_dir, records[1], out=shown)
    assert f"#1 {records[1]}" in shown.getvalue()


def run_commands(commands: str, cwd: Path) -> str:
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    env.pop("PROJECT_ROOT", None)  # paths.root: the directory the commands run in, as for a user
    out = subprocess.run(["bash", "-euo", "pipefail", "-c", commands], cwd=cwd, env=env, capture_output=True,
                         text=True, timeout=600)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    return out.stdout


@pytest.mark.e2e
def test_the_walkthrough_runs_as_written(tmp_path):
    """Every ```bash block of the page but `dvc repro`, in order, in one shell, from a directory holding the example
    (as a fresh clone does); each step prints what the page shows."""
    shutil.copytree(EXAMPLE, tmp_path / "docs" / "examples" / "own_graph")
    commands = [b for b in blocks("bash") if not b.startswith("dvc ")]
    out = run_commands("\n".join(commands), tmp_path)
    shown = "\n".join(blocks("text"))
    for line in ("my_graph: 19 nodes, 28 edges", "  1. [14] book | The Observatory Letters", "  4. [3] author | Oren Blake",
                 "my_graph/tables: {'queries': {'train': 8, 'val': 4, 'test': 4}"):
        assert line in shown and line in out, line
    evaluated = re.search(r"^evaluate .*", out, flags=re.M).group(0)
    assert evaluated.split(" -> ")[0] in shown
    (metrics,) = (tmp_path / "results" / "runs" / "adhoc").glob("*/metrics.json")
    assert json.loads(metrics.read_text())["n_queries"] == 4


@pytest.mark.slow  # dvc repro of five stages: 15-30 s
def test_the_walkthrough_joins_dvc_repro(tmp_path):
    """The page's params.yaml line and its `dvc repro` command, in a DVC project of this checkout's pipeline."""
    shutil.copytree(EXAMPLE, tmp_path / "my_graph")
    for name in ("dvc.yaml", "deps.yaml"):
        shutil.copy(ROOT / name, tmp_path / name)
    for name in ("src", "conf"):
        (tmp_path / name).symlink_to(ROOT / name)
    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    params["table_graphs"] = yaml.safe_load(blocks("yaml")[0])["table_graphs"]
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
    (tmp_path / "docs" / "examples").mkdir(parents=True)
    shutil.copytree(EXAMPLE, tmp_path / "docs" / "examples" / "own_graph")
    run_commands(f"{sys.executable} -m dvc init --no-scm -q", tmp_path)
    (command,) = [b for b in blocks("bash") if b.startswith("dvc ")]
    out = run_commands(command.replace("dvc ", f"{sys.executable} -m dvc ", 1), tmp_path)
    assert "Running stage 'table_evaluate@my_graph'" in out
    metrics = json.loads((tmp_path / "results" / "table_evaluate" / "my_graph" / "metrics.json").read_text())
    assert metrics["n_queries"] == 4
