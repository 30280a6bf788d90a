"""A toolbox's read-only tools over the Model Context Protocol (stdio transport): ``ark mcp [overrides]``.

What is served is what an agent of the same configuration is given, minus the tools that change an answer list:
ARK's ``search_in_graph`` and ``search_in_neighborhood`` (ARK-V1's ``find_entity``, ``get_relations`` and
``get_triples`` with ``agent=ark_v1``), with the same JSON schemas, caps on sizes and observation length, quoting,
and one-line errors (an error observation comes back as a tool result with ``isError`` set). Each call is the
toolbox's own ``call``, so an MCP client sees exactly the text an agent sees.

Every line a client sends gets an answer: a line that is not JSON is answered with JSON-RPC's parse error (-32700),
one that is not a single JSON-RPC 2.0 message (an array, another ``jsonrpc``, an id that is neither a string nor an
integer, nesting deeper than ``MAX_DEPTH``, more than ``MAX_LINE`` bytes) with its invalid-request error (-32600),
with ``id: null``; a request with a valid id but no method, params that are not an object, or a lone surrogate
in a string gets -32600 or -32602 with its id; all before the MCP session sees it. An over-long line is dropped as it streams, never held whole.
"""
from __future__ import annotations

import json
import sys

import anyio
import mcp_types as types
from mcp.server.lowlevel.server import Server
from mcp.server.stdio import stdio_server
from mcp.shared.message import SessionMessage

from ark.tools.toolbox import AnswerState

MAX_LINE = 1 << 20  # bytes in one message; the longest legitimate call is a few kB (a 4,000-character query)
MAX_DEPTH = 32  # nesting of one message's JSON; a tool call needs about 5
PARSE_ERROR, INVALID_REQUEST, INVALID_PARAMS = -32700, -32600, -32602
OVERSIZE = object()  # a line dropped for its length


def _depth(value) -> int:
    deepest, stack = 0, [(value, 1)]
    while stack:
        node, level = stack.pop()
        deepest = max(deepest, level)
        children = node.values() if isinstance(node, dict) else node if isinstance(node, list) else ()
        stack += [(child, level + 1) for child in children if isinstance(child, (dict, list))]
    return deepest


def _unicode(value) -> bool:
    """Whether every string in ``value`` is valid Unicode (JSON may escape a lone surrogate, ``"\\ud800"``)."""
    try:
        json.dumps(value, ensure_ascii=False).encode("utf-8")
        return True
    except UnicodeEncodeError:
        return False


def refusal(line: bytes) -> tuple[int, str, str | int | None] | None:
    """The JSON-RPC error (code, message, the id to answer) a line gets instead of reaching the MCP session; None:
    pass it on. The id is the request's where it has a valid one, else null."""
    try:
        value = json.loads(line.decode("utf-8"))
    except UnicodeDecodeError:
        return PARSE_ERROR, "Parse error: the line is not UTF-8", None
    except RecursionError:
        return INVALID_REQUEST, f"Invalid Request: nested deeper than {MAX_DEPTH} levels", None
    except ValueError as e:
        return PARSE_ERROR, f"Parse error: {getattr(e, 'msg', 'not JSON')} at character {getattr(e, 'pos', 0)}", None
    if isinstance(value, list):
        return INVALID_REQUEST, "Invalid Request: batches are not supported; send one JSON object per line", None
    if not isinstance(value, dict):
        return INVALID_REQUEST, "Invalid Request: a message is a JSON object", None
    if _depth(value) > MAX_DEPTH:
        return INVALID_REQUEST, f"Invalid Request: nested deeper than {MAX_DEPTH} levels", None
    ident = value.get("id", 0)
    if not isinstance(ident, str) and (not isinstance(ident, int) or isinstance(ident, bool)):
        return INVALID_REQUEST, "Invalid Request: id must be a string or an integer", None
    if not _unicode(ident):
        return INVALID_REQUEST, "Invalid Request: the id holds a lone surrogate (not valid Unicode)", None
    reply_to = value.get("id")
    if value.get("jsonrpc") != "2.0":
        return INVALID_REQUEST, 'Invalid Request: "jsonrpc" must be "2.0"', reply_to
    if "method" not in value and "result" not in value and "error" not in value:
        return INVALID_REQUEST, "Invalid Request: a request needs a method", reply_to
    if "method" in value and not isinstance(value["method"], str):
        return INVALID_REQUEST, "Invalid Request: method must be a string", reply_to
    if "params" in value and not isinstance(value["params"], dict):
        return INVALID_PARAMS, "Invalid params: params must be an object", reply_to
    if not _unicode(value):
        return INVALID_PARAMS, "Invalid params: a string holds a lone surrogate (not valid Unicode)", reply_to
    return None


