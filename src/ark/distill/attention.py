"""Attention for packed training rows: causal attention within each sample of a row, never across samples.

A packed row holds several trajectories end to end (``ark.distill.sft.pack``). trl's padding-free collator gives
the sample boundaries as ``cu_seq_lens_q``. Two implementations, registered with transformers by name
(``attn_implementation=...``):

- ``packed_sdpa``: torch's SDPA with ``is_causal`` on each sample in turn (its flash / cuDNN kernels on a GPU), so no
  row-sized mask is built and no cross-sample score is computed; a Python loop of one call per sample.
- ``packed_flex``: one FlexAttention call per row with a document-causal block mask, built once per row and shared by
  every layer; blocks across samples are skipped, not computed and masked. Compiled on a GPU; on a CPU torch runs it
  eagerly and has no backward for it (torch 2.13), so it is a GPU path (its CPU test checks the forward only).

A third, ``prefix_sdpa``, serves ``distill.share_prefix`` (a suffix attending to a shared prefix's keys and values).

transformers' own SDPA path would build a dense row x row mask instead, which rules out the fast kernels (measured in
``benchmarks/distill_throughput.py``). Without boundaries (generation, an unpacked row) both are plain causal SDPA:
use them for padding-free rows only.
"""
from __future__ import annotations

import functools

import torch

PACKED_SDPA = "packed_sdpa"
PACKED_FLEX = "packed_flex"
PREFIX_SDPA = "prefix_sdpa"
MIN_FLEX_LENGTH = 128  # FlexAttention's block size
PREFIX_BLOCK = 256  # query block of prefix_sdpa


def _plain_or_bounds(query, cu_seq_lens_q):
    """The sample boundaries of a packed row, or None where the plain SDPA path applies."""
    if cu_seq_lens_q is None or query.shape[0] != 1:
        return None
    return tuple(cu_seq_lens_q.tolist() if isinstance(cu_seq_lens_q, torch.Tensor) else cu_seq_lens_q)


def packed_sdpa_forward(module, query, key, value, attention_mask, dropout: float = 0.0, scaling=None,
                        cu_seq_lens_q=None, **kwargs):
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    kwargs.pop("is_causal", None)
    bounds = _plain_or_bounds(query, cu_seq_lens_q)
    if bounds is None:
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout, scaling, **kwargs)
    parts = [sdpa_attention_forward(module, query[:, :, s:e], key[:, :, s:e], value[:, :, s:e], None, dropout,
                                    scaling, is_causal=True, **kwargs)[0]
             for s, e in zip(bounds[:-1], bounds[1:]) if e > s]
    return torch.cat(parts, dim=1), None  # (batch, tokens, heads, head_dim), as sdpa_attention_forward returns


@functools.lru_cache(maxsize=1)  # the layers of one forward (and its recomputation) share the row's mask
def document_causal_mask(bounds: tuple[int, ...], length: int, device: str):
    """The block mask of a row of ``length`` tokens whose samples start and end at ``bounds``: a token attends to the
    tokens before it in its own sample; the tokens after ``bounds[-1]`` (padding) attend to nothing."""
    from torch.nn.attention.flex_attention import create_block_mask

    sizes = torch.tensor([e - s for s, e in zip(bounds[:-1], bounds[1:])] + [length - bounds[-1]], device=device)
    sample = torch.repeat_interleave(torch.arange(len(sizes), device=device), sizes)
    padding = len(sizes) - 1

    def causal_within_sample(b, h, q, kv):
        return (sample[q] == sample[kv]) & (q >= kv) & (sample[q] != padding)

    # compiled on a GPU: the eager path would materialize row x row intermediates (GiBs at 16k tokens)
    return create_block_mask(causal_within_sample, None, None, length, length, device=device,
                             _compile=device.startswith("cuda"))


@functools.cache
def _flex_attention(device_type: str):
    from torch.nn.attention.flex_attention import flex_attention

    return torch.compile(flex_attention, dynamic=False) if device_type == "cuda" else flex_attention


def packed_flex_forward(module, query, key, value, attention_mask, dropout: float = 0.0, scaling=None,
                        cu_seq_lens_q=None, **kwargs):
    bounds = _plain_or_bounds(query, cu_seq_lens_q)
    if bounds is None:
        return packed_sdpa_forward(module, query, key, value, attention_mask, dropout, scaling, **kwargs)
    if dropout:
        raise ValueError(f"{PACKED_FLEX} has no attention dropout (got {dropout}); use {PACKED_SDPA}")
    tokens = query.shape[2]
    # rows padded to a power of two: a handful of compiled shapes, not one per row length (torch.compile stops
    # recompiling after 8 shapes and falls back to the slow eager path)
    length = max(MIN_FLEX_LENGTH, 1 << (tokens - 1).bit_length())

    def pad(t):
        return torch.nn.functional.pad(t, (0, 0, 0, length - tokens))

    out = _flex_attention(query.device.type)(
        pad(query), pad(key), pad(value), block_mask=document_causal_mask(bounds, length, str(query.device)),
        scale=scaling, enable_gqa=key.shape[1] != query.shape[1])
    return out[:, :, :tokens].transpose(1, 2).contiguous(), None


def prefix_sdpa_forward(module, query, key, value, attention_mask, dropout: float = 0.0, scaling=None, **kwargs):
    """Causal attention of a suffix on the cached keys and values of a prefix (``distill.share_prefix``): the
    suffix's queries in blocks of ``PREFIX_BLOCK``, each on the keys up to its own last one with a mask for that block
    only, so the part of a materialized mask that is computed and thrown away is a block's triangle, not the
    suffix's (one unpadded sequence; its prefix, keys equal to queries, runs as plain causal SDPA)."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    kwargs.pop("is_causal", None)
    q_len, k_len = query.shape[2], key.shape[2]
    if attention_mask is not None or query.shape[0] != 1:
        raise ValueError(f"{PREFIX_SDPA} takes one unpadded sequence")
    if q_len == k_len:
        return sdpa_attention_forward(module, query, key, value, None, dropout, scaling, is_causal=True, **kwargs)
    offset, parts = k_len - q_len, []
    for s in range(0, q_len, PREFIX_BLOCK):
        e = min(s + PREFIX_BLOCK, q_len)
        # query offset + s + i attends the keys up to offset + s + i
        mask = torch.ones(e - s, offset + e, dtype=torch.bool, device=query.device).tril(offset + s)
        parts.append(sdpa_attention_forward(module, query[:, :, s:e], key[:, :, :offset + e], value[:, :, :offset + e],
                                            mask[None, None], dropout, scaling, is_causal=False, **kwargs)[0])
    return torch.cat(parts, dim=1), None


PACKED = {PACKED_SDPA: packed_sdpa_forward, PACKED_FLEX: packed_flex_forward, PREFIX_SDPA: prefix_sdpa_forward}


def register(name: str = PACKED_SDPA) -> str:
    """Make ``attn_implementation=name`` (a key of ``PACKED``) known to transformers; returns the name."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, flash_attention_mask

    AttentionInterface.register(name, PACKED[name])
    AttentionMaskInterface.register(name, flash_attention_mask)  # no row-sized mask: boundaries suffice
    return name
