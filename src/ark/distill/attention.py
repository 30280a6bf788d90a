"""Attention for packed training rows: causal SDPA over each sample of a row, never across samples.

A packed row holds several trajectories end to end (``ark.distill.sft.pack``). trl's padding-free collator gives
the sample boundaries as ``cu_seq_lens_q``; this attention runs torch's SDPA with ``is_causal`` on each sample
(its flash / cuDNN kernels on a GPU), so no row-sized mask is built and no cross-sample score is computed. transformers'
own SDPA path would build a dense row x row mask instead, which rules out the fast kernels (measured in
``benchmarks/distill_throughput.py``). Registered under ``PACKED_SDPA``: ``attn_implementation="packed_sdpa"``.
Without boundaries (generation, an unpacked row) it is plain causal SDPA: use it for padding-free rows only.
"""
from __future__ import annotations

import torch

PACKED_SDPA = "packed_sdpa"


def packed_sdpa_forward(module, query, key, value, attention_mask, dropout: float = 0.0, scaling=None,
                        cu_seq_lens_q=None, **kwargs):
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    kwargs.pop("is_causal", None)
    if cu_seq_lens_q is None or query.shape[0] != 1:
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout, scaling, **kwargs)
    bounds = cu_seq_lens_q.tolist() if isinstance(cu_seq_lens_q, torch.Tensor) else list(cu_seq_lens_q)
    parts = [sdpa_attention_forward(module, query[:, :, s:e], key[:, :, s:e], value[:, :, s:e], None, dropout,
                                    scaling, is_causal=True, **kwargs)[0]
             for s, e in zip(bounds[:-1], bounds[1:]) if e > s]
    return torch.cat(parts, dim=1), None  # (batch, tokens, heads, head_dim), as sdpa_attention_forward returns


def register() -> str:
    """Make ``attn_implementation="packed_sdpa"`` known to transformers; returns the name."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, flash_attention_mask

    AttentionInterface.register(PACKED_SDPA, packed_sdpa_forward)
    AttentionMaskInterface.register(PACKED_SDPA, flash_attention_mask)  # no row-sized mask: boundaries suffice
    return PACKED_SDPA
