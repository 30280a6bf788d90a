"""Latency of the agent's graph tools on a built graph + BM25 index.

Times ``Toolbox.search_in_graph`` and ``Toolbox.search_in_neighborhood`` (uniform random nodes
and the top-100-degree hubs; with a query, without one, and with a node_type filter), the same
neighborhood call through ``Toolbox.call`` (argument checking + dispatch), and the raw parts
underneath (``relevance.search``, ``relevance.score`` on hub neighborhoods, query tokenization,
``np.unique`` of the neighbor ids, ``snippet()`` of the rows shown),
then checks the targets: neighborhood p50 <= 1 ms, global search p50 <= 20 ms.

    .venv/bin/python benchmarks/tools_latency.py [--graph DIR] [--index DIR] [--n 300] [--seed 0]

Queries are 2-6 (global) or 2-4 (neighborhood) words sampled, in order, from the name and
definition of random nodes, so they look like what an agent types and always hit the vocabulary.
Every call is timed on its own with ``time.perf_counter`` after a few warm-up calls.
"""
from __future__ import annotations

import argparse
import os
import re
import shlex
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_GRAPH = ROOT / "data/graph/biokg"
DEFAULT_INDEX = ROOT / "data/index/biokg/bm25"
NUM_HUBS = 100
WARMUP = 5
NEIGHBORHOOD_TARGET_MS = 1.0
GLOBAL_TARGET_MS = 20.0

