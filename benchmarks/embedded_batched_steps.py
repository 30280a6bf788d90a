"""Batched decoding steps (``backbone.local.decode_rows``) on the product's path, against one request at a time.

Replays the requests of a published embedded run (``embedded_throughput.workload``: every agent step's request as
``LLMClient`` sends it) through ``LocalChatModel.generate`` from ``--concurrency`` threads, once per setting
``ROWS:CONCURRENCY`` (rows of a decoding step : requests in flight; ``1:1`` is one request at a time), each on a
freshly loaded model, and prints per setting: wall seconds, seconds in prefill forward passes (and other whole-model
passes: a grammar's forced tokens), seconds in batched steps, the steps' mean rows used, and whether every reply
equals that of the first setting::

    python benchmarks/embedded_batched_steps.py --records results/runs/evaluate/student-synthetic/*/records.jsonl \\
        --adapter data/students/embedded --queries 8 --settings 1:1 8:8
"""
from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from pathlib import Path

import ark  # noqa: F401  (offline environment defaults)
import ark.llm.batching as batching
from ark.llm.local import LocalChatModel

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import machine  # noqa: E402
from embedded_throughput import workload  # noqa: E402


def run(requests: list[dict], rows: int, concurrency: int, adapter: str | None, constrained: bool) -> dict:
    model = LocalChatModel(adapter=adapter, constrained=constrained, cache_dir="~/.cache/ark/models",
                           decode_rows=rows)
    spent = {"whole": 0.0, "batched": 0.0}
    forward, decode_rows = model.model.forward, batching.decode_rows

    def timed(fn, key):
        def wrapper(*args, **kwargs):
            t = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                spent[key] += time.perf_counter() - t
        return wrapper

    model.model.forward, batching.decode_rows = timed(forward, "whole"), timed(decode_rows, "batched")
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
    batching.decode_rows = decode_rows
    b = model.batcher
    return {"rows": rows, "concurrency": concurrency, "wall_s": round(wall, 1),
            "whole_model_passes_s": round(spent["whole"], 1), "batched_steps_s": round(spent["batched"], 1),
            "mean_rows_used": round(b.row_steps / b.steps, 2) if b and b.steps else 1.0,
            "replies": replies}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=Path, required=True)
    ap.add_argument("--adapter", default=None)
    ap.add_argument("--free", action="store_true", help="decode freely (the students, base_free)")
    ap.add_argument("--queries", type=int, default=8)
    ap.add_argument("--settings", nargs="+", default=["1:1", "8:8"])
    args = ap.parse_args()
    requests = workload(args.records, args.queries, 1)
    print(json.dumps(machine()))
    print(f"{len(requests)} requests of the first {args.queries} queries of {args.records}")
    first = None
    for setting in args.settings:
        rows, concurrency = map(int, setting.split(":"))
        r = run(requests, rows, concurrency, args.adapter, constrained=not (args.free or args.adapter))
        first = first or r["replies"]
        same = sum(a == b for a, b in zip(r.pop("replies"), first))
        print(json.dumps(r | {"same_replies_as_first": f"{same}/{len(requests)}"}), flush=True)


if __name__ == "__main__":
    main()
