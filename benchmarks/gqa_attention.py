"""One query token's attention over a long key/value cache, SmolLM2-135M's shape (9 query heads sharing 3 key/value
heads, head size 64): the three ways to run grouped-query attention through ``scaled_dot_product_attention``.

- ``enable_gqa``: what ``ark.llm.batching`` does for each row of a batched decoding step;
- ``grouped``: the three query heads of a key/value head passed as three query positions (for one token no causal
  mask is needed, so it is the same computation);
- ``repeated``: keys and values copied to the 9 heads first (``repeat_kv``, what transformers does with a mask).

    python benchmarks/gqa_attention.py [--lengths 1000 3000 6000] [--dtypes float32 bfloat16]

Prints microseconds a call for each, and whether ``grouped`` gives the same bits as ``enable_gqa``.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))  # benchmarks/common.py, however this file is loaded
from common import machine  # noqa: E402

HEADS, KV_HEADS, DIM = 9, 3, 64


def variants(q, k, v):
    group = HEADS // KV_HEADS
    return {
        "enable_gqa": lambda: F.scaled_dot_product_attention(q, k, v, scale=DIM ** -0.5, enable_gqa=True),
        "grouped": lambda: F.scaled_dot_product_attention(q.view(1, KV_HEADS, group, DIM), k, v,
                                                          scale=DIM ** -0.5).view(1, HEADS, 1, DIM),
        "repeated": lambda: F.scaled_dot_product_attention(q, k.repeat_interleave(group, 1),
                                                           v.repeat_interleave(group, 1), scale=DIM ** -0.5),
    }


def microseconds(fn, calls: int) -> float:
    for _ in range(3):
        fn()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - start) / calls * 1e6


def main(argv=None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lengths", type=int, nargs="+", default=[1000, 3000, 6000], help="cached positions")
    parser.add_argument("--dtypes", nargs="+", default=["float32", "bfloat16"])
    parser.add_argument("--calls", type=int, default=200)
    args = parser.parse_args(argv)
    torch.manual_seed(0)
    rows = []
    print("| dtype | cached positions | enable_gqa µs | grouped µs | repeated µs | grouped: same bits |")
    print("|---|---|---|---|---|---|")
    for dtype in args.dtypes:
        for length in args.lengths:
            q = torch.randn(1, HEADS, 1, DIM).to(getattr(torch, dtype))
            k, v = (torch.randn(1, KV_HEADS, length, DIM).to(getattr(torch, dtype)) for _ in range(2))
            fns = variants(q, k, v)
            row = {"dtype": dtype, "length": length, **{n: round(microseconds(f, args.calls), 1) for n, f in fns.items()},
                   "grouped_same_bits": torch.equal(fns["grouped"](), fns["enable_gqa"]())}
            rows.append(row)
            print(f"| {dtype} | {length} | {row['enable_gqa']} | {row['grouped']} | {row['repeated']} | "
                  f"{row['grouped_same_bits']} |")
    print(json.dumps(machine()))
    return rows


if __name__ == "__main__":
    main()
