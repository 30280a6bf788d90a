"""Training the embedded student with and without ``distill.share_prefix`` on real teacher trajectories: seconds a
trajectory, tokens computed, and the per-step losses of both (they must agree: the same updates, fewer tokens).

Every trajectory of the student starts with the same system prompt and tool list (~940 SmolLM2 tokens of ~2,560).
With ``share_prefix`` a batch of B trajectories runs that prefix once, and each trajectory's rest on its keys and
values; without it, each trajectory runs whole, one at a time with B accumulated into an update (a padded batch of
B whole trajectories does not fit 24 GiB at B = 4 in float32). Same updates either way: same samples (a seeded
draw from the teacher run), same LoRA initialisation, same order, the recipe of ``conf/distill/embedded.yaml``
otherwise (constant learning rate).

    python -m ark.stages.collect dataset=biokg queries=synthetic backbone=rules_teacher +experiment=distillation \\
        collect.budget=200 collect.trajectories=2 run.root=/tmp/teacher logger=none
    python benchmarks/distill_shared_prefix.py --teacher /tmp/teacher --batch 8 --steps 1 --repeats 2

With ``--repeats`` the two modes alternate (whole, shared, whole, shared...) and each mode's median is reported: on
a shared virtual machine one run of either can be 15 % off.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # benchmarks/common.py, however this file is loaded
from common import machine  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def samples_of(teacher: str, max_tokens: int):
    """The teacher run's trajectories rendered as the distill stage renders them, and the tokenizer."""
    from hydra import compose, initialize_config_dir

    from ark import build
    from ark.distill.sft import sft_samples
    from ark.llm.weights import default_gguf_path, load_gguf
    from ark.runs.store import load_run
    from ark.stages.distill import teacher_run

    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        cfg = compose("config", overrides=["dataset=biokg", "distill=embedded"])
    tools = build.toolbox(build.spec(cfg, "distill")).schemas()
    with tempfile.TemporaryDirectory() as models:
        _, tokenizer = load_gguf(default_gguf_path(), "float32", models)
    _, records = load_run(teacher_run(teacher))
    return list(sft_samples(records, tools, tokenizer, max_tokens)), tokenizer


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--teacher", required=True, help="a collect run (its run root or run directory)")
    ap.add_argument("--batch", type=int, default=8, help="trajectories an update")
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--repeats", type=int, default=1, help="runs of each mode, alternating")
    ap.add_argument("--out", help="also write the figures here (JSON)")
    args = ap.parse_args()

    import torch
    from hydra import compose, initialize_config_dir

    from ark.config import resolved
    from ark.distill.settings import distill_settings
    from ark.distill.sft import shared_prefix
    from ark.distill.train import load_base, trainer

    info = machine(("transformers", "peft", "trl"))
    samples, _ = samples_of(args.teacher, 4096)
    chosen = random.Random(args.seed).sample(samples, args.batch * args.steps)
    groups = [chosen[i:i + args.batch] for i in range(0, len(chosen), args.batch)]
    whole = sum(len(s["input_ids"]) for s in chosen)
    computed = sum(len(g["prefix_ids"]) + sum(len(s["input_ids"]) for s in g["suffixes"])
                   for g in map(shared_prefix, groups))
    figures = {"machine": info, "trajectories": len(chosen), "batch": args.batch, "tokens_whole": whole,
               "tokens_shared": computed, "modes": {}}
    print(json.dumps(info))
    print(f"{len(chosen)} trajectories, {whole} tokens; with the prefix shared {computed} tokens computed "
          f"({whole / computed:.2f}x fewer)", flush=True)
    for share in [False, True] * args.repeats:
        with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
            cfg = compose("config", overrides=[
                "distill=embedded", f"distill.share_prefix={str(share).lower()}",
                f"distill.attn={'prefix_sdpa' if share else 'sdpa'}",
                f"distill.batch_size={args.batch if share else 1}", f"distill.grad_accum={1 if share else args.batch}",
                f"distill.max_steps={args.steps}", "distill.budgets=null", "distill.val_fraction=0",
                "distill.scheduler=constant", "distill.warmup=0"])
        d = distill_settings(resolved(cfg.distill))
        with tempfile.TemporaryDirectory() as tmp:
            model, tokenizer = load_base(d, os.path.join(tmp, "models"))
            torch.manual_seed(args.seed)  # the same LoRA initialisation in both
            t = trainer(model, tokenizer, chosen, [], d, Path(tmp), seed=args.seed, sequential=True)
            start = time.perf_counter()
            t.train()
            seconds = time.perf_counter() - start
        losses = [round(row["loss"], 5) for row in t.state.log_history if "loss" in row]
        mode = figures["modes"].setdefault("shared" if share else "whole", {"runs": []})
        mode["runs"].append(round(seconds, 1))
        mode.update(seconds=round(statistics.median(mode["runs"]), 1), losses=losses)
        print(f"share_prefix {str(share).lower():5}: {seconds:7.1f} s, {seconds / len(chosen):5.2f} s a trajectory, "
              f"step losses {losses}", flush=True)
    a, b = figures["modes"]["whole"], figures["modes"]["shared"]
    print(f"medians: whole {a['seconds']} s, shared {b['seconds']} s; speed-up {a['seconds'] / b['seconds']:.2f}x; "
          f"largest step-loss difference "
          f"{max(abs(x - y) for x, y in zip(a['losses'], b['losses'])):.2e}")
    if args.out:
        Path(args.out).write_text(json.dumps(figures, indent=1))


if __name__ == "__main__":
    main()
