"""Where a CPU training step of the embedded recipe goes: the embedded SmolLM2-135M (dtype ``auto``) with the recipe's
LoRA (r 32, alpha 64, all linear layers) at each given LoRA dropout, one trajectory-sized sequence per step, the
loss on its last positions only (as ``ark.distill.train``'s labelled-position loss). Prints seconds per step (the
mean of ``--steps`` after one warm-up step) and, with ``--profile``, torch.profiler's top operators of one step.

    python benchmarks/distill_cpu_step.py --dropout 0.1 0.0 --profile
    ONEDNN_MAX_CPU_ISA=AVX2 ATEN_CPU_CAPABILITY=avx2 python benchmarks/distill_cpu_step.py --dropout 0.1 0.0

Random token ids (the speed does not depend on them); 2,300 tokens is about the mean trajectory of
``distill=embedded`` (its report.json: train_tokens / train_samples).
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))  # benchmarks/common.py, however this file is loaded
from common import machine  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dropout", type=float, nargs="+", default=[0.1, 0.0])
    ap.add_argument("--tokens", type=int, default=2300)
    ap.add_argument("--labelled", type=int, default=300, help="positions with a loss (the assistant turns)")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--profile", action="store_true")
    args = ap.parse_args()

    from peft import LoraConfig, get_peft_model

    from ark.llm.weights import default_gguf_path, load_gguf

    print(json.dumps(machine(("transformers", "peft"))))
    ids = torch.randint(0, 49000, (1, args.tokens), generator=torch.Generator().manual_seed(0))
    keep = torch.arange(args.tokens - args.labelled, args.tokens - 1)
    with tempfile.TemporaryDirectory() as models:
        for dropout in args.dropout:
            model, _ = load_gguf(default_gguf_path(), "auto", models)
            model.set_attn_implementation("sdpa")
            model = get_peft_model(model, LoraConfig(r=32, lora_alpha=64, lora_dropout=dropout,
                                                     target_modules="all-linear", task_type="CAUSAL_LM"))
            model.train()
            opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-4)

            def step():
                logits = model(input_ids=ids, logits_to_keep=keep, use_cache=False).logits
                torch.nn.functional.cross_entropy(logits.float()[0], ids[0, keep + 1]).backward()
                opt.step()
                opt.zero_grad()

            step()  # warm-up
            start = time.perf_counter()
            for _ in range(args.steps):
                step()
            seconds = (time.perf_counter() - start) / args.steps
            print(f"dtype {str(model.dtype).removeprefix('torch.')}  LoRA dropout {dropout}: {seconds:.2f} s a step "
                  f"of {args.tokens} tokens ({args.tokens / seconds:.0f} tokens/s)", flush=True)
            if args.profile:
                from torch.profiler import ProfilerActivity, profile

                with profile(activities=[ProfilerActivity.CPU]) as p:
                    step()
                print(p.key_averages().table(sort_by="self_cpu_time_total", row_limit=8))


if __name__ == "__main__":
    main()
