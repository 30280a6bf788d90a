"""A toolbox's read-only tools over the Model Context Protocol (stdio transport): ``ark mcp [overrides]``.

What is served is what an agent of the same configuration is given, minus the tools that change an answer list:
ARK's ``search_in_graph`` and ``search_in_neighborhood`` (ARK-V1's ``find_entity``, ``get_relations`` and
``get_triples`` with ``agent=ark_v1``), with the same JSON schemas, caps on sizes and observation length, quoting,
and one-line errors (an error observation comes back as a tool result with ``isError`` set). Each call is the
toolbox's own ``call``, so an MCP client sees exactly the text an agent sees.
"""
from __future__ import annotations

import anyio
import mcp_types as types
from mcp.server.lowlevel.server import Server
from mcp.server.stdio import stdio_server

from ark.tools.toolbox import AnswerState


def served_schemas(toolbox) -> list[dict]:
    """The function schemas of the toolbox's tools that only read the graph."""
    return [s["function"] for s in toolbox.schemas() if s["function"]["name"] in toolbox.pure_tools]


def server(toolbox, name: str = "ark") -> Server:
    schemas = served_schemas(toolbox)
    names = [s["name"] for s in schemas]

    async def list_tools(_ctx, _params) -> types.ListToolsResult:
        return types.ListToolsResult(tools=[types.Tool(name=s["name"], description=s["description"],
                                                       input_schema=s["parameters"]) for s in schemas])

    async def call_tool(_ctx, params: types.CallToolRequestParams) -> types.CallToolResult:
        if params.name not in names:  # add_to_answer and finish are an agent's, not a read-only server's
            text = f"Error: unknown tool {params.name!r}; available tools: {', '.join(names)}"
            return types.CallToolResult(content=[types.TextContent(type="text", text=text)], is_error=True)
        # a graph search is CPU work: off the event loop, so the server keeps answering pings
        observation = await anyio.to_thread.run_sync(toolbox.call, params.name, params.arguments or {},
                                                     AnswerState())
        return types.CallToolResult(content=[types.TextContent(type="text", text=observation.text)],
                                    is_error=observation.error is not None)

    return Server(name, instructions=f"Read-only tools over the knowledge graph {name} (its node indexes are "
                  "what the tools print in brackets).",
                  on_list_tools=list_tools, on_call_tool=call_tool)


def serve(toolbox, name: str = "ark") -> None:
    """Serve ``toolbox`` over stdin/stdout until the client closes the stream."""
    mcp_server = server(toolbox, name)

    async def main():
        async with stdio_server() as (read_stream, write_stream):
            await mcp_server.run(read_stream, write_stream, mcp_server.create_initialization_options())

    anyio.run(main)
