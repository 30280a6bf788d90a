"""Runs as data: identity -> directory, the record schema without gold, cache keys, honest exits."""
import asyncio
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ark.build import spec
from ark.runs.identity import identity
from ark.runs.store import Run, load_run
from tests.conftest import ROOT, compose_cfg
from ark.llm.fake import ScriptedEndpoint
from ark.llm.weights import cpu_has_bf16

# the dtype that "auto" does not resolve to on this CPU (auto: bfloat16 where it is native, else float32)
OTHER_DTYPE = f"backbone.local.dtype={'float32' if cpu_has_bf16() else 'bfloat16'}"
RESULT_AFFECTING = [
    "dataset.documents.max_per_relation=50", "queries=phenopackets", "split=train", "split=test-0.1", "eval.limit=2",
    "retriever=dense", "retriever.params.k1=1.5", "backbone=gpt-4o", "backbone.temperature=0.2",
    "backbone.tool_mode=text", "backbone.max_tokens=99", "backbone.local.constrained=false",
    OTHER_DTYPE, "agent.T_max=7", "agent.n_agents=2", "agent.aggregation=ordering",
    "agent.global_k=9", "agent.neighbor_k=5", "seed=3", "ablation=no_q", "ablation=no_neighbors",
    "prompt=minimal", "backbone.tool_choice=auto",
]
NOT_RESULT_AFFECTING = ["eval.concurrency=1", "subset_seed=1", "logger=none", "logger.project=other", "eval.progress=false",
                        "llm.cache=/tmp/elsewhere.sqlite", "paths.logs=/tmp/logs", "cpu_threads=1",
                        "backbone.api_base=http://10.0.0.1:8000/v1", "llm.retry.max_attempts=2"]


def run_name(overrides, stage="evaluate"):
    return Run(spec(compose_cfg(["backbone=local_smollm2", *overrides])), stage).name


@pytest.mark.e2e
def test_each_result_affecting_setting_gets_its_own_run_directory():
    names = [run_name([])] + [run_name([o]) for o in RESULT_AFFECTING]
    assert len(set(names)) == len(names), [o for o, n in zip([""] + RESULT_AFFECTING, names) if names.count(n) > 1]


@pytest.mark.e2e
def test_runtime_settings_keep_the_same_run():
    base = run_name([])
    assert all(run_name([o]) == base for o in NOT_RESULT_AFFECTING)
    nowhere = "dataset.index_dir=/nonexistent/dense"  # no index there: `bf16: auto` is what this CPU computes in
    dense = run_name(["retriever=dense", nowhere])
    assert run_name(["retriever=dense", nowhere, "retriever.params.batch_size=8"]) == dense
    assert run_name(["retriever=dense", nowhere, "retriever.params.reuse=/elsewhere"]) == dense
    other = "false" if "bf16': True" in str(identity(spec(compose_cfg(["retriever=dense", nowhere])), "evaluate")) else "true"
    assert run_name(["retriever=dense", nowhere, f"retriever.params.bf16={other}"]) != dense
    # a subset's seed matters only for a fractional split
    assert run_name(["split=test-0.1", "subset_seed=1"]) != run_name(["split=test-0.1"])


def test_an_adapter_is_part_of_the_identity_by_content(tmp_path):
    adapter = tmp_path / "adapter"
    adapter.mkdir()
    (adapter / "adapter_model.safetensors").write_bytes(b"v1")
    first = run_name([f"backbone.local.adapter={adapter}"])
    (adapter / "adapter_model.safetensors").write_bytes(b"v2")  # retrained at the same path
    assert run_name([f"backbone.local.adapter={adapter}"]) != first != run_name([])


def write_split(tiny_project, split, rows):
    from ark.io import write_jsonl

    cfg = compose_cfg(tiny_project)
    write_jsonl(Path(cfg.dataset.queries_dir) / f"{split}.jsonl", rows)


def rules_cfg(tiny_project, *extra):
    return compose_cfg(tiny_project + ["retriever.params.stemmer=null", "backbone=rules", "agent.n_agents=1",
                                       "eval.progress=false", *extra])


@pytest.fixture
def tiny_rules(tiny_project):
    from ark.stages import build_index

    build_index.run(compose_cfg(tiny_project + ["retriever.params.stemmer=null"]))
    write_split(tiny_project, "train", [{"id": "t1", "query": "Which phenotype of Marfan disease", "answer_ids": [2]},
                                        {"id": "t2", "query": "long fingers", "answer_ids": [3]}])
    return tiny_project


def test_train_collection_and_test_evaluation_keep_both_record_files(tiny_rules):
    from ark.stages import evaluate

    train = evaluate.run(rules_cfg(tiny_rules, "split=train"))
    test = evaluate.run(rules_cfg(tiny_rules))
    assert train["run_dir"] != test["run_dir"]
    for result, ids in ((train, ["t1", "t2"]), (test, ["q1", "q2", "q3"])):
        config, records = load_run(result["run_dir"])
        assert [r.id for r in records] == ids and config["split"] == ("train" if ids[0] == "t1" else "test")


