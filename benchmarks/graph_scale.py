"""How the graph and its neighborhood tool scale, from 100k nodes to STaRK-MAG size, on generated STaRK graphs.

For each size (``--sizes``, in nodes) of a generated graph (``ark.data.synthetic_skb``; ``--skb mag`` or ``prime``),
each step in its own process, so that its peak RSS is its own:

1. generate: the STaRK files (what the download stage writes for ``dataset=synthetic_<skb>``);
2. build: ``load_stark_skb`` + ``Graph.save``, the build_graph stage's work: time and peak RSS;
3. index: the BM25 index over the node documents (``BM25Index.build`` + save), which the tool scores with;
4. tools: the graph as the stages load it (memory-mapped) and, on the same calls, interleaved: the product's
   ``Toolbox.search_in_neighborhood`` (with a query; and without), the raw CSR lookup of the distinct neighbor ids,
   and the reference implementation's edge-table scan with polars (``filter(src == v | dst == v)``), for ids alone
   and followed by the same scoring and top 20; p50/p95 for uniform random nodes and for the top-100 hubs; and the
   memory per million edges of the CSR, of the edge table, and of the polars edge table.

Prints the figures and writes ``--out`` (JSON, with the machine) and a log-log plot of the growth beside it (PNG).

    python benchmarks/graph_scale.py --skb mag --sizes 100000 200000            # ~2 min on 2 cores
    python benchmarks/graph_scale.py --skb mag --sizes 100000 1000000 1872968 2000000 --out logs/graph_scale_mag.json

Needs the ``bench`` extra (polars). Files go under ``--workdir`` (per size: STaRK files, graph, index; about 4 GB
at MAG size); ``--reuse`` keeps what a previous run of the same size and seed wrote.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shlex
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
sys.path.insert(0, str(Path(__file__).resolve().parent))  # benchmarks/common.py, however this file is loaded
from common import machine  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
NUM_HUBS = 100
WARMUP = 5
TARGETS = {"hub_p95_ms": 2.0, "scan_over_csr_p50": 100.0}  # issue 11: tool p95 on hubs, speed-up over the scan
LABEL_WORDS = {"paper", "title", "abstract", "publication", "date", "venue", "author", "name", "count", "citation",
               "field", "study", "institution", "type", "source", "details", "definition", "unknown"}


# ---------------------------------------------------------------- steps (each in its own process)
def step_generate(skb: str, nodes: int, seed: int, work: Path) -> dict:
    from ark.data.synthetic_skb import generate_skb

    start = time.perf_counter()
    result = generate_skb(skb, work / "raw", nodes, seed=seed, queries=100)
    return {"seconds": time.perf_counter() - start, "arcs": result["arcs"]}


def step_build(skb: str, work: Path) -> dict:
    from ark.graph.stark import load_stark_skb

    start = time.perf_counter()
    graph = load_stark_skb(skb, work / "raw")
    loaded = time.perf_counter()
    graph.save(work / "graph")
    return {"seconds": time.perf_counter() - start, "load_stark_seconds": loaded - start,
            "save_seconds": time.perf_counter() - loaded, "nodes": graph.num_nodes, "edges": graph.num_edges}


def step_index(work: Path) -> dict:
    from ark.graph.graph import Graph
    from ark.index.bm25 import BM25Index

    docs = Graph.load(work / "graph").doc
    start = time.perf_counter()
    index = BM25Index.build(docs)
    index.save(work / "index")
    return {"seconds": time.perf_counter() - start, "terms": len(index.retriever.vocab_dict)}


def step_tools(work: Path, calls: int, seed: int) -> dict:
    import polars as pl

    from ark.graph.graph import Graph
    from ark.index.bm25 import BM25Index
    from ark.index.topk import top_k
    from ark.tools.toolbox import Toolbox

    graph = Graph.load(work / "graph")
    index = BM25Index.load(work / "index")
    toolbox = Toolbox(graph, index)
    edges = pl.DataFrame({"src": graph.src, "dst": graph.dst, "rel": graph.edge_rel})
    rng = np.random.default_rng(seed)
    degree = np.diff(np.asarray(graph.indptr))
    hubs = np.argsort(-degree, kind="stable")[:NUM_HUBS]

    def csr_ids(v: int) -> np.ndarray:
        nbr = np.asarray(graph.nbr[graph.neighbors(v)])
        nbr = nbr[nbr != v]
        return nbr[np.r_[True, nbr[1:] != nbr[:-1]]] if len(nbr) else nbr

    def scan_ids(v: int) -> np.ndarray:
        rows = edges.filter((pl.col("src") == v) | (pl.col("dst") == v))
        ids = np.concatenate([rows["dst"].to_numpy(), rows["src"].to_numpy()])
        return np.unique(ids[ids != v])

    def ranked(ids: np.ndarray, query: str) -> np.ndarray:
        """The tool's ranking without its observation text: scores, then the top 20."""
        return ids[top_k(toolbox.relevance.score(query, ids), 20, positive_only=False)[0]] if len(ids) else ids

    approaches = {
        "tool +query": lambda v, q: toolbox.search_in_neighborhood(v, query=q),
        "tool no query": lambda v, q: toolbox.search_in_neighborhood(v),
        "csr neighbor ids": lambda v, q: csr_ids(v),
        "scan neighbor ids": lambda v, q: scan_ids(v),
        "csr + score + top 20": lambda v, q: ranked(csr_ids(v), q),
        "scan + score + top 20": lambda v, q: ranked(scan_ids(v), q),
    }
    figures = {}
    for kind in ("random", "hubs"):
        nodes = rng.choice(hubs, WARMUP + calls) if kind == "hubs" else rng.integers(graph.num_nodes, size=WARMUP + calls)
        queries = [query_words(graph, rng) for _ in nodes]
        times = {name: [] for name in approaches}
        for i, (v, q) in enumerate(zip(nodes.tolist(), queries)):
            for name, fn in approaches.items():  # interleaved: load drift weighs on all alike
                start = time.perf_counter()
                fn(v, q)
                if i >= WARMUP:
                    times[name].append((time.perf_counter() - start) * 1e3)
        for name, ms in times.items():
            p50, p95 = np.percentile(ms, [50, 95])
            figures[f"{kind}: {name}"] = {"p50_ms": float(p50), "p95_ms": float(p95), "mean_ms": float(np.mean(ms))}
        figures[f"{kind}: degree"] = {"median": float(np.median(degree[nodes])), "max": int(degree[nodes].max())}

    million = graph.num_edges / 1e6
    csr = sum(np.asarray(getattr(graph, a)).nbytes for a in ("indptr", "nbr", "rel", "out", "eid"))
    table = sum(a.nbytes for a in (graph.src, graph.dst, graph.edge_rel)) + graph.edge_attr.nbytes  # pointers
    memory = {"csr_mb_per_million_edges": csr / 1e6 / million, "edge_table_mb_per_million_edges": table / 1e6 / million,
              "polars_edge_table_mb_per_million_edges": edges.estimated_size() / 1e6 / million}
    return {"latency": figures, "memory": memory, "max_degree": int(degree.max())}


