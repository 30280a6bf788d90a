"""How much the leave-publication-out graph changes for the phenopacket test cases.

Prints, for the test split of a phenopacket query set, how many cases have a gold disease that lost
'phenotype present' annotations in ``biokg_lpo``, and how many are left with none. Needs ``dvc repro
build_graph make_queries``. Usage: ``python benchmarks/leave_publication_out.py [queries_name]``.
"""
import json
import sys

import numpy as np

from ark.graph import Graph


def present_degree(graph: Graph) -> np.ndarray:
    rel = graph.relation_names.index("phenotype present")
    keep = graph.edge_rel == rel
    return np.bincount(graph.src[keep], minlength=graph.num_nodes)


def main(queries: str = "phenopackets") -> None:
    full, lpo = present_degree(Graph.load("data/graph/biokg")), present_degree(Graph.load("data/graph/biokg_lpo"))
    cases = [json.loads(line) for line in open(f"data/queries/biokg/{queries}/test.jsonl")]
    golds = [v for q in cases for v in q["answer_ids"] if full[v] > 0]
    print(json.load(open("data/graph/biokg_lpo/summary.json"))["excluded"])
    print(f"{queries} test cases: {len(cases)}; gold diseases that lost annotations: "
          f"{sum(lpo[v] < full[v] for v in golds)}; left with none: {sum(lpo[v] == 0 for v in golds)}")


if __name__ == "__main__":
    main(*sys.argv[1:])
