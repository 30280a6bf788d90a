"""The embedded model's prefill rate by chunk size: a prompt's keys and values are computed in chunks at fixed
positions (``ark.llm.local.PREFILL_CHUNK``) so that they do not depend on what the prefix cache held, and a kept
prompt is reused up to a chunk boundary only. A smaller chunk would re-prefill fewer tokens past the last shared
boundary (half a chunk on average), at the rate this measures::

    python benchmarks/prefill_chunks.py [--dtype float32] [--tokens 2048] [--chunks 256 128 64 32]

Prints tokens a second for one prompt of ``--tokens`` random tokens prefilled in each chunk size (best of two), with
the linear layers as the product runs them (oneDNN, weights reordered once).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

import ark  # noqa: F401  (offline environment defaults)
from ark.llm.weights import default_gguf_path, load_gguf, pack_linears

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import machine  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dtype", default="float32")
    p.add_argument("--tokens", type=int, default=2048)
    p.add_argument("--chunks", type=int, nargs="+", default=[256, 128, 64, 32])
    args = p.parse_args()
    model, _ = load_gguf(Path(default_gguf_path()), args.dtype, "~/.cache/ark/models")
    model.eval()
    print(json.dumps(machine()))
    print(f"{args.dtype}, linear products: {pack_linears(model, 8)}")
    ids = torch.randint(100, 40000, (1, args.tokens), generator=torch.Generator().manual_seed(0))
    with torch.inference_mode():
        for chunk in args.chunks:
            best = float("inf")
            for _ in range(2):
                start, cache = time.perf_counter(), None
                for s in range(0, args.tokens, chunk):
                    cache = model(input_ids=ids[:, s:s + chunk], past_key_values=cache, use_cache=True,
                                  logits_to_keep=1).past_key_values
                best = min(best, time.perf_counter() - start)
            print(f"chunk {chunk}: {args.tokens / best:.0f} tokens/s ({best:.2f} s for {args.tokens})", flush=True)


if __name__ == "__main__":
    main()
