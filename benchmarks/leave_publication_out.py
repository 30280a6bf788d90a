"""How much each leave-publication-out graph changes for the phenopacket test cases.

For each graph (default: biokg_lpo, biokg_lpo_val), prints what it left out (``summary.json``'s ``excluded``: the
file, the splits whose cases' publications it left out, publications, annotations removed, diseases touched and
emptied) and, for the split it was cut for (test where it was cut for every case) of a phenopacket query set,
how many cases have a gold disease that lost
'phenotype present' annotations and how many are answerable there at all (``PhenopacketQueries.answerable``, as the
scoring computes it). Needs ``dvc repro build_graph make_queries``.
Usage: ``python benchmarks/leave_publication_out.py [queries_name] [graph ...]``.
"""
import json
import sys

import numpy as np

from ark.config import compose, make
from ark.graph import Graph


def present_degree(graph: Graph) -> np.ndarray:
    rel = graph.relation_names.index("phenotype present")
    keep = graph.edge_rel == rel
    return np.bincount(graph.src[keep], minlength=graph.num_nodes)


def main(queries: str = "phenopackets", *graphs: str) -> None:
    query_set = make(compose([f"queries={queries}"]).queries, "queries")
    full = present_degree(Graph.load("data/graph/biokg"))
    for name in graphs or ("biokg_lpo", "biokg_lpo_val"):
        graph = Graph.load(f"data/graph/{name}")
        split = ((graph.meta.get("excluded") or {}).get("source", {}).get("splits") or ["test"])[0]
        cases = [json.loads(line) for line in open(f"data/queries/biokg/{queries}/{split}.jsonl")]
        lpo = present_degree(graph)
        golds = [v for q in cases for v in q["answer_ids"] if full[v] > 0]
        answerable = sum(query_set.answerable(graph, q["answer_ids"]) for q in cases)
        print(f"{name}: {json.dumps(graph.meta.get('excluded'))}")
        print(f"  {queries} {split} cases: {len(cases)}; gold nodes that lost annotations: "
              f"{sum(lpo[v] < full[v] for v in golds)}; answerable: {answerable} ({100 * answerable / len(cases):.1f}%)")


if __name__ == "__main__":
    main(*sys.argv[1:])
