"""The agent: fusion, the loop's handling of bad calls, the LLM client's cache and retries, resumable runs.

The model is a test double: a scripted OpenAI-compatible endpoint on loopback reached through litellm.
"""
import asyncio
import dataclasses
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ark import build
from ark.agent.aggregate import aggregate, ordering, shuffled, voting
from ark.agent.loop import run_agent
from ark.agent.policies import LLMPolicy, RulesPolicy
from ark.llm.client import LLMClient
from ark.llm.settings import Backbone, RetryPolicy
from ark.runs.store import Run
from ark.tools.toolbox import Toolbox
from tests.conftest import ROOT, compose_cfg
from ark.llm.fake import ScriptedEndpoint, call
from tests.helpers import tiny_graph, tiny_index

FAST_RETRY = RetryPolicy(max_attempts=4, base_delay=0.01, max_delay=0.05, timeout=10)


# ------------------------------------------------------------------ fusion
def test_voting_counts_agents_then_best_position_then_agent_order():
    lists = [[1, 2, 3], [2, 1, 4], [5, 2]]
    # 2: 3 votes; 1: 2 votes; one vote each: 5 (position 0), 3 (position 2), 4 (position 2, a later agent)
    assert voting(lists) == [2, 1, 5, 3, 4]
    # ties on votes and best position: the first agent that listed it wins
    assert voting([[7, 8], [9, 8], [10]]) == [8, 7, 9, 10]
    assert voting([[4, 4, 5]]) == [4, 5]  # repeats inside one list count once


def test_ordering_random_and_cut():
    assert ordering([[3, 1], [1, 2], [4]]) == [3, 1, 2, 4]
    a, b = shuffled([[1, 2, 3], [4]], seed=1), shuffled([[1, 2, 3], [4]], seed=1)
    assert a == b and sorted(a) == [1, 2, 3, 4]
    assert aggregate([list(range(30))], "voting") == list(range(20))
    with pytest.raises(ValueError, match="unknown aggregation"):
        aggregate([[1]], "borda")


# ------------------------------------------------------------------ loop
def toolbox():
    g = tiny_graph()
    return Toolbox(g, tiny_index(g))


class ScriptedSession:
    """Replays fixed assistant messages (no LLM)."""

    def __init__(self, messages):
        self.messages = list(messages)

    async def act(self, messages, observations):
        from ark.llm.result import LLMResult

        return LLMResult(self.messages.pop(0), latency=0.5)


def test_garbage_calls_become_error_observations_and_the_trajectory_goes_on():
    session = ScriptedSession([
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "a", "type": "function", "function": {"name": "search_in_graph", "arguments": "{not json"}},
            {"id": "b", "type": "function", "function": {"name": "fly", "arguments": "{}"}}]},
        {"role": "assistant", "content": "I think the answer is Marfan."},  # no call at all
        {"role": "assistant", "content": 'Sure: {"name": "add_to_answer", "arguments": {"answer_nodes": [{"node_index": 0}]}}'},
        {"role": "assistant", "content": None, "tool_calls": [call("finish", {})]},
    ])
    traj = asyncio.run(run_agent(session, toolbox(), "marfan", T_max=10, agent=0))
    tool_msgs = [m for m in traj.messages if m["role"] == "tool"]
    assert tool_msgs[0]["content"].startswith("Error: arguments are not valid JSON")
    assert tool_msgs[1]["content"].startswith("Error: unknown tool 'fly'")
    assert traj.invalid_calls == 2 and traj.replies_without_call == 1
    assert any(m["role"] == "user" and m["content"].startswith("Observation from add_to_answer") for m in traj.messages)
    assert traj.answer == [0] and traj.finished and traj.steps == 4 and sum(traj.model_time) == 2.0
    assert len(traj.tool_time) == 4 and traj.tool_time[1] == 0.0 and traj.tool_time[0] > 0


def test_t_max_stops_the_loop():
    session = ScriptedSession([{"role": "assistant", "content": None,
                                "tool_calls": [call("search_in_graph", {"query": "heart"})]}] * 5)
    traj = asyncio.run(run_agent(session, toolbox(), "heart", T_max=3, agent=0))
    assert traj.steps == 3 and not traj.finished and traj.tool_calls == {"search_in_graph": 3}


