"""``ark mcp``: the graph's read-only tools over MCP's stdio transport, seen through the ``mcp`` client library,
give the agent's observations for the same arguments."""
import sys

import anyio
import pytest
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

from ark import build
from ark.tools.toolbox import AnswerState
from tests.conftest import compose_cfg
from tests.test_agent import build_index

CALLS = {"ark": [("search_in_graph", {"query": "lens of the eye", "size": 3}),
         ("search_in_neighborhood", {"node_index": 4, "query": "lens"}),
         ("search_in_neighborhood", {"node_index": 10_000}),  # out of range: the agent's one-line error
         ("add_to_answer", {"answer_nodes": [{"node_index": 4}]})],  # not served: it changes an answer list
         "ark_v1": [("find_entity", {"name": "Ectopia lentis"}), ("get_relations", {"node_index": 4}),
                    ("get_triples", {"node_index": 4, "relation": "nonexistent"}),
                    ("finish", {})]}


async def over_mcp(overrides: list[str], calls: list) -> tuple[list, list]:
    params = StdioServerParameters(command=sys.executable, args=["-m", "ark.cli", "mcp", *overrides])
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        listed = (await session.list_tools()).tools
        results = [await session.call_tool(name, arguments) for name, arguments in calls]
    return listed, results


@pytest.mark.parametrize("toolset", ["ark", "ark_v1"])
@pytest.mark.e2e
def test_ark_mcp_serves_the_agents_read_only_tools_with_their_observations(tiny_project, toolset):
    overrides = tiny_project + ["retriever.params.stemmer=null"] + (["agent=ark_v1"] if toolset == "ark_v1" else [])
    cfg = compose_cfg(overrides)
    build_index(cfg)
    tools = build.toolbox(build.spec(cfg))
    listed, results = anyio.run(over_mcp, overrides, CALLS[toolset])
    schemas = {s["function"]["name"]: s["function"] for s in tools.schemas()}
    assert [t.name for t in listed] == list(tools.pure_tools)
    for tool in listed:
        assert tool.input_schema == schemas[tool.name]["parameters"] and tool.description == schemas[tool.name][
            "description"]
    for (name, arguments), result in zip(CALLS[toolset][:3], results):
        expected = tools.call(name, arguments, AnswerState())
        assert [c.text for c in result.content] == [expected.text]
        assert result.is_error == (expected.error is not None)
    assert "Ectopia lentis" in results[0].content[0].text and results[2].is_error
    assert results[3].is_error and "unknown tool" in results[3].content[0].text


BAD_LINES = [  # (what a careless or hostile client sends, the JSON-RPC error code and the id it gets)
    (b'{"jsonrpc":"2.0","id":5,"method":"tools/list"', -32700, None),  # no closing brace
    (b"\xff\xfe\x00garbage", -32700, None),
    (b"[1,2,3]", -32600, None),
    (b'[{"jsonrpc":"2.0","id":1,"method":"ping"},{"jsonrpc":"2.0","id":2,"method":"ping"}]', -32600, None),  # a batch
    (b'{"jsonrpc":"2.0","id":null,"method":"ping"}', -32600, None),
    (b'{"jsonrpc":"2.0","id":{"a":1},"method":"ping"}', -32600, None),
    (b'{"jsonrpc":"1.0","id":3,"method":"ping"}', -32600, 3),
    (b'{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"search_in_graph","arguments":{"query":'
     + b"[" * 100_000 + b"]" * 100_000 + b"}}}", -32600, None),
    (b"x" * (3 << 20), -32600, None),  # 3 MiB in one line: dropped as it streams
    (b'{"jsonrpc":"2.0","id":50}', -32600, 50),  # no method
    (b'{"jsonrpc":"2.0","id":51,"method":"tools/list","params":"x"}', -32602, 51),
    (b'{"jsonrpc":"2.0","id":52,"method":"tools/list","params":[1]}', -32602, 52),
    (b'{"jsonrpc":"2.0","id":53,"method":"tools/call","params":{"name":"search_in_graph","arguments":'
     b'{"query":"a\\ud800b"}}}', -32602, 53),  # a lone surrogate in a query
    (b'{"jsonrpc":"2.0","id":"\\ud800","method":"ping"}', -32600, None),  # ... in an id
]


@pytest.mark.e2e  # a Python subprocess
def test_every_line_a_client_sends_gets_an_answer(tiny_project):
    """Raw stdio: each malformed line is answered with its JSON-RPC error (with the request's id where it has a
    valid one, else null), and the server goes on to
    answer a well-formed request after them; tool arguments of the wrong JSON type and over-long names are refused
    in one short line."""
    import json
    import subprocess

    overrides = tiny_project + ["retriever.params.stemmer=null"]
    build_index(compose_cfg(overrides))
    proc = subprocess.Popen([sys.executable, "-m", "ark.cli", "mcp", *overrides], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}}}
    calls = [{"jsonrpc": "2.0", "id": 7, "method": "tools/call",
              "params": {"name": "search_in_graph", "arguments": {"query": "lens", "size": 1e9}}},
             {"jsonrpc": "2.0", "id": 8, "method": "tools/call", "params": {"name": "n" * 100_000, "arguments": {}}},
             {"jsonrpc": "2.0", "id": 9, "method": "tools/list"}]
    lines = [line for line, _, _ in BAD_LINES] + [json.dumps(m).encode() for m in [init, *calls]]
    proc.stdin.write(b"\n".join(lines) + b"\n")
    proc.stdin.flush()
    replies = []  # read until every line is answered (closing stdin first would end the session mid-call)
    while len(replies) < len(BAD_LINES) + 1 + len(calls):
        line = proc.stdout.readline()
        assert line, proc.stderr.read()[-2000:]
        replies.append(json.loads(line))
    proc.stdin.close()
    err = proc.stderr.read()
    assert proc.wait(timeout=60) == 0, err[-2000:]
    errors = [r for r in replies if "error" in r]
    assert [(r["id"], r["error"]["code"]) for r in errors] == [(i, code) for _, code, i in BAD_LINES], err[-2000:]
    by_id = {r["id"]: r for r in replies if "result" in r}
    assert by_id[1]["result"]["serverInfo"]["name"].startswith("ark")
    assert by_id[1]["result"]["serverInfo"]["version"] == __import__("ark").__version__  # not empty
    size, name = by_id[7]["result"], by_id[8]["result"]
    assert size["isError"] and "size must be an integer" in size["content"][0]["text"]
    assert name["isError"] and len(name["content"][0]["text"]) < 300
    assert [t["name"] for t in by_id[9]["result"]["tools"]] == ["search_in_graph", "search_in_neighborhood"]
