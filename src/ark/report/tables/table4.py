"""Table 4: BM25 vs dense relevance inside ARK."""
from __future__ import annotations

from ark.report.intervals import METHOD
from ark.report.runs import experiment_config, table_rows
from ark.report.tables.cells import metric_cells, row_runs, where
from ark.report.tables.table import Table, metric_columns


def table4(runs, graphs: dict[str, str]) -> Table:
    metrics = ("hit@1", "recall@20", "mrr")
    split = experiment_config(table_rows("table4")[0], "biokg", "synthetic", ()).split
    query_sets = list(graphs)
    t = Table("table4", f"Table 4: BM25 vs dense relevance inside ARK on BioKG, {split} split (x100)",
              ["relevance"] + metric_columns(query_sets, metrics),
              note="The relevance function ranks both global search and the neighborhood (rel(q, d_V(u))); "
                   "dense: cosine of all-MiniLM-L6-v2 embeddings. The whole test split, as the paper's Table 4.")
    rows = row_runs(runs, "table4", graphs)
    for label, per_set in rows:
        if per_set:
            t.add([label] + metric_cells(per_set, query_sets, metrics), list(per_set.values()))
    t.note += f" {where(rows)} Intervals: {METHOD}."
    return t