def test_an_agent_stops_after_idle_limit_replies_without_a_valid_call():
    bad = {"role": "assistant", "content": None, "tool_calls": [
        {"id": "b", "type": "function", "function": {"name": "fly", "arguments": "{}"}}]}
    chat = {"role": "assistant", "content": "I think the answer is Marfan."}
    good = {"role": "assistant", "content": None, "tool_calls": [call("search_in_graph", {"query": "heart"})]}
    # an invalid call, then a reply without any call: two idle replies in a row
    traj = asyncio.run(run_agent(ScriptedSession([bad, chat, good, good]), toolbox(), "heart", T_max=4, agent=0,
                                 idle_limit=2))
    assert traj.steps == 2 and traj.idle_stop and not traj.finished
    # a valid call in between resets the count; without a limit the agent runs its budget
    traj = asyncio.run(run_agent(ScriptedSession([bad, good, chat, good]), toolbox(), "heart", T_max=4, agent=0,
                                 idle_limit=2))
    assert traj.steps == 4 and not traj.idle_stop
    traj = asyncio.run(run_agent(ScriptedSession([bad, chat, chat, chat]), toolbox(), "heart", T_max=4, agent=0))
    assert traj.steps == 4 and not traj.idle_stop


def test_rules_policy_is_label_free_and_uses_the_same_tools():
    tb = toolbox()
    policy = RulesPolicy(tb, {"disease": ["disease"], "effect/phenotype": ["phenotype", "finding"]})
    assert policy.answer_type("A patient with abnormal gene function. Which phenotype fits?") == "effect/phenotype"
    traj = asyncio.run(run_agent(policy.session("Which findings of Marfan disease", 0), tb, "Which findings of Marfan disease",
                                 T_max=10, agent=0))
    names = [tc["function"]["name"] for m in traj.messages if m["role"] == "assistant" for tc in m["tool_calls"]]
    assert names[0] == "search_in_graph" and "search_in_neighborhood" in names and names[-1] == "finish"
    assert traj.finished and traj.answer and all(tb.graph.type_name(v) == "effect/phenotype" for v in traj.answer)


RULE_WORDS = {"disease": ["disease"], "effect/phenotype": ["phenotype", "finding"]}
HUB_QUESTION = "Which findings of Holt-Oram heart disease"  # 25 phenotype neighbors behind one disease hit


def rules_calls(policy, tb, query, agent):
    traj = asyncio.run(run_agent(policy.session(query, agent), tb, query, T_max=10, agent=agent))
    return [(tc["function"]["name"], json.loads(tc["function"]["arguments"]))
            for m in traj.messages if m["role"] == "assistant" for tc in m["tool_calls"]]


def test_rules_at_temperature_zero_is_the_deterministic_policy_for_every_agent_and_seed():
    tb = toolbox()
    plain = rules_calls(RulesPolicy(tb, RULE_WORDS), tb, HUB_QUESTION, 0)
    cold = RulesPolicy(tb, RULE_WORDS, temperature=0.0, seed=7)
    assert all(rules_calls(cold, tb, HUB_QUESTION, a) == plain for a in range(3))


def test_stochastic_rules_are_reproducible_per_seed_and_agent_and_differ_across_agents():
    tb = toolbox()
    hot = RulesPolicy(tb, RULE_WORDS, temperature=0.7, seed=0)
    agents = [rules_calls(hot, tb, HUB_QUESTION, a) for a in range(3)]
    # the same (seed, agent, query) gives the same trajectory, in another policy object and in any order
    assert [rules_calls(RulesPolicy(tb, RULE_WORDS, temperature=0.7, seed=0), tb, HUB_QUESTION, a)
            for a in (2, 1, 0)] == agents[::-1]
    assert agents[0] != agents[1] != agents[2] != agents[0]
    assert rules_calls(RulesPolicy(tb, RULE_WORDS, temperature=0.7, seed=1), tb, HUB_QUESTION, 0) != agents[0]
    for calls in agents:  # different, but the same sensible script: search, typed neighborhoods, answer, finish
        names = [name for name, _ in calls]
        assert names[0] == "search_in_graph" and names[-2:] == ["add_to_answer", "finish"]
        assert 1 <= calls[0][1]["size"] <= tb.config.global_k_max
        assert all(args["node_type"] == "effect/phenotype" for name, args in calls if name == "search_in_neighborhood")
        answer = [n["node_index"] for n in calls[-2][1]["answer_nodes"]]
        assert answer and all(tb.graph.type_name(v) == "effect/phenotype" for v in answer)