def test_the_progress_bar_counts_steps_and_calls_in_flight_not_only_finished_queries(tiny_rules, capsys):
    """A served model can take minutes a query: the bar's postfix counts the agents' steps as they come back and
    the model calls out, and ends with every call back."""
    import re

    from ark.stages import evaluate

    result = evaluate.run(rules_cfg(tiny_rules, "eval.progress=true", "agent.n_agents=2"))
    err = capsys.readouterr().err
    steps = [int(s) for s in re.findall(r"steps=(\d+)", err)]
    assert steps, err[-2000:]
    config, records = load_run(result["run_dir"])
    assert steps[-1] == sum(t.steps for r in records for t in r.agents), err[-2000:]
    assert re.findall(r"calls in flight=(-?\d+)", err)[-1] == "0", err[-2000:]


def _keys(obj):
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield k
            yield from _keys(v)
    elif isinstance(obj, list):
        for v in obj:
            yield from _keys(v)


def test_records_hold_no_gold_and_no_score(tiny_rules):
    from ark.stages import evaluate

    result = evaluate.run(rules_cfg(tiny_rules))
    run_dir = Path(result["run_dir"])
    lines = (run_dir / "records.jsonl").read_text().splitlines()
    assert len(lines) == 3
    forbidden = {"answer_ids", "gold", "metrics", "scores", "hit@1", "hit@5", "recall@20", "mrr", "complete"}
    for line in lines:
        assert not forbidden & set(_keys(json.loads(line))), line[:200]
    scores = [json.loads(line) for line in (run_dir / "scores.jsonl").read_text().splitlines()]
    assert [s["id"] for s in scores] == ["q1", "q2", "q3"] and all("hit@1" in s for s in scores)
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert all(isinstance(v, (int, float)) for v in metrics.values()) and metrics["n_queries"] == 3


def test_stored_config_is_the_identity_and_a_rerun_resumes(tiny_rules):
    from ark.stages import evaluate

    cfg = rules_cfg(tiny_rules)
    first = evaluate.run(cfg)
    config, _ = load_run(first["run_dir"])
    assert config == identity(spec(cfg), "evaluate") and config["backbone"]["name"] == "rules"
    again = evaluate.run(rules_cfg(tiny_rules, "eval.concurrency=1"))
    assert again["run_dir"] == first["run_dir"] and again["hit@1"] == first["hit@1"]


# ------------------------------------------------------------------ the LLM cache key
def _complete(client, messages):
    return asyncio.run(client.complete(messages, None, agent_index=0, seed=0))


def test_another_model_or_server_misses_the_cache(tmp_path):
    from ark.llm.cache import ResponseCache
    from ark.llm.client import LLMClient
    from ark.llm.settings import Backbone, RetryPolicy

    cache = ResponseCache(tmp_path / "llm.sqlite")
    backbone = Backbone(name="local", model="openai/smollm2", temperature=0.7, max_tokens=32)
    base = {"gguf_sha256": "aa", "adapter_sha256": None, "dtype": "bfloat16", "constrained": True}
    variants = [{**base, "adapter_sha256": "bb"}, {**base, "constrained": False}, None]  # None: another server
    messages = [{"role": "user", "content": "Question: x"}]
    endpoint, other = ScriptedEndpoint(), ScriptedEndpoint()
    with endpoint.serve() as server, other.serve() as other_server:
        _complete(LLMClient(backbone, cache, RetryPolicy(), server.url, base), messages)
        _complete(LLMClient(backbone, cache, RetryPolicy(), server.url, base), messages)
        assert endpoint.calls == 1  # the same model replays
        for i, ident in enumerate(variants, 1):
            url = other_server.url if ident is None else server.url
            _complete(LLMClient(backbone, cache, RetryPolicy(), url, ident), messages)
        calls = endpoint.calls + other.calls
        assert calls == 1 + len(variants)
        # keyed by its address alone, this server is not the model identified above
        _complete(LLMClient(backbone, cache, RetryPolicy(), server.url), messages)
        assert endpoint.calls + other.calls == calls + 1


# ------------------------------------------------------------------ honest exits
def _evaluate(args, tmp_path, server_url, **env):
    return subprocess.run(
        [sys.executable, "-m", "ark.stages.evaluate", *args, "backbone=gpt-4.1", "backbone.model=openai/fake",
         f"backbone.api_base={server_url}", "backbone.api_key_env=null", "retriever.params.stemmer=null",
         "agent.n_agents=1", "agent.T_max=3", "llm.retry.max_attempts=2", "llm.retry.base_delay=0.01",
         f"llm.cache={tmp_path}/llm.sqlite", f"hydra.run.dir={tmp_path}/hydra", "eval.progress=false"],
        cwd=ROOT, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT), **env})


