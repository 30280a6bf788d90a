"""Batched decoding steps (``backbone.local.decode_rows``) on the product's path, against one request at a time.

Replays the requests of a published embedded run (``embedded_throughput.workload``: every agent step's request as
``LLMClient`` sends it) through ``LocalChatModel.generate`` from ``--concurrency`` threads, once per setting
``ROWS:CONCURRENCY`` (rows of a decoding step : requests in flight; ``1:1`` is one request at a time), each on a
freshly loaded model, and prints per setting: wall seconds, seconds in prefill passes (and other passes of
several tokens: a grammar's forced tokens), seconds in batched steps, the steps' mean rows used, and whether every reply
equals that of the first setting::

    python benchmarks/embedded_batched_steps.py --records results/runs/evaluate/student-synthetic/*/records.jsonl \\
        --adapter data/students/embedded --queries 8 --settings 1:1 8:8
    python benchmarks/embedded_batched_steps.py --kernel [--dtype float32] [--linear torch] [--profile] \\
        [--attention compiled]

``--kernel``: one decoding step alone, no requests: random prompts of 700-3,000 tokens prefilled, then 10 steps of
1, 2, 4 and 8 rows by ``decode_rows`` against the model's own forward pass one request at a time (ms a token), and
whether a row alone equals the same row beside others (and the model's own forward pass).
"""
from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from pathlib import Path

import torch
from transformers import DynamicCache

import ark  # noqa: F401  (offline environment defaults)
import ark.llm.batching as batching
from ark.llm.attention import compiled
from ark.llm.local import LocalChatModel
from ark.llm.weights import default_gguf_path, load_gguf, pack_linears

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import machine  # noqa: E402
from embedded_throughput import workload  # noqa: E402