_WORD = re.compile(r"[A-Za-z][A-Za-z0-9-]+")
_STOP = {"the", "and", "for", "with", "that", "this", "from", "into", "are", "was", "which", "any",
         "its", "such", "than", "other", "not", "but", "has", "have", "been", "also", "or", "of"}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--graph", default=str(DEFAULT_GRAPH), help="graph directory (Graph.load)")
    p.add_argument("--index", default=str(DEFAULT_INDEX), help="BM25 index directory (BM25Index.load)")
    p.add_argument("--n", type=int, default=300, help="timed calls per case")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)

    from common import machine  # benchmarks/ is this script's directory, first on sys.path

    m = machine()
    print(f"machine: {m['platform']} | {m['cpu']} | {m['cpus']} CPUs | Python {m['python']}")
    print(f"command: {' '.join(shlex.quote(a) for a in [sys.executable, *sys.argv])}")

    graph_dir, index_dir = Path(args.graph), Path(args.index)
    missing = [str(d) for d, f in ((graph_dir, "schema.json"), (index_dir, "ark_bm25.json")) if not (d / f).exists()]
    if missing:
        sys.exit(f"error: no built graph/index at {', '.join(missing)}; run `dvc repro build_index` first.")

    from ark.graph.graph import Graph
    from ark.index.bm25 import BM25Index
    from ark.tools.toolbox import AnswerState, ToolConfig, Toolbox

    t0 = time.perf_counter()
    graph = Graph.load(graph_dir)
    relevance = BM25Index.load(index_dir)
    toolbox = Toolbox(graph, relevance, ToolConfig())
    print(f"loaded {graph.num_nodes:,} nodes, {graph.num_edges:,} edges, "
          f"{len(relevance.retriever.vocab_dict):,} terms in {time.perf_counter() - t0:.1f} s; "
          f"load average {os.getloadavg()[0]:.2f}")

    rng = np.random.default_rng(args.seed)
    n = args.n
    degree = np.diff(np.asarray(graph.indptr))
    hubs = np.argsort(-degree, kind="stable")[:NUM_HUBS]
    print(f"hubs: top {NUM_HUBS} by degree, degree {int(degree[hubs].min())}..{int(degree[hubs].max())} "
          f"(max degree {int(degree[hubs].max())}); all nodes: median degree {np.median(degree):.0f}, "
          f"mean {degree.mean():.1f}")
    print(f"{n} timed calls per case after {WARMUP} warm-up calls\n")

    def queries(count: int, lo: int, hi: int) -> list[str]:
        out = []
        while len(out) < count:
            words = _node_words(graph, int(rng.integers(graph.num_nodes)))
            if len(words) < 2:
                continue
            m = int(rng.integers(lo, hi + 1))
            if len(words) > m:
                words = [words[i] for i in np.sort(rng.choice(len(words), m, replace=False))]
            out.append(" ".join(words))
        return out

    def nodes(kind: str, count: int) -> np.ndarray:
        if kind == "hubs":
            return rng.choice(hubs, count)
        return rng.integers(graph.num_nodes, size=count)

    def neighbor_type(v: int) -> str:
        """The type of a random neighbor of v (a filter that keeps something), or of v itself."""
        sl = graph.neighbors(v)
        if sl.stop > sl.start:
            return graph.type_name(int(graph.nbr[int(rng.integers(sl.start, sl.stop))]))
        return graph.type_name(v)

    rows: list[tuple[str, list[float], str]] = []  # (case, ms per call, target key)

    def bench(label: str, fn, inputs: list, target: str = "") -> None:
        for x in inputs[:WARMUP]:
            fn(x)
        times = []
        for x in inputs[WARMUP:]:
            t = time.perf_counter()
            fn(x)
            times.append((time.perf_counter() - t) * 1e3)
        rows.append((label, times, target))

    k = WARMUP + n
    # ---- global search
    for size in (5, 30):
        qs = queries(k, 2, 6)
        bench(f"search_in_graph size={size}", lambda q, s=size: toolbox.search_in_graph(q, s), qs, "global")
    # ---- neighborhoods
    for kind in ("random", "hubs"):
        vs, qs = nodes(kind, k), queries(k, 2, 4)
        bench(f"search_in_neighborhood {kind} +query",
              lambda x: toolbox.search_in_neighborhood(int(x[0]), query=x[1]), list(zip(vs, qs)), "neighborhood")
        vs = nodes(kind, k)
        bench(f"search_in_neighborhood {kind} no query",
              lambda v: toolbox.search_in_neighborhood(int(v)), list(vs), "neighborhood")
        vs, qs = nodes(kind, k), queries(k, 2, 4)
        ts = [neighbor_type(int(v)) for v in vs]
        bench(f"search_in_neighborhood {kind} +query +node_type",
              lambda x: toolbox.search_in_neighborhood(int(x[0]), query=x[1], node_type=x[2]),
              list(zip(vs, qs, ts)), "neighborhood")
    # ---- the same through the dispatcher
    vs, qs = nodes("hubs", k), queries(k, 2, 4)
    state = AnswerState()
    bench("call(search_in_neighborhood) hubs +query",
          lambda x: toolbox.call("search_in_neighborhood", {"node_index": int(x[0]), "query": x[1]}, state),
          list(zip(vs, qs)))
    # ---- raw parts
    qs = queries(k, 2, 6)
    bench("  part: relevance.search k=30", lambda q: relevance.search(q, 30), qs)
    bench("  part: relevance.term_ids (tokenize)", relevance.term_ids, qs)
    vs, qs = nodes("hubs", k), queries(k, 2, 4)
    hub_ids = {int(v): _neighbor_ids(graph, int(v)) for v in set(vs.tolist())}
    bench("  part: relevance.score hubs", lambda x: relevance.score(x[1], hub_ids[int(x[0])]), list(zip(vs, qs)))
    bench("  part: neighbor ids (slice+unique) hubs", lambda v: _neighbor_ids(graph, int(v)), list(vs))
    shown = [toolbox.search_in_neighborhood(int(v), query=q).nodes for v, q in zip(vs, qs)]
    bench("  part: snippet() x20 rows shown for hubs", lambda us: [toolbox.snippet(u) for u in us], shown)

    # ---- report
    print(f"{'case':<48} {'p50 ms':>8} {'p95 ms':>8} {'mean ms':>8} {'max ms':>8}")
    print("-" * 84)
    for label, times, _ in rows:
        p50, p95 = np.percentile(times, [50, 95])
        print(f"{label:<48} {p50:8.3f} {p95:8.3f} {statistics.fmean(times):8.3f} {max(times):8.3f}")
    print()
    print("targets (p50 of each case):")
    ok = True
    for label, times, target in rows:
        if not target:
            continue
        limit = NEIGHBORHOOD_TARGET_MS if target == "neighborhood" else GLOBAL_TARGET_MS
        p50 = float(np.percentile(times, 50))
        passed = p50 <= limit
        ok &= passed
        print(f"  {'PASS' if passed else 'MISS'}  {label:<48} p50 {p50:8.3f} ms <= {limit:g} ms")
    print(f"overall: {'PASS' if ok else 'MISS'}")
    return 0


def _node_words(graph, v: int) -> list[str]:
    """Content words of a node's name and (when present) definition, in order."""
    text = str(graph.name[v])
    for line in str(graph.doc[v]).splitlines():
        line = line.strip().removeprefix("- ")
        if line.startswith("definition:"):
            text += " " + line.removeprefix("definition:")
            break
    return [w for w in _WORD.findall(text) if w.lower() not in _STOP]


def _neighbor_ids(graph, v: int) -> np.ndarray:
    """What search_in_neighborhood scores: distinct neighbor ids without v itself."""
    nbr = np.asarray(graph.nbr[graph.neighbors(v)])
    return np.unique(nbr[nbr != v])


if __name__ == "__main__":
    raise SystemExit(main())
