"""Token decoding for the local model: tool calls constrained by a JSON-schema grammar, and free text.

The grammar is llguidance's (``LLMatcher`` over the model's tokenizer): it gives the tokens allowed
next and the tokens forced next. A call is one ``{"name": <tool>, "arguments": {...}}`` object valid
under that tool's parameter schema, written as ``json.dumps`` writes it (", " and ": ", no other
whitespace, properties in schema order).

The token budget: llguidance knows which tokens may come next, not how far the end is, so
``ToolCallGrammar.closing`` builds a short completion greedily: forced tokens, else the first allowed
of the end quote of an open string, closing brackets, a separator, the starts of the shortest values;
where it must choose a tool, key or value by name, the one whose greedy completion is shortest.
Decoding keeps ``tokens so far + closing <= max_tokens`` after every step, so a call is always complete.
"""
from __future__ import annotations

import json
import string
from dataclasses import dataclass
from typing import Callable

import llguidance
import llguidance.hf
import numpy as np
import torch

STRING_MAX_LENGTH = 100  # strings are cut here (a tool's own maxLength where smaller): a small model's budget
STRING_MIN_LENGTH = 1  # strings without minLength must not be empty (an empty query is an error)
JSON_FORMAT = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}
# the characters a closing tries, in order: in an open string its end quote, else a filler letter;
# elsewhere closing brackets, then a separator, then the starts of the shortest values
FILLER = "x"  # outside quotes no JSON text has it: where the grammar allows it, a string is open
STRING_CLOSING = '"' + FILLER
VALUE_CLOSING = "".join(dict.fromkeys('}]",01{[tfn-' + string.digits + string.ascii_letters
                                       + string.punctuation + " "))
NAMED_SCHEMAS = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")  # name -> schema
VALUES = ("enum", "const", "default", "examples", "required")  # JSON values, not schemas
MAX_CLOSING = 4096  # tokens; a closing this long means the grammar cannot be completed