def run(requests: list[dict], rows: int, concurrency: int, adapter: str | None, constrained: bool,
        attention: str = "auto") -> dict:
    model = LocalChatModel(adapter=adapter, constrained=constrained, cache_dir="~/.cache/ark/models",
                           decode_rows=rows, attention=attention)
    spent = {"whole": 0.0, "batched": 0.0}
    prefill, decode_rows = batching.prefill, batching.decode_rows

    def timed(fn, key):
        def wrapper(*args, **kwargs):
            t = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                spent[key] += time.perf_counter() - t
        return wrapper

    batching.prefill, batching.decode_rows = timed(prefill, "whole"), timed(decode_rows, "batched")
    replies, todo, lock = [None] * len(requests), iter(range(len(requests))), threading.Lock()

    def worker():
        while True:
            with lock:
                i = next(todo, None)
            if i is None:
                return
            replies[i] = model.generate(requests[i])["choices"][0]["message"]

    start = time.perf_counter()
    threads = [threading.Thread(target=worker) for _ in range(concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - start
    batching.prefill, batching.decode_rows = prefill, decode_rows
    b = model.batcher
    return {"rows": rows, "concurrency": concurrency, "attention": model.identity.get("attention", "-"),
            "wall_s": round(wall, 1),
            "whole_model_passes_s": round(spent["whole"], 1), "batched_steps_s": round(spent["batched"], 1),
            "mean_rows_used": round(b.row_steps / b.steps, 2) if b and b.steps else 1.0,
            "replies": replies}


def kernel(dtype: str, linear: str, profile: bool, attention: str) -> None:
    model, _ = load_gguf(default_gguf_path(), dtype=dtype, cache_dir="~/.cache/ark/models")
    model.eval()
    if linear == "onednn":  # the product's default (backbone.local.linear)
        linear = pack_linears(model, 8)
    print(f"linear products: {linear}")
    attend = compiled(model.dtype) if attention == "compiled" else None
    if attention == "compiled" and attend is None:
        raise SystemExit("the attention kernel could not be built (the warning above says why)")
    print(f"attention of a batched step: {attention}")
    torch.manual_seed(0)

    def copy(kv):
        return batching.RequestKV(model, [[pair] for pair in kv.positions(0, kv.length)], room=16, share=False)

    def transformers_cache(kv):
        return DynamicCache([(k[None], v[None]) for k, v in kv.positions(0, kv.length)])

    def one(cache, token):
        out = model(input_ids=torch.tensor([[token]]), past_key_values=cache, use_cache=True, logits_to_keep=1)
        return out.logits[0, -1].float()

    def prefilled(n):
        ids, kv = torch.randint(100, 40000, (n,)).tolist(), batching.RequestKV(model, room=n)
        for a, b in batching.passes(0, n, 256):
            batching.prefill(model, kv, ids[a:b], 256)
        return kv

    with torch.inference_mode():
        prompts = [prefilled(n) for n in (1500, 2100, 900, 2500, 1200, 1800, 3000, 700)]
        caches = [transformers_cache(c) for c in prompts[:4]]
        t = time.perf_counter()
        for _ in range(10):
            for c in caches:
                one(c, 123)
        alone = (time.perf_counter() - t) / 40
        print(f"{dtype}, the model's forward pass, one request at a time: {alone * 1000:.1f} ms a token")
        for rows in (1, 2, 4, 8):
            caches = [copy(c) for c in prompts[:rows]]
            t = time.perf_counter()
            for _ in range(10):
                batching.decode_rows(model, caches, [123] * rows, rows, attend)
            step = (time.perf_counter() - t) / 10
            print(f"rows {rows}: {step * 1000:.1f} ms a step, {step / rows * 1000:.1f} ms a token, "
                  f"x{alone * rows / step:.2f} against one at a time")
        if profile:  # where a step of 8 rows goes (torch.profiler, 5 steps)
            from torch.profiler import ProfilerActivity
            from torch.profiler import profile as profiler

            caches = [copy(c) for c in prompts]
            with profiler(activities=[ProfilerActivity.CPU]) as prof:
                for _ in range(5):
                    batching.decode_rows(model, caches, [123] * 8, 8, attend)
            print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=12))
        single = batching.decode_rows(model, [copy(prompts[0])], [555], 4, attend)[0]
        shared = batching.decode_rows(model, [copy(c) for c in prompts[:4]], [555, 7, 8, 9], 4, attend)[0]
        own = one(transformers_cache(prompts[0]), 555)
        print(f"a row alone equals the row beside 3 others: {torch.equal(single, shared)}; against the model's own "
              f"pass: max |difference| {(own - single).abs().max().item():.3g}, same argmax "
              f"{int(own.argmax()) == int(single.argmax())}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=Path)
    ap.add_argument("--kernel", action="store_true", help="time decoding steps alone (no requests)")
    ap.add_argument("--dtype", default="bfloat16", help="--kernel: the model's dtype")
    ap.add_argument("--linear", default="onednn", choices=["onednn", "torch"], help="--kernel: the linear products")
    ap.add_argument("--profile", action="store_true", help="--kernel: where a step of 8 rows goes")
    ap.add_argument("--attention", default="torch", choices=["torch", "compiled"],
                    help="a batched step's attention (ark.llm.attention's kernel, or a torch call per row)")
    ap.add_argument("--adapter", default=None)
    ap.add_argument("--free", action="store_true", help="decode freely (the students, base_free)")
    ap.add_argument("--queries", type=int, default=8)
    ap.add_argument("--settings", nargs="+", default=["1:1", "8:8"])
    args = ap.parse_args()
    print(json.dumps(machine()))
    if args.kernel:
        return kernel(args.dtype, args.linear, args.profile, args.attention)
    if args.records is None:
        ap.error("--records is required (or --kernel)")
    requests = workload(args.records, args.queries, 1)
    print(f"{len(requests)} requests of the first {args.queries} queries of {args.records}")
    first = None
    for setting in args.settings:
        rows, concurrency = map(int, setting.split(":"))
        r = run(requests, rows, concurrency, args.adapter, constrained=not (args.free or args.adapter),
                attention=args.attention)
        first = first or r["replies"]
        same = sum(a == b for a, b in zip(r.pop("replies"), first))
        print(json.dumps(r | {"same_replies_as_first": f"{same}/{len(requests)}"}), flush=True)


if __name__ == "__main__":
    main()