def _answer_keeps_observation_ranks(policy, tb, agent) -> bool:
    """Whether the agent's answer lists the nodes of each observation in the order that observation ranked them."""
    traj = asyncio.run(run_agent(policy.session(HUB_QUESTION, agent), tb, HUB_QUESTION, T_max=10, agent=agent))
    answer = [n["node_index"] for m in traj.messages if m["role"] == "assistant" for tc in m["tool_calls"]
              if tc["function"]["name"] == "add_to_answer"
              for n in json.loads(tc["function"]["arguments"])["answer_nodes"]]
    assert answer
    global_hits: list[int] = []
    for m in traj.messages:  # (a global hit found again among neighbors keeps its global rank)
        if m["role"] == "tool" and m["name"] in ("search_in_graph", "search_in_neighborhood"):
            ranked = [int(v) for v in re.findall(r"\[(\d+)\]", m["content"])]
            in_answer = [v for v in ranked if v in answer and (m["name"] == "search_in_graph" or v not in global_hits)]
            global_hits += ranked if m["name"] == "search_in_graph" else []
            if in_answer != sorted(in_answer, key=answer.index):
                return False
    return True


def test_stochastic_rules_keep_the_ranked_answer_order_unless_told_to_sample_it():
    tb = toolbox()
    kept = RulesPolicy(tb, RULE_WORDS, temperature=0.7, seed=0)
    assert all(_answer_keeps_observation_ranks(kept, tb, a) for a in range(4))
    sampled = RulesPolicy(tb, RULE_WORDS, temperature=0.7, seed=0, answer_order="sampled")
    assert not all(_answer_keeps_observation_ranks(sampled, tb, a) for a in range(4))
    with pytest.raises(ValueError, match="answer_order"):
        RulesPolicy(tb, RULE_WORDS, answer_order="random")


# ------------------------------------------------------------------ client: retries, cache
def fake_backbone(**kw):
    return Backbone(name="fake", model="openai/fake", temperature=0.7, max_tokens=64, **kw)


def test_rate_limit_then_success_is_retried():
    endpoint = ScriptedEndpoint(fail_first=1, status=429)
    with endpoint.serve() as server:
        client = LLMClient(fake_backbone(), None, FAST_RETRY, api_base=server.url)
        result = asyncio.run(client.complete([{"role": "user", "content": "Question: x"}], toolbox().schemas()))
    assert result.error is None and result.attempts == 2 and endpoint.calls == 2
    assert result.message["tool_calls"][0]["function"]["name"] == "search_in_graph"
    assert result.prompt_tokens == 100 and result.completion_tokens == 20


@pytest.mark.parametrize("backbone, tool_mode, expected", [("gpt-4.1", "native", "required"),
                                                            ("claude-sonnet-4-5", "native", "required"),
                                                            ("gpt-4.1", "text", None)])
def test_the_request_carries_the_backbones_tool_choice(backbone, tool_mode, expected):
    endpoint = ScriptedEndpoint()
    cfg = compose_cfg([f"backbone={backbone}", "backbone.model=openai/fake", f"backbone.tool_mode={tool_mode}",
                       "llm.cache=null"])
    with endpoint.serve() as server:
        spec = build.spec(cfg)
        client = spec.backbone.client(build.serving(spec), api_base=server.url)
        asyncio.run(LLMPolicy(client, toolbox()).session("x", 0).act([{"role": "user", "content": "Question: x"}], []))
    request = endpoint.requests[0]
    assert request.get("tool_choice") == expected and ("tools" in request) == (expected is not None)


def test_a_call_that_keeps_failing_is_recorded_not_raised():
    endpoint = ScriptedEndpoint(fail_first=100, status=503)
    with endpoint.serve() as server:
        client = LLMClient(fake_backbone(), None, FAST_RETRY, api_base=server.url)
        policy = LLMPolicy(client, toolbox())
        traj = asyncio.run(run_agent(policy.session("x", 0), policy.toolbox, "x", T_max=5, agent=0))
    assert endpoint.calls == FAST_RETRY.max_attempts
    assert len(traj.errors) == 1 and "ServiceUnavailable" in traj.errors[0] or "InternalServer" in traj.errors[0]
    assert traj.steps == 1 and not traj.finished


