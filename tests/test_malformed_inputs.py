"""A corpus of malformed inputs: each runs a real stage, which must end with exit status 2 and one clear line
(no traceback) and leave every file of the project as it was (no partial run, graph, index or query set).

Most cases call the stage's ``run(cfg)`` under ``clear_errors`` in-process; those marked ``sub`` run
``python -m ark.stages.<name>`` to check the real exit line as well.
"""
import gzip
import hashlib
import importlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from ark.errors import UserError
from tests.conftest import ROOT, compose_cfg

BASE = ["logger=none", "retriever.params.stemmer=null", "backbone=rules", "agent.n_agents=1", "eval.progress=false"]
RUN = "results/runs/adhoc"  # where the template's finished evaluate run lives
PACKET = {"id": "c1", "subject": {"sex": "FEMALE"}, "phenotypicFeatures": [{"type": {"id": "N:3"}}],
          "diseases": [{"term": {"id": "N:0"}}], "metaData": {"externalReferences": [{"id": "PMID:1"}]}}


def paths(p: Path) -> list[str]:
    return [f"paths.data={p}/data", f"paths.results={p}/results", f"paths.root={p}"]


@pytest.fixture(scope="module")
def template(tmp_path_factory):
    """A small project: the tiny graph and its index, test/train queries, a finished evaluate run, a STaRK QA
    folder and a phenopacket file, all valid."""
    from ark.io import write_jsonl
    from ark.stages import build_index, evaluate
    from tests.helpers import tiny_graph

    p = tmp_path_factory.mktemp("template")
    cfg = compose_cfg(paths(p) + BASE)
    tiny_graph().save(cfg.dataset.graph_dir)
    build_index.run(cfg)
    queries = Path(cfg.dataset.queries_dir)
    write_jsonl(queries / "test.jsonl", [{"id": "q1", "query": "slender fingers", "answer_ids": [3]},
                                         {"id": "q2", "query": "lens of the eye", "answer_ids": [4, 0]},
                                         {"id": "q3", "query": "heart valve", "answer_ids": [6]}])
    write_jsonl(queries / "train.jsonl", [{"id": "t1", "query": "long fingers", "answer_ids": [3]}])
    evaluate.run(cfg)
    qa = p / "qa"
    (qa / "stark_qa").mkdir(parents=True)
    (qa / "stark_qa" / "stark_qa.csv").write_text('id,query,answer_ids\n0,a question,"[1, 2]"\n1,another,[3]\n')
    (qa / "split").mkdir()
    for split, ids in (("train", "0\n"), ("val", "1\n"), ("test", "1\n")):
        (qa / "split" / f"{split}.index").write_text(ids)
    (p / "cases.jsonl").write_text(json.dumps(PACKET) + "\n")
    return p


# ------------------------------------------------------------------ damage, applied to a copy of the template
def rows(*rows):
    def damage(p):
        (queries_dir(p) / "test.jsonl").write_text("".join(r if isinstance(r, str) else json.dumps(r) + "\n"
                                                           for r in rows))
    return damage


def queries_dir(p):
    return p / "data/queries/biokg/synthetic"


def write(name, data):
    def damage(p):
        path = p / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data) if isinstance(data, bytes) else path.write_text(data)
    return damage


def remove(name):
    return lambda p: shutil.rmtree(p / name) if (p / name).is_dir() else (p / name).unlink()


def cut(name, keep=0.5):
    def damage(p):
        data = (p / name).read_bytes()
        (p / name).write_bytes(data[: int(len(data) * keep)])
    return damage


def npy(name, change, checksums=True):
    """A CSR array changed in place; ``checksums=False``: as in a graph whose summary has none (the range checks
    must catch it)."""
    def damage(p):
        path = p / "data/graph/biokg" / f"csr_{name}.npy"
        a = np.load(path)
        change(a)
        np.save(path, a)  # same size, same dtype
        if not checksums:
            summary = p / "data/graph/biokg/summary.json"
            summary.write_text(json.dumps({k: v for k, v in json.loads(summary.read_text()).items() if k != "files"}))
    return damage


def index_npy(change):
    """The BM25 index's postings (its first .npy in name order) changed in place, or cut (``change`` None)."""
    def damage(p):
        path = sorted((p / "data/index/biokg/bm25").glob("*.npy"))[0]
        if change is None:
            path.write_bytes(path.read_bytes()[:-8])
            return
        a = np.load(path)
        change(a)
        np.save(path, a)
    return damage


def index_info(change):
    def damage(p):
        path = p / "data/index/biokg/bm25/info.json"
        info = json.loads(path.read_text())
        change(info)
        path.write_text(json.dumps(info))
    return damage


def set_at(i, value):
    def change(a):
        a[i] = value
    return change


def swap_indptr(a):
    a[3], a[4] = a[4], a[3]


def edges_out_of_range(p):
    path = p / "data/graph/biokg/edges.parquet"
    edges = pd.read_parquet(path)
    edges.loc[0, "src"] = 999
    edges.to_parquet(path, index=False)


def records(change):
    def damage(p):
        path = next((p / RUN).glob("*/records.jsonl"))
        lines = path.read_bytes().splitlines(keepends=True)
        path.write_bytes(b"".join(change(lines)))
    return damage


def run_file(name, data):
    def damage(p):
        next((p / RUN).glob("*/records.jsonl")).with_name(name).write_text(data)
    return damage