@pytest.mark.e2e
def test_a_run_whose_calls_all_fail_exits_nonzero_and_a_rerun_completes_it(tiny_rules, tmp_path):
    failing = ScriptedEndpoint(fail_first=10**6, status=401)
    with failing.serve() as server:
        out = _evaluate(tiny_rules, tmp_path, server.url)
        port = server.socket.getsockname()[1]
        run_dir = Run(spec(compose_cfg(tiny_rules + ["backbone=gpt-4.1", "backbone.model=openai/fake",
                                                     f"backbone.api_base={server.url}", "retriever.params.stemmer=null",
                                                     "agent.n_agents=1", "agent.T_max=3"])), "evaluate").dir
    assert out.returncode == 1, out.stderr[-1000:]
    last = out.stderr.strip().splitlines()[-1]
    assert last.startswith("incomplete: 3 of 3 queries are incomplete") and "Traceback" not in out.stderr
    assert not (run_dir / "metrics.json").exists()  # nothing a DVC stage could record as done
    healthy = ScriptedEndpoint()
    with healthy.serve(port) as server:  # the same address: the same endpoint, so the rerun resumes
        again = _evaluate(tiny_rules, tmp_path, server.url)
    assert again.returncode == 0, again.stderr[-1000:]
    assert json.loads((run_dir / "metrics.json").read_text())["n_queries"] == 3 and healthy.calls == 3 * 2