def query_words(graph, rng) -> str:
    """2-4 words of a random node's document, in order, as an agent's sub-query might be."""
    while True:
        text = str(graph.doc[rng.integers(graph.num_nodes)]).lower()
        words = [w for w in re.findall(r"[a-z][a-z0-9]{1,}", text) if w not in LABEL_WORDS]
        if len(words) >= 2:
            m = min(len(words), int(rng.integers(2, 5)))
            return " ".join(words[i] for i in np.sort(rng.choice(len(words), m, replace=False)))


STEPS = {"generate": step_generate, "build": step_build, "index": step_index, "tools": step_tools}


def run_step(step: str, args, nodes: int, work: Path) -> dict:
    """One step in a fresh process; its result and peak RSS (GB)."""
    cmd = [sys.executable, __file__, "--step", step, "--skb", args.skb, "--sizes", str(nodes), "--seed",
           str(args.seed), "--calls", str(args.calls), "--workdir", str(args.workdir)]
    out = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "PYTHONHASHSEED": "0"})
    if out.returncode != 0:
        sys.exit(f"step {step} at {nodes:,} nodes failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


# ---------------------------------------------------------------- report
def plot(results: list[dict], path: Path, skb: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    nodes = [r["nodes"] for r in results]
    fig, axes = plt.subplots(1, 4, figsize=(21, 4.8))
    series = [
        (axes[0], "seconds", [(step, lambda r, s=step: r[s].get("seconds")) for step in ("generate", "build", "index")]),
        (axes[1], "peak RSS (GB)", [(step, lambda r, s=step: r[s].get("peak_rss_gb"))
                                    for step in ("generate", "build", "index")]),
        (axes[2], "neighborhood, top-100 hubs (ms)", [
            (f"{name} {p}", lambda r, name=name, p=p: r["tools"]["latency"][f"hubs: {name}"][f"{p}_ms"])
            for name in ("tool +query", "csr + score + top 20", "scan + score + top 20") for p in ("p50", "p95")]
         + [(f"{name} p50", lambda r, name=name: r["tools"]["latency"][f"hubs: {name}"]["p50_ms"])
            for name in ("csr neighbor ids", "scan neighbor ids")]),
        (axes[3], "MB per million edges", [
            *((name, lambda r, key=key: r["tools"]["memory"][key]) for name, key in (
                ("CSR (both directions)", "csr_mb_per_million_edges"), ("edge table", "edge_table_mb_per_million_edges"),
                ("polars edge table", "polars_edge_table_mb_per_million_edges"))),
            ("build peak RSS", lambda r: r["build"].get("peak_rss_gb") and
             r["build"]["peak_rss_gb"] * 1e3 / (r["build"]["edges"] / 1e6))]),
    ]
    for ax, label, lines in series:
        for name, value in lines:
            points = [(n, value(r)) for n, r in zip(nodes, results) if value(r)]  # a reused step has no figures
            if points:
                ax.plot(*zip(*points), marker="o", label=name, linestyle="--" if name.endswith("p95") else "-")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("nodes")
        ax.set_ylabel(label)
        ax.grid(True, which="both", alpha=0.3)
        if ax.lines:
            ax.legend(fontsize=7)
    fig.suptitle(f"generated STaRK-{skb.upper()} graphs: build, memory and neighborhood latency by size")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def _cell(step: dict, key: str, width: int, spec: str) -> str:
    """A figure of a step, or '-' for a step reused from an earlier run."""
    value = step.get(key)
    return f"{'-' if value is None else format(value, spec):>{width}}"


def report(results: list[dict]) -> None:
    print(f"\n{'nodes':>10} {'edges':>11} {'generate s':>10} {'GB':>5} {'build s':>8} {'GB':>5} {'index s':>8} "
          f"{'GB':>5} {'CSR MB/M edges':>14} {'edge table':>10} {'polars':>7} {'max degree':>10}")
    for r in results:
        m, g, b, i = r["tools"]["memory"], r["generate"], r["build"], r["index"]
        print(f"{r['nodes']:>10,} {b['edges']:>11,} {_cell(g, 'seconds', 10, '.1f')} {_cell(g, 'peak_rss_gb', 5, '.2f')} "
              f"{_cell(b, 'seconds', 8, '.1f')} {_cell(b, 'peak_rss_gb', 5, '.2f')} {_cell(i, 'seconds', 8, '.1f')} "
              f"{_cell(i, 'peak_rss_gb', 5, '.2f')} {m['csr_mb_per_million_edges']:>14.1f} "
              f"{m['edge_table_mb_per_million_edges']:>10.1f} {m['polars_edge_table_mb_per_million_edges']:>7.1f} "
              f"{r['tools']['max_degree']:>10,}")
    for r in results:
        lat = r["tools"]["latency"]
        print(f"\n{r['nodes']:,} nodes: neighborhood latency, ms (random nodes: median degree "
              f"{lat['random: degree']['median']:.0f}; top-100 hubs: degree up to {lat['hubs: degree']['max']:,})")
        print(f"  {'case':<36} {'p50':>9} {'p95':>9}")
        for name, v in lat.items():
            if "p50_ms" in v:
                print(f"  {name:<36} {v['p50_ms']:>9.3f} {v['p95_ms']:>9.3f}")
        for kind in ("random", "hubs"):
            ids, top = (lat[f"{kind}: scan {case}"]["p50_ms"] / lat[f"{kind}: csr {case}"]["p50_ms"]
                        for case in ("neighbor ids", "+ score + top 20"))
            print(f"  {kind}, scan / CSR at p50: neighbor ids {ids:,.0f}x, ranked top 20 {top:,.1f}x")
        hub_p95 = lat["hubs: tool +query"]["p95_ms"]
        print(f"  tool p95 on hubs {hub_p95:.3f} ms: {'PASS' if hub_p95 <= TARGETS['hub_p95_ms'] else 'MISS'} "
              f"(target {TARGETS['hub_p95_ms']:g} ms at MAG size)")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--skb", choices=["mag", "prime"], default="mag")
    p.add_argument("--sizes", type=int, nargs="+", default=[100_000, 200_000], help="graph sizes in nodes")
    p.add_argument("--calls", type=int, default=300, help="timed neighborhood calls per node kind")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--workdir", type=Path, default=ROOT / "logs/graph_scale")
    p.add_argument("--out", type=Path, default=ROOT / "logs/graph_scale.json")
    p.add_argument("--reuse", action="store_true", help="keep the files a previous run wrote for a size")
    p.add_argument("--step", choices=list(STEPS), help=argparse.SUPPRESS)  # internal: run one step, print JSON
    args = p.parse_args(argv)

    if args.step:
        work = args.workdir / f"{args.skb}-s{args.seed}" / f"n{args.sizes[0]}"
        work.mkdir(parents=True, exist_ok=True)
        kwargs = {"generate": dict(skb=args.skb, nodes=args.sizes[0], seed=args.seed, work=work),
                  "build": dict(skb=args.skb, work=work), "index": dict(work=work),
                  "tools": dict(work=work, calls=args.calls, seed=args.seed)}[args.step]
        result = STEPS[args.step](**kwargs)
        result["peak_rss_gb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6  # kB on Linux
        print(json.dumps(result))
        return 0

    info = {"machine": machine(("numpy", "polars", "bm25s", "torch")), "command": " ".join(shlex.quote(a) for a in [sys.executable, *sys.argv]),
            "skb": args.skb, "seed": args.seed, "calls": args.calls, "loadavg_before": os.getloadavg(),
            "targets": TARGETS, "results": []}
    print(json.dumps(info["machine"]))
    print(f"command: {info['command']}")
    for nodes in sorted(args.sizes):
        work = args.workdir / f"{args.skb}-s{args.seed}" / f"n{nodes}"
        result = {"nodes": nodes}
        for step in STEPS:
            done = {"generate": work / "raw" / "qa", "build": work / "graph" / "summary.json",
                    "index": work / "index" / "ark_bm25.json"}.get(step)
            if args.reuse and done is not None and done.exists():
                result[step] = {"reused": True}
                if step == "build":
                    summary = json.loads(done.read_text())
                    result[step].update(nodes=summary["num_nodes"], edges=summary["num_edges"])
                continue
            start = time.perf_counter()
            result[step] = run_step(step, args, nodes, work)
            print(f"{nodes:,} nodes: {step} done in {time.perf_counter() - start:.1f} s, "
                  f"peak RSS {result[step]['peak_rss_gb']:.2f} GB", flush=True)
        info["results"].append(result)
    info["loadavg_after"] = os.getloadavg()
    report(info["results"])
    print(f"\nload average {info['loadavg_before']} before, {info['loadavg_after']} after")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(info, indent=1))
    plot(info["results"], args.out.with_suffix(".png"), args.skb)
    print(f"written {args.out} and {args.out.with_suffix('.png')}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
