"""The embedded local chat model: SmolLM2-135M-Instruct (GGUF, run by transformers) behind ``ChatServer``.

``LocalChatModel.generate`` is a ``ChatServer`` callback, so litellm reaches the model like any
OpenAI-compatible endpoint::

    model = LocalChatModel(cache_dir="~/.cache/ark/models")
    with ChatServer(model.generate, model_name="smollm2") as server:
        litellm.completion(model="openai/smollm2", api_base=server.url, api_key="none", tools=..., ...)

The pieces: weights and adapters (``ark.llm.weights``), the request as chat turns (``ark.llm.protocol``:
the model has no tool role), decoding (``ark.llm.decoding``). With ``tools`` (and ``constrained=True``)
every reply is exactly one tool call, valid under that tool's JSON schema. Without tools, or with
``constrained=False``, the reply is free text; the prompt is identical in both modes and asks for that
same JSON object.

Speed: ``dtype="auto"`` picks bfloat16 only where the CPU computes it natively, and ``PrefixCache`` keeps the
key/value caches of recent requests, so that an agent's next step prefills only what its conversation added.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import contextlib
import json
import logging
import os
import threading
from collections import OrderedDict
from pathlib import Path
from typing import Callable

import numpy as np
import torch
from transformers import DynamicCache

from ark.llm import batching
from ark.llm.decoding import Sampling, ToolCallGrammar, decode_text, decode_tool_call
from ark.llm.protocol import chat_messages, forced_tool_name
from ark.llm.server import HTTPError, chat_completion
from ark.llm.weights import apply_adapter, default_gguf_path, fingerprint, load_gguf, resolve_dtype

if TYPE_CHECKING:
    from ark.llm.decoding import Step

DEFAULT_MAX_TOKENS = 512


# The prompt is prefilled in chunks at fixed positions (multiples of this), and a cached prefix is reused up to
# such a position only: the keys and values at a position are then computed by the same chunk, whatever the
# earlier requests were, and the replies are the same with and without the prefix cache (in bfloat16 a prefill
# split elsewhere differs in the last bits, which changes a sampled token now and then). 256: prefill in chunks of
# 128 ran at half the speed of a whole prompt in bfloat16 with AMX, in chunks of 256 at 70 %, in float32 at 97 %.
PREFILL_CHUNK = 256


def common_prefix(a, b) -> int:
    """The length of the longest common prefix of two token id sequences."""
    n = min(len(a), len(b))
    diff = np.flatnonzero(np.asarray(a[:n]) != np.asarray(b[:n]))
    return int(diff[0]) if diff.size else n


def first_positions(cache: DynamicCache, n: int) -> DynamicCache:
    """A cache of the first ``n`` positions of ``cache``: views, valid while ``cache`` grows (a forward pass
    concatenates into new tensors, a batched step appends into new buffers)."""
    return DynamicCache([(k[..., :n, :], v[..., :n, :]) for k, v, *_ in cache])


class PrefixCache:
    """The key/value caches of recent requests, each keyed by the prompt tokens it holds up to a chunk boundary.
    An agent's next step sends the conversation so far again: its prompt starts with what an earlier request's
    cache holds, and only the rest is prefilled. Bounded by entries and by the tokens the caches hold (SmolLM2:
    23 KB a token in bfloat16, 46 KB in float32). Not thread-safe: ``LocalChatModel`` runs one request at a time."""

    def __init__(self, max_entries: int = 32, max_tokens: int = 65536):
        self.max_entries, self.max_tokens = max_entries, max_tokens
        self.entries: OrderedDict[tuple[int, ...], DynamicCache] = OrderedDict()

    def longest_prefix(self, ids: list[int]) -> tuple[DynamicCache | None, int]:
        """(a new cache holding ``ids[:n]``, n): n is the longest prefix an entry holds, cut to a chunk boundary
        and short of ``len(ids)``. The new cache is a copy: entries are never written."""
        best, n = None, 0
        for key in self.entries:
            m = min(common_prefix(key, ids), len(ids) - 1) // PREFILL_CHUNK * PREFILL_CHUNK
            if m > n:
                best, n = key, m
        if best is None:
            return None, 0
        self.entries.move_to_end(best)
        return first_positions(self.entries[best], n), n

    def put(self, key: list[int], cache: DynamicCache) -> None:
        """Keep ``cache``, whose first ``len(key)`` positions hold ``key`` (a multiple of the chunk)."""
        key = tuple(key)
        if not key or self.max_entries <= 0 or cache.get_seq_length() > self.max_tokens:
            return
        for other in [k for k in self.entries if key[:len(k)] == k]:  # serves no prompt better than the new one
            del self.entries[other]
        self.entries[key] = cache
        while (len(self.entries) > self.max_entries
               or sum(c.get_seq_length() for c in self.entries.values()) > self.max_tokens):
            self.entries.popitem(last=False)


class LocalChatModel:
    """An in-process chat model; ``generate(request) -> chat.completion`` is the ``ChatServer`` callback.

    Request defaults: temperature 1, top_p 1, seed 0 (replies are a function of the request),
    max_tokens 512. With tools and ``constrained``, ``tool_choice`` "auto"/"required"/None all give
    exactly one call, ``{"type": "function", "function": {"name": X}}`` a call of X, and "none" text.
    ``decode_rows`` 1: requests run one at a time (the server is threaded; the model is not); more: concurrent
    requests are prefilled one at a time and share their single-token decoding steps, ``decode_rows`` rows a
    forward pass (``ark.llm.batching``). ``dtype`` "auto": bfloat16 where the CPU has it natively, else float32.
    ``prefix_cache``: keep the key/value caches of recent requests and prefill only what a prompt adds to one
    (False: prefill every prompt whole).
    """

    def __init__(self, gguf_path: str | os.PathLike | None = None, dtype: str = "auto",
                 adapter: str | os.PathLike | None = None, constrained: bool = True, threads: int | None = None,
                 cache_dir: str | os.PathLike | None = None, merge_adapter: bool = True, name: str = "smollm2",
                 prefix_cache: bool = True, decode_rows: int = 1):
        if threads:
            torch.set_num_threads(threads)
        if dtype == "auto":
            dtype = resolve_dtype(dtype)
            logging.getLogger(__name__).info("dtype auto -> %s", dtype)
        gguf_path = Path(gguf_path or default_gguf_path())
        model, tokenizer = load_gguf(gguf_path, dtype, cache_dir)
        weights = fingerprint(gguf_path, adapter, cache_dir)
        self._setup(model, tokenizer, weights, adapter, constrained, merge_adapter, name, prefix_cache, decode_rows)

    @classmethod
    def from_model(cls, model, tokenizer, *, adapter: str | os.PathLike | None = None, constrained: bool = True,
                   merge_adapter: bool = True, name: str = "local",
                   prefix_cache: bool = True, decode_rows: int = 1) -> "LocalChatModel":
        """Wrap an already loaded causal LM (tests use a tiny random one). ``adapter`` modifies ``model``."""
        self = cls.__new__(cls)
        self._setup(model, tokenizer, fingerprint(None, adapter), adapter, constrained, merge_adapter, name,
                    prefix_cache, decode_rows)
        return self

    def _setup(self, model, tokenizer, weights: dict, adapter, constrained, merge_adapter, name, prefix_cache,
               decode_rows):
        if adapter is not None:
            model = apply_adapter(model, adapter, merge_adapter)
        self.model = model.eval()
        if decode_rows < 1:
            raise ValueError(f"decode_rows must be at least 1, not {decode_rows}")
        if decode_rows > 1 and not batching.supports(self.model):
            raise ValueError(f"decode_rows {decode_rows}: batched decoding needs a Llama-architecture model, "
                             f"not {self.model.config.model_type!r}")
        self.tokenizer = tokenizer
        self.constrained, self.name = constrained, name
        # what determines the replies to a request (the response cache keys a local endpoint by it): chunking and
        # threads change bfloat16 replies, the rows of a decoding step float32 ones
        self.identity = {**weights, "dtype": str(model.dtype).removeprefix("torch."), "constrained": constrained,
                         "prefill_chunk": PREFILL_CHUNK, "threads": torch.get_num_threads(),
                         "decode_rows": decode_rows}
        self.grammar = ToolCallGrammar(tokenizer) if constrained else None
        self.context_window = getattr(model.config, "max_position_embeddings", None) or 8192
        known = tokenizer.get_vocab()
        self.stop_ids = {known[t] for t in ("<|im_end|>", "<|endoftext|>", tokenizer.eos_token) if t in known}
        self.prefix_cache = PrefixCache() if prefix_cache else None
        self._lock = threading.Lock()
        self._calls = 0
        # decode_rows > 1: the lock is held per forward pass, not per request
        self.batcher = batching.StepBatcher(self.model, decode_rows, self._lock) if decode_rows > 1 else None

    # ------------------------------------------------------------------ pieces
    def render(self, request: dict) -> str:
        """The prompt text of a chat request (ChatML, generation prompt appended)."""
        msgs = chat_messages(request.get("messages") or [], request.get("tools"), request.get("tool_choice"))
        return self.tokenizer.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)

    def encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=False)

    def _stepper(self) -> tuple[Step, Callable[[], None], Callable[[], None]]:
        """(step, keep, release): the first ``step`` prefills the prompt in chunks, from the prefix cache's best
        entry; later single-token steps go to the batcher, if any; ``keep()`` puts the cache in the prefix cache;
        ``release()`` (always, last) tells the batcher this request decodes no more."""
        cache, prompt, entered = None, [], False
        batcher = self.batcher
        # without a batcher the whole request holds the lock (``generate``); with one, each forward pass does
        locked = self._lock if batcher is not None else contextlib.nullcontext()

        def forward(ids: list[int]) -> torch.Tensor:
            nonlocal cache
            out = self.model(input_ids=torch.tensor([ids]), past_key_values=cache, use_cache=True, logits_to_keep=1)
            cache = out.past_key_values
            return out.logits[0, -1].float()

        def step(ids: list[int]) -> torch.Tensor:
            nonlocal cache, entered
            if prompt:
                if batcher is not None and len(ids) == 1:
                    return batcher.step(cache, ids[0])
                with locked:
                    return forward(ids)
            prompt.extend(ids)
            with locked:
                cache, done = self.prefix_cache.longest_prefix(ids) if self.prefix_cache is not None else (None, 0)
                for start in range(done, len(ids), PREFILL_CHUNK):
                    logits = forward(ids[start:start + PREFILL_CHUNK])
                # kept now as well as after the reply, so that requests arriving meanwhile reuse it (the queries in
                # flight start together, and their first prompts share the system prompt and tool schemas)
                aligned = len(ids) // PREFILL_CHUNK * PREFILL_CHUNK
                if self.prefix_cache is not None and aligned > done:
                    self.prefix_cache.put(ids[:aligned], first_positions(cache, aligned))
            if batcher is not None:
                batcher.enter()
                entered = True
            return logits

        def keep() -> None:
            if self.prefix_cache is not None and cache is not None:
                with locked:
                    self.prefix_cache.put(prompt[:len(prompt) // PREFILL_CHUNK * PREFILL_CHUNK],
                                          cache if batcher is None else batching.compact(cache))

        def release() -> None:
            nonlocal entered
            if entered:
                batcher.leave()
                entered = False

        return step, keep, release

    # ------------------------------------------------------------------ the callback
    def generate(self, request: dict) -> dict:
        """An OpenAI chat-completions body -> a ``chat.completion`` object (``HTTPError`` 400 on a bad request)."""
        with self._lock if self.batcher is None else contextlib.nullcontext(), torch.inference_mode():
            return self._generate(request)

    def _generate(self, request: dict) -> dict:
        if not request.get("messages"):
            raise HTTPError(400, "messages is required")
        if request.get("stream"):
            raise HTTPError(400, "streaming is not supported by the local model")
        tools = [t for t in request.get("tools") or [] if t.get("type", "function") == "function"]
        tool_choice = request.get("tool_choice")
        prompt_ids = self.encode(self.render(request))
        room = self.context_window - len(prompt_ids)
        if room <= 0:
            raise HTTPError(400, f"the prompt has {len(prompt_ids)} tokens; the context window is "
                                 f"{self.context_window}")
        max_tokens = min(int(request.get("max_tokens") or request.get("max_completion_tokens")
                             or DEFAULT_MAX_TOKENS), room)
        temperature, top_p, seed = request.get("temperature"), request.get("top_p"), request.get("seed")
        sampling = Sampling(1.0 if temperature is None else float(temperature), 1.0 if top_p is None else float(top_p),
                            torch.Generator().manual_seed(0 if seed is None else int(seed)))
        model_name = request.get("model") or self.name
        step, keep, release = self._stepper()
        try:
            if self.constrained and tools and tool_choice != "none":
                try:
                    matcher = self.grammar.matcher(tools, forced_tool_name(tool_choice))
                    out = decode_tool_call(step, prompt_ids, matcher, self.grammar.closing, max_tokens, sampling)
                except ValueError as e:
                    raise HTTPError(400, str(e)) from None
                release()  # decoded: the batcher's other requests need not wait for this one
                keep()
                call = json.loads(self.tokenizer.decode(out, clean_up_tokenization_spaces=False))
                self._calls += 1
                arguments = json.dumps(call["arguments"], ensure_ascii=False)
                message = {"role": "assistant", "content": None, "tool_calls": [{
                    "id": f"call_{self._calls}", "type": "function",
                    "function": {"name": call["name"], "arguments": arguments}}]}
                return chat_completion(model_name, message, "tool_calls", len(prompt_ids), len(out))
            out, finish = decode_text(step, prompt_ids, max_tokens, sampling, self.stop_ids)
            release()
            keep()
            text = self.tokenizer.decode(out, skip_special_tokens=True)
            return chat_completion(model_name, {"role": "assistant", "content": text}, finish, len(prompt_ids),
                                   len(out) + (finish == "stop"))
        finally:
            release()
