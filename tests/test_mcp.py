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
