"""The text protocol: tools, calls and results as text, calls parsed back, OpenAI messages as plain chat turns."""
import json
import subprocess
import sys

from ark.agent.prompt import system_prompt
from ark.llm.protocol import (
    chat_messages,
    format_tool_call,
    no_call_text,
    observation_text,
    parse_text_calls,
    render_tools,
)
from ark.tools.toolbox import Toolbox
from tests.helpers import tiny_graph, tiny_index

MESSAGES = [{"role": "system", "content": "You are a retrieval agent."},
            {"role": "user", "content": "Question: which gene is associated with Marfan syndrome?"}]


def toolbox():
    g = tiny_graph()
    return Toolbox(g, tiny_index(g))


def test_parse_text_calls_finds_json_objects():
    calls = parse_text_calls('x {"name": "finish", "arguments": {}} y {"tool": "search_in_graph", "args": {"query": "a"}}')
    assert [c["function"]["name"] for c in calls] == ["finish", "search_in_graph"]
    assert json.loads(calls[1]["function"]["arguments"]) == {"query": "a"}
    assert parse_text_calls("no calls {here}") == []


def test_a_formatted_call_parses_back():
    text = format_tool_call("search_in_graph", '{"query": "Marfan", "size": 3}')
    assert text == '{"name": "search_in_graph", "arguments": {"query": "Marfan", "size": 3}}'
    (call,) = parse_text_calls(no_call_text("search_in_graph", {"query": "Marfan", "size": 3}))
    assert call["function"]["name"] == "search_in_graph"
    assert json.loads(call["function"]["arguments"]) == {"query": "Marfan", "size": 3}


def test_chat_messages_turn_calls_and_results_into_text():
    tools = toolbox().schemas()
    call = {"id": "c7", "type": "function",
            "function": {"name": "search_in_graph", "arguments": '{"query": "Marfan", "size": 3}'}}
    messages = MESSAGES + [{"role": "assistant", "content": None, "tool_calls": [call]},
                           {"role": "tool", "tool_call_id": "c7", "content": "Top 1 nodes: [0] Marfan syndrome"}]
    turns = chat_messages(messages, tools)
    assert [t["role"] for t in turns] == ["system", "user", "assistant", "user"]
    system = turns[0]["content"]
    assert system == MESSAGES[0]["content"] + "\n\n" + render_tools(tools)
    for t in tools:
        assert f"- {t['function']['name']}: {t['function']['description']}" in system
    assert "size (integer from 1 to 30; optional)" in system and '{"name": <tool name>' in system
    assert turns[2]["content"] == '{"name": "search_in_graph", "arguments": {"query": "Marfan", "size": 3}}'
    assert turns[3]["content"] == observation_text("search_in_graph", "Top 1 nodes: [0] Marfan syndrome") \
        == "Observation from search_in_graph:\nTop 1 nodes: [0] Marfan syndrome"
    forced = chat_messages(MESSAGES[1:], tools, {"type": "function", "function": {"name": "finish"}})
    assert forced[0]["role"] == "system" and forced[0]["content"].endswith("Call the tool finish now.")


def test_the_text_protocol_prompt_is_what_the_embedded_model_reads():
    """tool_mode text: the prompt lists the tools; native: the prompt leaves them to the backbone, and the
    embedded model appends the same list, so both read the same system text with each description once."""
    tb = toolbox()
    native = chat_messages([{"role": "system", "content": system_prompt(tb, 5)}], tb.schemas())[0]["content"]
    text = system_prompt(tb, 5, text_protocol=True)
    assert native == text
    for t in tb.schemas():
        assert text.count(t["function"]["description"]) == 1
        assert t["function"]["description"] not in system_prompt(tb, 5)


def test_protocol_imports_neither_torch_nor_litellm():
    code = "import sys, ark.llm.protocol; print(sorted({'torch', 'litellm'} & set(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