def test_a_conversation_that_would_overflow_the_context_window_ends_cleanly_before_the_call():
    from ark.eval.trajectories import run_statistics
    from ark.agent.records import QueryRecord

    tb = toolbox()
    first = LLMClient(fake_backbone(), None, FAST_RETRY).request(
        [{"role": "system", "content": "s"}], tb.schemas(), 0)
    endpoint = ScriptedEndpoint(script=lambda request: call("search_in_graph", {"query": "connective tissue"}))
    trajectories = {}
    with endpoint.serve() as server:
        for window in (10 ** 6, None):
            client = LLMClient(fake_backbone(context_window=window), None, FAST_RETRY, api_base=server.url)
            if window is None:  # room for the first request and its reply, not for the first observation's
                from ark.agent.prompt import system_prompt, user_prompt

                msgs = [{"role": "system", "content": system_prompt(tb, 5)}, {"role": "user", "content": user_prompt("x")}]
                client.context_window = client.count_tokens({**first, "messages": msgs}) + 64 + 40
            policy = LLMPolicy(client, tb)
            trajectories[window] = asyncio.run(run_agent(policy.session("x", 0), tb, "x", T_max=5, agent=0))
    roomy, tight = trajectories[10 ** 6], trajectories[None]
    assert roomy.steps == 5 and not roomy.context_full
    assert tight.steps == 1 and tight.context_full and not tight.errors and endpoint.calls == 5 + 1
    stats = run_statistics([QueryRecord(id="q", query="x", ranking=[], agents=[roomy, tight])])
    assert stats["context_full_share"] == 0.5


def test_secret_never_reaches_records(monkeypatch):
    monkeypatch.setenv("ARK_TEST_KEY", "sk-very-secret-value")
    endpoint = ScriptedEndpoint()
    with endpoint.serve() as server:
        client = LLMClient(fake_backbone(api_key_env="ARK_TEST_KEY"), None, FAST_RETRY, api_base=server.url)
        policy = LLMPolicy(client, toolbox())
        traj = asyncio.run(run_agent(policy.session("x", 0), policy.toolbox, "x", T_max=5, agent=0))
    assert "sk-very-secret-value" not in json.dumps(dataclasses.asdict(traj))


# ------------------------------------------------------------------ evaluate stage
def evaluate_cfg(tiny_project, url, extra=()):
    return compose_cfg(tiny_project + [
        "backbone=gpt-4.1", "backbone.model=openai/fake", f"backbone.api_base={url}", "backbone.api_key_env=null",
        "retriever.params.stemmer=null", "eval.concurrency=2", "agent.n_agents=3", "agent.T_max=4",
        "llm.retry.base_delay=0.01", *extra])


def build_index(cfg):
    from ark.stages import build_index

    build_index.run(cfg)


TIMINGS = {"wall_time", "model_time", "tool_time", "replayed_steps"}


def without_timings(line: str) -> dict:
    record = json.loads(line)
    record["agents"] = [{k: v for k, v in a.items() if k not in TIMINGS} for a in record["agents"]]
    return {k: v for k, v in record.items() if k not in TIMINGS}


def test_evaluate_then_replay_from_cache_makes_no_calls_and_identical_records(tiny_project):
    from ark.stages import evaluate

    endpoint = ScriptedEndpoint()
    with endpoint.serve() as server:
        cfg = evaluate_cfg(tiny_project, server.url)
        build_index(cfg)
        first = evaluate.run(cfg)
        calls = endpoint.calls
        out = Path(first["run_dir"])
        records = (out / "records.jsonl").read_text().splitlines()
        timings = (out / "timings.jsonl").read_text().splitlines()
        metrics = (out / "metrics.json").read_text()
        assert first["n_queries"] == 3 and calls == 3 * 3 * 2  # 3 queries x 3 agents x 2 steps
        assert first["hit@1"] == pytest.approx(2 / 3) and first["invalid_call_rate"] == 0.0
        # 9 agents: 9 searches, 9 finishes, 6 add_to_answer ('zebra' finds nothing to add)
        assert first["tool_call_share"] == {"add_to_answer": 0.25, "finish": 0.375, "search_in_graph": 0.375}
        shutil.rmtree(out)
        second = evaluate.run(cfg)
    assert endpoint.calls == calls and second["model_calls"] == 0 and second["run_dir"] == first["run_dir"]
    # the records hold no times: a replay rewrites them byte for byte (the run directory's DVC hash is unchanged)
    assert (out / "records.jsonl").read_text().splitlines() == records
    assert not any(k in json.loads(records[0]) for k in TIMINGS) and "model_time" not in records[0]
    replayed = [json.loads(line) for line in (out / "timings.jsonl").read_text().splitlines()]
    first_timings = [json.loads(line) for line in timings]
    # model time is replayed from the cache; only the tools' and the query's wall-clock time are measured anew
    assert [t["agents"][0]["model_time"] for t in replayed] == [t["agents"][0]["model_time"] for t in first_timings]
    assert (out / "metrics.json").read_text() == metrics
    for t in replayed:  # a replayed query's wall-clock time is rebuilt from the recorded model and tool times
        assert all(a["replayed_steps"] == len(a["model_time"]) for a in t["agents"])
        assert t["wall_time"] == round(max(sum(a["model_time"]) + sum(a["tool_time"]) for a in t["agents"]), 4)
    assert all(t["agents"][0]["replayed_steps"] == 0 for t in first_timings)