class CheckedLines:
    """The client's lines as the stdio transport reads them (an async iterator of text), each checked by ``refusal``
    first; a refused line is answered on ``replies`` (the transport's write stream, given by ``answer_on``)."""

    def __init__(self, raw):
        self.raw = raw
        self.replies = None
        self._open = anyio.Event()

    def answer_on(self, replies) -> None:
        self.replies = replies
        self._open.set()

    def __aiter__(self):
        return self

    async def __anext__(self) -> str:
        while True:
            line = await anyio.to_thread.run_sync(self._line, abandon_on_cancel=True)
            if line is None:
                raise StopAsyncIteration
            if line is not OVERSIZE and not line.strip():
                continue
            error = ((INVALID_REQUEST, f"Invalid Request: a message over {MAX_LINE:,} bytes", None)
                     if line is OVERSIZE else refusal(line))
            if error is None:
                return line.decode("utf-8")
            await self._open.wait()
            code, message, reply_to = error
            await self.replies.send(SessionMessage(types.JSONRPCError(
                jsonrpc="2.0", id=reply_to, error=types.ErrorData(code=code, message=message))))

    def _line(self):
        """The next line (bytes), OVERSIZE for one over MAX_LINE (read on to its end, not kept), None at the end."""
        chunk = self.raw.readline(MAX_LINE + 1)
        if not chunk:
            return None
        if len(chunk) <= MAX_LINE or chunk.endswith(b"\n"):
            return chunk
        while chunk and not chunk.endswith(b"\n"):
            chunk = self.raw.readline(MAX_LINE)
        return OVERSIZE


def _brief(text: str, limit: int = 80) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def wrong_argument(schema: dict, arguments: dict) -> str | None:
    """The first argument whose JSON type is not its schema's integer (``size: 1e9``, ``node_index: true``)."""
    for name, prop in (schema.get("properties") or {}).items():
        value = arguments.get(name)
        if prop.get("type") == "integer" and value is not None and (not isinstance(value, int) or isinstance(value, bool)):
            return f"Error: {name} must be an integer, got {_brief(repr(value))}"
    return None


def served_schemas(toolbox) -> list[dict]:
    """The function schemas of the toolbox's tools that only read the graph."""
    return [s["function"] for s in toolbox.schemas() if s["function"]["name"] in toolbox.pure_tools]


def server(toolbox, name: str = "ark") -> Server:
    schemas = served_schemas(toolbox)
    names = [s["name"] for s in schemas]
    by_name = {s["name"]: s["parameters"] for s in schemas}

    async def list_tools(_ctx, _params) -> types.ListToolsResult:
        return types.ListToolsResult(tools=[types.Tool(name=s["name"], description=s["description"],
                                                       input_schema=s["parameters"]) for s in schemas])

    async def call_tool(_ctx, params: types.CallToolRequestParams) -> types.CallToolResult:
        if params.name not in names:  # add_to_answer and finish are an agent's, not a read-only server's
            text = f"Error: unknown tool {_brief(params.name)!r}; available tools: {', '.join(names)}"
            return types.CallToolResult(content=[types.TextContent(type="text", text=text)], is_error=True)
        wrong = wrong_argument(by_name[params.name], params.arguments or {})
        if wrong is not None:
            return types.CallToolResult(content=[types.TextContent(type="text", text=wrong)], is_error=True)
        # a graph search is CPU work: off the event loop, so the server keeps answering pings
        observation = await anyio.to_thread.run_sync(toolbox.call, params.name, params.arguments or {},
                                                     AnswerState())
        return types.CallToolResult(content=[types.TextContent(type="text", text=observation.text)],
                                    is_error=observation.error is not None)

    from ark import __version__

    return Server(name, version=__version__,
                  instructions=f"Read-only tools over the knowledge graph {name} (its node indexes are "
                  "what the tools print in brackets).",
                  on_list_tools=list_tools, on_call_tool=call_tool)


def serve(toolbox, name: str = "ark") -> None:
    """Serve ``toolbox`` over stdin/stdout until the client closes the stream."""
    mcp_server = server(toolbox, name)

    async def main():
        lines = CheckedLines(sys.stdin.buffer)
        async with stdio_server(stdin=lines) as (read_stream, write_stream):
            lines.answer_on(write_stream)
            await mcp_server.run(read_stream, write_stream, mcp_server.create_initialization_options())

    anyio.run(main)
