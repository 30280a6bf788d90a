"""The neighborhood tool on MAG-size hubs without building MAG.

A star graph of ``--degrees`` neighbors among STaRK-MAG's 1,872,968 node ids, and posting lists of the lengths the
query terms of real benchmark queries would have at MAG size: 2-4 words of random documents of a generated graph
(``--graph``, ``--index``: a ``benchmarks/graph_scale.py`` size), each term's document frequency scaled from that
corpus to 1.87M documents. Every query goes to ``Toolbox.search_in_neighborhood`` with BM25 ranking.

    python benchmarks/graph_scale.py --sizes 200000                       # once: a generated graph and its index
    python benchmarks/neighborhood_hub.py --graph logs/graph_scale/mag-s0/n200000/graph \\
        --index logs/graph_scale/mag-s0/n200000/index --degrees 30000 100000 250000 450000
"""
from __future__ import annotations

import argparse
import os
import sys
import threading
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from benchmarks.common import machine  # noqa: E402
from benchmarks.graph_scale import query_words  # noqa: E402

MAG_NODES = 1_872_968


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--graph", type=Path, required=True)
    p.add_argument("--index", type=Path, required=True)
    p.add_argument("--degrees", type=int, nargs="+", default=[30_000, 100_000, 250_000, 450_000])
    p.add_argument("--calls", type=int, default=300)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)

    from ark.graph.graph import Graph
    from ark.index.bm25 import BM25Index
    from ark.tools.toolbox import Toolbox

    print(machine())
    print(f"load average {os.getloadavg()}")
    rng = np.random.default_rng(args.seed)
    small, small_index = Graph.load(args.graph), BM25Index.load(args.index)
    df = np.diff(np.asarray(small_index.indptr)) / small.num_nodes
    queries = [small_index.term_ids(query_words(small, rng)) for _ in range(args.calls)]
    # one posting list per query term, of its length at MAG size; term ids in the query's order
    lengths = [np.maximum(1, np.round(df[q] * MAG_NODES).astype(np.int64)) for q in queries]
    postings = [np.sort(rng.choice(MAG_NODES, n, replace=False)).astype(np.int32) for q in lengths for n in q]
    index = BM25Index.__new__(BM25Index)  # its scoring arrays only
    index.num_docs, index._tables, index._max_scores = MAG_NODES, threading.local(), {}
    index.indptr = np.r_[0, np.cumsum([len(x) for x in postings])]
    index.indices = np.concatenate(postings)
    index.data = (rng.random(len(index.indices)) * 5 + 0.1).astype(np.float32)
    first = np.r_[0, np.cumsum([len(q) for q in queries])]
    index.term_ids = lambda q: np.arange(first[int(q)], first[int(q) + 1])
    print(f"{args.calls} queries, {np.mean([len(q) for q in queries]):.1f} terms each; posting lengths at MAG size: "
          f"median {int(np.median(np.concatenate(lengths))):,}, p90 {int(np.percentile(np.concatenate(lengths), 90)):,}")

    for degree in args.degrees:
        neighbors = np.sort(rng.choice(np.arange(1, MAG_NODES), degree, replace=False))
        types_ = np.ones(MAG_NODES, np.int64)
        types_[0] = 0
        graph = Graph.from_tables(["field_of_study", "paper"], ["paper___has_topic___field_of_study"], types_,
                                  np.full(MAG_NODES, "", object), np.full(MAG_NODES, "a paper title", object),
                                  np.full(MAG_NODES, "", object), np.zeros(degree, np.int64), neighbors,
                                  np.zeros(degree, np.int64),
                                  doc=np.full(MAG_NODES, " - paper title: a paper title\n - abstract: some words", object))
        toolbox = Toolbox(graph, index)
        ms = []
        for i in range(args.calls):
            start = time.perf_counter()
            toolbox.search_in_neighborhood(0, query=str(i))
            if i >= 3:
                ms.append((time.perf_counter() - start) * 1e3)
        print(f"hub of {degree:>7,} neighbors: p50 {np.percentile(ms, 50):.2f} ms, p95 {np.percentile(ms, 95):.2f} ms")
    print(f"load average {os.getloadavg()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
