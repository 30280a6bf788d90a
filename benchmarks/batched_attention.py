"""One attention call over every row of a decoding step, against one call per row (issue 60, item 3).

A decoding step of ``decode_rows`` rows (``ark.llm.batching.decode_rows``) attends each row over its own key/value
cache: one ``scaled_dot_product_attention`` call per row and layer (240 a step for 8 rows of SmolLM2-135M). The
alternatives measured here: the rows' caches in one pool, padded to a common length (a multiple of ``--block``
positions) and masked, all rows of a layer in one torch call; and the project's own kernel (``ark.llm.attention``,
built for the keys' dtype), one call a layer over each row's own length, and the same kernel with the rows' first
``--shared`` positions one piece that every row reads in place (a kept system prompt). For each form: the attention
time of one whole step (every layer, each layer's cache its own memory, so nothing stays in the CPU's caches from
one layer to the next), the same with torch's threads set to one, the key/value bytes it reads and the rate that
makes; and whether a row's result in the pooled call depends on the other rows (the same row alone, beside 2 rows of
the same padded length, and in the full batch padded further), which ``decode_rows`` must not allow::

    python benchmarks/batched_attention.py [--lengths 1500 1620 ...] [--out benchmarks/results/<file>.txt]
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

import ark  # noqa: F401  (offline environment defaults)
from ark.llm.attention import compiled
from ark.llm.weights import default_gguf_path, load_gguf

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import machine  # noqa: E402


def best_ms(fn, repeats: int) -> float:
    fn()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best * 1e3


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--lengths", type=int, nargs="+", default=[1500, 1620, 1700, 1750, 1830, 1900, 1960, 2000],
                   help="the cached positions of each row (agent steps of a Table 5 run hold ~1,500-2,000)")
    p.add_argument("--block", type=int, default=512, help="the pool pads each row to a multiple of this")
    p.add_argument("--shared", type=int, default=1280, help="positions that the rows share (the kernel's second form)")
    p.add_argument("--dtype", default="float32")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--out", type=Path)
    args = p.parse_args()

    config = load_gguf(Path(default_gguf_path()), args.dtype, "~/.cache/ark/models")[0].config
    layers, heads, kv_heads = config.num_hidden_layers, config.num_attention_heads, config.num_key_value_heads
    dim = config.hidden_size // heads
    dtype, lengths, rows = getattr(torch, args.dtype), args.lengths, len(args.lengths)
    padded = -(-max(lengths) // args.block) * args.block
    scale = dim ** -0.5
    torch.manual_seed(0)
    pools = [(torch.randn(rows, kv_heads, padded, dim, dtype=dtype), torch.randn(rows, kv_heads, padded, dim, dtype=dtype))
             for _ in range(layers)]
    q = torch.randn(rows, heads, 1, dim, dtype=dtype)
    mask = torch.zeros(rows, 1, 1, padded, dtype=dtype)
    for i, n in enumerate(lengths):
        mask[i, ..., n:] = float("-inf")

    def per_row():
        for keys, values in pools:
            for i, n in enumerate(lengths):
                F.scaled_dot_product_attention(q[i:i + 1], keys[i:i + 1, :, :n], values[i:i + 1, :, :n], scale=scale,
                                               enable_gqa=True)

    def pooled():
        for keys, values in pools:
            F.scaled_dot_product_attention(q, keys, values, attn_mask=mask, scale=scale, enable_gqa=True)

    kernel = compiled(dtype)  # keys and values of the dtype, the query and result float32
    q_rows = q[:, :, 0].float().contiguous()
    new = [torch.randn(rows, kv_heads, dim, dtype=dtype) for _ in range(2)]
    buffers = [([keys[i] for i in range(rows)], [values[i] for i in range(rows)]) for keys, values in pools]
    before = [n - 1 for n in lengths]  # the kernel writes the new position itself: the step ends at each length

    def own_kernel():
        for keys, values in buffers:
            kernel(q_rows, new[0], new[1], keys, values, [1] * rows, before, scale)

    # the rows' first --shared positions one piece that every row reads in place (a system prompt kept once), the
    # rest each row's own
    shared = [([keys[0, :, :args.shared]] + [keys[i, :, args.shared:] for i in range(rows)],
               [values[0, :, :args.shared]] + [values[i, :, args.shared:] for i in range(rows)])
              for keys, values in pools]
    after = [n - 1 - args.shared for n in lengths]

    def shared_kernel():
        for keys, values in shared:
            pieces_k = [p for i in range(rows) for p in (keys[0], keys[1 + i])]
            pieces_v = [p for i in range(rows) for p in (values[0], values[1 + i])]
            kernel(q_rows, new[0], new[1], pieces_k, pieces_v, [2] * rows, after, scale)

    per_position = 2 * kv_heads * dim * dtype.itemsize * layers
    sharing = f"ark.llm.attention's kernel, the first {args.shared} positions shared"
    read = {"one call per row": sum(lengths) * per_position, "one pooled call": rows * padded * per_position,
            "ark.llm.attention's kernel": sum(lengths) * per_position,
            sharing: (args.shared + sum(n - args.shared for n in lengths)) * per_position}
    lines = [json.dumps(machine()),
             f"{config.model_type}: {layers} layers, {heads} query heads, {kv_heads} key/value heads of {dim}; "
             f"{args.dtype}; {rows} rows of {min(lengths)}-{max(lengths)} positions, the pool padded to {padded}"]
    threads = torch.get_num_threads()
    with torch.inference_mode():
        forms = [("one call per row", per_row), ("one pooled call", pooled)]
        if kernel is not None:
            forms += [("ark.llm.attention's kernel", own_kernel), (sharing, shared_kernel)]
        for name, fn in forms:
            ms = best_ms(fn, args.repeats)
            torch.set_num_threads(1)
            one = best_ms(fn, args.repeats)
            torch.set_num_threads(threads)
            lines.append(f"{name}: {ms:.1f} ms a step ({threads} threads), {one:.1f} ms (1 thread); "
                         f"{read[name] / 1e6:.0f} MB of keys and values, {read[name] / ms / 1e6:.1f} GB/s")

        keys, values = pools[0]
        first = -(-lengths[0] // args.block) * args.block

        def row0(batch: int, length: int) -> torch.Tensor:
            return F.scaled_dot_product_attention(q[:batch], keys[:batch, :, :length], values[:batch, :, :length],
                                                  attn_mask=mask[:batch, ..., :length], scale=scale, enable_gqa=True)[0]
        alone = row0(1, first)
        own = F.scaled_dot_product_attention(q[:1], keys[:1, :, :lengths[0]], values[:1, :, :lengths[0]], scale=scale,
                                             enable_gqa=True)[0]
        lines.append(f"row 0 in the pool: alone at {first} positions equals beside 2 rows at {first}: "
                     f"{torch.equal(alone, row0(3, first))}; equals in all {rows} rows at {padded}: "
                     f"{torch.equal(alone, row0(rows, padded))}; max |difference| from its own-length call "
                     f"{(alone - own).abs().max().item():.2e}")
    text = "\n".join(lines)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
