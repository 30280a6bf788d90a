"""Throughput of the embedded model (SmolLM2-135M, ``LocalChatModel``) on a real agent workload.

Replays the trajectories of a published embedded run: every agent step's request (system prompt, tool schemas,
the conversation so far, as ``LLMClient`` sends it) goes to ``LocalChatModel.generate``. Queries run
``--concurrency`` at a time with their agents' steps interleaved, as ``eval.concurrency`` does, so that several
conversations compete for the prefix cache. Every request goes to each setting (dtype x prefix cache) in turn,
the settings of a dtype sharing its weights::

    python benchmarks/embedded_throughput.py [--queries 4] [--concurrency 2] [--settings bfloat16:off auto:on ...]
    git show <commit>:src/ark/llm/local.py > /tmp/local_old.py   # the code before: --settings bfloat16:old ...
    python benchmarks/embedded_throughput.py --old-local /tmp/local_old.py --settings bfloat16:old auto:on

Prints, and writes to ``--out`` (JSON), per setting: seconds per step, prefilled tokens, prefill tokens/s (the
first forward pass of a request), decode tokens/s (completion tokens over the rest of the request: forward passes
and grammar), projected queries/hour (3600 / seconds per query), the machine (CPU, bf16 flags, torch, threads) and
the load average before and after. Replies are compared with those of the same dtype without the prefix cache.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import sys
import time
from pathlib import Path

import torch

import ark  # noqa: F401  (offline environment defaults)
from ark.build import spec, toolbox
from ark.config import compose
from ark.llm.client import LLMClient
from ark.llm.local import PREFILL_CHUNK, LocalChatModel
from ark.llm.weights import cpu_has_bf16, resolve_dtype
sys.path.insert(0, str(Path(__file__).resolve().parent))  # benchmarks/common.py, however this file is loaded
from common import machine  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
RUN = ROOT / "results/runs/evaluate/base-synthetic"  # SmolLM2 trajectories that dvc repro writes
OVERRIDES = ["+experiment=embedded", "dataset=biokg", "queries=synthetic", "logger=none"]


def workload(records: Path, n_queries: int, concurrency: int) -> list[dict]:
    """The requests of the first ``n_queries`` records, in the order a run with ``concurrency`` sends them:
    queries in groups, their agents' steps round-robin."""
    cfg = compose(OVERRIDES)
    tools = toolbox(spec(cfg)).schemas()
    client = LLMClient(spec(cfg).backbone)
    rows = [json.loads(line) for line in records.open()][:n_queries]
    requests = []
    for start in range(0, len(rows), concurrency):
        trajectories = []
        for row in rows[start:start + concurrency]:
            for a in row["agents"]:
                msgs = a["messages"]
                steps = [client.request(msgs[:i], tools, cfg.seed + a["agent"])
                         for i, m in enumerate(msgs) if m["role"] == "assistant"]
                trajectories.append(steps)
        for k in range(max(map(len, trajectories))):
            requests += [t[k] for t in trajectories if k < len(t)]
    return requests


def timed_forward(model) -> list:
    """Record (tokens fed, seconds) of every forward pass of ``model``."""
    calls, forward = [], model.forward

    def wrapper(*args, **kwargs):
        t = time.perf_counter()
        out = forward(*args, **kwargs)
        calls.append((kwargs["input_ids"].shape[1], time.perf_counter() - t))
        return out

    model.forward = wrapper
    return calls


def prefill_passes(calls: list) -> list:
    """The forward passes of a request's prefill: its chunks, up to the first pass that is not a whole chunk."""
    n = next((i for i, (tokens, _) in enumerate(calls) if tokens != PREFILL_CHUNK), len(calls) - 1)
    return calls[:n + 1]