def grammar_schema(schema):
    """A parameter schema as the grammar uses it: strings get ``maxLength`` 100 (or the schema's, if smaller) and,
    without one, ``minLength`` 1, and objects allow only their listed properties unless
    ``additionalProperties`` says otherwise (the schema itself is not changed)."""
    if isinstance(schema, list):
        return [grammar_schema(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {}
    for k, v in schema.items():
        if k in NAMED_SCHEMAS and isinstance(v, dict):
            out[k] = {name: grammar_schema(s) for name, s in v.items()}
        else:
            out[k] = v if k in VALUES else grammar_schema(v)
    types = schema.get("type") if isinstance(schema.get("type"), list) else [schema.get("type")]
    if "string" in types and "enum" not in schema and "const" not in schema:
        out["maxLength"] = min(out.get("maxLength", STRING_MAX_LENGTH), STRING_MAX_LENGTH)
        out.setdefault("minLength", min(STRING_MIN_LENGTH, out["maxLength"]))
    if "object" in types or "properties" in schema:
        out.setdefault("additionalProperties", False)
    return out


def tool_call_schema(tools: list[dict], only: str | None = None) -> dict:
    """The JSON schema of one call of any of ``tools`` (of ``only``, when given)."""
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
    return {"anyOf": [{"type": "object", "properties": {"name": {"const": name}, "arguments": grammar_schema(params)},
                       "required": ["name", "arguments"], "additionalProperties": False}
                      for name, params in functions.items()]}


class ToolCallGrammar:
    """Tool-call grammars for one tokenizer: a fresh ``llguidance.LLMatcher`` per call, and closings."""

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        self.ll_tokenizer = llguidance.hf.from_tokenizer(tokenizer)
        self.filler = self.encode(FILLER)[0]
        self.string_closing = self._single_tokens(STRING_CLOSING)
        self.value_closing = self._single_tokens(VALUE_CLOSING)
        self.letters = set(self._single_tokens(string.ascii_letters))
        self._grammars: dict[str, str] = {}

    def encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=False)

    def _single_tokens(self, chars: str) -> list[int]:
        return [ids[0] for ids in map(self.encode, chars) if len(ids) == 1]

    def matcher(self, tools: list[dict], only: str | None = None) -> llguidance.LLMatcher:
        """A matcher for one call (ValueError for a tool set or schema the grammar cannot be made of)."""
        key = json.dumps([tools, only], sort_keys=True)
        if key not in self._grammars:
            grammar = llguidance.LLMatcher.grammar_from_json_schema(tool_call_schema(tools, only),
                                                                    overrides=JSON_FORMAT)
            failed, messages = llguidance.LLMatcher.validate_grammar_with_warnings(grammar, self.ll_tokenizer)
            if failed:
                raise ValueError(f"tool schemas: {messages[0]}")
            if len(self._grammars) > 16:
                self._grammars.clear()
            self._grammars[key] = grammar
        return llguidance.LLMatcher(self.ll_tokenizer, self._grammars[key])

    def closing(self, matcher: llguidance.LLMatcher) -> list[int]:
        """Tokens that complete the call from the matcher's state (the matcher is left as it was);
        the text is tokenized again where that takes fewer tokens than it was built from."""
        ids = self._greedy_closing(matcher, lookahead=True)
        retokenized = self.encode(self.tokenizer.decode(ids, clean_up_tokenization_spaces=False))
        if len(retokenized) < len(ids) and matcher.validate_tokens(retokenized) == len(retokenized):
            return retokenized
        return ids

    def _greedy_closing(self, matcher: llguidance.LLMatcher, lookahead: bool) -> list[int]:
        ids: list[int] = []
        while not matcher.is_accepting() and len(ids) < MAX_CLOSING:
            step = matcher.compute_ff_tokens() or [self._closing_token(matcher, lookahead)]
            matcher.consume_tokens(step)
            ids += step
        complete = matcher.is_accepting()
        matcher.rollback(len(ids))
        if not complete:
            raise ValueError("the tool-call grammar cannot be completed")
        return ids

    def _closing_token(self, matcher: llguidance.LLMatcher, lookahead: bool) -> int:
        in_string = matcher.validate_tokens([self.filler]) == 1
        allowed = (t for t in (self.string_closing if in_string else []) + self.value_closing
                   if matcher.validate_tokens([t]) == 1)
        first = next(allowed, None)
        if first is None:
            mask = np.flatnonzero(np.frombuffer(matcher.compute_logit_bias(), dtype=np.uint8))
            if not mask.size:
                raise ValueError("the tool-call grammar cannot be completed")
            return int(mask[0])  # e.g. the rest of a character whose first UTF-8 bytes were sampled
        others = list(allowed) if lookahead and not in_string and first in self.letters else []
        if others:  # a choice of tool, key or value: the one whose closing is shortest
            return min([first, *others], key=lambda t: len(self._greedy_closing_after(matcher, t)))
        return first

    def _greedy_closing_after(self, matcher: llguidance.LLMatcher, token: int) -> list[int]:
        matcher.consume_tokens([token])
        try:
            return self._greedy_closing(matcher, lookahead=False)
        finally:
            matcher.rollback(1)


@dataclass
class Sampling:
    temperature: float = 1.0
    top_p: float = 1.0
    generator: torch.Generator | None = None

    def pick(self, logits: torch.Tensor) -> int:
        """Sample a token from the logits (argmax at temperature 0); -inf logits are never picked."""
        if self.temperature <= 0:
            return int(torch.argmax(logits))
        probs = torch.softmax(logits / self.temperature, dim=-1)
        if self.top_p < 1.0:
            order = torch.argsort(probs, descending=True)
            keep = torch.cumsum(probs[order], 0) - probs[order] < self.top_p
            mask = torch.zeros_like(probs, dtype=torch.bool)
            mask[order[keep]] = True
            probs = torch.where(mask, probs, torch.zeros_like(probs))
        # inverse CDF: exact, and ~100x faster than torch.multinomial over a whole vocabulary;
        # right=True never lands on a zero-probability token
        cdf = torch.cumsum(probs, 0)
        u = torch.rand((), generator=self.generator) * cdf[-1]
        return min(int(torch.searchsorted(cdf, u, right=True)), probs.numel() - 1)


Step = Callable[[list[int]], torch.Tensor]  # feed tokens (extending the KV cache) -> next-token logits


def allowed_logits(logits: torch.Tensor, matcher: llguidance.LLMatcher) -> torch.Tensor:
    """``logits`` with every token the grammar does not allow next set to -inf."""
    bias = np.frombuffer(matcher.compute_logit_bias(), dtype=np.uint8)  # 0: not allowed
    allowed = torch.zeros(logits.numel(), dtype=torch.bool)
    n = min(bias.size, logits.numel())
    allowed[:n] = torch.from_numpy(bias[:n] > 0)
    return logits.masked_fill(~allowed, float("-inf"))


def decode_tool_call(step: Step, prompt_ids: list[int], matcher: llguidance.LLMatcher,
                     closing: Callable[[llguidance.LLMatcher], list[int]], max_tokens: int,
                     sampling: Sampling) -> list[int]:
    """Grammar-constrained decoding of one tool call: its token ids.

    Forced tokens are fed as a batch in one forward pass; otherwise a token is sampled among those the
    grammar allows. A step whose tokens and closing would not fit in ``max_tokens`` is not taken: the
    call is closed instead. When even the shortest call does not fit, it is emitted anyway.
    """
    out, pending = [], list(prompt_ids)
    rest = closing(matcher)
    while not matcher.is_accepting():
        ids = matcher.compute_ff_tokens()
        if not ids:
            logits = step(pending)
            pending = []
            ids = [sampling.pick(allowed_logits(logits, matcher))]
        if not matcher.consume_tokens(ids):
            raise RuntimeError(f"llguidance: {matcher.get_error()}")
        after = closing(matcher)
        if len(out) + len(ids) + len(after) > max_tokens:
            matcher.rollback(len(ids))
            matcher.consume_tokens(rest)
            return out + rest
        out += ids
        pending += ids
        rest = after
    return out


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
