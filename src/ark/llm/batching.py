"""Decoding steps of concurrent requests in one forward pass, with replies that do not depend on which requests
happen to run together.

On CPU a decoding step of the embedded model is a chain of matrix-vector products: the weights are read once per
token whatever the batch, so a step for ``rows`` requests costs little more than one. Batching is worth it only if
it cannot change a reply, since the requests that meet in a step depend on timing. ``decode_rows`` makes each row's
result independent of the others:

- the linear layers always run on ``rows`` rows (the free ones zero): a matrix product's row does not depend on
  the other rows' values, but in float32 it does depend on their number (the BLAS picks its kernel by shape);
- attention runs per row over that row's own key/value cache (no padding to another row's length): one torch call
  per row and layer, or, in float32, ``ark.llm.attention``'s kernel, one call a layer that computes each row alone;
- normalisation, rotary embedding and activations work row by row.

So a reply depends on ``rows`` (part of the model's identity), never on the company it kept.
``tests/test_batching.py`` checks this bit for bit. Llama-architecture models only (SmolLM2 is one).

A prompt is computed by ``prefill`` passes, each within one window of positions (``ark.llm.local.PREFILL_CHUNK``),
with the same layers as a step but attention over keys padded with zeros to the window's end and queries padded to
``QUERY_BLOCK`` rows: the shapes torch's attention sees then depend on the window, not on where a pass began. Where
the linear layers compute a row whatever the number of rows (``reuse_granularity`` checks it), the keys and values
at a position depend only on the tokens up to it, and a kept prompt can be reused up to any position.
"""
from __future__ import annotations

import random
import threading
from typing import Callable

import torch
import torch.nn.functional as F
from transformers import DynamicCache
from transformers.models.llama.modeling_llama import apply_rotary_pos_emb


def supports(model) -> bool:
    """Whether ``decode_rows`` can run ``model`` (a Llama-architecture causal LM)."""
    inner = getattr(model, "model", None)
    return (getattr(model.config, "model_type", None) == "llama" and inner is not None
            and hasattr(inner, "rotary_emb") and hasattr(inner, "layers"))


# positions a row's key/value buffer gains beyond its length when it must grow: a small fixed step, not a doubling,
# so that a request's memory stays near what it reserved (its prompt plus its reply cap; ark.llm.local.KVBudget);
# a copy of a 2,000-position cache every 64 steps is a few milliseconds
GROW = 64