def old_model_class(path: Path):
    """``LocalChatModel`` of another version of ``ark/llm/local.py`` (e.g. ``git show <commit>:src/ark/llm/local.py``)."""
    spec = importlib.util.spec_from_file_location("old_local", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.LocalChatModel


def summarize(setting: str, dtype: str, steps: list[dict], steps_per_query: float) -> dict:
    total = sum(s["seconds"] for s in steps)
    prefill_s = sum(s["prefill_seconds"] for s in steps)
    n = len(steps)
    return {"setting": setting, "dtype": dtype, "steps": n, "seconds_per_step": total / n,
            "median_seconds_per_step": statistics.median(s["seconds"] for s in steps),
            "prompt_tokens_per_step": sum(s["prompt_tokens"] for s in steps) / n,
            "prefilled_tokens_per_step": sum(s["prefilled"] for s in steps) / n,
            "completion_tokens_per_step": sum(s["completion_tokens"] for s in steps) / n,
            "prefill_tokens_per_s": sum(s["prefilled"] for s in steps) / prefill_s,
            "decode_tokens_per_s": sum(s["completion_tokens"] for s in steps) / (total - prefill_s),
            "queries_per_hour": 3600 / (total / n * steps_per_query), "per_step": steps}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--records", type=Path, default=next(RUN.glob("*/records.jsonl"), None))
    ap.add_argument("--queries", type=int, default=4)
    ap.add_argument("--concurrency", type=int, default=2)
    ap.add_argument("--settings", nargs="+", default=["bfloat16:off", "bfloat16:on", "float32:off", "float32:on"],
                    help="dtype:mode; dtype auto, bfloat16 or float32; mode on/off (prefix cache), or old "
                         "(the LocalChatModel of --old-local)")
    ap.add_argument("--old-local", type=Path, help="another version of ark/llm/local.py, for the 'old' mode")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--out", type=Path, default=ROOT / "logs/embedded_throughput.json")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    models_dir = Path(compose(OVERRIDES).paths.models)
    requests = workload(args.records, args.queries, args.concurrency)
    steps_per_query = len(requests) / args.queries
    info = {"machine": {**machine(), "native_bf16": cpu_has_bf16()}, "records": str(args.records.relative_to(ROOT)), "queries": args.queries,
            "concurrency": args.concurrency, "requests": len(requests), "loadavg_before": os.getloadavg()}
    print(json.dumps(info["machine"]), f"| {len(requests)} requests, {steps_per_query:g} per query", flush=True)

    # one set of weights per dtype, shared by its settings; every request goes to each setting in turn, so that
    # the load of the machine weighs on all alike
    weights, runners, calls = {}, {}, {}
    for setting in args.settings:
        dtype, mode = setting.split(":")
        dtype = resolve_dtype(dtype)
        if dtype not in weights:
            weights[dtype] = LocalChatModel(dtype=dtype, cache_dir=models_dir, prefix_cache=False)
            calls[dtype] = timed_forward(weights[dtype].model)
            weights[dtype].generate(requests[0] | {"max_tokens": 8})  # warm-up
        base = weights[dtype]
        if mode == "old":
            runners[setting] = old_model_class(args.old_local).from_model(base.model, base.tokenizer)
        else:
            runners[setting] = LocalChatModel.from_model(base.model, base.tokenizer, prefix_cache=mode == "on")
    steps = {s: [] for s in args.settings}
    replies = {s: [] for s in args.settings}
    for i, req in enumerate(requests):
        for setting, model in runners.items():
            dtype = resolve_dtype(setting.split(":")[0])
            calls[dtype].clear()
            t = time.perf_counter()
            reply = model.generate(req)
            seconds = time.perf_counter() - t
            prefill = prefill_passes(calls[dtype])
            message = reply["choices"][0]["message"]
            replies[setting].append(json.dumps(message.get("tool_calls") and message["tool_calls"][0]["function"]))
            steps[setting].append({"seconds": seconds, "prompt_tokens": reply["usage"]["prompt_tokens"],
                                   "completion_tokens": reply["usage"]["completion_tokens"],
                                   "prefilled": sum(c[0] for c in prefill),
                                   "prefill_seconds": sum(c[1] for c in prefill),
                                   "forward_passes": len(calls[dtype])})
        print(f"request {i + 1}/{len(requests)}: " + " | ".join(
            f"{s} {v[-1]['seconds']:.2f}s prefilled {v[-1]['prefilled']}" for s, v in steps.items()),
            file=sys.stderr, flush=True)
    info["loadavg_after"] = os.getloadavg()
    info["settings"] = []
    for setting in args.settings:
        dtype = resolve_dtype(setting.split(":")[0])
        summary = summarize(setting, dtype, steps[setting], steps_per_query)
        same_dtype = [s for s in args.settings if resolve_dtype(s.split(":")[0]) == dtype]
        ref = next((s for s in same_dtype if s.endswith(":off")), same_dtype[0])
        summary["same_replies_as"] = {ref: sum(a == b for a, b in zip(replies[setting], replies[ref])) / len(requests)}
        info["settings"].append(summary)
        print(f"{setting:>14} ({dtype}): {summary['seconds_per_step']:.2f} s/step (median "
              f"{summary['median_seconds_per_step']:.2f}) | prefilled "
              f"{summary['prefilled_tokens_per_step']:.0f} of {summary['prompt_tokens_per_step']:.0f} tokens/step at "
              f"{summary['prefill_tokens_per_s']:.0f} tok/s | decode {summary['completion_tokens_per_step']:.0f} "
              f"tokens/step at {summary['decode_tokens_per_s']:.1f} tok/s | {summary['queries_per_hour']:.0f} "
              f"queries/h | same replies as {ref}: {summary['same_replies_as'][ref]:.2f}")
    print(f"load average {info['loadavg_before']} before, {info['loadavg_after']} after")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(info, indent=1))
    print(f"written {args.out}")


if __name__ == "__main__":
    main()