@pytest.mark.parametrize("stage, overrides, message", [
    ("evaluate", ["agent.T_max=0"], "agent.T_max must be an integer >= 1"),
    ("evaluate", ["agent.T_max=true"], "agent.T_max must be an integer >= 1"),
    ("evaluate", ["agent.n_agents=0"], "agent.n_agents must be"),
    ("evaluate", ["eval.concurrency=0"], "eval.concurrency must be"),
    ("evaluate", ["eval.limit=-1"], "eval.limit must be"),
    ("baseline", ["eval.limit=-1"], "eval.limit must be"),
    ("evaluate", ["agent.aggregation=borda"], "agent.aggregation must be one of"),
    ("evaluate", ["metrics=[hit@0]"], "unknown metric 'hit@0'"),
    ("evaluate", ["backbone=local_smollm2", "backbone.local.adapter=/nonexistent/adapter"],
     "backbone.local.adapter: no adapter directory"),
    ("baseline", ["retriever.params.k1=1.5"], "the index at"),  # built with k1 1.2
])
@pytest.mark.e2e  # a stage process per case
def test_bad_config_values_exit_2_before_any_work(tiny_rules, tmp_path, stage, overrides, message):
    backbone = [] if any(o.startswith("backbone=") for o in overrides) else ["backbone=rules"]
    out = subprocess.run([sys.executable, "-m", f"ark.stages.{stage}", *tiny_rules, *backbone, *overrides,
                          "retriever.params.stemmer=null", f"hydra.run.dir={tmp_path}/hydra"],
                         cwd=ROOT, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    lines = out.stderr.strip().splitlines()
    assert out.returncode == 2 and len(lines) == 1 and lines[0].startswith(f"error: {message}")
    assert not (tmp_path / "results" / "runs").exists()


@pytest.mark.e2e  # a Python subprocess
def test_malformed_query_rows_exit_2(tiny_rules, tmp_path):
    write_split(tiny_rules, "test", [{"id": "q1", "query": "x", "answer_ids": [999]}])
    out = subprocess.run([sys.executable, "-m", "ark.stages.evaluate", *tiny_rules, "backbone=rules",
                          "retriever.params.stemmer=null", f"hydra.run.dir={tmp_path}/hydra"],
                         cwd=ROOT, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.returncode == 2 and "answer_ids must be a list of node ids in 0..30" in out.stderr
    assert not (tmp_path / "results" / "runs").exists()


def test_an_exception_inside_a_tool_becomes_an_error_observation():
    from ark.tools.toolbox import AnswerState, Toolbox
    from tests.helpers import tiny_graph, tiny_index

    g = tiny_graph()

    class BrokenIndex:
        name = "a broken test double"

        def search(self, query, k):
            raise IndexError("corrupt posting list")

    obs = Toolbox(g, BrokenIndex()).call("search_in_graph", '{"query": "heart"}', AnswerState())
    assert obs.tool_failed and obs.text.startswith("Error: the tool search_in_graph failed (IndexError")
    ok = Toolbox(g, tiny_index(g)).call("search_in_graph", '{"query": "heart"}', AnswerState())
    assert not ok.tool_failed and ok.error is None


@pytest.mark.e2e
def test_a_rules_run_imports_neither_litellm_nor_torch(tiny_rules, tmp_path):
    code = ("import sys; from ark.stages import evaluate; from tests.conftest import compose_cfg; "
            f"evaluate.run(compose_cfg({tiny_rules + ['retriever.params.stemmer=null', 'backbone=rules', 'eval.progress=false']!r})); "
            "print(sorted(m for m in ('litellm', 'torch', 'transformers') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "[]"


# ------------------------------------------------------------------ subsets
def test_a_fraction_split_is_a_seeded_subset_and_a_shipped_file_wins(tmp_path):
    from ark.data.queries import load_queries
    from ark.io import write_jsonl

    rows = [{"id": f"q{i}", "query": f"text {i}", "answer_ids": [i]} for i in range(95)]
    write_jsonl(tmp_path / "test.jsonl", rows)
    tenth = load_queries(tmp_path, "test-0.1")
    assert len(tenth) == 10 and tenth == [r for r in rows if r in tenth]  # original order kept
    assert load_queries(tmp_path, "test-0.1") == tenth and load_queries(tmp_path, "test-0.1", seed=1) != tenth
    write_jsonl(tmp_path / "test.jsonl", rows[::-1])  # the file's order does not pick the subset
    assert {r["id"] for r in load_queries(tmp_path, "test-0.1")} == {r["id"] for r in tenth}
    write_jsonl(tmp_path / "test-0.1.jsonl", rows[:3])  # STaRK's own test-0.1.index, written by make_queries
    assert load_queries(tmp_path, "test-0.1") == rows[:3]
    with pytest.raises(ValueError, match="unknown split 'dev'"):
        load_queries(tmp_path, "dev")


def test_a_spread_split_gives_every_publication_one_case_before_any_a_second(tmp_path):
    from ark.data.queries import load_queries
    from ark.io import write_jsonl

    # 30 publications with 1..5 cases each, the big ones first in the file (as case collections often are)
    rows = [{"id": f"p{p}c{c}", "query": "text", "answer_ids": [0], "meta": {"pmid": f"PMID:{p}"}}
            for p in range(30) for c in range(1 + p % 5)]
    rows.sort(key=lambda r: -(int(r["meta"]["pmid"][5:]) % 5))
    write_jsonl(tmp_path / "test.jsonl", rows)
    order = load_queries(tmp_path, "test-spread")
    assert sorted(r["id"] for r in order) == sorted(r["id"] for r in rows)  # every case, once
    pmids = [r["meta"]["pmid"] for r in order]
    assert len(set(pmids[:30])) == 30  # the first 30 cases: 30 publications
    assert len(set(pmids[30:54])) == 24  # then a second case of each of the 24 publications that have one
    write_jsonl(tmp_path / "test.jsonl", rows[::-1])  # not the file's order
    assert load_queries(tmp_path, "test-spread") == order
    assert load_queries(tmp_path, "test-spread", seed=1) != order  # seeded
    write_jsonl(tmp_path / "train.jsonl", rows[:2])
    write_jsonl(tmp_path / "val.jsonl", rows[2:3])
    assert [r["id"] for r in load_queries(tmp_path, "all")] == [r["id"] for r in rows[:3] + rows[::-1]]


def test_a_spread_split_keeps_its_seed_in_the_identity_and_all_hashes_every_split(tmp_path):
    from ark.data.queries import parse_split

    assert parse_split("test-spread") == ("test", "spread") and parse_split("all") == ("all", None)
    assert run_name(["split=test-spread", "subset_seed=1"]) != run_name(["split=test-spread"])
    assert run_name(["split=all", "subset_seed=1"]) == run_name(["split=all"])  # every case: no seed


def test_a_leave_publication_out_graph_refuses_queries_from_another_source(tmp_path):
    from ark import build
    from ark.data.phenopackets import source_identity
    from ark.errors import UserError
    from tests.helpers import tiny_graph

    left_out, other = tmp_path / "release-a.jsonl", tmp_path / "release-b.jsonl"
    left_out.write_text('{"id": "case-1"}\n')
    other.write_text('{"id": "case-2"}\n')
    graph = tiny_graph()
    graph.meta["excluded"] = {"source": source_identity(left_out)}
    with pytest.raises(UserError, match="leaves out the publications of release-a.jsonl"):
        build.queries(build.spec(compose_cfg(["queries=phenopackets", f"queries.source={other}"])), graph)
    with pytest.raises(UserError, match="no query file"):  # the same source passes the check
        build.queries(build.spec(compose_cfg(["queries=phenopackets", f"queries.source={left_out}",
                                              f"paths.data={tmp_path}"])), graph)


# ------------------------------------------------------------------ damage and concurrency
def test_resume_drops_only_a_last_line_cut_inside_a_utf8_character(tiny_rules, capsys):
    from ark.stages import evaluate

    write_split(tiny_rules, "test", [{"id": "q1", "query": "slender fingers", "answer_ids": [3]},
                                     {"id": "q2", "query": "lens of the eye", "answer_ids": [4]},
                                     {"id": "q3", "query": "café au lait lens", "answer_ids": [4]}])
    cfg = rules_cfg(tiny_rules)
    first = evaluate.run(cfg)
    path = Path(first["run_dir"]) / "records.jsonl"
    lines = path.read_bytes().splitlines(keepends=True)
    last = lines[2]
    cut = last.index("é".encode()) + 1  # inside the two bytes of 'é'
    path.write_bytes(b"".join(lines[:2]) + last[:cut])
    capsys.readouterr()
    again = evaluate.run(cfg)
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "dropped its incomplete last line" in err[0], err
    assert path.read_bytes().splitlines(keepends=True)[:2] == lines[:2]  # complete records kept as they were
    assert [json.loads(line)["id"] for line in path.read_text(encoding="utf-8").splitlines()] == ["q1", "q2", "q3"]
    assert again["hit@1"] == first["hit@1"]


@pytest.mark.e2e
def test_a_second_process_on_an_open_run_refuses_at_once(tiny_rules, tmp_path):
    import fcntl

    from ark.stages import evaluate

    cfg = rules_cfg(tiny_rules)
    run_dir = Run(spec(cfg), "evaluate").dir
    run_dir.mkdir(parents=True)
    with open(run_dir / ".lock", "w") as held:  # another process has the run open
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        held.write("4242")
        held.flush()
        out = subprocess.run([sys.executable, "-m", "ark.stages.evaluate", *tiny_rules, "backbone=rules",
                              "agent.n_agents=1", "retriever.params.stemmer=null", f"hydra.run.dir={tmp_path}/hydra"],
                             cwd=ROOT, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    lines = out.stderr.strip().splitlines()
    assert out.returncode == 2 and len(lines) == 1, out.stderr[-2000:]
    assert lines[0].startswith(f"error: run {run_dir.name} is open in another process (pid 4242)")
    assert sorted(p.name for p in run_dir.iterdir()) == [".lock"]  # it wrote nothing
    evaluate.run(cfg)  # the lock released: the run goes ahead, and its finished directory holds no lock file
    assert not (run_dir / ".lock").exists() and (run_dir / "metrics.json").exists()


def test_a_spending_cap_stops_the_run_resumably_and_a_higher_cap_completes_it(tiny_rules, tmp_path, capsys):
    """eval.max_cost_usd against litellm's cost accounting: a scripted endpoint (a test double) answers as
    openai/gpt-4.1 with 100 prompt and 20 completion tokens, $0.00036 a call at the bundled prices; each query takes
    2 calls. Each call is reserved at its worst case (its prompt's tokens and max_tokens=20) before it goes out, so
    a cap of $0.002 stops the run before the spend could pass it: one line, exit 1, the ledger's own total in it; a
    rerun with a higher cap resumes the rest and spends no more than they need."""
    from ark.llm.spending import Ledger
    from ark.stages import clear_errors, evaluate

    endpoint = ScriptedEndpoint()
    with endpoint.serve() as server:
        args = tiny_rules + ["backbone=gpt-4.1", "backbone.model=openai/gpt-4.1", f"backbone.api_base={server.url}",
                             "backbone.api_key_env=null", "retriever.params.stemmer=null", "agent.n_agents=1",
                             "agent.T_max=3", "eval.concurrency=1", f"llm.cache={tmp_path}/llm.sqlite",
                             "eval.progress=false", "backbone.max_tokens=20"]
        with pytest.raises(SystemExit) as stopped:
            clear_errors(evaluate.run)(compose_cfg(args + ["eval.max_cost_usd=0.002"]))
        line = [x for x in capsys.readouterr().err.strip().splitlines() if "LiteLLM" not in x]  # litellm's own noise
        assert stopped.value.code == 1 and len(line) == 1, line
        run_dir = Path(line[0].split("Records: ")[1])
        spent, _ = Ledger(run_dir / "spend.sqlite").totals()
        assert 0 < spent <= 0.002 and spent == pytest.approx(endpoint.calls * 0.00036)
        assert line[0].startswith(f"incomplete: spending cap reached: ${spent:.4f} spent of eval.max_cost_usd=$0.002; ")
        assert "of 3 queries done" in line[0] and 2 <= endpoint.calls < 6
        result = evaluate.run(compose_cfg(args + ["eval.max_cost_usd=1"]))
    assert result["n_queries"] == 3 and result["n_incomplete"] == 0 and endpoint.calls == 6
    spent, top = Ledger(Path(result["run_dir"]) / "spend.sqlite").totals()
    assert spent == pytest.approx(6 * 0.00036) and top == pytest.approx(0.00036)


def test_the_cap_holds_with_many_calls_in_flight_and_counts_the_calls_of_a_killed_run(tmp_path):
    """Reservations, not checks: 90 calls in flight at once against a cap of 10 worst cases never spend past it, and
    a reservation whose call never came back (a killed run) stays counted at its worst case."""
    import asyncio

    from ark.llm.spending import WAIT, Ledger, SpendingCap

    cap = SpendingCap("run", [(Ledger(tmp_path / "spend.sqlite"), 0.10, "eval.max_cost_usd")])

    async def call():
        while (held := cap.reserve(0.01)) == WAIT:  # the worst case of one call; the first goes alone
            await asyncio.sleep(0.001)
        if isinstance(held, str):
            return False
        await asyncio.sleep(0.01)
        cap.settle(held, 0.004, counted=100, reported=100)  # what it really cost, at litellm's token count
        return True

    async def many():
        return await asyncio.gather(*(call() for _ in range(90)))

    sent = sum(asyncio.run(many()))
    spent = cap.spent()[0][1]
    assert spent <= 0.10 and sent >= 10 and spent == pytest.approx(sent * 0.004)
    killed = cap.reserve(0.005)  # never settled (room is left: each call settled below its reservation)
    assert not isinstance(killed, str)
    assert Ledger(tmp_path / "spend.sqlite").totals()[0] == pytest.approx(spent + 0.005)


@pytest.mark.e2e  # the engine end to end
def test_thirty_queries_of_three_agents_in_flight_stay_under_the_cap_and_the_closing_line_is_the_ledger(
        tiny_rules, capsys):
    """The engine end to end against a scripted endpoint (a test double) at a price of one's own: 30 queries x 3
    agents in flight, a cap of $0.01. The ledger ends under the cap and the closing line quotes it."""
    from ark.llm.spending import Ledger
    from ark.stages import clear_errors, evaluate

    write_split(tiny_rules, "test", [{"id": f"q{i}", "query": f"long fingers {i}", "answer_ids": [3]}
                                     for i in range(30)])
    endpoint = ScriptedEndpoint()
    with endpoint.serve() as server:
        # a name of its own: litellm keeps a price given with a call in its process-wide map
        args = tiny_rules + ["backbone=gpt-4.1", "backbone.model=openai/fake-priced", f"backbone.api_base={server.url}",
                             "backbone.api_key_env=null", "retriever.params.stemmer=null", "agent.n_agents=3",
                             "agent.T_max=3", "eval.concurrency=30", "llm.cache=null", "eval.progress=false",
                             "backbone.max_tokens=20", "+backbone.extra.input_cost_per_token=0.000001",
                             "+backbone.extra.output_cost_per_token=0.000001", "eval.max_cost_usd=0.01"]
        with pytest.raises(SystemExit) as stopped:
            clear_errors(evaluate.run)(compose_cfg(args))
    line = [x for x in capsys.readouterr().err.strip().splitlines() if "LiteLLM" not in x]
    assert stopped.value.code == 1 and len(line) == 1, line
    spent, _ = Ledger(Path(line[0].split("Records: ")[1]) / "spend.sqlite").totals()
    assert spent <= 0.01 and spent == pytest.approx(endpoint.calls * 120 * 0.000001)  # 100 + 20 tokens a call
    print(line[0])  # what the user reads
    assert f"${spent:.4f} spent of eval.max_cost_usd=$0.01" in line[0] and endpoint.calls > 30


class UndercountedEndpoint(ScriptedEndpoint):
    """A server (test double) that bills ``ratio`` times the prompt tokens litellm counts for the request."""

    def __init__(self, ratio: float):
        super().__init__()
        self.ratio = ratio

    def generate(self, request: dict) -> dict:
        import litellm

        reply = super().generate(request)
        counted = litellm.token_counter(model="openai/fake-priced", messages=request["messages"],
                                        tools=request.get("tools"))
        reply["usage"]["prompt_tokens"] = round(self.ratio * counted)
        reply["usage"]["total_tokens"] = reply["usage"]["prompt_tokens"] + reply["usage"]["completion_tokens"]
        return reply


@pytest.mark.parametrize("ratio", [pytest.param(1.3, marks=pytest.mark.e2e), 2.0])  # each a run: one in make test
def test_the_cap_holds_when_the_server_counts_more_prompt_tokens_than_litellm(tiny_rules, capsys, ratio):
    """30 queries x 3 agents in flight against a server that bills 1.3x or 2x litellm's token count: the calls are
    reserved at the rate the first reply shows, and the ledger ends under the cap (it ended at 1.8x the cap)."""
    from ark.llm.spending import Ledger
    from ark.stages import clear_errors, evaluate

    write_split(tiny_rules, "test", [{"id": f"q{i}", "query": f"long fingers {i}", "answer_ids": [3]}
                                     for i in range(30)])
    endpoint = UndercountedEndpoint(ratio)
    with endpoint.serve() as server:
        args = tiny_rules + ["backbone=gpt-4.1", "backbone.model=openai/fake-priced", f"backbone.api_base={server.url}",
                             "backbone.api_key_env=null", "retriever.params.stemmer=null", "agent.n_agents=3",
                             "agent.T_max=3", "eval.concurrency=30", "llm.cache=null", "eval.progress=false",
                             "backbone.max_tokens=20", "+backbone.extra.input_cost_per_token=0.000001",
                             "+backbone.extra.output_cost_per_token=0.000001", "eval.max_cost_usd=0.1"]
        with pytest.raises(SystemExit) as stopped:
            clear_errors(evaluate.run)(compose_cfg(args))
    line = [x for x in capsys.readouterr().err.strip().splitlines() if "LiteLLM" not in x]
    assert stopped.value.code == 1 and len(line) == 1, line
    spent, _ = Ledger(Path(line[0].split("Records: ")[1]) / "spend.sqlite").totals()
    print(f"\nserver bills {ratio}x litellm's prompt tokens, 30x3 in flight: ledger ${spent:.6f}, cap $0.10, "
          f"{endpoint.calls} calls")
    assert 0.08 < spent <= 0.1 and endpoint.calls > 30


def test_a_tool_that_fails_on_most_queries_fails_the_run_with_one_line(tiny_rules, monkeypatch, capsys):
    """A relevance index that raises on every search (a damaged index the checksums cannot see, or a bug): the run
    ends with one line and exit 1, and no metrics a DVC stage could record as done."""
    from ark.index.bm25 import BM25Index
    from ark.stages import clear_errors, evaluate

    def broken(self, query, k):
        raise IndexError("index 96059 is out of bounds")

    monkeypatch.setattr(BM25Index, "search", broken)
    with pytest.raises(SystemExit) as stopped:
        clear_errors(evaluate.run)(rules_cfg(tiny_rules))
    err = [line for line in capsys.readouterr().err.strip().splitlines() if line.startswith("failed:")]
    assert stopped.value.code == 1 and len(err) == 1
    assert "a tool failed (raised) in 3 of 3 queries; no metrics were written" in err[0]
    assert not list(Path(tiny_rules[2].split("=", 1)[1]).rglob("metrics.json"))  # paths.root


def test_a_cap_on_a_model_without_a_price_is_refused_before_the_run(tiny_rules):
    from ark.build import spec
    from ark.errors import UserError

    base = tiny_rules + ["backbone=gpt-4.1", "backbone.model=openai/my-proxy-alias", "eval.max_cost_usd=0.01"]
    with pytest.raises(UserError, match="has no price in litellm's price map"):
        spec(compose_cfg(base))
    priced = spec(compose_cfg(base + ["+backbone.extra.input_cost_per_token=0.0001",
                                      "+backbone.extra.output_cost_per_token=0.0001"]))
    assert priced.eval.max_cost_usd == 0.01


@pytest.mark.e2e
def test_ark_estimate_prices_the_split_from_its_first_queries(tiny_rules, tmp_path, capsys):
    """Against a scripted endpoint (a test double) priced as openai/gpt-4.1: the first 2 of 3 queries make 4 calls
    at $0.00036; the estimate is 3 x their cost per query, and the calls stay in the cache."""
    from ark.cli import main

    endpoint = ScriptedEndpoint()
    with endpoint.serve() as server:
        args = tiny_rules + ["backbone=gpt-4.1", "backbone.model=openai/gpt-4.1", f"backbone.api_base={server.url}",
                             "backbone.api_key_env=null", "retriever.params.stemmer=null", "agent.n_agents=1",
                             f"llm.cache={tmp_path}/llm.sqlite", "eval.progress=false"]
        assert main(["estimate", *args, "--queries", "2"]) == 0
        assert main(["estimate", *args, "--queries", "2"]) == 0  # replayed from the cache: no new call
    out = capsys.readouterr().out.strip().splitlines()
    assert endpoint.calls == 4
    assert out[0].endswith("the first 2 queries cost $0.0014 (4 model calls made now, the rest replayed), $0.0007 a "
                           "query; all 3 queries: about $0.0022")
    assert "(0 model calls made now" in out[1]


def test_ark_estimate_that_cannot_price_says_so_in_one_line_without_its_removed_trial_run(tiny_rules, tmp_path,
                                                                                          capsys):
    """A cap below one call stops the trial run: one line, a non-zero exit, no path into the removed temporary
    directory; --queries below 1 is refused before anything runs."""
    from ark.cli import main

    endpoint = ScriptedEndpoint()
    with endpoint.serve() as server:
        args = tiny_rules + ["backbone=gpt-4.1", "backbone.model=openai/gpt-4.1", f"backbone.api_base={server.url}",
                             "backbone.api_key_env=null", "retriever.params.stemmer=null", "agent.n_agents=1",
                             f"llm.cache={tmp_path}/llm.sqlite", "eval.progress=false", "eval.max_cost_usd=0.00001"]
        assert main(["estimate", *args, "--queries", "1"]) != 0
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "trial run" in err and "ark-estimate-" not in err, err
    for bad in ("0", "-1"):
        with pytest.raises(SystemExit) as exit_:
            main(["estimate", *tiny_rules, "--queries", bad])
        assert exit_.value.code == 2 and "must be at least 1" in capsys.readouterr().err


def test_rewritten_queries_are_another_run_not_a_resume(tiny_rules):
    """The same settings over a query file whose rows were rewritten (same ids, other text and answers): the run
    identity holds the file's content hash, so it is a new run with its own metrics, never the old records."""
    from ark.stages import evaluate

    first = evaluate.run(rules_cfg(tiny_rules))
    write_split(tiny_rules, "test", [{"id": "q1", "query": "lens of the eye", "answer_ids": [4]},
                                     {"id": "q2", "query": "slender fingers", "answer_ids": [3]},
                                     {"id": "q3", "query": "Marfan syndrome", "answer_ids": [0]}])
    second = evaluate.run(rules_cfg(tiny_rules))
    fresh = evaluate.run(rules_cfg(tiny_rules, f"run.root={Path(first['run_dir']).parent}-fresh"))
    assert second["run_dir"] != first["run_dir"]
    assert {k: second[k] for k in ("hit@1", "mrr")} == {k: fresh[k] for k in ("hit@1", "mrr")}
    assert load_run(second["run_dir"])[0]["inputs"]["queries"] != load_run(first["run_dir"])[0]["inputs"]["queries"]


@pytest.mark.e2e
def test_the_endpoint_from_the_environment_and_the_served_model_key_the_cache(tiny_rules, tmp_path, monkeypatch):
    """OPENAI_BASE_URL (api_base null) names server A, then server B: the second run asks B (another run identity,
    other cache keys). A server restarted at B's address under the same model name but serving since another time
    (its /v1/models entry) is asked again too. Scripted endpoints are the test doubles."""
    import time

    from ark.stages import evaluate

    args = tiny_rules + ["backbone=gpt-4.1", "backbone.model=openai/fake", "backbone.api_base=null",
                         "backbone.api_key_env=null", "retriever.params.stemmer=null", "agent.n_agents=1",
                         "agent.T_max=3", f"llm.cache={tmp_path}/llm.sqlite", "eval.progress=false"]
    a, b = ScriptedEndpoint(), ScriptedEndpoint()
    with a.serve() as server_a, b.serve() as server_b:
        monkeypatch.setenv("OPENAI_BASE_URL", server_a.url)
        run_a = evaluate.run(compose_cfg(args))
        monkeypatch.setenv("OPENAI_BASE_URL", server_b.url)
        run_b = evaluate.run(compose_cfg(args))
        url_b, port_b = server_b.url, server_b.socket.getsockname()[1]
    assert a.calls == 6 and b.calls == 6 and run_b["model_calls"] == 6
    assert run_a["run_dir"] != run_b["run_dir"]
    assert load_run(run_b["run_dir"])[0]["backbone"]["endpoint"] == url_b
    time.sleep(1.1)  # /v1/models reports whole seconds
    restarted = ScriptedEndpoint()
    with restarted.serve(port_b) as server:
        again = evaluate.run(compose_cfg(args + [f"run.root={tmp_path}/again"]))
        assert server.url == url_b
    assert restarted.calls == 6 and again["model_calls"] == 6


def test_a_leave_publication_out_cut_has_the_nodes_of_its_graph_and_stark_has_others():
    """distill accepts teacher runs on a cut of the student's graph (node ids mean the same), not on another graph."""
    from ark.runs.identity import graph_setting, same_graph_up_to_cut
    from tests.conftest import compose_cfg

    biokg, lpo, lpo_val, prime = (graph_setting(spec(compose_cfg([f"dataset={d}"])))
                                  for d in ("biokg", "biokg_lpo", "biokg_lpo_val", "stark_prime"))
    assert lpo["name"] == "biokg_lpo" and lpo["exclude_splits"] == ["test"]  # the stored settings, cut included
    assert same_graph_up_to_cut(lpo, biokg) and same_graph_up_to_cut(biokg, lpo)
    assert same_graph_up_to_cut(lpo, lpo_val)
    assert not same_graph_up_to_cut(prime, biokg)
    other_documents = {**lpo, "documents": {**lpo["documents"], "max_per_relation": 5}}
    assert not same_graph_up_to_cut(other_documents, biokg)


@pytest.mark.e2e  # a Python subprocess
def test_a_run_directorys_dvc_hash_leaves_out_its_times_and_the_machine_they_were_taken_on(tmp_path):
    """The committed .dvcignore in a DVC repository: a run directory that differs only in timings.jsonl and
    machine.json (another CPU, another kernel) hashes the same, so a rerun elsewhere leaves dvc.lock unchanged."""
    dvc = [sys.executable, "-m", "dvc"]
    subprocess.run([*dvc, "init", "--no-scm", "-q"], cwd=tmp_path, check=True)
    shutil.copy(ROOT / ".dvcignore", tmp_path / ".dvcignore")
    run = tmp_path / "run"
    run.mkdir()
    (run / "records.jsonl").write_text('{"id": "q1"}\n')

    def hashed(processor: str, records: str = '{"id": "q1"}\n') -> str:
        (run / "records.jsonl").write_text(records)
        (run / "machine.json").write_text(json.dumps({"processor": processor}))
        (run / "timings.jsonl").write_text(json.dumps({"wall": len(processor)}))
        subprocess.run([*dvc, "add", "-q", "run"], cwd=tmp_path, check=True)
        return (tmp_path / "run.dvc").read_text()

    intel = hashed("Intel(R) Xeon(R) Processor")
    assert hashed("AMD EPYC 9R14") == intel
    assert hashed("AMD EPYC 9R14", '{"id": "q2"}\n') != intel  # the records are hashed