def append(layer, key: torch.Tensor, value: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Append one position to a ``DynamicCache`` layer in place: its keys and values become views of buffers with
    room to spare, so a step copies one position, not the whole cache (``DynamicLayer.update`` concatenates).
    A layer that a full forward pass has since concatenated again gets new buffers."""
    n = layer.keys.shape[-2]
    bufs = getattr(layer, "ark_buffers", None)
    if (bufs is None or bufs[0].shape[-2] <= n or bufs[0].data_ptr() != layer.keys.data_ptr()
            or bufs[1].data_ptr() != layer.values.data_ptr()):
        size = (*layer.keys.shape[:-2], n + GROW, layer.keys.shape[-1])
        bufs = (layer.keys.new_empty(size), layer.values.new_empty(size))
        bufs[0][..., :n, :] = layer.keys
        bufs[1][..., :n, :] = layer.values
        layer.ark_buffers = bufs
    bufs[0][..., n, :] = key[..., 0, :]
    bufs[1][..., n, :] = value[..., 0, :]
    layer.keys, layer.values = bufs[0][..., :n + 1, :], bufs[1][..., :n + 1, :]
    return layer.keys, layer.values


class RowBuffers:
    """A request's keys and values at every layer in buffers with room to grow, ``[kv_heads, capacity, dim]``, and
    the positions they hold: what a step with the compiled attention writes into (the kernel writes the new
    position of every layer, so a step's Python does not touch a row per layer). Between steps the cache's own
    layers lag behind (views of the buffers as they were made): ``hand_back`` makes them whole before anything else
    reads the cache."""

    __slots__ = ("keys", "values", "length")

    def __init__(self, keys: list, values: list, length: int):
        self.keys, self.values, self.length = keys, values, length


def _point(cache: DynamicCache, bufs: RowBuffers) -> None:
    for layer, k, v in zip(cache.layers, bufs.keys, bufs.values):
        layer.keys, layer.values = k[None, :, :bufs.length], v[None, :, :bufs.length]


def row_buffers(cache: DynamicCache) -> RowBuffers:
    """``cache``'s ``RowBuffers`` with room for one more position: new ones (copies of its layers) for a cache that
    has none, larger ones (``GROW`` more positions) for one that is full."""
    bufs = getattr(cache, "ark_row_buffers", None)
    if bufs is not None:
        if cache.layers[0].keys.data_ptr() != bufs.keys[0].data_ptr():  # a pass extended the layers (concatenating)
            raise RuntimeError("a cache was read past its batched positions: hand_back(cache) before a pass")
        if bufs.length < bufs.keys[0].shape[1]:
            return bufs
        sources, n = [(k[:, :bufs.length], v[:, :bufs.length]) for k, v in zip(bufs.keys, bufs.values)], bufs.length
    else:
        sources, n = [(layer.keys[0], layer.values[0]) for layer in cache.layers], cache.layers[0].keys.shape[-2]
    keys, values = [], []
    for k, v in sources:
        kb, vb = k.new_empty(k.shape[0], n + GROW, k.shape[-1]), v.new_empty(v.shape[0], n + GROW, v.shape[-1])
        kb[:, :n], vb[:, :n] = k, v
        keys.append(kb)
        values.append(vb)
    cache.ark_row_buffers = bufs = RowBuffers(keys, values, n)
    _point(cache, bufs)
    return bufs


def hand_back(cache: DynamicCache) -> None:
    """Make ``cache``'s layers hold every position its ``RowBuffers`` hold, and let the buffers go: what reads the
    cache next (a whole-model pass, which extends its layers by concatenating into new tensors; the prefix cache)
    sees all of it, and a later batched step copies the layers into new buffers."""
    bufs = cache.__dict__.pop("ark_row_buffers", None)
    if bufs is not None:
        _point(cache, bufs)


def attend(q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, scale: float) -> torch.Tensor:
    """One token's attention over one row's cache, grouped-query (more query heads than key/value heads).
    In bfloat16 the query heads of each key/value head go in as that many query positions (one token needs no
    causal mask): the same bits as ``enable_gqa``, which took 5-6 times as long on an AVX2 CPU
    (``benchmarks/gqa_attention.py``). In float32 ``enable_gqa`` was the faster, and the grouped form changes the
    last bits."""
    if q.dtype != torch.bfloat16:
        return F.scaled_dot_product_attention(q, keys, values, scale=scale, enable_gqa=True)
    heads, dim = q.shape[1], q.shape[-1]
    grouped = q.reshape(1, keys.shape[1], heads // keys.shape[1], dim)
    return F.scaled_dot_product_attention(grouped, keys, values, scale=scale).reshape(1, heads, 1, dim)


def decode_rows(model, caches: list[DynamicCache], tokens: list[int], rows: int,
                attention: Callable | None = None) -> torch.Tensor:
    """One decoding step of ``len(tokens)`` requests: token i extends ``caches[i]`` (updated in place).
    Returns the next-token logits, float32, one row per request. ``attention``: ``ark.llm.attention.compiled()``
    (all rows of a layer in one call), or None (``attend``, a call per row)."""
    n = len(tokens)
    if not 0 < n <= rows:
        raise ValueError(f"{n} requests for a step of {rows} rows")
    inner = model.model
    ids = torch.zeros(rows, 1, dtype=torch.long)
    ids[:n, 0] = torch.tensor(tokens)
    buffers = [row_buffers(c) for c in caches] if attention is not None else None
    lengths = [b.length for b in buffers] if buffers else [c.get_seq_length() for c in caches]
    positions = torch.zeros(rows, 1, dtype=torch.long)
    positions[:n, 0] = torch.tensor(lengths)
    h = inner.embed_tokens(ids)
    cos, sin = inner.rotary_emb(h, positions)
    for idx, layer in enumerate(inner.layers):
        attn = layer.self_attn
        x = layer.input_layernorm(h)
        shape = (rows, 1, -1, attn.head_dim)
        q = attn.q_proj(x).view(shape).transpose(1, 2)
        k = attn.k_proj(x).view(shape).transpose(1, 2)
        v = attn.v_proj(x).view(shape).transpose(1, 2)
        q, k = apply_rotary_pos_emb(q, k, cos, sin)
        out = torch.zeros(rows, q.shape[1], 1, attn.head_dim, dtype=q.dtype)
        if buffers:
            out[:n, :, 0] = attention(q[:n, :, 0].contiguous(), k[:n, :, 0].contiguous(), v[:n, :, 0].contiguous(),
                                      [b.keys[idx] for b in buffers], [b.values[idx] for b in buffers], lengths,
                                      attn.scaling)
        else:
            for i, cache in enumerate(caches):
                keys, values = append(cache.layers[idx], k[i:i + 1], v[i:i + 1])
                out[i:i + 1] = attend(q[i:i + 1], keys, values, attn.scaling)
        h = h + attn.o_proj(out.transpose(1, 2).reshape(rows, 1, -1))
        h = h + layer.mlp(layer.post_attention_layernorm(h))
    for b in buffers or ():
        b.length += 1
    return model.lm_head(inner.norm(h))[:n, 0].float()


# A prefill pass's queries go to attention in blocks of this many rows (zero rows after the last): torch's CPU
# attention gave a row other bits when the last block of 32 query rows held only 1-3 of them (torch 2.13, AVX2)
QUERY_BLOCK = 32


def empty_cache(model) -> DynamicCache:
    """A cache holding no positions, one layer per layer of ``model``."""
    c = model.config
    head_dim = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
    kv_heads = getattr(c, "num_key_value_heads", None) or c.num_attention_heads
    empty = torch.empty(1, kv_heads, 0, head_dim, dtype=model.dtype)
    return DynamicCache([(empty, empty) for _ in model.model.layers])


def prefill(model, cache: DynamicCache, ids: list[int], window: int) -> torch.Tensor:
    """One forward pass of ``ids`` after ``cache``'s positions (extended in place), inside one ``window`` of
    positions (the pass must not cross a multiple of it). Returns the last position's logits, float32.
    A layer's keys and values become a view of a buffer padded with zeros to the window's end, which attention
    reads whole (masked); its queries are padded to ``QUERY_BLOCK`` rows."""
    past, n = cache.get_seq_length(), len(ids)
    if not n or past // window != (past + n - 1) // window:
        raise ValueError(f"a prefill pass of {n} tokens after {past} must lie inside one window of {window}")
    end, rows = (past // window + 1) * window, -(-n // QUERY_BLOCK) * QUERY_BLOCK
    inner = model.model
    h = inner.embed_tokens(torch.tensor([ids]))
    cos, sin = inner.rotary_emb(h, torch.arange(past, past + n)[None])
    mask = torch.ones(rows, end, dtype=torch.bool).tril(diagonal=past)
    mask[n:] = mask[n - 1]  # the padding rows attend like the last row (their results are dropped)
    for cached, layer in zip(cache.layers, inner.layers):
        attn = layer.self_attn
        x = layer.input_layernorm(h)
        shape = (1, n, -1, attn.head_dim)
        q = attn.q_proj(x).view(shape).transpose(1, 2)
        k = attn.k_proj(x).view(shape).transpose(1, 2)
        v = attn.v_proj(x).view(shape).transpose(1, 2)
        q, k = apply_rotary_pos_emb(q, k, cos, sin)
        padded = []
        for old, new in ((cached.keys, k), (cached.values, v)):
            buf = new.new_empty(1, new.shape[1], end, new.shape[-1])
            buf[:, :, :past], buf[:, :, past:past + n] = old, new
            buf[:, :, past + n:] = 0
            padded.append(buf)
        cached.keys, cached.values = (b[:, :, :past + n] for b in padded)
        queries = q.new_zeros(1, q.shape[1], rows, q.shape[-1])
        queries[:, :, :n] = q
        out = F.scaled_dot_product_attention(queries, *padded, attn_mask=mask, scale=attn.scaling,
                                             enable_gqa=True)[:, :, :n]
        h = h + attn.o_proj(out.transpose(1, 2).reshape(1, n, -1))
        h = h + layer.mlp(layer.post_attention_layernorm(h))
    return model.lm_head(inner.norm(h[:, -1:]))[0, -1].float()


def passes(start: int, stop: int, window: int) -> list[tuple[int, int]]:
    """The prefill passes of positions ``start`` to ``stop``: split at every multiple of ``window``."""
    cuts = [start, *range((start // window + 1) * window, stop, window), stop]
    return [(a, b) for a, b in zip(cuts, cuts[1:]) if b > a]


def reuse_granularity(model, window: int) -> int:
    """1 where ``prefill`` computes every position the same whatever position its pass began at, else ``window``
    (a kept prompt is then reused up to a multiple of it only). Checked on ``model`` as it is (weights, dtype,
    linear kernels, threads) on this CPU: a random prompt of ``window + 40`` tokens prefilled from the start, and
    again from a copy of its first keys and values at positions that leave passes of 1-3, 33 and most rows; every
    key, value and the last logits must be the same bits. Float32 with oneDNN's prepacked linear layers passed on
    an AVX2 AMD EPYC; torch's own float32 products did not (the BLAS picks its kernel by the number of rows)."""
    rng = random.Random(0)
    ids = [rng.randrange(model.config.vocab_size) for _ in range(window + 40)]

    def run(cache, start):
        logits = None
        for a, b in passes(start, len(ids), window):
            logits = prefill(model, cache, ids[a:b], window)
        return logits

    with torch.inference_mode():
        reference = empty_cache(model)
        logits = run(reference, 0)
        for start in (window + 39, window + 38, window + 37, window + 7, 29):
            cache = DynamicCache([(layer.keys[:, :, :start].clone(), layer.values[:, :, :start].clone())
                                  for layer in reference.layers])
            if not torch.equal(run(cache, start), logits) or not all(
                    torch.equal(a.keys, b.keys) and torch.equal(a.values, b.values)
                    for a, b in zip(cache.layers, reference.layers)):
                return window
    return 1


class StepBatcher:
    """Joins the single-token decoding steps of concurrent requests into ``decode_rows`` calls.

    Each request's thread calls ``step(cache, token)`` and blocks until its row is computed. One waiting thread at
    a time leads: it takes the model lock (shared with prefill), gives the other requests that are decoding
    ``gather_s`` seconds to submit their steps, runs up to ``rows`` of them in one pass and hands each its logits.
    ``decoding`` counts the requests between their prefill and their last step (``enter``/``leave``), so a lone
    request never waits."""

    def __init__(self, model, rows: int, lock: threading.Lock, gather_s: float = 0.02,
                 attention: Callable | None = None):
        self.model, self.rows, self.lock, self.gather_s, self.attention = model, rows, lock, gather_s, attention
        self.cond = threading.Condition()
        self.pending: list[dict] = []
        self.decoding = 0
        self.leading = False
        self.steps = self.row_steps = 0  # forward passes, and rows computed (for the speed report)

    def enter(self) -> None:
        with self.cond:
            self.decoding += 1

    def leave(self) -> None:
        with self.cond:
            self.decoding -= 1
            self.cond.notify_all()

    def summary(self) -> str:
        mean = self.row_steps / self.steps if self.steps else 0.0
        return (f"{self.row_steps} single-token steps in {self.steps} forward passes of {self.rows} rows "
                f"(mean {mean:.2f} rows used)")

    def step(self, cache: DynamicCache, token: int) -> torch.Tensor:
        job = {"cache": cache, "token": token, "logits": None, "error": None}
        with self.cond:
            self.pending.append(job)
            self.cond.notify_all()
        while True:
            with self.cond:
                self.cond.wait_for(lambda: job["logits"] is not None or job["error"] or not self.leading)
                if job["error"]:
                    raise RuntimeError("a batched decoding step failed") from job["error"]
                if job["logits"] is not None:
                    return job["logits"]
                self.leading = True
            self._lead()

    def _lead(self) -> None:
        """Run one pass over the steps waiting (the leader's own among them, unless ``rows`` came before it)."""
        batch, logits, error = [], None, None
        try:
            with self.lock:
                with self.cond:
                    self.cond.wait_for(lambda: len(self.pending) >= min(self.decoding, self.rows), self.gather_s)
                    batch, self.pending = self.pending[:self.rows], self.pending[self.rows:]
                logits = decode_rows(self.model, [j["cache"] for j in batch], [j["token"] for j in batch], self.rows,
                                     self.attention)
        except BaseException as e:
            error = e
            raise
        finally:
            with self.cond:
                self.leading = False
                if logits is not None:
                    self.steps += 1
                    self.row_steps += len(batch)
                for i, j in enumerate(batch):
                    j["logits"], j["error"] = (logits[i], None) if logits is not None else (None, error)
                self.cond.notify_all()
