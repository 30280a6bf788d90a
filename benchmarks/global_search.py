"""Global BM25 search and index build: the product (ark's BM25Index) beside tantivy and bm25s, on one corpus.

    python benchmarks/global_search.py --graph data/graph/synthetic_mag [--queries 300] [--k 5]
        [--engines ark tantivy bm25s] [--json results.json]

The corpus is the node documents of a built graph. Each engine runs in a fresh process of its own (the texts loaded
first): build time is wall-clock and memory is the peak resident set above what that process held before the build
(the texts included in that baseline: "above the texts"). Queries come in two kinds, drawn from the corpus with a
fixed seed: "selective" (3-6 words of one document, none of the 100 commonest) and "frequent" (2-3 of the 100
commonest words plus one of a document). Every engine answers the same queries, top --k, single-threaded;
tantivy indexes term frequencies (no positions) with its English stemmer, and searches without counting hits.
"""
from __future__ import annotations

import argparse
import gc
import json
import re
import shlex
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np

import ark  # noqa: F401  (offline environment defaults)
sys.path.insert(0, str(Path(__file__).resolve().parent))  # benchmarks/common.py, however this file is loaded
from common import machine  # noqa: E402

WORD = re.compile(r"(?u)\b\w\w+\b")
ALNUM = re.compile(r"[^\W_]+")  # what tantivy's default tokenizer splits text into


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def peak_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


def measured_build(build):
    """(index, seconds, peak MB above the resident set before the build)."""
    gc.collect()
    Path("/proc/self/clear_refs").write_text("5")  # resets the peak (VmHWM) to the current resident set
    before = rss_mb()
    t = time.perf_counter()
    index = build()
    seconds = time.perf_counter() - t
    return index, seconds, max(0.0, peak_mb() - before)


def make_queries(docs, n: int, seed: int) -> dict[str, list[str]]:
    rng = np.random.default_rng(seed)
    sample = [docs[int(i)] for i in rng.integers(len(docs), size=min(len(docs), 20_000))]
    counts = Counter(w for d in sample for w in set(WORD.findall(str(d).lower())))
    common = [w for w, _ in counts.most_common(100)]
    common_set = set(common)
    queries: dict[str, list[str]] = {"selective": [], "frequent": []}
    while len(queries["selective"]) < n or len(queries["frequent"]) < n:
        words = [w for w in dict.fromkeys(WORD.findall(str(docs[int(rng.integers(len(docs)))]).lower()))
                 if w not in common_set]
        if len(words) < 3:
            continue
        if len(queries["selective"]) < n:
            m = int(rng.integers(3, min(6, len(words)) + 1))
            queries["selective"].append(" ".join(words[i] for i in sorted(rng.choice(len(words), m, replace=False))))
        if len(queries["frequent"]) < n:
            picks = [common[int(i)] for i in rng.choice(len(common), int(rng.integers(2, 4)), replace=False)]
            queries["frequent"].append(" ".join(picks + [words[int(rng.integers(len(words)))]]))
    return queries


# ---------------------------------------------------------------------------------------------------- engines
def ark_engine(docs, k: int):
    from ark.index.bm25 import BM25Index

    index, seconds, mb = measured_build(lambda: BM25Index.build(docs))
    return (lambda q: index.search(q, k)[0]), seconds, mb, index


def tantivy_engine(docs, k: int, threads: int):
    import tantivy

    def build():
        builder = tantivy.SchemaBuilder()
        builder.add_text_field("body", tokenizer_name="en_stem", index_option="freq")
        builder.add_unsigned_field("id", stored=True)
        index = tantivy.Index(builder.build())  # in RAM
        writer = index.writer(heap_size=128_000_000 * max(1, threads), num_threads=threads)
        for i, d in enumerate(docs):
            writer.add_document(tantivy.Document(body=str(d), id=i))
        writer.commit()
        writer.wait_merging_threads()
        index.reload()
        return index

    index, seconds, mb = measured_build(build)
    searcher = index.searcher()

    def search(q: str):
        words = " ".join(ALNUM.findall(q))  # single terms of its tokenizer: no phrases, no query syntax
        return searcher.search(index.parse_query(words, ["body"]), k, count=False).hits

    return search, seconds, mb, index


def bm25s_engine(docs, k: int, backend: str):
    import bm25s
    import Stemmer

    stemmer = Stemmer.Stemmer("english")

    def build():
        retriever = bm25s.BM25(backend=backend)
        retriever.index(bm25s.tokenize(list(docs), stopwords="en", stemmer=stemmer, show_progress=False),
                        show_progress=False)
        return retriever

    retriever, seconds, mb = measured_build(build)

    def search(q: str):
        tokens = bm25s.tokenize([q], stopwords="en", stemmer=stemmer, show_progress=False)
        return retriever.retrieve(tokens, k=k, show_progress=False, n_threads=1)

    return search, seconds, mb, retriever


