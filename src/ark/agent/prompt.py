"""The system prompt, generated from the graph's types and the tool set in use.

The same text is used at collection, training and inference time. The tool list is rendered once,
by whoever shows the model its tools: with native tool calling the backbone does (a hosted model
from the request's ``tools``; the embedded model with ``ark.llm.protocol.render_tools``), with the
text protocol this prompt appends that same ``render_tools`` block. Either way a model reads each
tool's description once, and the embedded model and a text-protocol model read the same text.
"""
from __future__ import annotations

from ark.llm.protocol import append_block, render_tools
from ark.tools.toolbox import Toolbox


def system_prompt(toolbox: Toolbox, T_max: int, text_protocol: bool = False) -> str:
    g, names = toolbox.graph, toolbox.names()
    lines = [
        "You are a retrieval agent. You explore a knowledge graph to find the nodes that answer a question.",
        f"Node types: {', '.join(g.node_type_names)}.",
        f"Relation types: {', '.join(g.relation_names)}.",
        "",
        "How to work:",
        "- Use search_in_graph to find the entities the question names, or candidate answers directly.",
    ]
    if "search_in_neighborhood" in names:
        how = "ranked by a query" if toolbox.config.query_param else "in a fixed order"
        filters = ", filtered by node type and relation" if toolbox.config.type_filters else ""
        lines.append(f"- Use search_in_neighborhood to follow relations from a node (its neighbors {how}{filters}); "
                     "repeat it to go several hops.")
    lines += ["- Put the nodes that answer the question into the answer with add_to_answer, best first.",
              f"- Call finish when the answer is complete. You have at most {T_max} steps.",
              "- Refer to nodes by their index, the number in square brackets."]
    prompt = "\n".join(lines)
    return append_block(prompt, render_tools(toolbox.schemas())) if text_protocol else prompt


def user_prompt(query: str) -> str:
    return f"Question: {query}"
