"""How much of BM25's phenopacket -> disease score comes from the 'Not observed' sentence.

    python benchmarks/phenopackets_excluded_terms.py [--split test]

Scores one BM25 search per case twice: the query as rendered, and the same query without its excluded findings.
"""
import argparse
import re
import sys
from pathlib import Path

import ark  # noqa: F401
from ark.data.queries import load_queries
from ark.eval.metrics import mean_scores, score_query
from ark.index.bm25 import BM25Index

ROOT = Path(__file__).resolve().parents[1]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--queries", default=str(ROOT / "data/queries/biokg/phenopackets"))
    p.add_argument("--index", default=str(ROOT / "data/index/biokg/bm25"))
    p.add_argument("--split", default="test")
    args = p.parse_args()
    index = BM25Index.load(args.index)
    queries = load_queries(args.queries, args.split)
    variants = {"as rendered": lambda t: t,
                "without 'Not observed: ...'": lambda t: re.sub(r" Not observed: [^.]*\.", "", t)}
    print(f"{len(queries)} queries ({args.split}); BM25 top 100; x100")
    for name, render in variants.items():
        per_query = [score_query(index.search(render(q["query"]), 100)[0].tolist(), q["answer_ids"]) for q in queries]
        m = mean_scores(per_query)
        print(f"{name:<30} " + "  ".join(f"{k} {100 * m[k]:.2f}" for k in ("hit@1", "hit@5", "recall@20", "mrr")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
