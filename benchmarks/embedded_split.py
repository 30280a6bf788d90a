"""Where an embedded-model row's time goes: prefill, batched decoding steps, forced-token passes, grammar, sampling.

Runs one of Table 5's embedded rows on its first ``--limit`` queries through the product's evaluate stage
(``ark.stages.evaluate.run``, the row's own experiment file, the response cache off so that every reply is computed,
the run written to a temporary directory), with timers wrapped around the model's pieces from outside::

    python benchmarks/embedded_split.py --row base --queries synthetic [--limit 8] [--out split.json]

The split, in seconds of wall time. The model runs one forward pass at a time, so its parts add up; the grammar and
sampling of one request can run beside another's pass, so ``rest`` is at least what it says:

- ``prefill``: a request's first forward passes, over the prompt tokens the prefix cache did not hold (and the
  grammar's forced tokens that open a call);
- ``forced``: later passes of several tokens at once (the grammar's forced tokens, and the sampled token before them),
  when decoding steps are not batched (``decode_rows`` 1; batched, they are rows of the shared steps);
- ``single``: steps of one token when decoding steps are not batched (``decode_rows`` 1);
- ``batched``: the shared decoding steps of ``ark.llm.batching`` (with the rows they used: a token a row, the
  forced tokens of a call included);
- ``grammar``: the allowed-token mask and the shortest closing of a call (``ark.llm.decoding``); ``sampling``;
- ``prefix_cache``: finding and copying a cached prefix, and keeping a request's cache;
- ``rest``: the wall time outside all of these (start-up, the agent, the tools, HTTP, and waiting).

``cores_busy`` of a part: the process's CPU seconds during its calls over their wall seconds. The model's parts run
one at a time, so theirs is the model's own use of the cores; the grammar and sampling run beside them, so theirs
also counts the model's concurrent work.

Also the run's metrics, the prompt tokens the prefix cache held (and the requests that found nothing there), the
process's CPU seconds over the run (cores busy on average) and the machine. A Table 5 row's inputs must be built
(``dvc repro`` up to its graph and index).
"""
from __future__ import annotations

import argparse
import json
import resource
import sys
import tempfile
import threading
import time
from collections import defaultdict
from contextlib import contextmanager
from pathlib import Path

import ark  # noqa: F401  (offline environment defaults)
from ark.llm import batching, decoding
from ark.llm.local import LocalChatModel, PrefixCache
sys.path.insert(0, str(Path(__file__).resolve().parent))  # benchmarks/common.py, however this file is loaded
from common import machine  # noqa: E402

PARTS = ("prefill", "forced", "single", "batched", "grammar", "sampling", "prefix_cache")


class Split:
    """Seconds, calls and tokens (rows, for batched steps) per part; thread-safe."""

    def __init__(self):
        self.lock = threading.Lock()
        self.seconds, self.cpu, self.calls, self.tokens = defaultdict(float), defaultdict(float), defaultdict(int), \
            defaultdict(int)
        self.phase = threading.local()  # which step of its request a thread is in
        self.prompts: list[tuple[int, int]] = []  # (prompt tokens, tokens found in the prefix cache) a request

    def add(self, part: str, seconds: float, cpu: float, tokens: int = 0) -> None:
        with self.lock:
            self.seconds[part] += seconds
            self.cpu[part] += cpu
            self.calls[part] += 1
            self.tokens[part] += tokens

    def timed(self, part, fn, tokens=lambda *a, **k: 0):
        def wrapper(*args, **kwargs):
            start, cpu = time.perf_counter(), cpu_seconds()
            try:
                return fn(*args, **kwargs)
            finally:
                name = part() if callable(part) else part
                if name is not None:  # None: outside a request (the model's set-up checks)
                    self.add(name, time.perf_counter() - start, cpu_seconds() - cpu, tokens(*args, **kwargs))
        return wrapper

    def reuse(self) -> dict:
        return {"requests": len(self.prompts), "prompt_tokens": sum(p for p, _ in self.prompts),
                "found_in_prefix_cache": sum(n for _, n in self.prompts),
                "requests_finding_nothing": sum(n == 0 for _, n in self.prompts)}

    def table(self, wall: float) -> list[dict]:
        rows = [{"part": p, "seconds": round(self.seconds[p], 2), "share_of_wall": round(self.seconds[p] / wall, 3),
                 "cores_busy": round(self.cpu[p] / self.seconds[p], 2) if self.seconds[p] else None,
                 "calls": self.calls[p], "tokens": self.tokens[p],
                 "tokens_per_s": round(self.tokens[p] / self.seconds[p], 1) if self.tokens[p] else None}
                for p in PARTS if self.calls[p]]
        rest = wall - sum(self.seconds[p] for p in PARTS)
        return rows + [{"part": "rest", "seconds": round(rest, 2), "share_of_wall": round(rest / wall, 3)}]