@pytest.mark.e2e
def test_kill_mid_run_then_rerun_yields_each_query_once(tiny_project, tmp_path):
    endpoint = ScriptedEndpoint(delay=0.4)
    with endpoint.serve() as server:
        cfg = evaluate_cfg(tiny_project, server.url, ["eval.concurrency=1", "agent.n_agents=1"])
        build_index(cfg)
        args = [sys.executable, "-m", "ark.stages.evaluate", *tiny_project, "backbone=gpt-4.1",
                "backbone.model=openai/fake", f"backbone.api_base={server.url}", "backbone.api_key_env=null",
                "retriever.params.stemmer=null", "eval.concurrency=1", "agent.n_agents=1", "agent.T_max=4",
                f"llm.cache={tmp_path}/llm.sqlite", f"hydra.run.dir={tmp_path}/hydra"]
        records = Run(build.spec(cfg), "evaluate").dir / "records.jsonl"
        proc = subprocess.Popen(args, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                env={**os.environ, "PYTHONPATH": str(ROOT)})
        # the event, not a deadline: under load the first record takes longer (pytest-timeout ends a hang)
        while proc.poll() is None and not (records.exists() and records.read_text().count("\n") >= 1):
            time.sleep(0.05)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        done_before = [json.loads(line)["id"] for line in records.read_text().splitlines() if line.strip()]
        assert 1 <= len(done_before) < 3
        calls_before = endpoint.calls
        rerun = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
        assert rerun.returncode == 0, rerun.stderr[-2000:]
    ids = [json.loads(line)["id"] for line in records.read_text().splitlines()]
    assert ids == ["q1", "q2", "q3"]
    # finished queries were not asked again: at most the interrupted query's calls were repeated
    assert endpoint.calls - calls_before <= 2 * (3 - len(done_before)) + 1



def test_ark_ask_shows_the_trajectory_and_the_named_answer(tiny_project):
    import io

    from ark.cli import ask

    cfg = compose_cfg(tiny_project + ["retriever.params.stemmer=null"])
    build_index(cfg)
    out = io.StringIO()
    record = ask("Which finding of the lens of the eye", tiny_project + ["retriever.params.stemmer=null",
                                                                           "backbone=rules", "agent.n_agents=2"], out=out)
    text = out.getvalue()
    assert "-> search_in_graph(" in text and "Top " in text and "-> finish(" in text
    assert record.ranking[0] == 4 and "1. [4] effect/phenotype | Ectopia lentis" in text
    # the deterministic rules policy: agent 1 takes agent 0's path, shown once; the header says what it is
    assert "[agent 0 step 1] -> search_in_graph(" in text and "[agent 1 step" not in text
    assert record.agents[0].messages == record.agents[1].messages
    assert re.search(r"^\[agent 1: the same \d+ steps? as agent 0\]$", text, re.M)
    assert "note: the rules backbone is a scripted policy" in text


