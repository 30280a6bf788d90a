"""The data tables: queries per split (Table 6), graph statistics (Table 7), what each leave-publication-out graph left
out (lpo)."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from ark.report.tables.cells import answerable_count, answerable_sets
from ark.report.tables.table import Table


def table6(queries_root: Path, query_sets, subset_split: str) -> Table:
    from ark.data.queries import load_queries
    from ark.errors import UserError

    def count(q: str, split: str) -> int | None:
        try:
            return len(load_queries(Path(queries_root) / q, split))
        except UserError:  # no such split file
            return None

    splits = ("train", "val", "test", subset_split)
    t = Table("table6", "Table 6: queries per split on BioKG", ["query set", *splits])
    for q in query_sets:
        if (Path(queries_root) / q / "test.jsonl").exists():
            t.add([q, *(count(q, s) for s in splits)])
    return t


def table7(graphs: dict) -> Table:
    """``graphs``: {name: Graph}."""
    t = Table("table7", "Table 7: graph statistics", ["graph", "node types", "relation types", "nodes", "edges",
                                                      "mean degree", "max degree", "document tokens (mean)",
                                                      "document tokens (total, M)"],
              note="Degrees count both directions of each edge; tokens are whitespace-separated words of d_V(v).")
    for name, g in graphs.items():
        degree = np.diff(np.asarray(g.indptr))
        tokens = np.array([len(str(d).split()) for d in g.doc])
        t.add([name, len(g.node_type_names), len(g.relation_names), g.num_nodes, g.num_edges,
               round(float(degree.mean()), 2), int(degree.max()), round(float(tokens.mean()), 1),
               round(float(tokens.sum()) / 1e6, 2)])
    return t


def table_lpo(graphs: dict, queries_root: Path, query_sets: list[str]) -> Table:
    """What each leave-publication-out graph (a graph whose summary has ``excluded``) left out, and how many of the
    cases of the split it was cut for stay answerable there (``QuerySet.answerable``, as the scoring computes it)."""
    sets = answerable_sets(query_sets)
    t = Table("lpo", "Leave-publication-out graphs: what each left out, and the cases left answerable",
              ["graph", "cut for", "publications", "annotations removed", "diseases emptied",
               *[f"{q} answerable" for q in sets]],
              note="Cut for: the query split whose cases' publications were left out (every case: the whole file). "
                   "Answerable: the cases of that split (test where the whole file was cut) whose gold disease (for "
                   "a gene: a disease of the gold gene) keeps at least one phenotype annotation in the graph, of all "
                   "of them.")
    for name, g in graphs.items():
        cut = g.meta.get("excluded")
        if not cut:
            continue
        splits = cut["source"].get("splits")
        split = (splits or ["test"])[0]
        cells = [name, "/".join(splits) if splits else "every case", cut["publications"], cut["annotations_removed"],
                 cut["diseases_left_without_phenotypes"]]
        cells += [f"{answerable_count(query_set, g, queries_root / q / f'{split}.jsonl')} ({split})"
                  for q, query_set in sets.items()]
        t.add(cells)
    return t
