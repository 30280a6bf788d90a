"""What decoding several agents' requests in one batch would buy the embedded model (SmolLM2-135M) on this CPU.

A measurement for Issue 23, not a product path: the product decodes one request at a time (``LocalChatModel``). The
same real agent requests as ``embedded_throughput.py`` (the conversation so far of each step of a stored run) are
decoded greedily by transformers' ``generate`` in groups of B, left-padded, for B = 1, 2, 4, 8; each request gets
exactly ``--new-tokens`` new tokens (a tool call is ~50). The prefill (up to the first logits) is timed apart::

    python benchmarks/embedded_batch_decode.py [--requests 8] [--new-tokens 48] [--dtype auto] [--threads 2]

Prints per B: prefill seconds, decode tokens/s over all rows, the speed-up against B = 1, and the share of the
requests whose greedy tokens equal those of B = 1 (padding changes the arithmetic, so a batch can change a reply).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch
from transformers import LogitsProcessorList

import ark  # noqa: F401  (offline environment defaults)
from ark.config import compose
from ark.llm.local import LocalChatModel
from ark.llm.weights import cpu_has_bf16, resolve_dtype

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import machine  # noqa: E402
from embedded_throughput import OVERRIDES, RUN, workload  # noqa: E402


def generate(model, tokenizer, prompts: list[list[int]], new_tokens: int) -> tuple[list[list[int]], float, float]:
    """Greedy tokens of each prompt, decoded together (left padding); the prefill's seconds (up to the first token's
    logits) and the decoding's (the rest)."""
    width = max(map(len, prompts))
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    ids = torch.tensor([[pad] * (width - len(p)) + p for p in prompts])
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
    first = []

    def stamp(input_ids, scores):  # a logits processor: called once per new token, first after the prefill
        if not first:
            first.append(time.perf_counter())
        return scores

    start = time.perf_counter()
    out = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=new_tokens, min_new_tokens=new_tokens,
                         do_sample=False, pad_token_id=pad, logits_processor=LogitsProcessorList([stamp]))
    end = time.perf_counter()
    return out[:, width:].tolist(), first[0] - start, end - first[0]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--records", type=Path, default=next(RUN.glob("*/records.jsonl"), None))
    ap.add_argument("--requests", type=int, default=8)
    ap.add_argument("--new-tokens", type=int, default=48)
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 2, 4, 8])
    ap.add_argument("--dtype", default="auto")
    ap.add_argument("--threads", type=int, default=None)
    args = ap.parse_args()
    if args.records is None:
        raise SystemExit(f"no stored run under {RUN}: run `dvc repro evaluate@base-synthetic` or give --records")
    if args.threads:
        torch.set_num_threads(args.threads)
    dtype = resolve_dtype(args.dtype)
    local = LocalChatModel(dtype=dtype, cache_dir=Path(compose(OVERRIDES).paths.models), prefix_cache=False)
    requests = workload(args.records, args.requests, 1)[:args.requests]
    prompts = [local.encode(local.render(r)) for r in requests]
    print(json.dumps({**machine(), "native_bf16": cpu_has_bf16(), "dtype": dtype}))
    print(f"{len(prompts)} requests, prompts of {min(map(len, prompts))}-{max(map(len, prompts))} tokens, "
          f"{args.new_tokens} new tokens each")
    with torch.inference_mode():
        generate(local.model, local.tokenizer, prompts[:1], 2)  # warm-up
        reference, base_rate = None, None
        for b in args.batches:
            groups = [prompts[i:i + b] for i in range(0, len(prompts), b)]
            tokens, prefill, decode = [], 0.0, 0.0
            for g in groups:
                out, p, d = generate(local.model, local.tokenizer, g, args.new_tokens)
                tokens, prefill, decode = tokens + out, prefill + p, decode + d
            rate = len(prompts) * (args.new_tokens - 1) / decode
            reference = reference or tokens
            base_rate = base_rate or rate
            same = sum(a == r for a, r in zip(tokens, reference)) / len(tokens)
            print(f"B={b}: prefill {prefill:.1f} s, decode {decode:.1f} s: decode {rate:.1f} tokens/s "
                  f"({rate / base_rate:.2f}x B=1), same tokens as B=1: {same:.2f}", flush=True)


if __name__ == "__main__":
    main()
