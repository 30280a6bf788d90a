"""LoRA training throughput of the student's architecture: tokens/s and MFU of real training steps.

The model is built from its architecture with random weights (no download; the speed does not depend on the
weights). Two workloads:

- ``--lengths 4096 8192 16384``: one sequence of each length per step;
- ``--paper``: trajectories drawn from a distribution like the paper's (94.4M tokens in <= 54,000 trajectories:
  about 1,750 tokens each, log-normal, cut at 16,384), packed best-fit-decreasing into rows of ``--pack`` tokens
  by ``ark.distill.sft.pack_bins`` (the training stage's packing); position ids restart at every trajectory, so
  attention never crosses trajectories, and every token is counted once (no padding).

MFU (model FLOPs utilisation) = model FLOPs per second / the GPU's peak (989 TFLOP/s dense bf16 on an H100 or
H200). Model FLOPs of one LoRA training token = 4 x the base model's linear parameters (forward 2, backward 2:
the frozen weights need input gradients only; LoRA's own small matrices are not counted) + 3 x the causal attention
forward of its trajectory (2 x layers x heads x head_dim x L^2 for a trajectory of L tokens, over its L tokens);
recomputation under activation checkpointing is not counted.

    python benchmarks/distill_throughput.py --shape qwen3-8b --lengths 4096 8192 16384
    python benchmarks/distill_throughput.py --shape qwen3-8b --paper --pack 16384 --liger --checkpoint-every 1
    python benchmarks/distill_throughput.py --shape toy --device cpu --lengths 64 128 --steps 1   # the code path
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
from ark.distill.attention import PACKED, register  # noqa: E402
from ark.distill.sft import pack_bins  # noqa: E402
sys.path.insert(0, str(Path(__file__).resolve().parent))  # benchmarks/common.py, however this file is loaded
from common import machine  # noqa: E402

# architectures from the models' published config.json files (Qwen3: tied embeddings only for the 4B)
SHAPES = {
    "qwen3-8b": dict(hidden_size=4096, intermediate_size=12288, num_hidden_layers=36, num_attention_heads=32,
                     num_key_value_heads=8, head_dim=128, vocab_size=151936, tie_word_embeddings=False),
    "qwen3-4b": dict(hidden_size=2560, intermediate_size=9728, num_hidden_layers=36, num_attention_heads=32,
                     num_key_value_heads=8, head_dim=128, vocab_size=151936, tie_word_embeddings=True),
    "toy": dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                num_key_value_heads=2, head_dim=16, vocab_size=512, tie_word_embeddings=False),
}
PEAK_TFLOPS = {"H100": 989.0, "H200": 989.0}  # dense bf16
PAPER_MEAN_TOKENS, PAPER_MAX_TOKENS = 1750, 16384


def build_model(shape: str, device: str, dtype, attn: str, liger: bool, r: int, dropout: float):
    from peft import LoraConfig, get_peft_model
    from transformers import Qwen3Config, Qwen3ForCausalLM

    if attn in PACKED:
        register(attn)
    if liger:
        from liger_kernel.transformers import apply_liger_kernel_to_qwen3

        apply_liger_kernel_to_qwen3(rope=True, rms_norm=True, swiglu=True, cross_entropy=False,
                                    fused_linear_cross_entropy=True)
    config = Qwen3Config(**SHAPES[shape], max_position_embeddings=40960, rope_theta=1e6, use_cache=False,
                         attn_implementation=attn)
    with torch.device(device):
        model = Qwen3ForCausalLM(config).to(dtype)
    linear = sum(m.weight.numel() for m in model.modules() if isinstance(m, torch.nn.Linear))
    model = get_peft_model(model, LoraConfig(r=r, lora_alpha=2 * r, lora_dropout=dropout,
                                             target_modules="all-linear", task_type="CAUSAL_LM"))
    return model, config, linear


def enable_checkpointing(model) -> list:
    """Turn activation checkpointing on; returns the decoder layers, whose flags ``checkpoint`` sets per row."""
    kwargs = {"use_reentrant": False}
    if hasattr(model, "activation_checkpointing_enable"):  # transformers >= 5.2x
        model.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs)
    else:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)
    return list(model.get_base_model().model.layers)


def checkpoint(layers: list, every: int) -> None:
    """Checkpoint every ``every``-th decoder layer (0: none, 1: all)."""
    for i, layer in enumerate(layers):
        layer.gradient_checkpointing = bool(every) and i % every == 0


def paper_lengths(n: int, seed: int) -> list[int]:
    """Trajectory lengths: log-normal with mean 1,750 tokens (sigma 0.8), between 200 and 16,384."""
    rng = np.random.default_rng(seed)
    sigma = 0.8
    mu = math.log(PAPER_MEAN_TOKENS) - sigma ** 2 / 2
    return [int(x) for x in np.clip(rng.lognormal(mu, sigma, n), 200, PAPER_MAX_TOKENS)]


def rows_of(lengths: list[int], pack: int | None) -> list[list[int]]:
    """The trajectory lengths of each training row: packed (one longer than a pack is a row of its own), or one
    trajectory per row."""
    if not pack:
        return [[n] for n in lengths]
    fits = [n for n in lengths if n <= pack]
    return [[fits[i] for i in b] for b in pack_bins(fits, pack)] + [[n] for n in lengths if n > pack]


def make_batch(seq_lengths: list[int], vocab: int, device: str, gen: torch.Generator, pad_to: int = 0) -> dict:
    """One row of random tokens. ``pad_to``: a filler segment (no loss, not counted as tokens) makes the row that
    long, so a compiled attention kernel sees one shape."""
    filler = max(pad_to - sum(seq_lengths), 0)
    segments = [*seq_lengths, filler] if filler else list(seq_lengths)
    total = sum(segments)
    ids = torch.randint(0, vocab, (1, total), generator=gen)
    positions = torch.cat([torch.arange(n) for n in segments])[None]
    labels = ids.clone()
    labels[positions == 0] = -100  # a trajectory's first token is not predicted from the one before it
    if filler:
        labels[0, total - filler:] = -100
    bounds = torch.tensor([0, *np.cumsum(segments)], dtype=torch.int32)  # for packed_sdpa (as trl's collator)
    return {"input_ids": ids.to(device), "labels": labels.to(device), "position_ids": positions.to(device),
            "cu_seq_lens_q": bounds, "cu_seq_lens_k": bounds, "max_length_q": max(segments),
            "max_length_k": max(segments)}


def model_flops(seq_lengths: list[int], linear: int, config) -> float:
    attention_width = config.num_attention_heads * config.head_dim
    attention = sum(2 * config.num_hidden_layers * attention_width * n * n for n in seq_lengths)
    return 4 * linear * sum(seq_lengths) + 3 * attention


def time_rows(model, rows: list[list[int]], config, linear: int, device: str, warmup: int, pad_to: int = 0,
              layers=(), every: int = 1, pack: int = 0) -> dict:
    """Train on ``rows``; a row longer than ``pack`` (one long trajectory) checkpoints every layer."""
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-5)
    gen = torch.Generator().manual_seed(0)
    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
    tokens = flops = 0
    seconds = 0.0
    losses = []
    for step, seq_lengths in enumerate(rows):
        checkpoint(layers, 1 if pack and sum(seq_lengths) > pack else every)
        batch = make_batch(seq_lengths, config.vocab_size, device, gen, pad_to)
        sync()
        start = time.perf_counter()
        loss = model(**batch).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        sync()
        losses.append(float(loss.detach()))
        if step >= warmup:
            seconds += time.perf_counter() - start
            tokens += sum(seq_lengths)
            flops += model_flops(seq_lengths, linear, config)
    return {"steps": len(rows) - warmup, "tokens": tokens, "seconds": round(seconds, 3),
            "tokens_per_s": round(tokens / seconds, 1) if seconds else None,
            "model_tflops_per_s": round(flops / seconds / 1e12, 2) if seconds else None,
            "loss_finite": all(math.isfinite(x) for x in losses)}


def recipe(name: str):
    """``conf/distill/<name>.yaml`` over its defaults, as attribute access (no Hydra needed on a GPU host)."""
    import types

    import yaml

    conf = Path(__file__).resolve().parents[1] / "conf" / "distill"
    data = yaml.safe_load((conf / f"{name}.yaml").read_text())
    for parent in data.pop("defaults", []):
        if parent != "_self_":
            base = vars(recipe(parent))
            data = {**base, **data}
    as_ns = lambda v: types.SimpleNamespace(**{k: as_ns(x) for k, x in v.items()}) if isinstance(v, dict) else v  # noqa: E731
    return as_ns(data)


def run_trl(args) -> dict:
    """The product's training path: ``ark.distill.train.train_lora`` (trl SFTTrainer, peft, the collator's packed
    rows, ``--recipe``'s settings) on random trajectories of paper-like lengths, a tenth of each labelled."""
    from tokenizers import Tokenizer, models
    import yaml
    from transformers import PreTrainedTokenizerFast, Qwen3Config, Qwen3ForCausalLM

    from ark.distill.train import train_lora

    d = recipe(args.recipe)
    for setting in args.set:  # KEY=VALUE, KEY dotted (lora.dropout=0), VALUE as YAML
        key, _, value = setting.partition("=")
        *path, last = key.split(".")
        group = d
        for part in path:
            group = getattr(group, part, None)
        if not hasattr(group, last):
            raise SystemExit(f"error: --set {setting}: conf/distill/{args.recipe}.yaml has no key {key!r}")
        setattr(group, last, yaml.safe_load(value))
    d.max_steps, d.logging_steps, d.liger = args.warmup + args.steps, 1, d.liger and args.liger
    if d.attn in PACKED:
        register(d.attn)
    vocab = SHAPES[args.shape]["vocab_size"]
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.WordLevel({"<pad>": 0, "<unk>": 1}, "<unk>")),
                                        pad_token="<pad>", unk_token="<unk>")
    rng = np.random.default_rng(args.seed)
    samples = []
    for n in paper_lengths(args.trajectories, args.seed):
        n = min(n, d.max_tokens)
        ids = rng.integers(2, vocab, n).tolist()
        samples.append({"input_ids": ids, "labels": [-100] * (n - n // 10) + ids[n - n // 10:]})
    config = Qwen3Config(**SHAPES[args.shape], max_position_embeddings=40960, rope_theta=1e6, use_cache=False,
                         attn_implementation=d.attn)
    with torch.device(args.device):
        model = Qwen3ForCausalLM(config).to(getattr(torch, d.dtype))
    with tempfile.TemporaryDirectory() as out:
        report = train_lora(model, tokenizer, samples, [], d, out, args.seed)
        curve = json.loads((Path(out) / "curve.json").read_text())
    tokens = max(row.get("num_tokens", 0) for row in curve)  # trl's count of the tokens trained on
    figures = {"recipe": args.recipe, "set": args.set, "steps": report["steps"],
               "train_seconds": report["timings"]["train_seconds"],
               "tokens_per_s": round(tokens / report["timings"]["train_seconds"], 1)
               if report["timings"]["train_seconds"] else None,
               "losses": [row["loss"] for row in curve if "loss" in row]}
    if args.device.startswith("cuda"):
        figures["peak_gib"] = round(torch.cuda.max_memory_allocated() / 2 ** 30, 1)
    print(json.dumps(figures), flush=True)
    return {"settings": vars(args), "machine": machine(("transformers", "peft", "liger_kernel")), "results": [figures]}


def peak_tflops(device: str, given: float | None) -> float | None:
    if given or not device.startswith("cuda"):
        return given
    name = torch.cuda.get_device_name(0)
    return next((v for k, v in PEAK_TFLOPS.items() if k in name), None)


def run(args) -> dict:
    dtype = {"bf16": torch.bfloat16, "fp32": torch.float32}[args.dtype]
    model, config, linear = build_model(args.shape, args.device, dtype, args.attn, args.liger, args.r, args.dropout)
    layers = enable_checkpointing(model)
    model.train()
    peak = peak_tflops(args.device, args.peak_tflops)
    settings = {k: v for k, v in vars(args).items() if k not in ("out", "lengths")}
    results = []
    if args.paper:
        lengths = paper_lengths(args.trajectories, args.seed)
        rows = rows_of(lengths, args.pack)
        # the warm-up rows, then rows from across the whole distribution (the longest included)
        order = np.random.default_rng(args.seed).permutation(len(rows))
        cases = [("paper", [rows[i] for i in order[: args.warmup + args.steps]])]
        fill = sum(map(sum, rows)) / sum(max(sum(r), args.pack) for r in rows) if args.pack else None
        print(f"paper-like lengths: {len(lengths)} trajectories, mean {np.mean(lengths):.0f}, "
              f"max {max(lengths)}; {len(rows)} rows" + (f", packs {fill:.1%} full" if fill else ""))
    else:
        cases = [(str(n), [[n]] * (args.warmup + args.steps)) for n in args.lengths]
    for name, rows in cases:
        if args.device.startswith("cuda"):
            torch.cuda.reset_peak_memory_stats()
        try:
            pad_to = args.pack if args.paper and args.attn == "flex_attention" else 0
            figures = time_rows(model, rows, config, linear, args.device, args.warmup, pad_to, layers,
                                args.checkpoint_every, args.pack if args.paper else 0)
        except torch.OutOfMemoryError:
            figures = {"error": "out of memory"}
            torch.cuda.empty_cache()
        if args.device.startswith("cuda"):
            figures["peak_gib"] = round(torch.cuda.max_memory_allocated() / 2 ** 30, 1)
        if peak and figures.get("model_tflops_per_s"):
            figures["mfu"] = round(figures["model_tflops_per_s"] / peak, 4)
        results.append({"case": name, **figures})
        print(json.dumps(results[-1]), flush=True)
    return {"settings": settings, "linear_params": linear, "peak_tflops": peak, "machine": machine(("transformers", "peft", "liger_kernel")),
            "results": results}


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shape", choices=sorted(SHAPES), default="qwen3-8b")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--dtype", choices=["bf16", "fp32"], default="bf16")
    ap.add_argument("--attn", default="sdpa", help=f"sdpa | {' | '.join(PACKED)} | flex_attention | eager")
    ap.add_argument("--liger", action="store_true", help="Liger's fused kernels (liger-kernel installed)")
    ap.add_argument("--checkpoint-every", type=int, default=1, help="checkpoint every k-th layer (0: none)")
    ap.add_argument("--r", type=int, default=32)
    ap.add_argument("--dropout", type=float, default=0.1)
    ap.add_argument("--lengths", type=int, nargs="+", default=[4096, 8192, 16384])
    ap.add_argument("--paper", action="store_true", help="the paper-like length distribution, packed")
    ap.add_argument("--pack", type=int, default=16384, help="tokens per packed row (0: one trajectory a row)")
    ap.add_argument("--trajectories", type=int, default=400, help="trajectories drawn for --paper")
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--peak-tflops", type=float, default=None, help="default: 989 on H100/H200, none on CPU")
    ap.add_argument("--out", default=None, help="write the figures as JSON here")
    ap.add_argument("--trl", action="store_true", help="through the product's trainer (trl) with --recipe instead")
    ap.add_argument("--recipe", default="qwen3-8b", help="conf/distill/<recipe>.yaml for --trl")
    ap.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE",
                    help="--trl: recipe settings changed for this run, e.g. attn=packed_flex checkpoint_every=3")
    args = ap.parse_args(argv)
    report = run_trl(args) if args.trl else run(args)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(report, indent=1))
    return report


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    main()