def gzip_cut(p):
    data = gzip.compress(b"".join(json.dumps({**PACKET, "id": f"c{i}"}).encode() + b"\n" for i in range(200)))
    (p / "cases.jsonl").write_bytes(data[: len(data) // 2])


def other_config(p):
    config = next((p / RUN).glob("*/config.yaml"))
    config.write_text(config.read_text().replace("T_max: 20", "T_max: 7"))


def teacher(p):
    return [f"distill.teacher={next((p / RUN).glob('*/config.yaml')).parent}"]


def empty_graph(p):
    from ark.graph import Graph

    shutil.rmtree(p / "data/graph/biokg")
    Graph.from_tables(["disease"], ["r"], [], [], [], [], [], [], [], doc=[]).save(p / "data/graph/biokg")


def record_field(name, value):
    """The first record of the finished run with ``name`` set to ``value``."""
    def change(lines):
        first = json.loads(lines[0])
        first[name] = value
        return [json.dumps(first).encode() + b"\n", *lines[1:]]
    return records(change)


def mkfifo(name):
    def damage(p):
        (p / name).unlink()
        os.mkfifo(p / name)
    return damage


def mkdir(name):
    return lambda p: (p / name).mkdir(parents=True, exist_ok=True)


def packets_and_loop(p):
    """A directory of one good phenopacket file and a link to itself named like one."""
    (p / "cases").mkdir()
    (p / "cases" / "c1.json").write_text(json.dumps(PACKET))
    (p / "cases" / "loop.json").symlink_to(p / "cases" / "loop.json")


def symlink_loop(p):
    (p / "loop").symlink_to(p / "loop")


def records_directory(p):
    """The finished run's records.jsonl replaced by a directory of that name."""
    path = next((p / RUN).glob("*/records.jsonl"))
    path.unlink()
    path.mkdir()


PHENO = ["queries=phenopackets", "queries.source=${paths.root}/cases.jsonl"]
STARK = ["dataset=stark_prime", "queries=stark", "queries.qa_dir=${paths.root}/qa"]
Q = "test.jsonl row 2"
CANARY = "sk-canary-0c41e7d29a8b4f35"
DEEP = "[" * 100_000 + "]" * 100_000

# (id, stage, overrides, damage, message in the error line, subprocess)
CASES = [
    # configuration values and types
    ("T_max-0", "evaluate", ["agent.T_max=0"], None, "agent.T_max must be an integer >= 1", False),
    ("n_agents-str", "evaluate", ["agent.n_agents=three"], None, "agent.n_agents must be an integer", False),
    ("concurrency-0", "evaluate", ["eval.concurrency=0"], None, "eval.concurrency must be an integer >= 1", True),
    ("collect-concurrency-0", "collect", ["eval.concurrency=0"], None, "eval.concurrency must be", False),
    ("limit-negative", "baseline", ["eval.limit=-1"], None, "eval.limit must be null or an integer", False),
    ("aggregation", "evaluate", ["agent.aggregation=borda"], None, "agent.aggregation must be one of", False),
    ("metric-k0", "evaluate", ["metrics=[hit@0]"], None, "unknown metric 'hit@0'", False),
    ("metrics-not-list", "evaluate", ["metrics=hit@1"], None, "metrics must be a non-empty list", False),
    ("depth-0", "baseline", ["baseline.depth=0"], None, "baseline.depth must be an integer >= 1", False),
    ("neighbor_k-str", "evaluate", ["agent.neighbor_k=abc"], None, "agent.neighbor_k must be", False),
    ("global_k-0", "evaluate", ["agent.global_k=0"], None, "agent.global_k must be", False),
    ("split-unknown", "evaluate", ["split=dev"], None, "unknown split 'dev'", False),
    ("trajectories-0", "collect", ["collect.trajectories=0"], None, "collect.trajectories must be", False),
    ("budget-negative", "collect", ["collect.budget=-3"], None, "collect.budget must be null or", False),
    ("seed-negative", "evaluate", ["seed=-1"], None, "seed must be an integer >= 0", False),
    ("temperature-str", "evaluate", ["backbone.temperature=hot"], None, "backbone.temperature must be", False),
    ("allow_incomplete-str", "evaluate", ["eval.allow_incomplete=maybe"], None, "must be true or false", False),
    ("cap-0", "make_queries", PHENO + ["queries.cap_per_disease=0"], None, "queries.cap_per_disease must", False),
    ("fractions", "make_queries", ["queries.split_fractions=[1,-1,0]"], None, "split_fractions must be three",
     False),
    ("answers-min-max", "make_queries", ["queries.min_answers=5", "queries.max_answers=2"], None, "exceeds", False),
    # query files
    ("row-no-query", "evaluate", [], rows({"id": "q1", "query": "x", "answer_ids": [1]}, {"id": "q2"}),
     f"{Q}: needs a string 'id' and a non-empty string 'query'", False),
    ("row-no-id", "evaluate", [], rows({"id": "q1", "query": "x", "answer_ids": [1]}, {"query": "x"}),
     f"{Q}: expected a JSON object with a non-empty string 'id'", False),
    ("row-no-answers", "evaluate", [], rows({"id": "q1", "query": "x", "answer_ids": [1]}, {"id": "q2", "query": "y"}),
     f"{Q}: answer_ids must be a list of node ids in 0..30", False),
    ("answers-str", "evaluate", [], rows({"id": "q1", "query": "x", "answer_ids": "12"}),
     "row 1: answer_ids must be a list of node ids in 0..30 (at least one); got '12'", False),
    ("answer-out-of-range", "baseline", [], rows({"id": "q1", "query": "x", "answer_ids": [999]}), "got [999]",
     False),
    ("answer-bool", "evaluate", [], rows({"id": "q1", "query": "x", "answer_ids": [True]}), "got [True]", False),
    ("answers-empty", "evaluate", [], rows({"id": "q1", "query": "x", "answer_ids": []}), "got []", False),
    ("row-not-object", "evaluate", [], rows({"id": "q1", "query": "x", "answer_ids": [1]}, [1, 2]),
     f"{Q}: expected a JSON object", False),
    ("row-bad-json", "evaluate", [], rows('{"id": "q1", "query": \n'), "test.jsonl:1: not valid JSON", False),
    ("row-duplicate-id", "evaluate", [], rows({"id": "q1", "query": "x", "answer_ids": [1]},
                                              {"id": "q1", "query": "y", "answer_ids": [2]}),
     "duplicate query id 'q1'", False),
    ("subset-row-no-id", "evaluate", ["split=test-0.5"], rows({"id": "q1", "query": "x", "answer_ids": [1]},
                                                               {"query": "y"}), "expected a JSON object", False),
    ("collect-row-no-id", "collect", ["collect.split=test"], rows({"query": "x"}), "row 1: expected a JSON object",
     False),
    ("queries-not-utf8", "baseline", [], write("data/queries/biokg/synthetic/test.jsonl", b'{"id": "q\xff"}\n'),
     "not UTF-8 text", False),
    ("queries-missing", "evaluate", ["split=val"], None, "no query file", False),
    # phenopacket files
    ("pheno-missing", "make_queries", ["queries=phenopackets", "queries.source=${paths.root}/nope.jsonl"], None,
     "no phenopacket file at", False),
    ("pheno-cut-line", "make_queries", PHENO, write("cases.jsonl", json.dumps(PACKET)[:40] + "\n"),
     "cases.jsonl, line 1: not valid JSON", False),
    ("pheno-not-object", "make_queries", PHENO, write("cases.jsonl", "[1, 2]\n"), "expected a JSON object", False),
    ("pheno-bad-utf8", "make_queries", PHENO, write("cases.jsonl", json.dumps(PACKET).encode() + b"\n\xff\xfe\n"),
     "not UTF-8 text", True),
    ("pheno-gzip-cut", "make_queries", PHENO, gzip_cut, "damaged gzip stream", False),
    ("pheno-wrong-type", "make_queries", PHENO, write("cases.jsonl", json.dumps({**PACKET, "phenotypicFeatures": "x"})),
     "phenopacket 1 (id 'c1'): a field has the wrong type", False),
    # graph files
    ("graph-missing-array", "evaluate", [], remove("data/graph/biokg/csr_nbr.npy"), "missing csr_nbr.npy", False),
    ("graph-cut-array", "evaluate", [], cut("data/graph/biokg/csr_rel.npy", 0.8), "csr_rel.npy", False),
    ("graph-nbr-out-of-range", "evaluate", [], npy("nbr", set_at(3, 10**6)), "csr_nbr.npy: its size or checksum",
     True),
    ("graph-nbr-out-of-range-unsummed", "evaluate", [], npy("nbr", set_at(3, 10**6), checksums=False),
     "has no file checksums in summary.json", False),
    ("graph-rel-unsummed", "baseline", [], npy("rel", set_at(0, 99), checksums=False),
     "has no file checksums in summary.json", False),
    ("graph-summary-removed", "evaluate", [], remove("data/graph/biokg/summary.json"), "has no summary.json", False),
    # index files: posting ids shifted by one (a valid .npy of the same size), a file cut, no checksums
    ("index-postings-shifted", "evaluate", [], index_npy(lambda a: a.__setitem__(slice(None), (a + 1) % a.max())),
     "damaged index file", False),
    ("index-file-cut", "baseline", [], index_npy(None), "damaged index file", False),
    ("index-no-checksums", "evaluate", [], index_info(lambda info: info.pop("files")),
     "has no file checksums in info.json", False),
    ("graph-nbr-negative", "baseline", [], npy("nbr", set_at(0, -1)), "csr_nbr.npy", False),
    ("graph-indptr", "evaluate", [], npy("indptr", swap_indptr), "csr_indptr.npy", False),
    ("graph-indptr-end", "evaluate", [], npy("indptr", set_at(-1, 7)), "csr_indptr.npy", False),
    ("graph-rel", "evaluate", [], npy("rel", set_at(0, 99)), "csr_rel.npy", False),
    ("graph-eid", "evaluate", [], npy("eid", set_at(0, 10**5)), "csr_eid.npy", False),
    ("graph-edges", "baseline", [], edges_out_of_range, "edges.parquet", False),
    ("graph-cut-nodes", "baseline", [], cut("data/graph/biokg/nodes.parquet"), "nodes.parquet", False),
    ("graph-schema", "build_index", [], write("data/graph/biokg/schema.json", "{"), "schema.json", False),
    ("graph-none", "build_index", [], remove("data/graph/biokg"), "no graph at", False),
    # STaRK files
    ("stark-no-column", "make_queries", STARK, write("qa/stark_qa/stark_qa.csv", "id,query\n0,a\n"),
     "no column answer_ids", False),
    ("stark-answers", "make_queries", STARK, write("qa/stark_qa/stark_qa.csv", "id,query,answer_ids\n0,a,12)\n"),
     "stark_qa.csv:2: expected an integer id", False),
    ("stark-id", "make_queries", STARK, write("qa/stark_qa/stark_qa.csv", "id,query,answer_ids\nx,a,[1]\n"),
     "got id 'x'", False),
    ("stark-index-token", "make_queries", STARK, write("qa/split/test.index", "1\nabc\n"), "'abc' is not a query id",
     False),
    ("stark-index-unknown", "make_queries", STARK, write("qa/split/val.index", "77\n"), "ids not in", False),
    ("stark-qa-missing", "make_queries", STARK, remove("qa/stark_qa/stark_qa.csv"), "is missing", False),
    # run files (resuming the template's finished run)
    ("records-bad-json", "evaluate", [], records(lambda ls: [ls[0], b'{"id": "q2", "que\n', ls[2]]),
     "records.jsonl line 2 is not a valid record", False),
    ("records-bad-utf8", "evaluate", [], records(lambda ls: [ls[0], ls[1][:30] + b"\xff" + ls[1][31:], ls[2]]),
     "records.jsonl line 2 is not a valid record", True),
    ("records-not-record", "evaluate", [], records(lambda ls: [b"[1, 2]\n", *ls[1:]]),
     "records.jsonl line 1 is not a valid record", False),
    ("config-damaged", "evaluate", [], run_file("config.yaml", "{: [\n"), "config.yaml is damaged", False),
    ("config-other", "evaluate", [], other_config, "holds another configuration", False),
    ("teacher-cut", "distill", teacher, records(lambda ls: [*ls[:2], ls[2][:20]]), "line 3 is incomplete", False),
    ("records-foreign-id", "evaluate", [], record_field("id", "not-in-the-split"), "which is not among this run's",
     False),
    ("records-other-text", "evaluate", [], record_field("query", "a question since rewritten"),
     "was made for another question text", False),
    # limits and missing settings
    ("T_max-removed", "evaluate", ["~agent.T_max"], None, "agent.T_max: missing from the config", False),
    ("n_agents-huge", "evaluate", ["agent.n_agents=1000000"], None, "is over limits.n_agents=64", False),
    ("n_agents-float", "evaluate", ["agent.n_agents=1e6"], None, "agent.n_agents must be an integer", False),
    ("T_max-huge", "evaluate", ["agent.T_max=100000"], None, "is over limits.T_max", False),
    ("question-huge", "evaluate", [], rows({"id": "q1", "query": "x " * 5_000_000, "answer_ids": [1]}),
     "over limits.query_chars", False),
    ("question-huge-baseline", "baseline", [], rows({"id": "q1", "query": "slender " * 10_000, "answer_ids": [1]}),
     "over limits.query_chars", False),
    # the command line (checked before Hydra composes it)
    ("group-unknown", "evaluate", ["agent=nonexistent"], None, "agent=nonexistent: no such option", True),
    ("override-syntax", "evaluate", ["agent.T_max=3=4"], None, "bad override", True),
    ("sweep-without-multirun", "evaluate", ["agent.T_max=1,2"], None, "add --multirun", True),
    ("experiment-unknown", "evaluate", ["+experiment=table1/nope"], None, "no such option", True),
    # files that are not what they should be
    ("queries-directory", "evaluate", [], lambda p: (remove("data/queries/biokg/synthetic/test.jsonl")(p),
                                                     mkdir("data/queries/biokg/synthetic/test.jsonl")(p)),
     "is not a regular file", False),
    ("queries-fifo", "evaluate", [], mkfifo("data/queries/biokg/synthetic/test.jsonl"), "is not a regular file",
     False),
    ("collect-queries-fifo", "collect", ["collect.split=test"], mkfifo("data/queries/biokg/synthetic/test.jsonl"),
     "is not a regular file", False),
    ("run-root-file", "evaluate", ["run.root=${paths.root}/cases.jsonl"], None, "cannot make the run directory",
     False),
    ("run-root-loop", "evaluate", ["run.root=${paths.root}/loop/runs"], symlink_loop, "cannot make the run directory",
     False),
    ("cache-garbage", "evaluate", ["backbone=gpt-4.1", "llm.cache=${paths.root}/cache.sqlite"],
     write("cache.sqlite", b"not a database, just bytes" * 100), "not an LLM response cache", False),
    ("cache-directory", "evaluate", ["backbone=gpt-4.1", "llm.cache=${paths.root}/cachedir"], mkdir("cachedir"),
     "not a file", False),
    ("index-empty-graph", "build_index", [], empty_graph, "has no nodes", False),
    # nested past what Python's JSON parser reads (a RecursionError inside json.loads)
    ("row-deep", "evaluate", [], rows({"id": "q1", "query": "x", "answer_ids": [1]}, DEEP + "\n"),
     "test.jsonl:2: nested deeper than the JSON reader's limit", True),
    ("pheno-deep-line", "make_queries", PHENO, write("cases.jsonl", json.dumps(PACKET) + "\n" + DEEP + "\n"),
     "cases.jsonl, line 2: nested deeper", False),
    ("pheno-deep-document", "make_queries", PHENO, write("cases.jsonl", DEEP.replace("[", "[\n")),
     "cases.jsonl: nested deeper", False),
    ("records-deep", "evaluate", [], records(lambda ls: [ls[0], DEEP.encode() + b"\n", ls[2]]),
     "records.jsonl line 2: nested deeper", False),
    # a secret as an override: refused before Hydra writes its logs (nothing written holds it)
    ("secret-api_key", "evaluate", ["backbone=gpt-4.1", f"+backbone.extra.api_key={CANARY}"], None,
     "backbone.extra.api_key is an argument the client sets itself", True),
    ("secret-password", "collect", [f"+backbone.extra.db_password={CANARY}"], None,
     "backbone.extra.db_password: the command line may set only litellm's non-secret settings", True),
    ("pheno-dir-loop", "make_queries", ["queries=phenopackets", "queries.source=${paths.root}/cases"], packets_and_loop,
     "loop.json: not a readable file (a broken or looping link?)", False),
    ("pheno-empty", "make_queries", PHENO, write("cases.jsonl", ""), "holds no phenopacket", False),
    ("pheno-blank-lines", "make_queries", PHENO, write("cases.jsonl", "\n  \n\n"), "holds no phenopacket", False),
    ("pheno-none-usable", "make_queries", PHENO, write("cases.jsonl", json.dumps({**PACKET, "diseases": []}) + "\n"),
     "none of the 1 phenopackets makes a query", False),
    # settings that contradict each other or the machine
    ("max-cost-negative", "evaluate", ["eval.max_cost_usd=-1"], None, "eval.max_cost_usd must be null or a finite number",
     False),
    ("total-cap-without-ledger", "evaluate", ["eval.max_total_cost_usd=5"], None, "needs eval.spend_ledger", False),
    # values out of range, each refused by the settings class that holds it (ark.settings, the backbones)
    ("rules-search_size-0", "evaluate", ["backbone.search_size=0"], None,
     "backbone.search_size must be an integer >= 1", False),
    ("rules-max_answer-0", "evaluate", ["backbone.max_answer=0"], None, "backbone.max_answer must be an integer >= 1",
     False),
    ("rules-expand-negative", "evaluate", ["backbone.expand=-1"], None, "backbone.expand must be an integer >= 0",
     False),
    ("rules-vote_weight-nan", "evaluate", ["backbone.vote_weight=nan"], None,
     "backbone.vote_weight must be a finite number >= 0", False),
    ("hosted-max_tokens-negative", "evaluate", ["backbone=gpt-4.1", "backbone.max_tokens=-5"], None,
     "backbone.max_tokens must be an integer >= 1", False),
    ("hosted-top_p-5", "evaluate", ["backbone=gpt-4.1", "+backbone.top_p=5"], None,
     "backbone.top_p must be null or a finite number > 0 and <= 1", False),
    ("hosted-tool_mode-bogus", "evaluate", ["backbone=gpt-4.1", "backbone.tool_mode=bogus"], None,
     "backbone.tool_mode must be one of native, text", False),
    ("hosted-tool_choice-bogus", "evaluate", ["backbone=gpt-4.1", "backbone.tool_choice=bogus"], None,
     "backbone.tool_choice must be one of", False),
    ("hosted-context_window-negative", "evaluate", ["backbone=gpt-4.1", "+backbone.context_window=-1"], None,
     "backbone.context_window must be null or an integer >= 1", False),
    ("hosted-api_base-not-a-url", "evaluate", ["backbone=gpt-4.1", "backbone.api_base=not-a-url"], None,
     "backbone.api_base must be null or an http(s):// URL", False),
    ("hosted-api_base-with-a-credential", "evaluate", ["backbone=gpt-4.1", "backbone.api_base=http://u:sk-1@h.org/v1"],
     None, "backbone.api_base carries a credential", False),
    ("served-nothing-listens", "evaluate", ["backbone=served", "backbone.api_base=http://127.0.0.1:9/v1"], None,
     "nothing answers at http://127.0.0.1:9/v1 (connection refused): start the server first", False),
    ("hosted-model-empty", "evaluate", ["backbone=gpt-4.1", "backbone.model=''"], None,
     "backbone.model must name a model", False),
    ("max-cost-inf", "evaluate", ["eval.max_cost_usd=inf"], None,
     "eval.max_cost_usd must be null or a finite number >= 0 (US dollars), got inf", False),
    ("cpu_threads-negative", "evaluate", ["cpu_threads=-1"], None, "cpu_threads must be null or an integer >= 1",
     False),
    ("max-cost-nan", "evaluate", ["eval.max_cost_usd=nan"], None, "eval.max_cost_usd must be null or a finite number",
     False),
    ("cap-on-an-unpriced-model", "evaluate", ["backbone=gpt-4.1", "backbone.model=openai/my-proxy-alias",
                                              "eval.max_cost_usd=0.01"], None, "has no price in litellm's price map",
     False),
    ("retry-max_attempts-0", "evaluate", ["llm.retry.max_attempts=0"], None,
     "llm.retry.max_attempts must be an integer >= 1", True),
    ("retry-base_delay-negative", "evaluate", ["llm.retry.base_delay=-1"], None,
     "llm.retry.base_delay must be a finite number >= 0", False),
    ("retry-timeout-negative", "evaluate", ["llm.retry.timeout=-1"], None, "llm.retry.timeout must be a finite number > 0",
     False),
    ("agent-key-mistyped", "evaluate", ["agent.T_maxx=3"], None, "Could not override 'agent.T_maxx'", True),
    ("agent-key-added", "evaluate", ["+agent.T_maxx=3"], None, "agent has no setting T_maxx", False),
    ("global_k-over-max", "evaluate", ["agent.global_k=50"], None, "is over agent.global_k_max=30", False),
    ("idle_limit-0", "evaluate", ["agent.idle_limit=0"], None, "agent.idle_limit must be null or an integer >= 1",
     False),
    ("toolset-unknown", "evaluate", ["+agent.toolset=ark_v9"], None, "agent.toolset must be one of", False),
    ("toolset-with-ablation", "evaluate", ["agent=ark_v1", "ablation=no_f"], None, "use ablation=none", False),
    ("prompt-unknown", "evaluate", ["prompt.name=verbose"], None, "prompt must be one of", False),
    ("workers-embedded-model", "evaluate", ["backbone=local_smollm2", "eval.workers=2"], None,
     "eval.workers > 1 needs a hosted or rules backbone", False),
    ("adapter-missing", "evaluate", ["backbone=student", "backbone.local.adapter=${paths.root}/nope"], None,
     "no adapter directory at", False),
    ("backbone-unknown-key", "evaluate", ["+backbone.top_k=5"], None, "unexpected keyword argument 'top_k'", False),
    ("backbone-no-target", "evaluate", ["~backbone._target_"], None, "names no class (_target_)", False),
    ("bm25-k1-negative", "build_index", ["retriever.params.k1=-1"], None, "retriever.params.k1 must be a number >= 0",
     False),
    ("retriever-param-unknown", "build_index", ["+retriever.params.k3=1"], None, "retriever.params has no setting k3",
     False),
    ("split-fraction-0", "evaluate", ["split=test-0"], None, "unknown split 'test-0'", False),
    # query files that hold rows but no usable question
    ("row-id-not-string", "evaluate", [], rows({"id": 7, "query": "x", "answer_ids": [1]}),
     "row 1: expected a JSON object with a non-empty string 'id'", False),
    ("row-meta-not-object", "evaluate", [], rows({"id": "q1", "query": "x", "answer_ids": [1], "meta": [1]}),
     "row 1: 'meta' must be a JSON object, got [1]", False),
    ("query-whitespace", "evaluate", [], rows({"id": "q1", "query": " \t ", "answer_ids": [1]}),
     "row 1: needs a string 'id' and a non-empty string 'query'", False),
    ("queries-empty-file", "evaluate", [], write("data/queries/biokg/synthetic/test.jsonl", ""), "no queries in",
     False),
    # index and graph files
    ("index-missing", "baseline", [], remove("data/index/biokg/bm25"), "no index at", False),
    ("index-missing-file", "evaluate", [], remove("data/index/biokg/bm25/data.csc.index.npy"), "damaged index file",
     False),
    ("index-info-not-json", "evaluate", [], write("data/index/biokg/bm25/info.json", "{"), "info.json", False),
    ("index-other-settings", "evaluate", ["retriever.params.b=0.5"], None, "was built with other retriever settings",
     False),
    ("graph-summary-not-json", "evaluate", [], write("data/graph/biokg/summary.json", "{"), "summary.json", False),
    ("graph-sources-missing", "build_graph", [], None, "missing source artefact", False),
    # source files of make_queries
    ("stark-duplicate-id", "make_queries", STARK,
     write("qa/stark_qa/stark_qa.csv", "id,query,answer_ids\n0,a,[1]\n0,b,[2]\n1,c,[3]\n"),
     "stark_qa.csv:3: duplicate query id 0", False),
    ("pheno-no-id", "make_queries", PHENO, write("cases.jsonl", json.dumps({k: v for k, v in PACKET.items()
                                                                           if k != "id"}) + "\n"),
     "phenopacket 1: no 'id'", False),
    # places a run writes to
    ("cache-under-file", "evaluate", ["backbone=gpt-4.1", "llm.cache=${paths.root}/cases.jsonl/llm.sqlite"], None,
     "cases.jsonl is a file", False),
    ("ledger-under-file", "evaluate", ["eval.spend_ledger=${paths.root}/cases.jsonl/spend.sqlite"], None,
     "cases.jsonl is a file", False),
    ("publish-under-file", "baseline", ["run.publish=${paths.root}/cases.jsonl/published"], None,
     "run.publish", True),
    ("records-directory", "evaluate", [], records_directory, "records.jsonl is not a regular file", True),
    # stages with their own inputs
    ("hpo-not-phenopackets", "hpo_baseline", [], None, "hpo_baseline ranks the cases of a phenopacket query set",
     True),
    ("distill-no-teacher", "distill", [], None, "distill.teacher must name the teacher's run", False),
    ("distill-teacher-no-run", "distill", ["distill.teacher=${paths.root}/qa"], None,
     "expected one run directory in", False),
    ("distill-teacher-other-dataset", "distill", lambda p: teacher(p) + ["dataset=stark_prime"], None,
     "is on biokg, whose nodes are not those of stark_prime", False),
]


def snapshot(p: Path) -> dict:
    """Every file and directory of the project (logs aside) with its content hash."""
    return {str(f.relative_to(p)): hashlib.sha256(f.read_bytes()).hexdigest() if f.is_file() else "dir"
            for f in sorted(p.rglob("*")) if f.relative_to(p).parts[0] != "logs"}


# a case in its own process is end to end; of the others every sixth runs in make test (each copies and hashes a
# small project), all of them in make test-e2e
@pytest.mark.parametrize("stage, overrides, damage, message, sub",
                         [pytest.param(*c[1:], marks=[pytest.mark.e2e] if c[-1] or i % 6 else [])
                          for i, c in enumerate(CASES)],
                         ids=[c[0] for c in CASES])
def test_malformed_input_exits_2_with_one_line_and_writes_nothing(template, tmp_path, capsys, stage, overrides, damage,
                                                                  message, sub):
    from ark.stages import clear_errors

    p = tmp_path / "p"
    shutil.copytree(template, p)
    if damage is not None:
        damage(p)
    args = paths(p) + BASE + (overrides(p) if callable(overrides) else overrides)
    before = snapshot(p)
    if sub:
        out = subprocess.run([sys.executable, "-m", f"ark.stages.{stage}", *args, f"hydra.run.dir={p}/logs/hydra"],
                             cwd=ROOT, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
        code, text = out.returncode, out.stdout + out.stderr
    else:
        run = clear_errors(importlib.import_module(f"ark.stages.{stage}").run)
        with pytest.raises(SystemExit) as exit_:
            run(compose_cfg(args))
        code, text = exit_.value.code, "".join(capsys.readouterr())
    lines = text.strip().splitlines()
    assert code == 2 and len(lines) == 1, text[-3000:]
    assert lines[0].startswith("error: ") and message in lines[0], lines[0]
    assert snapshot(p) == before


# a secret on the command line under each spelling a user has tried: none passes, whatever its name
SECRET_SPELLINGS = [[f"+backbone.extra.accessToken={CANARY}"], [f"+backbone.extra.Authorization={CANARY}"],
                    [f"+backbone.extra.pwd={CANARY}"], [f"+backbone.extra.extra_headers={{Authorization:{CANARY}}}"],
                    [f"+backbone.extra.headers={{x-api-key:{CANARY}}}"], [f"+backbone.extra.extra_body={{token:{CANARY}}}"],
                    [f"++backbone.extra={{api_key:{CANARY}}}"], [f"+llm.accessToken={CANARY}"],
                    [f"+backbone.extra_token={CANARY}"],  # beside backbone.extra, not in it
                    [f"+backbone.extra.response_format={{type:json_object,api_key:{CANARY}}}"],  # inside a setting
                    ["-m", f"+backbone.api_key={CANARY},{CANARY}2"],  # a sweep's values
                    ["-m", f"++backbone.extra={{stop:x}},{{api_key:{CANARY}}}"]]
PRICING = ["+backbone.extra.input_cost_per_token=0.000001", "+backbone.extra.output_cost_per_token=0.000002"]


@pytest.mark.parametrize("spelling", SECRET_SPELLINGS)
def test_a_secret_on_the_command_line_is_refused_under_any_name_and_not_echoed(spelling):
    from ark.config import check_overrides

    with pytest.raises(UserError) as e:
        check_overrides(["backbone=gpt-4.1", *spelling])
    assert CANARY not in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize("api_base, refused", [("http://127.0.0.1:9/v1", True), ("http:///v1", False),
                                               ("localhost:9", False), ("http://127.0.0.1:port/v1", False)])
def test_only_a_refused_connection_to_a_real_address_stops_a_run_before_it_starts(api_base, refused):
    """What cannot be probed (no host, no scheme, a port that is not a number) is left to the calls, which say why."""
    from ark.llm.client import check_listening

    if refused:
        with pytest.raises(UserError, match="nothing answers at http://127.0.0.1:9/v1"):
            check_listening(api_base)
    else:
        check_listening(api_base)


def test_the_documented_pricing_overrides_pass_the_command_line_check():
    from ark.config import check_overrides

    check_overrides(["backbone=gpt-4.1", "backbone.model=openai/my-proxy-alias", "eval.max_cost_usd=0.01", *PRICING])


@pytest.mark.e2e
def test_no_file_of_the_project_or_its_logs_holds_a_secret_refused_on_the_command_line(template, tmp_path):
    """Each spelling through a stage's own entry point: exit 2 with one line before Hydra writes its logs; then every
    file under the project (logs included) is searched for the canary."""
    p = tmp_path / "p"
    shutil.copytree(template, p)
    for spelling in SECRET_SPELLINGS:
        out = subprocess.run([sys.executable, "-m", "ark.stages.evaluate", *paths(p), *BASE, "backbone=gpt-4.1",
                              *spelling, f"hydra.run.dir={p}/logs/hydra", f"hydra.sweep.dir={p}/logs/sweep"],
                             cwd=ROOT, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
        lines = (out.stdout + out.stderr).strip().splitlines()
        assert out.returncode == 2 and len(lines) == 1 and lines[0].startswith("error: "), (spelling, lines)
        assert CANARY not in lines[0]
    held = [f for f in p.rglob("*") if f.is_file() and CANARY.encode() in f.read_bytes()]
    assert held == [] and not (p / "logs" / "hydra").exists() and not (p / "logs" / "sweep").exists()


def test_a_record_appended_twice_is_kept_once_with_a_warning(template, tmp_path, capsys):
    """Valid but odd: a query's record appears twice in records.jsonl (a line copied by hand). The run resumes,
    keeps the last, says so in one warning, and its metrics are those of the template."""
    from ark.stages import evaluate

    p = tmp_path / "p"
    shutil.copytree(template, p)
    records(lambda ls: [*ls, ls[0]])(p)
    result = evaluate.run(compose_cfg(paths(p) + BASE))
    err = capsys.readouterr().err
    assert "warning:" in err and "appear twice; the last of each is kept" in err
    assert result["n_queries"] == 3
    metrics = json.loads(next((template / RUN).glob("*/metrics.json")).read_text())
    assert {k: result[k] for k in metrics} == metrics


def test_a_run_root_on_a_read_only_file_system_exits_2_with_one_line(template, tmp_path, capsys, monkeypatch):
    """As root no chmod makes a directory unwritable, so the file system's refusal (EROFS) is what mkdir raises."""
    import errno
    from ark.stages import clear_errors, evaluate

    p = tmp_path / "p"
    shutil.copytree(template, p)
    real_mkdir = Path.mkdir

    def mkdir(self, *args, **kwargs):
        if str(self).startswith(str(p / "ro")):
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(self))
        return real_mkdir(self, *args, **kwargs)

    monkeypatch.setattr(Path, "mkdir", mkdir)
    before = snapshot(p)
    with pytest.raises(SystemExit) as exit_:
        clear_errors(evaluate.run)(compose_cfg(paths(p) + BASE + [f"run.root={p}/ro/runs"]))
    lines = "".join(capsys.readouterr()).strip().splitlines()
    assert exit_.value.code == 2 and len(lines) == 1 and "Read-only file system" in lines[0], lines
    assert snapshot(p) == before


SETTINGS = [
    ("ask", ["agent.T_maxx=3"], "Could not override 'agent.T_maxx'"),
    ("ask", ["agent=nonexistent"], "agent=nonexistent: no such option"),
    ("ask", ["agent.T_max=1,2"], "sweeps over several values"),
    ("ask", ["backbone.expand=-1"], "backbone.expand must be an integer >= 0"),
    ("ask", ["backbone=gpt-4.1", "backbone.tool_mode=bogus"], "backbone.tool_mode must be one of"),
    ("ask", ["llm.retry.max_attempts=0"], "llm.retry.max_attempts must be an integer >= 1"),
    ("estimate", ["agent.T_maxx=3"], "Could not override 'agent.T_maxx'"),
    ("estimate", ["agent=nonexistent"], "agent=nonexistent: no such option"),
    ("estimate", ["backbone=gpt-4.1", "backbone.tool_mode=bogus"], "backbone.tool_mode must be one of"),
    ("ask", ["backbone=gpt-4.1", f"+backbone.extra.api_key={CANARY}"], "an environment variable named by"),
    ("ask", ["backbone=gpt-4.1", "+backbone.extra.api_base=http://127.0.0.1:9/v1"], "give it as backbone.api_base"),
    ("estimate", ["backbone=gpt-4.1", f"+backbone.extra.db_password={CANARY}"], "put a key in an environment variable"),

]
SETTINGS_IDS = ["ask-key-mistyped", "ask-option-unknown", "ask-sweep", "ask-expand-negative", "ask-tool_mode-bogus",
                "ask-max_attempts-0", "estimate-key-mistyped", "estimate-option-unknown", "estimate-tool_mode-bogus",
                "ask-secret", "ask-extra-api_base", "estimate-secret"]


# every third case in make test (each copies and hashes a small project), all of them in make test-e2e
@pytest.mark.parametrize("command, overrides, message",
                         [pytest.param(*c, marks=[] if i % 3 == 0 else [pytest.mark.e2e])
                          for i, c in enumerate(SETTINGS)], ids=SETTINGS_IDS)
def test_ark_ask_and_estimate_refuse_bad_settings_in_one_line(template, tmp_path, capsys, command, overrides, message):
    from ark.cli import main

    p = tmp_path / "p"
    shutil.copytree(template, p)
    before = snapshot(p)
    args = paths(p) + BASE + overrides
    code = main(["ask", "slender fingers", *args] if command == "ask" else ["estimate", *args])
    lines = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], lines
    assert snapshot(p) == before


# the question's two cases in make test, the path's in make test-e2e
@pytest.mark.parametrize("question, extra, message", [
    ("   ", [], "the question is empty"),
    ("x" * 5000, ["limits.query_chars=4000"], "the question has 5,000 characters, over limits.query_chars=4,000"),
    pytest.param("slender fingers", ["--json", "{p}"], "exists and is not a regular file", marks=pytest.mark.e2e),
    pytest.param("slender fingers", ["--json", "{p}/no/such/dir/out.json"], "no directory", marks=pytest.mark.e2e),
], ids=["ask-empty", "ask-too-long", "ask-json-a-directory", "ask-json-nowhere"])
def test_ark_ask_checks_its_question_and_json_path_before_the_run(template, tmp_path, capsys, question, extra,
                                                                  message):
    from ark.cli import main

    p = tmp_path / "p"
    shutil.copytree(template, p)
    before = snapshot(p)
    code = main(["ask", question, *paths(p), *BASE, *(a.format(p=p) for a in extra)])
    lines = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], lines
    assert snapshot(p) == before