@contextmanager
def attached(split: Split):
    """Time the pieces of every ``LocalChatModel`` set up inside the block (their code is unchanged)."""
    setup, stepper = LocalChatModel._setup, LocalChatModel._stepper
    originals = {(batching, "decode_rows"): batching.decode_rows, (batching, "prefill"): batching.prefill,
                 (decoding, "allowed_logits"): decoding.allowed_logits,
                 (decoding.ToolCallGrammar, "closing"): decoding.ToolCallGrammar.closing,
                 (decoding.Sampling, "pick"): decoding.Sampling.pick,
                 (PrefixCache, "longest_prefix"): PrefixCache.longest_prefix, (PrefixCache, "put"): PrefixCache.put}

    wrapped = []  # (model, its own forward attribute before, if any)

    def timed_setup(self, *args, **kwargs):
        setup(self, *args, **kwargs)
        tokens = lambda *a, **k: k["input_ids"].shape[1]  # noqa: E731
        wrapped.append((self.model, self.model.__dict__.get("forward")))
        self.model.forward = split.timed(lambda: split.phase.name, self.model.forward, tokens)

    def timed_stepper(self, *args):
        step, keep, release = stepper(self, *args)
        first = [True]

        def phased_step(ids):
            split.phase.name = "prefill" if first[0] else "forced" if len(ids) > 1 else "single"
            first[0] = False
            return step(ids)
        return phased_step, keep, release

    def looked_up(cache, ids, leave=1):
        found = originals[PrefixCache, "longest_prefix"](cache, ids, leave)
        if leave:  # a request's look-up (leave=0: the same request reading back what it just kept)
            with split.lock:
                split.prompts.append((len(ids), found[1]))
        return found

    LocalChatModel._setup, LocalChatModel._stepper = timed_setup, timed_stepper
    rows_of = lambda model, kvs, tokens, *a: sum(1 if isinstance(t, int) else len(t) for t in tokens)  # noqa: E731
    single, batched = (split.timed(part, batching.decode_rows, rows_of) for part in ("single", "batched"))
    # a step of one row: a request's own (no batcher: ``decode_rows`` 1); the batcher's steps have two rows or more
    batching.decode_rows = lambda model, kvs, tokens, rows, *a: (single if rows == 1 else batched)(model, kvs, tokens,
                                                                                               rows, *a)
    batching.prefill = split.timed(lambda: getattr(split.phase, "name", None), batching.prefill,
                                   lambda model, cache, ids, *a: len(ids))
    decoding.allowed_logits = split.timed("grammar", decoding.allowed_logits)
    decoding.ToolCallGrammar.closing = split.timed("grammar", decoding.ToolCallGrammar.closing)
    decoding.Sampling.pick = split.timed("sampling", decoding.Sampling.pick)
    PrefixCache.longest_prefix = split.timed("prefix_cache", looked_up)
    PrefixCache.put = split.timed("prefix_cache", PrefixCache.put)
    try:
        yield split
    finally:
        LocalChatModel._setup, LocalChatModel._stepper = setup, stepper
        for (owner, name), fn in originals.items():
            setattr(owner, name, fn)
        for model, forward in wrapped:
            if forward is None:
                del model.forward
            else:
                model.forward = forward


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--row", default="base", help="a Table 5 row: conf/experiment/table5/<row>.yaml")
    parser.add_argument("--queries", default="synthetic", help="synthetic, phenopackets or phenopackets_gene")
    parser.add_argument("--dataset", default=None, help="default: biokg for synthetic, biokg_lpo for the case reports")
    parser.add_argument("--limit", type=int, default=8, help="the first N test queries")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="another Hydra override")
    parser.add_argument("--out", type=Path, default=None, help="also write the figures here (JSON)")
    args = parser.parse_args(argv)

    from ark.config import compose
    from ark.stages import evaluate

    dataset = args.dataset or ("biokg" if args.queries == "synthetic" else "biokg_lpo")
    with tempfile.TemporaryDirectory(prefix="ark-split-") as tmp:
        overrides = [f"+experiment=table5/{args.row}", f"dataset={dataset}", f"queries={args.queries}",
                     f"eval.limit={args.limit}", "llm.cache=null", "logger=none",
                     f"run.root={tmp}/runs", f"run.publish={tmp}/publish", *args.set]
        cfg = compose(overrides)
        with attached(Split()) as split:
            cpu0, start = cpu_seconds(), time.perf_counter()
            result = evaluate.run(cfg)
            wall, cpu = time.perf_counter() - start, cpu_seconds() - cpu0
    report = {"row": args.row, "queries": args.queries, "dataset": dataset, "limit": args.limit,
              "overrides": overrides[:3] + args.set, "wall_s": round(wall, 1), "cpu_s": round(cpu, 1),
              "cores_busy": round(cpu / wall, 2), "n_queries": result["n_queries"],
              "model_calls": result["model_calls"], "metrics": {k: result[k] for k in cfg.metrics},
              "split": split.table(wall), "prefix_cache": split.reuse(),
              "machine": machine(["transformers"])}
    print(f"{args.row} on {dataset}/{args.queries}, first {args.limit} queries: {wall:.1f} s wall, "
          f"{cpu:.1f} CPU s ({cpu / wall:.2f} cores busy), {result['model_calls']} model calls, "
          + " ".join(f"{k}={v:.4f}" for k, v in report["metrics"].items()))
    print("| part | seconds | share of wall | cores busy | calls | tokens (rows) | tokens/s |")
    print("|---|---|---|---|---|---|---|")
    for row in report["split"]:
        print(f"| {row['part']} | {row['seconds']} | {row['share_of_wall']:.2f} | {row.get('cores_busy') or ''} | "
              f"{row.get('calls', '')} | {row.get('tokens', '') or ''} | {row.get('tokens_per_s') or ''} |")
    print("prefix cache:", json.dumps(report["prefix_cache"]))
    print(json.dumps(report["machine"]))
    if args.out:
        args.out.write_text(json.dumps(report, indent=1) + "\n")
    return report


if __name__ == "__main__":
    main()
