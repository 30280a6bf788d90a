"""The text protocol: tools, tool calls and tool results as the text a model reads and writes.

One rendering for every model that reads tools as text: backbones without native tool calling
(``tool_mode: text``, the tool list is in the agent's system prompt) and the embedded local model
(its chat template has no tool role, so ``chat_messages`` renders the request's tools the same way).

- the tool list: ``render_tools`` (each tool's description, its parameters, how to call);
- a call: one JSON object ``{"name": <tool>, "arguments": {...}}`` (``format_tool_call``), read back
  out of free text by ``parse_text_calls``;
- a result: a user turn ``Observation from <tool>:\\n<text>`` (``observation_text``).

Plain Python (no torch, no litellm): the agent loop and SFT-data building use it too.
"""
from __future__ import annotations

import json


def format_tool_call(name: str, arguments) -> str:
    """A tool call as the text the model reads and writes: ``{"name": ..., "arguments": {...}}``."""
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments) if arguments.strip() else {}
        except json.JSONDecodeError:
            pass
    return json.dumps({"name": name, "arguments": arguments}, ensure_ascii=False)


def observation_text(tool: str, text: str) -> str:
    """A tool result as the user turn the model reads."""
    return f"Observation from {tool}:\n{text}"


def no_call_text(tool: str, arguments: dict) -> str:
    """The reply to a message without a tool call; ``tool``/``arguments`` make the example call."""
    example = format_tool_call(tool, arguments)
    return f"Error: no tool call found in your reply. Answer with one tool call, e.g. {example}."


def parse_text_calls(text: str | None) -> list[dict]:
    """JSON objects ``{"name": ..., "arguments": {...}}`` found in free text, as OpenAI-style tool calls."""
    calls, decoder, i = [], json.JSONDecoder(), 0
    text = text or ""
    while (i := text.find("{", i)) != -1:
        try:
            obj, end = decoder.raw_decode(text, i)
        except json.JSONDecodeError:
            i += 1
            continue
        if isinstance(obj, dict) and isinstance(obj.get("name") or obj.get("tool"), str):
            args = obj.get("arguments", obj.get("args", {}))
            calls.append({"id": None, "type": "function", "function": {
                "name": obj.get("name") or obj.get("tool"),
                "arguments": args if isinstance(args, str) else json.dumps(args)}})
        i = end
    return calls


def describe_schema(schema) -> str:
    """A short human-readable type, e.g. ``integer from 1 to 30`` or ``list of object {...}``."""
    if not isinstance(schema, dict):
        return "string"
    if "enum" in schema:
        return "one of " + ", ".join(json.dumps(v, ensure_ascii=False) for v in schema["enum"])
    alts = schema.get("anyOf") or schema.get("oneOf")
    if alts:
        parts = []
        for a in alts:
            same = isinstance(a, dict) and a.get("type") == "array" and a.get("items") in alts
            parts.append("a list of these" if same else describe_schema(a))
        return " or ".join(parts)
    t = schema.get("type", "object" if "properties" in schema else "string")
    if t in ("integer", "number"):
        lo, hi = schema.get("minimum"), schema.get("maximum")
        rng = f" from {lo} to {hi}" if lo is not None and hi is not None else \
            f" >= {lo}" if lo is not None else f" <= {hi}" if hi is not None else ""
        return t + rng
    if t == "array":
        n = schema.get("minItems")
        return f"list of {describe_schema(schema.get('items', {}))}" + (f" (at least {n})" if n else "")
    if t == "object":
        req = set(schema.get("required") or [])
        fields = [f"{k}{'' if k in req else '?'}: {describe_schema(v)}"
                  for k, v in (schema.get("properties") or {}).items()]
        return "object {" + ", ".join(fields) + "}"
    if t == "string" and "maxLength" in schema:
        return f"string of at most {schema['maxLength']} characters"
    return t if isinstance(t, str) else " or ".join(t)


def render_tools(tools: list[dict], only: str | None = None) -> str:
    """The tool list as text: each tool's description and parameters, then how to call one
    (and, with ``only``, which one to call now)."""
    lines = ["# Tools", "You can call these tools:"]
    for t in tools:
        f = t.get("function", t)
        lines.append(f"- {f['name']}: {f.get('description', '').strip()}")
        params = f.get("parameters") or {}
        req = set(params.get("required") or [])
        for k, v in (params.get("properties") or {}).items():
            desc = v.get("description", "") if isinstance(v, dict) else ""
            flag = "required" if k in req else "optional"
            lines.append(f"  - {k} ({describe_schema(v)}; {flag})" + (f": {desc}" if desc else ""))
    lines.append('To call a tool, answer with exactly one JSON object {"name": <tool name>, "arguments": '
                 '{<argument>: <value>, ...}} and nothing else.')
    if only:
        lines.append(f"Call the tool {only} now.")
    return "\n".join(lines)


def forced_tool_name(tool_choice) -> str | None:
    """The tool an OpenAI ``tool_choice`` forces (``{"type": "function", "function": {"name": X}}``), else None."""
    if isinstance(tool_choice, dict):
        return (tool_choice.get("function") or {}).get("name") or tool_choice.get("name")
    return None


def _text(content) -> str:
    if content is None:
        return ""
    if isinstance(content, list):  # OpenAI content parts
        return "".join(p.get("text", "") if isinstance(p, dict) else str(p) for p in content)
    return str(content)


def chat_messages(messages: list[dict], tools: list[dict] | None = None, tool_choice=None) -> list[dict]:
    """OpenAI messages -> plain chat turns for a model without a tool role: the tool list appended to
    the system message, tool calls as JSON text, tool results as observation user turns."""
    out: list[dict] = []
    call_names: dict[str, str] = {}
    for m in messages:
        role, content = m.get("role"), _text(m.get("content"))
        if role in ("system", "developer"):
            out.append({"role": "system", "content": content})
        elif role == "assistant":
            calls = m.get("tool_calls") or []
            for c in calls:
                call_names[c.get("id") or ""] = c["function"]["name"]
            parts = [content] if content else []
            parts += [format_tool_call(c["function"]["name"], c["function"].get("arguments")) for c in calls]
            out.append({"role": "assistant", "content": "\n".join(parts)})
        elif role in ("tool", "function"):
            name = m.get("name") or call_names.get(m.get("tool_call_id") or "", "tool")
            out.append({"role": "user", "content": observation_text(name, content)})
        else:
            out.append({"role": "user", "content": content})
    if tools:
        block = render_tools(tools, forced_tool_name(tool_choice))
        if out and out[0]["role"] == "system":
            out[0] = {"role": "system", "content": append_block(out[0]["content"], block)}
        else:
            out.insert(0, {"role": "system", "content": block})
    return out


def append_block(text: str, block: str) -> str:
    """``block`` as a paragraph after ``text`` (the tool list after the system prompt)."""
    return (text.rstrip() + "\n\n" + block).strip()
