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

import collections
import contextlib
import ctypes
import hashlib
import json
import logging
import os
import threading
from pathlib import Path
from typing import Callable

import torch
from transformers import DynamicCache

from ark.errors import UserError
from ark.llm import batching
from ark.llm.attention import KV_TYPES as KERNEL_DTYPES
from ark.llm.attention import compiled as attention_kernel
from ark.llm.attention import source_digest as attention_source
from ark.llm.decoding import Sampling, ToolCallGrammar, decode_text, decode_tool_call
from ark.llm.protocol import chat_messages, forced_tool_name
from ark.llm.schema import RequestError
from ark.llm.server import HTTPError, chat_completion
from ark.llm.weights import apply_adapter, default_gguf_path, fingerprint, load_gguf, pack_linears, resolve_dtype

if TYPE_CHECKING:
    from ark.llm.decoding import Step

DEFAULT_MAX_TOKENS = 512


# The prompt is prefilled in passes that end at multiples of this (or at the prompt's end), and a kept prompt is
# reused up to such a multiple, or, where ``batching.reuse_granularity`` finds that a pass's rows do not depend on
# where it began, up to any position: the keys and values at a position are then the same whatever the earlier
# requests were, and the replies are the same with and without the prefix cache (in bfloat16 a prefill split
# elsewhere differs in the last bits, which changes a sampled token now and then). 256: prefill in chunks of
# 128 ran at half the speed of a whole prompt in bfloat16 with AMX, in chunks of 256 at 70 %, in float32 at 97 %.
PREFILL_CHUNK = 256


class Chunk:
    """One ``PREFILL_CHUNK`` of prompt tokens in the prefix tree, or fewer (a prompt's last, a leaf): its keys and
    values at every layer (``[kv_heads, n, dim]`` copies, never written), the chunks that have followed it, when it
    was last used, and how many requests read it in place (``users``: it is not dropped while they run)."""

    __slots__ = ("parent", "tokens", "kv", "children", "used", "users")

    def __init__(self, parent: "Chunk | None", tokens: tuple[int, ...], kv: list, used: int):
        self.parent, self.tokens, self.kv, self.children, self.used, self.users = parent, tokens, kv, {}, used, 0


