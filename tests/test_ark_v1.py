"""The ARK-V1 interface (ark.tools.ark_v1) and its scripted policy (ark.agent.rules_v1), on the tiny test graph:
0 Marfan syndrome -[phenotype present]-> 2 Tall stature, 3 Arachnodactyly, 4 Ectopia lentis; 1 FBN1
-[associated with]-> 0; 3 -[is_a]-> 2; 5 Holt-Oram syndrome -[phenotype present]-> 25 findings (6..30)."""
import asyncio
import json

import pytest

from ark.agent.loop import run_agent
from ark.agent.prompt import system_prompt
from ark.agent.rules_v1 import RulesV1Policy, entity_spans
from ark.errors import UserError
from ark.tools.ark_v1 import ArkV1Toolbox
from ark.tools.toolbox import AnswerState, ToolConfig
from tests.conftest import compose_cfg
from tests.helpers import tiny_graph, tiny_index

WORDS = {"disease": ["disease", "syndrome"], "gene/protein": ["gene"], "effect/phenotype": ["phenotype", "finding"]}


@pytest.fixture(scope="module")
def tb():
    g = tiny_graph()
    return ArkV1Toolbox(g, tiny_index(g), ToolConfig(neighbor_k=10))


def test_the_tools_are_anchor_relations_triples_and_ark_answer_protocol(tb):
    assert tb.names() == ["find_entity", "get_relations", "get_triples", "add_to_answer", "finish"]
    obs = tb.call("search_in_graph", {"query": "Marfan"}, AnswerState())
    assert obs.error and "unknown tool" in obs.error  # no text search in this interface
    assert "find_entity" in system_prompt(tb, 20) and "search_in_graph" not in system_prompt(tb, 20)


def test_find_entity_is_exact_up_to_case_and_spacing(tb):
    assert tb.call("find_entity", {"name": "  marfan   SYNDROME "}, AnswerState()).nodes == [0]
    partial = tb.call("find_entity", {"name": "Marfan"}, AnswerState())
    assert partial.error is None and partial.nodes == [] and "No node is named" in partial.text
    assert tb.call("find_entity", {"name": " "}, AnswerState()).error == "name is empty"


def test_get_relations_counts_by_relation_direction_and_type_without_self_loops(tb):
    text = tb.call("get_relations", {"node_index": 0}, AnswerState()).text.splitlines()
    assert text[1:] == ['-[phenotype present]-> effect/phenotype: 3',
                        '<-[associated with]- gene/protein: 1']  # the self loop 0 -[is_a]-> 0 is not shown


def test_get_triples_pages_in_a_fixed_order(tb):
    first = tb.call("get_triples", {"node_index": 5, "relation": "phenotype present"}, AnswerState())
    assert first.nodes == list(range(6, 16)) and "1-10 of 25" in first.text
    last = tb.call("get_triples", {"node_index": 5, "relation": "phenotype present", "offset": 20}, AnswerState())
    assert last.nodes == list(range(26, 31))
    past = tb.call("get_triples", {"node_index": 5, "relation": "phenotype present", "offset": 40}, AnswerState())
    assert past.nodes == [] and "past them" in past.text
    bad = tb.call("get_triples", {"node_index": 5, "relation": "cures"}, AnswerState())
    assert bad.error is not None


def test_entity_spans_are_the_longest_names_left_to_right(tb):
    assert entity_spans("with Tall stature, arachnodactyly and Marfan syndrome.", tb.names_index) == \
        ["Tall stature", "arachnodactyly", "Marfan syndrome"]


def calls(tb, question, T_max=20):
    traj = asyncio.run(run_agent(RulesV1Policy(tb, WORDS).session(question, 0, T_max), tb, question,
                                 T_max=T_max, agent=0))
    names = [tc["function"]["name"] for m in traj.messages if m["role"] == "assistant" for tc in m["tool_calls"]]
    return names, traj


def test_rules_v1_anchors_on_the_phenotypes_named_and_skips_negated_sentences(tb):
    q = "A patient presents with Tall stature, Arachnodactyly. Not observed: Finding 3. Which disease fits?"
    names, traj = calls(tb, q)
    first = traj.messages[2]["tool_calls"]
    assert [json.loads(c["function"]["arguments"])["name"] for c in first] == ["Tall stature", "Arachnodactyly"]
    assert names == ["find_entity"] * 2 + ["get_relations"] * 2 + ["get_triples"] * 2 + ["add_to_answer", "finish"]
    assert traj.answer == [0]  # both anchors reach Marfan; Holt-Oram (Finding 3's disease) is never reached


def test_rules_v1_goes_one_hop_further_when_no_relation_reaches_the_answer_type(tb):
    names, traj = calls(tb, "A patient presents with Tall stature and Arachnodactyly. Which gene is causal?")
    assert names.count("get_relations") == 3 and traj.answer == [1]  # 2 phenotypes -> Marfan -> FBN1


def test_rules_v1_answers_at_its_last_step(tb):
    names, traj = calls(tb, "A patient presents with Tall stature and Arachnodactyly. Which gene is causal?", T_max=3)
    assert names[-1] == "finish" and traj.finished and traj.steps == 3


