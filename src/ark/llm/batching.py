"""Decoding steps of concurrent requests in one forward pass, with replies that do not depend on which requests
happen to run together.

On CPU a decoding step of the embedded model is a chain of matrix-vector products: the weights are read once per
token whatever the batch, so a step for ``rows`` requests costs little more than one. Batching is worth it only if
it cannot change a reply, since the requests that meet in a step depend on timing. ``decode_rows`` makes each row's
result independent of the others:

- the linear layers always run on ``rows`` rows (the free ones zero): a matrix product's row does not depend on
  the other rows' values, but in float32 it does depend on their number (the BLAS picks its kernel by shape);
- attention runs per row over that row's own key/value cache (no padding to another row's length): one torch call
  per row and layer, or ``ark.llm.attention``'s kernel (float32 or bfloat16), one call a layer that computes each row
  alone;
- normalisation, rotary embedding and activations work row by row.

So a reply depends on ``rows`` (part of the model's identity), never on the company it kept.
``tests/test_batching.py`` checks this bit for bit. Llama-architecture models only (SmolLM2 is one).

A request's keys and values are a ``RequestKV``: the kept prompt chunks it starts with, read in place (with the
kernel; requests that share a system prompt read one copy of it, in memory and from it), then its own buffers,
allocated at once for its prompt and reply cap.

A prompt is computed by ``prefill`` passes, each within one window of positions (``ark.llm.local.PREFILL_CHUNK``),
with the same layers as a step but attention over keys padded with zeros to the window's end and queries padded to
``QUERY_BLOCK`` rows: the shapes torch's attention sees then depend on the window, not on where a pass began. Where
the linear layers compute a row whatever the number of rows (``reuse_granularity`` checks it), the keys and values
at a position depend only on the tokens up to it, and a kept prompt can be reused up to any position.
"""
from __future__ import annotations

import itertools
import random
import threading
from typing import Callable

import torch
import torch.nn.functional as F
from transformers.models.llama.modeling_llama import apply_rotary_pos_emb


def supports(model) -> bool:
    """Whether ``decode_rows`` can run ``model`` (a Llama-architecture causal LM)."""
    inner = getattr(model, "model", None)
    return (getattr(model.config, "model_type", None) == "llama" and inner is not None
            and hasattr(inner, "rotary_emb") and hasattr(inner, "layers"))


# positions a request's own buffers gain when they must grow past what it reserved (its prompt plus its reply cap,
# allocated at once: they grow only where a reply runs past that)
GROW = 64


def kv_shape(model) -> tuple[int, int, int]:
    """(layers, key/value heads, head dim) of ``model``'s cache."""
    c = model.config
    head_dim = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
    return c.num_hidden_layers, getattr(c, "num_key_value_heads", None) or c.num_attention_heads, head_dim