def timed(search, queries: list[str], warmup: int = 10) -> list[float]:
    for q in queries[:warmup]:
        search(q)
    out = []
    for q in queries:
        t = time.perf_counter()
        search(q)
        out.append((time.perf_counter() - t) * 1e3)
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--graph", required=True, help="a built graph directory: its node documents are the corpus")
    p.add_argument("--limit", type=int, default=None, help="the first N documents only")
    p.add_argument("--queries", type=int, default=300, help="timed queries of each kind")
    p.add_argument("--k", type=int, default=5)
    p.add_argument("--engines", nargs="+", default=["ark", "tantivy", "bm25s"],
                   help="ark, tantivy (1 writer thread), tantivy-auto (its default writer threads), bm25s (numpy), "
                        "bm25s-numba")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", default=None, help="write the figures here")
    args = p.parse_args(argv)

    from ark.graph.graph import Graph

    info = machine()
    command = " ".join(shlex.quote(a) for a in [sys.executable, *sys.argv])
    print(f"machine: {info['cpu']} | {info['cpus']} CPUs | load average {info['load_average']:.2f}")
    print(f"command: {command}")
    t = time.perf_counter()
    docs = Graph.load(args.graph).doc
    docs = list(docs[: args.limit] if args.limit else docs)
    chars = sum(len(str(d)) for d in docs)
    print(f"{len(docs):,} documents, {chars / 1e6:.0f} M characters, loaded in {time.perf_counter() - t:.1f} s; "
          f"resident {rss_mb():.0f} MB")
    queries = make_queries(docs, args.queries, args.seed)

    if len(args.engines) > 1:  # each engine in a fresh process: its peak memory is its own
        import subprocess
        import tempfile

        rows = []
        for name in args.engines:
            with tempfile.NamedTemporaryFile(suffix=".json") as out:
                child = [a for a in (sys.argv[1:] if argv is None else argv)]
                child = _without(child, "--engines", "--json") + ["--engines", name, "--json", out.name]
                subprocess.run([sys.executable, __file__, *child], check=True)
                rows += json.loads(Path(out.name).read_text())["engines"]
        return report(rows, queries, info, command, docs, chars, args)

    rows = []
    for name in args.engines:
        if name == "ark":
            search, seconds, mb, index = ark_engine(docs, args.k)
        elif name.startswith("tantivy"):
            search, seconds, mb, index = tantivy_engine(docs, args.k, 0 if name == "tantivy-auto" else 1)
        elif name.startswith("bm25s"):
            search, seconds, mb, index = bm25s_engine(docs, args.k, "numba" if name == "bm25s-numba" else "numpy")
        else:
            p.error(f"unknown engine {name}")
        row = {"engine": name, "build_s": round(seconds, 2), "build_peak_mb": round(mb),
               "peak_mb_per_million_docs": round(mb / len(docs) * 1e6)}
        for kind, qs in queries.items():
            ms = timed(search, qs)
            row[kind] = {"p50_ms": round(float(np.percentile(ms, 50)), 3),
                         "p95_ms": round(float(np.percentile(ms, 95)), 3), "qps": round(1e3 / float(np.mean(ms)), 1)}
        rows.append(row)
        print(f"{name:>12}: build {row['build_s']:.1f} s, peak +{row['build_peak_mb']:,} MB "
              f"({row['peak_mb_per_million_docs']:,} MB per M docs) | "
              + " | ".join(f"{kind} p50 {row[kind]['p50_ms']:.3f} ms p95 {row[kind]['p95_ms']:.3f} ms "
                           f"{row[kind]['qps']:.0f} q/s" for kind in queries))
        del search, index
        gc.collect()
    return report(rows, queries, info, command, docs, chars, args)


def _without(argv: list[str], *options: str) -> list[str]:
    """``argv`` without the given options and their values."""
    out, skip = [], False
    for a in argv:
        if a in options:
            skip = True
        elif skip and a.startswith("--"):
            skip = False
            out.append(a)
        elif not skip:
            out.append(a)
    return out


def report(rows, queries, info, command, docs, chars, args) -> int:
    ark_row = next((r for r in rows if r["engine"] == "ark"), None)
    if ark_row:
        print("\nark against the others (build time ratio: other / ark; QPS ratio: ark / other):")
        for r in rows:
            if r is ark_row:
                continue
            print(f"  vs {r['engine']}: build {r['build_s'] / ark_row['build_s']:.2f}x, "
                  + ", ".join(f"{kind} QPS {ark_row[kind]['qps'] / r[kind]['qps']:.2f}x" for kind in queries))
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps({"machine": info, "command": command, "documents": len(docs),
                                               "characters": chars, "k": args.k, "queries": args.queries,
                                               "engines": rows}, indent=1))
        print(f"written {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