def test_the_interface_is_chosen_by_config_and_refuses_ablations_and_sampling(tiny_project):
    from ark import build
    from ark.runs.execute import agents
    from ark.stages import build_index

    cfg = compose_cfg(tiny_project + ["agent=ark_v1", "backbone=rules"])
    build_index.run(cfg)
    assert build.toolbox(build.spec(cfg)).toolset == "ark_v1"
    with pytest.raises(UserError, match="use ablation=none"):
        build.toolbox(build.spec(compose_cfg(tiny_project + ["agent=ark_v1", "ablation=no_q"])))
    with pytest.raises(UserError, match="agent.toolset must be one of"):
        build.toolbox(build.spec(compose_cfg(tiny_project + ["+agent.toolset=v3"])))
    with pytest.raises(UserError, match="deterministic"):
        with agents(build.spec(compose_cfg(tiny_project + ["agent=ark_v1", "backbone=rules_sampled"]))):
            pass
    with agents(build.spec(cfg)) as a:
        record = a.one({"id": "q", "query": "Which disease has Arachnodactyly?"})
    assert record.ranking[:1] == [0]


def test_a_hosted_backbone_is_offered_the_ark_v1_tools_and_prompt(tiny_project):
    """The STaRK pipeline's way of running it (args: agent=ark_v1): an LLM backbone over the ARK-V1 tools, against
    a scripted fake endpoint (a test double)."""
    from ark import build
    from ark.llm.fake import ScriptedEndpoint
    from ark.runs.execute import agents
    from ark.stages import build_index

    def script(request):
        done = [m for m in request["messages"] if m["role"] == "tool"]
        if not done:
            return {"role": "assistant", "content": None, "tool_calls": [{"id": "c0", "type": "function", "function": {
                "name": "find_entity", "arguments": json.dumps({"name": "Arachnodactyly"})}}]}
        return {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "add_to_answer", "arguments": json.dumps(
                {"answer_nodes": [{"node_index": 3}]})}},
            {"id": "c2", "type": "function", "function": {"name": "finish", "arguments": "{}"}}]}

    endpoint = ScriptedEndpoint(script)
    with endpoint.serve() as server:
        cfg = compose_cfg(tiny_project + ["agent=ark_v1", "agent.n_agents=1", "backbone=gpt-4.1",
                                          "backbone.model=openai/fake", f"backbone.api_base={server.url}",
                                          "backbone.api_key_env=null", "llm.cache=null"])
        build_index.run(cfg)
        with agents(build.spec(cfg)) as a:
            record = a.one({"id": "q", "query": "Which finding is long slender fingers?"})
    first = endpoint.requests[0]
    assert [t["function"]["name"] for t in first["tools"]] == [
        "find_entity", "get_relations", "get_triples", "add_to_answer", "finish"]
    assert "find_entity needs its exact name" in first["messages"][0]["content"]
    assert record.ranking == [3]


TIE = """
import asyncio, json
from ark.agent.loop import run_agent
from ark.agent.rules_v1 import RulesV1Policy
from ark.graph import Graph
from ark.tools.ark_v1 import ArkV1Toolbox
from ark.tools.toolbox import ToolConfig
from tests.helpers import tiny_index

# Tall stature reaches one disease and one gene (a tie between the two types); neither reaches a process
types = ["disease", "gene/protein", "effect/phenotype", "biological_process"]
g = Graph.from_tables(types, ["associated with", "phenotype present", "involved in"], [2, 0, 1, 3],
                      ["N:0", "N:1", "N:2", "N:3"], ["Tall stature", "Marfan syndrome", "FBN1", "Growth"], [{}] * 4,
                      [1, 2, 2], [0, 0, 3], [1, 0, 2], doc=["tall", "marfan", "fbn1", "growth"])
tb = ArkV1Toolbox(g, tiny_index(g), ToolConfig(neighbor_k=10))
words = {"disease": ["disease"], "gene/protein": ["gene"], "biological_process": ["process"]}
q = "A patient presents with Tall stature. Which process is involved?"
traj = asyncio.run(run_agent(RulesV1Policy(tb, words).session(q, 0, 10), tb, q, T_max=10, agent=0))
print(json.dumps([m["tool_calls"] for m in traj.messages if m["role"] == "assistant"]))
"""


@pytest.mark.e2e
def test_rules_v1_breaks_a_tie_between_types_the_same_way_in_every_process():
    """The type to go through is chosen among tied types by the order of the links, not by a set's string hashes
    (which differ between processes: PYTHONHASHSEED)."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    outs = {subprocess.run([sys.executable, "-c", TIE], cwd=root, capture_output=True, text=True, check=True,
                           env={**os.environ, "PYTHONHASHSEED": str(seed)}).stdout for seed in range(6)}
    assert len(outs) == 1
    steps = json.loads(outs.pop())
    via = [json.loads(c["function"]["arguments"])["relation"] for c in steps[2]]
    assert [c["function"]["name"] for c in steps[2]] == ["get_triples"] and len(via) == 1