class RequestKV:
    """A request's keys and values at every layer: first the kept prompt chunks it starts with (``shared``: per
    layer, ``(keys, values)`` pieces ``[kv_heads, n, dim]`` of the prefix tree, never written, read in place by every
    request that starts with them), then its own positions in one buffer a layer, ``[kv_heads, capacity, dim]``,
    allocated at once for ``room`` positions. ``share=False`` copies the shared positions into its own buffers
    (torch's attention reads one tensor a row)."""

    __slots__ = ("shared", "base", "keys", "values", "own")

    def __init__(self, model, shared: list | None = None, room: int = 0, share: bool = True):
        layers, kv_heads, dim = kv_shape(model)
        shared = shared or [[] for _ in range(layers)]
        base = sum(k.shape[1] for k, _ in shared[0])
        copied = 0 if share else base
        self.keys = [torch.empty(kv_heads, copied + room, dim, dtype=model.dtype) for _ in range(layers)]
        self.values = [torch.empty(kv_heads, copied + room, dim, dtype=model.dtype) for _ in range(layers)]
        if not share and base:
            for own_k, own_v, pieces in zip(self.keys, self.values, shared):
                torch.cat([k for k, _ in pieces], 1, out=own_k[:, :base])
                torch.cat([v for _, v in pieces], 1, out=own_v[:, :base])
        if not share:
            shared = [[] for _ in range(layers)]
        self.shared, self.base, self.own = shared, base - copied, copied

    @property
    def length(self) -> int:
        return self.base + self.own

    def room(self, n: int) -> None:
        """Make room for ``n`` more own positions (new buffers, ``GROW`` more than needed, where they are full)."""
        if self.own + n <= self.keys[0].shape[1]:
            return
        for bufs in (self.keys, self.values):
            for i, old in enumerate(bufs):
                new = old.new_empty(old.shape[0], self.own + n + GROW, old.shape[2])
                new[:, :self.own] = old[:, :self.own]
                bufs[i] = new

    def pieces(self, layer: int, filled: int) -> tuple[list, list]:
        """The keys and values of ``layer`` in position order: the shared pieces, then the own buffer's first
        ``filled`` positions."""
        keys = [k for k, _ in self.shared[layer]] + [self.keys[layer][:, :filled]]
        return keys, [v for _, v in self.shared[layer]] + [self.values[layer][:, :filled]]

    def positions(self, start: int, end: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Copies of the keys and values at positions ``start`` to ``end``, a ``(keys, values)`` pair a layer."""
        out = []
        for layer in range(len(self.keys)):
            keys, values = self.pieces(layer, self.own)
            k, v = torch.cat(keys, 1), torch.cat(values, 1)  # a copy
            out.append((k[:, start:end].clone(), v[:, start:end].clone()))
        return out


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


def decode_rows(model, kvs: list[RequestKV], tokens: list, rows: int,
                attention: Callable | None = None) -> torch.Tensor:
    """One decoding step of ``len(tokens)`` requests: ``tokens[i]`` (a token, or a run of tokens, each a row of its
    own) extends ``kvs[i]`` (in place); at most ``rows`` rows in all. Returns the next-token logits after each
    request's last token, float32, one row per request. A run's token at offset j attends over its request's
    positions and the run's tokens before it, alone, as a step of that one token would: a run gives the bits of its
    tokens fed one step after another (a tool call's forced tokens ride along with other requests' steps).
    ``attention``: ``ark.llm.attention.compiled(model.dtype)`` (all rows of a layer in one call, shared pieces read in
    place), or None (``attend``, a call per row over its own buffers: no shared pieces)."""
    runs = [[t] if isinstance(t, int) else list(t) for t in tokens]
    n = sum(map(len, runs))
    if not runs or not all(runs) or n > rows:
        raise ValueError(f"{n} tokens of {len(runs)} requests for a step of {rows} rows")
    if attention is None and any(kv.base for kv in kvs):
        raise ValueError("torch's attention reads a row's own buffers only: RequestKV(share=False)")
    inner = model.model
    for kv, run in zip(kvs, runs):
        kv.room(len(run))
    # row r is token offset[r] of request owner[r]'s run
    owner = [i for i, run in enumerate(runs) for _ in run]
    offset = [j for run in runs for j in range(len(run))]
    owns = [kv.own for kv in kvs]
    ids = torch.zeros(rows, 1, dtype=torch.long)
    ids[:n, 0] = torch.tensor([t for run in runs for t in run])
    positions = torch.zeros(rows, 1, dtype=torch.long)
    positions[:n, 0] = torch.tensor([kvs[i].length + j for i, j in zip(owner, offset)])
    # the kernel writes a row's new key where it reads it last: the request's own buffer for a lone token; for a run's
    # tokens a one-position scratch of the row's, after the run's earlier positions (written into the buffer first)
    lone = [len(runs[i]) == 1 for i in owner]
    counts = [len(kvs[i].shared[0]) + (1 if alone else 2) for i, alone in zip(owner, lone)]
    lengths = [owns[i] if alone else 0 for i, alone in zip(owner, lone)]
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
        if attention is not None:
            first = 0
            for i, run in enumerate(runs):
                if len(run) > 1:
                    kvs[i].keys[idx][:, owns[i]:owns[i] + len(run)] = k[first:first + len(run), :, 0].transpose(0, 1)
                    kvs[i].values[idx][:, owns[i]:owns[i] + len(run)] = v[first:first + len(run), :, 0].transpose(0, 1)
                first += len(run)
            scratch_k, scratch_v = k.new_empty(n, k.shape[1], 1, k.shape[-1]), v.new_empty(n, v.shape[1], 1, v.shape[-1])
            keys, values = [], []
            for r, (i, j) in enumerate(zip(owner, offset)):
                kv = kvs[i]
                keys += [piece for piece, _ in kv.shared[idx]]
                values += [piece for _, piece in kv.shared[idx]]
                if lone[r]:
                    keys.append(kv.keys[idx]), values.append(kv.values[idx])
                else:
                    keys += [kv.keys[idx][:, :owns[i] + j], scratch_k[r]]
                    values += [kv.values[idx][:, :owns[i] + j], scratch_v[r]]
            out[:n, :, 0] = attention(q[:n, :, 0].float().contiguous(), k[:n, :, 0].contiguous(),
                                      v[:n, :, 0].contiguous(), keys, values, counts, lengths, attn.scaling)
        else:
            for r, (i, j) in enumerate(zip(owner, offset)):
                kvs[i].keys[idx][:, owns[i] + j] = k[r, :, 0]
                kvs[i].values[idx][:, owns[i] + j] = v[r, :, 0]
            for r, (i, j) in enumerate(zip(owner, offset)):
                end = owns[i] + j + 1
                out[r:r + 1] = attend(q[r:r + 1], kvs[i].keys[idx][None, :, :end], kvs[i].values[idx][None, :, :end],
                                      attn.scaling)
        h = h + attn.o_proj(out.transpose(1, 2).reshape(rows, 1, -1))
        h = h + layer.mlp(layer.post_attention_layernorm(h))
    for kv, run in zip(kvs, runs):
        kv.own += len(run)
    last = torch.tensor(list(itertools.accumulate(map(len, runs)))) - 1
    return model.lm_head(inner.norm(h))[:, 0][last].float()


# A prefill pass's queries go to attention in blocks of this many rows (zero rows after the last): torch's CPU
# attention gave a row other bits when the last block of 32 query rows held only 1-3 of them (torch 2.13, AVX2)
QUERY_BLOCK = 32


def prefill(model, kv: RequestKV, ids: list[int], window: int) -> torch.Tensor:
    """One forward pass of ``ids`` after ``kv``'s positions (extended in place), inside one ``window`` of positions
    (the pass must not cross a multiple of it). Returns the last position's logits, float32. Attention reads each
    layer's keys and values copied into one buffer padded with zeros to the window's end (masked), and its queries
    padded to ``QUERY_BLOCK`` rows."""
    past, n = kv.length, len(ids)
    if not n or past // window != (past + n - 1) // window:
        raise ValueError(f"a prefill pass of {n} tokens after {past} must lie inside one window of {window}")
    end, rows = (past // window + 1) * window, -(-n // QUERY_BLOCK) * QUERY_BLOCK
    kv.room(n)
    inner = model.model
    h = inner.embed_tokens(torch.tensor([ids]))
    cos, sin = inner.rotary_emb(h, torch.arange(past, past + n)[None])
    mask = torch.ones(rows, end, dtype=torch.bool).tril(diagonal=past)
    mask[n:] = mask[n - 1]  # the padding rows attend like the last row (their results are dropped)
    for idx, layer in enumerate(inner.layers):
        attn = layer.self_attn
        x = layer.input_layernorm(h)
        shape = (1, n, -1, attn.head_dim)
        q = attn.q_proj(x).view(shape).transpose(1, 2)
        k = attn.k_proj(x).view(shape).transpose(1, 2)
        v = attn.v_proj(x).view(shape).transpose(1, 2)
        q, k = apply_rotary_pos_emb(q, k, cos, sin)
        kv.keys[idx][:, kv.own:kv.own + n], kv.values[idx][:, kv.own:kv.own + n] = k[0], v[0]
        padded = []
        for pieces in kv.pieces(idx, kv.own + n):
            buf = k.new_empty(1, k.shape[1], end, k.shape[-1])
            torch.cat(pieces, 1, out=buf[0, :, :past + n])
            buf[:, :, past + n:] = 0
            padded.append(buf)
        queries = q.new_zeros(1, q.shape[1], rows, q.shape[-1])
        queries[:, :, :n] = q
        out = F.scaled_dot_product_attention(queries, *padded, attn_mask=mask, scale=attn.scaling,
                                             enable_gqa=True)[:, :, :n]
        h = h + attn.o_proj(out.transpose(1, 2).reshape(1, n, -1))
        h = h + layer.mlp(layer.post_attention_layernorm(h))
    kv.own += n
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
        reference = RequestKV(model, room=len(ids))
        logits = run(reference, 0)
        whole = reference.positions(0, len(ids))
        for start in (window + 39, window + 38, window + 37, window + 7, 29):
            kv = RequestKV(model, [[(k[:, :start], v[:, :start])] for k, v in whole], room=len(ids) - start)
            if not torch.equal(run(kv, start), logits) or not all(
                    torch.equal(a, b) for pair, again in zip(whole, kv.positions(0, len(ids)))
                    for a, b in zip(pair, again)):
                return window
    return 1


class StepBatcher:
    """Joins the decoding steps of concurrent requests into ``decode_rows`` calls.

    Each request's thread calls ``step(cache, tokens)`` (a sampled token, or one followed by the tokens a grammar
    forces) and blocks until its rows are computed. One waiting thread at a time leads: it takes the model lock
    (shared with prefill), gives the other requests that are decoding ``gather_s`` seconds to submit their steps,
    fills up to ``rows`` rows with them in arrival order (a run longer than the rows left goes on in the next pass)
    and hands each finished one its logits. ``decoding`` counts the requests between their prefill and their last
    step (``enter``/``leave``), so a lone request never waits."""

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
        return (f"{self.row_steps} tokens in {self.steps} forward passes of {self.rows} rows "
                f"(mean {mean:.2f} rows used)")

    def step(self, kv: RequestKV, tokens: int | list[int]) -> torch.Tensor:
        job = {"cache": kv, "tokens": [tokens] if isinstance(tokens, int) else list(tokens), "done": 0,
               "logits": None, "error": None}
        if not job["tokens"]:
            raise ValueError("a step needs a token")
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
            try:
                self._lead()
            except BaseException:  # this request ends here: its step, if still waiting, is dropped, not computed
                with self.cond:
                    self.pending = [j for j in self.pending if j is not job]
                raise

    def _lead(self) -> None:
        """Run one pass over the steps waiting (the leader's own among them, unless ``rows`` came before it)."""
        batch, logits, error = [], None, None  # (job, how many of its tokens this pass)
        try:
            with self.lock:
                with self.cond:
                    # every decoding request has a step waiting, or the steps waiting fill the rows
                    self.cond.wait_for(lambda: len(self.pending) >= self.decoding or sum(
                        len(j["tokens"]) - j["done"] for j in self.pending) >= self.rows, self.gather_s)
                    free = self.rows
                    for job in self.pending:
                        take = min(free, len(job["tokens"]) - job["done"])
                        if take == 0:
                            break
                        batch.append((job, take))
                        free -= take
                    finished = {id(job) for job, take in batch if job["done"] + take == len(job["tokens"])}
                    self.pending = [job for job in self.pending if id(job) not in finished]
                logits = decode_rows(self.model, [job["cache"] for job, _ in batch],
                                     [job["tokens"][job["done"]:job["done"] + take] for job, take in batch],
                                     self.rows, self.attention)
        except BaseException as e:
            error = e
            raise
        finally:
            with self.cond:
                self.leading = False
                if logits is not None:
                    self.steps += 1
                    self.row_steps += sum(take for _, take in batch)
                for i, (job, take) in enumerate(batch):
                    if logits is None:
                        job["error"] = error
                        continue
                    job["done"] += take
                    if job["done"] == len(job["tokens"]):
                        job["logits"] = logits[i]
                # a job left part-done by a failed pass is not run again over a cache in an unknown state
                self.pending = [job for job in self.pending if not job["error"]]
                self.cond.notify_all()