class PrefixCache:
    """The key/values of recent prompts as a tree of ``PREFILL_CHUNK``-token chunks: a chunk is stored once
    however many prompts start with it (the agents' shared system prompt and tool schemas, a conversation's
    earlier turns). An agent's next step sends the conversation so far again: its prompt starts with chunks the
    tree holds, and only the rest is prefilled. ``any_position``: a prompt is kept whole (its last chunk short)
    and reused up to any position, part of a chunk included; else up to whole chunks only. Bounded by
    ``max_tokens`` (a number, or a function read at every ``put``; SmolLM2: 23 KB a token in bfloat16, 46 KB in
    float32); the least recently used leaf chunk that no request holds goes first. Not thread-safe:
    ``LocalChatModel`` calls it under its model lock."""

    def __init__(self, max_tokens: int | Callable[[], int] = 65536, any_position: bool = False):
        self.bound = max_tokens if callable(max_tokens) else (lambda: max_tokens)  # read at every put
        self.any_position = any_position
        self.root = Chunk(None, (), [], 0)
        self.tokens = 0
        self._clock = 0

    def _tick(self) -> int:
        self._clock += 1
        return self._clock

    def longest_prefix(self, ids: list[int], leave: int = 1) -> tuple[list, int, list[Chunk]]:
        """(pieces, n, chunks): what the tree holds of ``ids[:n]``, short of ``len(ids)`` by ``leave`` tokens (one
        is left to feed), as ``(keys, values)`` pieces a layer (views of the chunks, never to be written), and the
        chunks they come from (``hold`` them while the pieces are read)."""
        path, node, n, limit = [], self.root, 0, len(ids) - leave
        while n < limit:
            want = tuple(ids[n:min(n + PREFILL_CHUNK, limit)])
            child = node.children.get(want) if len(want) == PREFILL_CHUNK else None
            take = PREFILL_CHUNK
            if child is None and self.any_position:  # the child that shares the most of what comes next
                take, child = max(((common(c.tokens, want), c) for c in node.children.values()),
                                  key=lambda tc: tc[0], default=(0, None))
            if child is None or take == 0:
                break
            child.used = self._tick()
            path.append((child, take))
            n, node = n + take, child
            if take < PREFILL_CHUNK:
                break
        layers = len(path[0][0].kv) if path else 0
        pieces = [[(chunk.kv[i][0][:, :take], chunk.kv[i][1][:, :take]) for chunk, take in path]
                  for i in range(layers)]
        return pieces, n, [chunk for chunk, _ in path]

    @staticmethod
    def hold(chunks: list[Chunk], by: int = 1) -> None:
        """Count a request that reads ``chunks`` in place (``by=-1``: one that no longer does)."""
        for chunk in chunks:
            chunk.users += by

    def kept(self, prompt: list[int]) -> list[int]:
        """What of ``prompt`` the tree keeps: all of it where it is reused up to any position, else its whole
        chunks."""
        return prompt if self.any_position else prompt[:len(prompt) // PREFILL_CHUNK * PREFILL_CHUNK]

    def put(self, key: list[int], positions: Callable[[int, int], list]) -> None:
        """Keep the chunks of ``key`` (``kept(prompt)``) that the tree lacks; ``positions(start, end)`` gives copies
        of their keys and values, a ``(keys, values)`` pair ``[kv_heads, end - start, dim]`` a layer. A short last
        chunk is kept unless a chunk the tree holds starts with it; a whole chunk replaces the short ones it starts
        with (unless a request holds them)."""
        node = self.root
        for start in range(0, len(key), PREFILL_CHUNK):
            tokens = tuple(key[start:start + PREFILL_CHUNK])
            child = node.children.get(tokens)
            if child is None and len(tokens) < PREFILL_CHUNK:
                child = next((c for c in node.children.values() if c.tokens[:len(tokens)] == tokens), None)
            if child is None:
                for short in [c for c in node.children.values()
                              if tokens[:len(c.tokens)] == c.tokens and not c.users]:
                    del node.children[short.tokens]  # a leaf: only a whole chunk has children
                    self.tokens -= len(short.tokens)
                child = Chunk(node, tokens, positions(start, start + len(tokens)), 0)
                node.children[tokens] = child
                self.tokens += len(tokens)
            child.used = self._tick()
            node = child
        self.shrink(self.bound())

    def shrink(self, max_tokens: int) -> None:
        """Drop least recently used leaf chunks that no request holds until the tree holds at most ``max_tokens``
        (or only held chunks and their parents)."""
        while self.tokens > max(max_tokens, 0):
            leaves, stack = [], [self.root]
            while stack:
                node = stack.pop()
                stack.extend(node.children.values())
                if not node.children and node is not self.root and not node.users:
                    leaves.append(node)
            if not leaves:
                return
            for leaf in sorted(leaves, key=lambda c: c.used):
                del leaf.parent.children[leaf.tokens]
                self.tokens -= len(leaf.tokens)
                if self.tokens <= max(max_tokens, 0):
                    break


def common(a: tuple, b: tuple) -> int:
    """How many tokens ``a`` and ``b`` share from their starts."""
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


# The share of the key/value budget that the requests being computed may reserve; the rest is the kept prompts'
# at least. Without such a floor a burst of requests that share a system prompt left no room to keep it, and
# each of them prefilled it again (20 requests, 4 system prompts: 173 s against 70 s; benchmarks/serve_load.py).
IN_FLIGHT_SHARE = 0.75


class KVBudget:
    """The key/value tokens of the requests being computed, bounded: ``reserve(n)`` waits, in arrival order, until
    ``n`` more fit under ``limit`` (a request reserves its prompt plus its reply cap), so that memory is bounded by
    configuration, not by traffic; a request gives back what it reads in place from the kept prompts
    (``Reservation.give_back``), which count there; ``tokens - reserved`` is what the kept prompts may hold.
    ``stop()`` turns every wait into an error."""

    def __init__(self, tokens: int):
        self.tokens, self.reserved = tokens, 0
        self.limit = int(tokens * IN_FLIGHT_SHARE)
        self.cond = threading.Condition()
        self.waiting: collections.deque = collections.deque()  # in arrival order: a large request is not overtaken
        self.stopping = False                                   # for ever by small ones that fit before it

    @contextlib.contextmanager
    def reserve(self, n: int):
        with self.cond:
            ticket = object()
            self.waiting.append(ticket)
            try:
                self.cond.wait_for(lambda: self.stopping or (self.waiting[0] is ticket
                                                             and self.reserved + n <= self.limit))
            finally:
                self.waiting.remove(ticket)
                self.cond.notify_all()
            if self.stopping:
                raise HTTPError(503, "the server is stopping")
            self.reserved += n
        held = Reservation(self, n)
        try:
            yield held
        finally:
            with self.cond:
                self.reserved -= held.tokens
                idle = self.reserved == 0
                self.cond.notify_all()
            if idle:
                release_free_memory()

    def stop(self) -> None:
        with self.cond:
            self.stopping = True
            self.cond.notify_all()


class Reservation:
    """The tokens a request holds in a ``KVBudget``."""

    def __init__(self, budget: KVBudget, tokens: int):
        self.budget, self.tokens = budget, tokens

    def give_back(self, n: int) -> None:
        n = min(n, self.tokens)
        with self.budget.cond:
            self.tokens -= n
            self.budget.reserved -= n
            self.budget.cond.notify_all()


def release_free_memory() -> None:
    """Give the heap's free pages back to the system (glibc ``malloc_trim``): the key/value tensors of a burst of
    requests are freed into the heap, which keeps them mapped unless told."""
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # not glibc
        pass


def tool_call_id(prompt: list[int], reply: list[int]) -> str:
    """A tool call's id, a function of the prompt's and the reply's tokens: a request gets the same id however
    many others run beside it and whichever finishes first, so a rerun's records are the same bytes."""
    return "call_" + hashlib.sha256(json.dumps([prompt, reply]).encode()).hexdigest()[:24]


def kv_bytes_per_token(model) -> int:
    """The bytes of keys and values one position takes in ``model``'s cache (all layers)."""
    layers, kv_heads, head_dim = batching.kv_shape(model)
    return 2 * layers * kv_heads * head_dim * model.dtype.itemsize


class LocalChatModel:
    """An in-process chat model; ``generate(request) -> chat.completion`` is the ``ChatServer`` callback.

    Request defaults: temperature 1, top_p 1, seed 0 (replies are a function of the request),
    max_tokens 512. With tools and ``constrained``, ``tool_choice`` "auto"/"required"/None all give
    exactly one call, ``{"type": "function", "function": {"name": X}}`` a call of X, and "none" text.
    ``decode_rows`` 1: requests run one at a time (the server is threaded; the model is not); more: concurrent
    requests are prefilled one at a time and share their decoding steps, ``decode_rows`` rows a forward pass, a
    token a row (a tool call's forced tokens too: ``ark.llm.batching``). ``dtype`` "auto": bfloat16 where the CPU
    has it natively, else float32.
    ``linear`` "onednn": every linear layer's weight reordered once for oneDNN's products (``weights.pack_linears``);
    "torch": torch's own.
    ``attention`` (batched steps): "auto", ``ark.llm.attention``'s kernel, one call a layer for all rows, reading
    kept prompts in place (where it cannot be built: in float32 an error, a float32 run's replies being those of the
    kernel; in bfloat16 torch's, each request then copying its kept prompt); "compiled", the kernel or an error;
    "torch", one torch call per row (tests and benchmarks compare the two).
    ``prefix_cache``: keep the key/values of recent prompts and prefill only what a prompt adds to them (False:
    prefill every prompt whole). ``kv_memory_mb``: the key/values of the requests being computed (each reserves
    its prompt plus its reply cap; more wait their turn) and of the kept prompts (what the requests leave) together
    stay under it; at least one full context window. ``cancel()`` ends the requests being computed (a stopping
    server): each raises a 503 at its next forward pass.
    """

    def __init__(self, gguf_path: str | os.PathLike | None = None, dtype: str = "auto",
                 adapter: str | os.PathLike | None = None, constrained: bool = True, threads: int | None = None,
                 cache_dir: str | os.PathLike | None = None, merge_adapter: bool = True, name: str = "smollm2",
                 prefix_cache: bool = True, decode_rows: int = 1, kv_memory_mb: int = 1024, linear: str = "onednn",
                 attention: str = "auto"):
        if threads:
            torch.set_num_threads(threads)
        if dtype == "auto":
            dtype = resolve_dtype(dtype)
            logging.getLogger(__name__).info("dtype auto -> %s", dtype)
        gguf_path = Path(gguf_path or default_gguf_path())
        model, tokenizer = load_gguf(gguf_path, dtype, cache_dir)
        weights = fingerprint(gguf_path, adapter, cache_dir)
        self._setup(model, tokenizer, weights, adapter, constrained, merge_adapter, name, prefix_cache, decode_rows,
                    kv_memory_mb, linear, attention)

    @classmethod
    def from_model(cls, model, tokenizer, *, adapter: str | os.PathLike | None = None, constrained: bool = True,
                   merge_adapter: bool = True, name: str = "local",
                   prefix_cache: bool = True, decode_rows: int = 1, kv_memory_mb: int = 1024,
                   linear: str = "torch", attention: str = "auto") -> "LocalChatModel":
        """Wrap an already loaded causal LM (tests use a tiny random one). ``adapter`` and ``linear="onednn"``
        modify ``model``."""
        self = cls.__new__(cls)
        self._setup(model, tokenizer, fingerprint(None, adapter), adapter, constrained, merge_adapter, name,
                    prefix_cache, decode_rows, kv_memory_mb, linear, attention)
        return self

    def _setup(self, model, tokenizer, weights: dict, adapter, constrained, merge_adapter, name, prefix_cache,
               decode_rows, kv_memory_mb, linear, attention):
        if adapter is not None:
            model = apply_adapter(model, adapter, merge_adapter)
        self.model = model.eval()
        if linear == "onednn":
            linear = pack_linears(self.model, max(decode_rows, 8))
        elif linear != "torch":
            raise ValueError(f"linear must be onednn or torch, not {linear!r}")
        if decode_rows < 1:
            raise ValueError(f"decode_rows must be at least 1, not {decode_rows}")
        if decode_rows > 1 and not batching.supports(self.model):
            raise ValueError(f"decode_rows {decode_rows}: batched decoding needs a Llama-architecture model, "
                             f"not {self.model.config.model_type!r}")
        kernel = self._attention(attention, decode_rows)
        self.tokenizer = tokenizer
        self.constrained, self.name = constrained, name
        # what determines the replies to a request (the response cache keys a local endpoint by it): chunking and
        # threads change bfloat16 replies, the rows of a decoding step float32 ones
        # a prompt's passes: ark.llm.batching's (keys padded to the chunk's end) for a Llama, else transformers'
        self.own_prefill = batching.supports(self.model)
        self.identity = {**weights, "dtype": str(model.dtype).removeprefix("torch."), "constrained": constrained,
                         "prefill_chunk": PREFILL_CHUNK, "threads": torch.get_num_threads(),
                         "decode_rows": decode_rows, "linear": linear,
                         "prefill": "padded to the chunk" if self.own_prefill else "transformers"}
        if decode_rows > 1:  # which attention computed the batched steps (one request at a time: the model's own)
            self.identity["attention"] = (f"compiled {attention_source(model.dtype)}" if kernel is not None
                                          else "torch")
            if constrained:  # a grammar's forced tokens: rows of the steps (one request at a time: prompt passes)
                self.identity["forced_tokens"] = "rows of the batched steps"
        if constrained:  # a reply's tool call id: once a counter in the order replies finished, now of the reply
            self.identity["tool_call_ids"] = "of the prompt and reply"
        self.grammar = ToolCallGrammar(tokenizer) if constrained else None
        self.context_window = getattr(model.config, "max_position_embeddings", None) or 8192
        known = tokenizer.get_vocab()
        # a byte-level token stands for at most its own length in characters: a prompt of more characters than the
        # window times the longest token cannot fit, and is refused without tokenizing it
        self.max_prompt_chars = self.context_window * max(map(len, known))
        self.stop_ids = {known[t] for t in ("<|im_end|>", "<|endoftext|>", tokenizer.eos_token) if t in known}
        per_token = kv_bytes_per_token(self.model)
        self.kv = KVBudget(int(kv_memory_mb * 2**20 // per_token))
        if self.kv.limit < self.context_window:
            least = -(-self.context_window * per_token // IN_FLIGHT_SHARE // 2**20)
            raise ValueError(f"kv_memory_mb {kv_memory_mb} lets a request hold {self.kv.limit} positions of "
                             f"key/values; the context window is {self.context_window} ({least:.0f} MB at least, "
                             f"{str(self.model.dtype).removeprefix('torch.')})")
        # the kept prompts get what the requests in flight leave, read whenever a prompt is kept
        any_position = (prefix_cache and self.own_prefill
                        and batching.reuse_granularity(self.model, PREFILL_CHUNK) == 1)
        if prefix_cache:
            logging.getLogger(__name__).info("kept prompts reused up to %s", "any position" if any_position else
                                             f"multiples of {PREFILL_CHUNK} tokens (batching.reuse_granularity)")
        self.prefix_cache = (PrefixCache(lambda: self.kv.tokens - self.kv.reserved, any_position)
                             if prefix_cache else None)
        self._lock = threading.Lock()
        # decode_rows > 1: the lock is held per forward pass, not per request
        self.batcher = (batching.StepBatcher(self.model, decode_rows, self._lock, attention=kernel)
                        if decode_rows > 1 else None)

    def _attention(self, choice: str, decode_rows: int):
        """The batched steps' attention kernel (``ark.llm.attention``), or None for torch's."""
        if choice not in ("auto", "compiled", "torch"):
            raise ValueError(f"attention must be auto, compiled or torch, not {choice!r}")
        if decode_rows == 1 or choice == "torch":
            return None
        if self.model.dtype not in KERNEL_DTYPES:
            if choice == "compiled":
                raise ValueError(f"attention compiled: the kernel is float32 or bfloat16, the model is "
                                 f"{self.model.dtype}")
            return None
        kernel = attention_kernel(self.model.dtype)
        if kernel is None and self.model.dtype == torch.bfloat16 and choice == "auto":
            return None  # torch's attention, as bfloat16 had before its kernel (the identity says which)
        if kernel is None:  # the replies of a float32 batched run are the kernel's: no silent change of model
            raise UserError("the batched decoding step's attention kernel could not be built (the warning above says "
                            "why); it needs a C++ compiler (g++ or clang) and ninja (in the lock): install them, or "
                            "decode one request at a time (backbone.local.decode_rows=1)")
        return kernel

    def cancel(self) -> None:
        """End the requests being computed and waiting (a 503 each): the server is stopping."""
        self.kv.stop()

    def shrink_kept(self, max_tokens: int) -> None:
        """Keep the ``max_tokens`` most recently used tokens of the kept prompts and give the heap's free pages back
        (an idle server after a burst: ``ark.serve.IdleRelease``)."""
        if self.prefix_cache is not None:
            with self._lock:  # the kept prompts are read and written under the model's lock
                self.prefix_cache.shrink(max_tokens)
        release_free_memory()

    # ------------------------------------------------------------------ pieces
    def render(self, request: dict) -> str:
        """The prompt text of a chat request (ChatML, generation prompt appended)."""
        msgs = chat_messages(request.get("messages") or [], request.get("tools"), request.get("tool_choice"))
        return self.tokenizer.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)

    def check_size(self, request: dict) -> dict:
        """``request``, or ``RequestError`` 400 where its messages' text alone cannot fit the context window."""
        chars = sum(len(c) if isinstance(c, str) else sum(len(p.get("text") or "") for p in c
                                                           if isinstance(p, dict)) if isinstance(c, list) else 0
                    for c in (m.get("content") for m in request.get("messages") or [] if isinstance(m, dict)))
        if chars > self.max_prompt_chars:
            raise RequestError(400, f"the messages hold {chars:,} characters, more than the context window of "
                                    f"{self.context_window} tokens can take ({self.max_prompt_chars:,})")
        return request

    def encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=False)

    def _stepper(self, reservation: Reservation, reply_cap: int) -> tuple[Step, Callable[[], None],
                                                                          Callable[[], None]]:
        """(step, keep, release): the first ``step`` prefills the prompt from the prefix cache's best entry, in
        passes that end at multiples of ``PREFILL_CHUNK``; later steps (a token, and the tokens a grammar forces after
        it) go to the batcher, if any;
        ``keep()`` puts the prompt in the prefix cache; ``release()`` (always, last) tells the batcher this request
        decodes no more and lets go of the kept chunks it read in place. A Llama's keys and values are a
        ``batching.RequestKV`` (the kept chunks read in place where the batched steps' kernel reads them, their
        tokens given back to ``reservation``; its own buffers sized for the prompt and ``reply_cap``), another
        model's a transformers cache."""
        kv, prompt, entered, held = None, [], False, []
        batcher = self.batcher
        share = batcher is not None and batcher.attention is not None
        # without a batcher the whole request holds the lock (``generate``); with one, each forward pass does
        locked = self._lock if batcher is not None else contextlib.nullcontext()

        def forward(ids: list[int], of_prompt: bool = False) -> torch.Tensor:
            """The logits after ``ids``: by passes that end at multiples of ``PREFILL_CHUNK`` (a prompt's, which
            may be kept: ``of_prompt``; more than one token), else by a decoding step of one row (a reply
            token's)."""
            if len(ids) == 1 and not of_prompt:
                if self.own_prefill:
                    return batching.decode_rows(self.model, [kv], ids, 1)[0]
                return self._pass(ids, kv)
            past = kv.length if self.own_prefill else kv.get_seq_length()
            for start, end in batching.passes(past, past + len(ids), PREFILL_CHUNK):
                if self.kv.stopping:
                    raise HTTPError(503, "the server is stopping")
                part = ids[start - past:end - past]
                logits = (batching.prefill(self.model, kv, part, PREFILL_CHUNK) if self.own_prefill
                          else self._pass(part, kv))
            return logits

        def positions(start: int, end: int) -> list:
            if self.own_prefill:
                return kv.positions(start, end)
            return [(k[0, :, start:end].clone(), v[0, :, start:end].clone()) for k, v, *_ in kv]

        def step(ids: list[int]) -> torch.Tensor:
            nonlocal kv, entered
            if self.kv.stopping:
                raise HTTPError(503, "the server is stopping")
            if prompt:
                if batcher is not None:  # a sampled token and any the grammar forces after it, as rows of a step
                    return batcher.step(kv, ids)
                with locked:
                    return forward(ids)
            prompt.extend(ids)
            with locked:
                pieces, done = [], 0
                if self.prefix_cache is not None:  # the kept prompts get what the requests in flight leave
                    self.prefix_cache.shrink(self.prefix_cache.bound())
                    pieces, done, chunks = self.prefix_cache.longest_prefix(ids)
                    if share:
                        PrefixCache.hold(chunks)
                        held.extend(chunks)
                        reservation.give_back(done)  # counted in the kept prompts while this request reads them
                if self.own_prefill:
                    kv = batching.RequestKV(self.model, pieces, room=len(ids) - done + reply_cap, share=share)
                else:
                    kv = DynamicCache([tuple(torch.cat(part, 1)[None] for part in zip(*layer)) for layer in pieces]
                                      if pieces else None)
                logits = forward(ids[done:], of_prompt=True)
                # kept now as well as after the reply, so that requests arriving meanwhile reuse it (the queries in
                # flight start together, and their first prompts share the system prompt and tool schemas)
                if self.prefix_cache is not None and len(self.prefix_cache.kept(ids)) > done:
                    self.prefix_cache.put(self.prefix_cache.kept(ids), positions)
                    if share:  # read what was just kept in place too, rather than hold it twice
                        pieces, kept, chunks = self.prefix_cache.longest_prefix(ids, leave=0)
                        if kept > kv.base:
                            rebased = batching.RequestKV(self.model, pieces, room=len(ids) - kept + reply_cap)
                            for k, v, (k0, v0) in zip(rebased.keys, rebased.values, kv.positions(kept, kv.length)):
                                k[:, :len(ids) - kept], v[:, :len(ids) - kept] = k0, v0
                            rebased.own = len(ids) - kept
                            PrefixCache.hold(chunks)
                            PrefixCache.hold(held, -1)
                            held[:] = chunks
                            reservation.give_back(kept - kv.base)
                            kv = rebased
            if batcher is not None:
                batcher.enter()
                entered = True
            return logits

        def keep() -> None:
            if self.prefix_cache is not None and kv is not None:
                with locked:
                    self.prefix_cache.put(self.prefix_cache.kept(prompt), positions)

        def release() -> None:
            nonlocal entered
            if entered:
                batcher.leave()
                entered = False
            if held:
                with locked:
                    PrefixCache.hold(held, -1)
                held.clear()

        return step, keep, release

    def _pass(self, ids: list[int], cache: DynamicCache | None) -> torch.Tensor:
        """The logits after ``ids`` by transformers' forward pass (``cache`` extended in place)."""
        out = self.model(input_ids=torch.tensor([ids]), past_key_values=cache, use_cache=True, logits_to_keep=1)
        if cache is not None and out.past_key_values is not cache:
            raise RuntimeError("the model's forward pass did not extend the cache it was given")
        return out.logits[0, -1].float()

    # ------------------------------------------------------------------ the callback
    def generate(self, request: dict) -> dict:
        """An OpenAI chat-completions body -> a ``chat.completion`` object (``HTTPError`` 400 on a bad request)."""
        with self._lock if self.batcher is None else contextlib.nullcontext(), torch.inference_mode():
            return self._generate(request)

    def _generate(self, request: dict) -> dict:
        if not request.get("messages"):
            raise HTTPError(400, "messages is required")
        self.check_size(request)
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
        with self.kv.reserve(len(prompt_ids) + max_tokens) as reservation:
            step, keep, release = self._stepper(reservation, max_tokens)
            return self._decode(step, keep, release, prompt_ids, tools, tool_choice, max_tokens, sampling,
                                model_name)

    def _decode(self, step: Step, keep: Callable[[], None], release: Callable[[], None], prompt_ids: list[int],
                tools: list, tool_choice, max_tokens: int, sampling: Sampling, model_name: str) -> dict:
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
                arguments = json.dumps(call["arguments"], ensure_ascii=False)
                message = {"role": "assistant", "content": None, "tool_calls": [{
                    "id": tool_call_id(prompt_ids, out), "type": "function",
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