def test_ark_ask_whose_every_model_call_fails_exits_1_in_one_line(tiny_project, tmp_path, capsys):
    from ark.cli import main
    from ark.llm.fake import ScriptedEndpoint

    build_index(compose_cfg(tiny_project + ["retriever.params.stemmer=null"]))
    with ScriptedEndpoint(fail_first=10**6, status=500).serve() as server:
        code = main(["ask", "--json", str(tmp_path / "out.json"), "Which finding of the lens of the eye",
                     *tiny_project, "retriever.params.stemmer=null", "backbone=gpt-4.1", "backbone.model=openai/fake",
                     f"backbone.api_base={server.url}", "backbone.api_key_env=null", "llm.cache=null",
                     "agent.n_agents=2", "llm.retry.max_attempts=2", "llm.retry.base_delay=0.01"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 1 and err[-1].startswith("incomplete: every agent's model calls failed (2 of 2 agents")
    assert not (tmp_path / "out.json").exists()  # no answer file for a question nobody answered
    assert "failed after 2 attempts: InternalServerError" in err[-1]


def test_ark_ask_without_its_key_says_no_call_was_made(tiny_project, capsys, monkeypatch):
    from ark.cli import main

    monkeypatch.delenv("ARK_UNSET_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    monkeypatch.delenv("OPENAI_API_BASE", raising=False)
    build_index(compose_cfg(tiny_project + ["retriever.params.stemmer=null"]))
    code = main(["ask", "Which finding of the lens of the eye", *tiny_project, "retriever.params.stemmer=null",
                 "backbone=gpt-4.1", "backbone.api_key_env=ARK_UNSET_KEY", "llm.cache=null", "agent.n_agents=1"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 1 and "no call was made: the environment variable ARK_UNSET_KEY" in err[-1], err
    assert "attempts" not in err[-1]


def test_a_timeout_names_the_settings_that_trade_waiting_against_load():
    retry = RetryPolicy(max_attempts=3, timeout=120)
    text = retry.failure("Timeout: litellm.Timeout: Connection timed out after 120.0 seconds.")
    assert "llm.retry.timeout=120 s, 3 attempts" in text and "eval.concurrency" in text
    assert retry.failure("InternalServerError: boom") == "failed after 3 attempts: InternalServerError: boom"


def test_ark_ask_shows_each_agent_whose_path_differs():
    import io

    from ark.cli import Printer

    out = io.StringIO()
    trace = Printer(max_lines=8, out=out)
    call = {"tool_calls": [{"function": {"name": "search_in_graph", "arguments": '{"query": "x"}'}}]}
    trace("reply", {"agent": 1, "step": 0, "message": call})  # agent 1 may act before agent 0
    trace("reply", {"agent": 0, "step": 0, "message": call})
    trace("reply", {"agent": 2, "step": 0, "message": {"content": "done"}})
    assert out.getvalue() == '[agent 0 step 1] -> search_in_graph({"query": "x"})\n'
    trace.finish()
    assert out.getvalue().splitlines()[1:] == ["[agent 2 step 1] says: done", "[agent 1: the same 1 step as agent 0]"]


def test_a_vllm_student_is_asked_by_its_lora_name_in_the_rendering_it_was_trained_on():
    """backbone=qwen3-8b-student: the request names the LoRA module and carries the tools as text, exactly as
    ark.distill.sft rendered the teacher's (native) trajectories for training."""
    from ark.agent.prompt import system_prompt
    from ark.llm.protocol import chat_messages

    endpoint = ScriptedEndpoint()
    cfg = compose_cfg(["backbone=qwen3-8b-student", "llm.cache=null"])
    tools = toolbox()
    text_system = system_prompt(tools, cfg.agent.T_max, text_protocol=True)
    question = {"role": "user", "content": "Question: x"}
    with endpoint.serve() as server:
        spec = build.spec(cfg)
        client = spec.backbone.client(build.serving(spec), api_base=server.url)
        policy = LLMPolicy(client, tools)
        asyncio.run(policy.session("x", 0).act([{"role": "system", "content": text_system}, question], []))
    request = endpoint.requests[0]
    assert policy.text_protocol and request["model"] == "ark-student"
    assert "tools" not in request and "tool_choice" not in request
    assert request["chat_template_kwargs"] == {"enable_thinking": False}
    trained = chat_messages([{"role": "system", "content": system_prompt(tools, cfg.agent.T_max)}, question],
                            tools.schemas())
    assert request["messages"] == trained


def test_rules_answer_with_the_global_hits_at_the_last_step_of_their_budget():
    tb = toolbox()

    def calls(T_max):
        policy = RulesPolicy(tb, RULE_WORDS)
        traj = asyncio.run(run_agent(policy.session(HUB_QUESTION, 0, T_max), tb, HUB_QUESTION, T_max=T_max, agent=0))
        return [tc["function"]["name"] for m in traj.messages if m["role"] == "assistant" for tc in m["tool_calls"]]

    assert calls(2) == ["search_in_graph", "add_to_answer", "finish"]  # no budget left to explore
    full = calls(3)
    assert "search_in_neighborhood" in full and full[-2:] == ["add_to_answer", "finish"]
    assert calls(20) == full == [name for name, _ in rules_calls(RulesPolicy(tb, RULE_WORDS), tb, HUB_QUESTION, 0)]


def test_a_runaway_reply_is_cut_before_it_is_stored_or_sent_back():
    tb = toolbox()
    huge = "x" * 300_000

    class Runaway:
        async def act(self, messages, observations):
            from ark.llm.result import LLMResult

            assert all(len(m.get("content") or "") < 20_000 for m in messages)  # never sent back whole
            return LLMResult({"role": "assistant", "content": huge, "tool_calls": [
                {"id": "c0", "type": "function", "function": {"name": "search_in_graph",
                                                              "arguments": json.dumps({"query": huge})}}]})

    traj = asyncio.run(run_agent(Runaway(), tb, "q", T_max=2, agent=0))
    replies = [m for m in traj.messages if m["role"] == "assistant"]
    assert len(replies) == 2 and all(len(m["content"]) < 17_000 for m in replies)
    assert replies[0]["content"].endswith("(reply cut at 16,000 of 300,000 characters)")
    assert traj.invalid_calls == 2  # the cut arguments are no valid JSON: an error observation, the run goes on


def test_a_retry_waits_as_long_as_the_server_asked_in_seconds():
    from types import SimpleNamespace

    from ark.llm.client import _retry_after

    def error(headers):
        return SimpleNamespace(response=SimpleNamespace(headers=headers))

    assert _retry_after(error({"retry-after": "7"})) == 7.0
    assert _retry_after(error({"retry-after": "Wed, 21 Oct 2026 07:28:00 GMT"})) == 0.0
    assert _retry_after(error({})) == 0.0 and _retry_after(ValueError("no response")) == 0.0


def test_a_priced_models_reply_costs_its_tokens_at_litellms_prices():
    import litellm

    price = litellm.model_cost["gpt-4.1"]
    endpoint = ScriptedEndpoint()
    with endpoint.serve() as server:
        for model, expected in (("gpt-4.1", 100 * price["input_cost_per_token"] + 20 * price["output_cost_per_token"]),
                                ("openai/fake", 0.0)):  # a model missing from the price map costs nothing here
            client = LLMClient(Backbone(name="b", model=model, max_tokens=64), None, FAST_RETRY, api_base=server.url)
            result = asyncio.run(client.complete([{"role": "user", "content": "Question: x"}], toolbox().schemas()))
            assert result.error is None and result.cost == pytest.approx(expected, rel=1e-9) and (expected > 0) == (model == "gpt-4.1")


@pytest.mark.e2e
def test_queries_spread_over_worker_processes_give_the_records_of_one_process(tiny_project):
    from ark.stages import evaluate

    endpoint = ScriptedEndpoint()
    runs = {}
    with endpoint.serve() as server:
        for workers in (1, 2):
            cfg = evaluate_cfg(tiny_project, server.url, [f"eval.workers={workers}", "llm.cache=null",
                                                          f"run.root={tiny_project[0].split('=', 1)[1]}/w{workers}"])
            if workers == 1:
                build_index(cfg)
            result = evaluate.run(cfg)
            out = Path(result["run_dir"])
            runs[workers] = (result, (out / "records.jsonl").read_text().splitlines(), (out / "metrics.json").read_text())
    (one, records_one, metrics_one), (two, records_two, metrics_two) = runs[1], runs[2]
    assert one["model_calls"] == two["model_calls"] == 3 * 3 * 2 and endpoint.calls == 2 * 3 * 3 * 2
    assert sorted(map(json.dumps, map(without_timings, records_two))) == \
        sorted(map(json.dumps, map(without_timings, records_one)))
    assert metrics_two == metrics_one


def test_workers_keep_exactly_the_configured_queries_in_flight():
    from ark.runs.workers import shards

    queries = [{"id": str(i)} for i in range(10)]
    for workers, concurrency in [(1, 1), (2, 1), (2, 3), (3, 8), (4, 64), (16, 4)]:
        split = shards(queries, workers, concurrency)
        assert sum(c for _, c in split) == concurrency and all(c >= 1 for _, c in split), (workers, concurrency)
        assert sorted(q["id"] for shard, _ in split for q in shard) == sorted(q["id"] for q in queries)
    assert len(shards(queries[:2], 8, 8)) == 2  # no worker without a query


def test_the_embedded_model_is_not_spread_over_workers(tiny_project):
    from ark.errors import UserError
    from ark.runs.execute import execute

    cfg = compose_cfg(tiny_project + ["backbone=local_smollm2", "eval.workers=2"])
    with pytest.raises(UserError, match="embedded model computes in one process"):
        execute(build.spec(cfg), "evaluate")


# ------------------------------------------------------------------ rules: a case read finding by finding
CASE = "A female patient presents with Tall stature, Arachnodactyly, Ectopia lentis. Not observed: Finding 3. "
FINDING_WORDS = {"disease": ["disease"], "gene/protein": ["gene"], "effect/phenotype": ["phenotype"]}


def test_case_findings_are_the_listed_items_before_the_question_without_the_absent_ones():
    from ark.agent.policies import case_findings

    assert case_findings(CASE + "Which disease best explains these findings?") == \
        ["Tall stature", "Arachnodactyly", "Ectopia lentis"]
    assert case_findings("Which diseases show 'Pyramidal tract signs' together with brisk reflexes?") == []
    assert case_findings(CASE) == []  # no question
    assert case_findings("A patient presents with Seizure, Seizure. Which disease?") == ["Seizure"]
    # a '.' inside a token ends no statement; a label with a comma or " with " in it stays whole
    assert case_findings("Which features seen in both Microphthalmia, Lenz type and Monosomy 9q22.3 are a kind of "
                         "'Ataxia'?") == []
    assert case_findings("A patient presents with Intellectual disability, mild, Ultra-low vision with retained "
                         "light perception. Which disease?") == ["Intellectual disability, mild",
                                                                 "Ultra-low vision with retained light perception"]


def test_findings_are_anchored_by_name_explored_and_voted_to_the_answer():
    tb = toolbox()
    query = CASE + "Which disease best explains these findings?"
    calls = rules_calls(RulesPolicy(tb, FINDING_WORDS, findings=30), tb, query, 0)
    searches = [a["query"] for n, a in calls if n == "search_in_graph"]
    assert searches == [query, "Tall stature", "Arachnodactyly", "Ectopia lentis"]
    explored = [(a["node_index"], a["node_type"]) for n, a in calls if n == "search_in_neighborhood"]
    assert explored == [(2, "disease"), (3, "disease"), (4, "disease")]  # the phenotypes named as the findings
    answer = [a["answer_nodes"] for n, a in calls if n == "add_to_answer"][0]
    assert answer[0]["node_index"] == 0  # Marfan: the only disease all three findings reach
    # capped: only the first finding is anchored
    capped = rules_calls(RulesPolicy(tb, FINDING_WORDS, findings=1), tb, query, 0)
    assert [a["query"] for n, a in capped if n == "search_in_graph"] == [query, "Tall stature"]
    # sampling agents each keep at least one finding, reproducibly
    hot = [rules_calls(RulesPolicy(tb, FINDING_WORDS, findings=30, temperature=0.7), tb, query, a) for a in range(3)]
    assert hot == [rules_calls(RulesPolicy(tb, FINDING_WORDS, findings=30, temperature=0.7), tb, query, a)
                   for a in range(3)]
    assert all(sum(n == "search_in_graph" for n, _ in c) >= 2 and c[-1][0] == "finish" for c in hot)


def test_findings_reach_genes_through_diseases_and_off_means_the_plain_policy():
    tb = toolbox()
    query = CASE + "Which gene is most likely causal?"
    calls = rules_calls(RulesPolicy(tb, FINDING_WORDS, findings=30, via={"gene/protein": "disease"}), tb, query, 0)
    explored = [(a["node_index"], a["node_type"]) for n, a in calls if n == "search_in_neighborhood"]
    assert explored[:3] == [(2, "disease"), (3, "disease"), (4, "disease")] and explored[3:] == [(0, "gene/protein")]
    assert [a["answer_nodes"] for n, a in calls if n == "add_to_answer"][0][0]["node_index"] == 1  # FBN1
    # off by default: one search for the question, none per finding
    plain = rules_calls(RulesPolicy(tb, FINDING_WORDS), tb, query, 0)
    assert [a["query"] for n, a in plain if n == "search_in_graph"] == [query]
    # a budget of 2 steps answers with what the first reply showed, and finishes
    traj = asyncio.run(run_agent(RulesPolicy(tb, FINDING_WORDS, findings=30).session(query, 0, 2), tb, query,
                                 T_max=2, agent=0))
    assert traj.finished and traj.steps == 2


def test_a_missing_api_key_fails_at_the_first_call_without_retries(monkeypatch):
    """A provider's API (no api_base) whose key variable is unset: one failed call, no attempt, no retry wait."""
    monkeypatch.delenv("ARK_UNSET_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    monkeypatch.delenv("OPENAI_API_BASE", raising=False)
    client = LLMClient(Backbone(name="b", model="gpt-4.1", max_tokens=64, api_key_env="ARK_UNSET_KEY"), None,
                       RetryPolicy(max_attempts=6, base_delay=5.0, max_delay=30, timeout=10))
    start = time.perf_counter()
    result = asyncio.run(client.complete([{"role": "user", "content": "Question: x"}], None))
    assert result.error.startswith("MissingKey: the environment variable ARK_UNSET_KEY") and client.calls == 0
    assert time.perf_counter() - start < 2
