"""Table 4: BM25 vs dense relevance inside ARK."""
from __future__ import annotations

from ark.report.runs import experiment_spec, table_rows
from ark.report.tables.cells import add_metric_rows
from ark.report.tables.table import Table, metric_columns


def table4(runs, graphs: dict[str, str]) -> Table:
    metrics = ("hit@1", "recall@20", "mrr")
    split = experiment_spec(table_rows("table4")[0], "biokg", "synthetic", ()).split
    query_sets = list(graphs)
    t = Table("table4", f"Table 4: BM25 vs dense relevance inside ARK on BioKG, {split} split (x100)",
              ["relevance"] + metric_columns(query_sets, metrics),
              note="The relevance function ranks both global search and the neighborhood (rel(q, d_V(u))); "
                   "dense: cosine of all-MiniLM-L6-v2 embeddings. The whole test split, as the paper's Table 4.")
    add_metric_rows(t, runs, graphs, metrics)
    return t
