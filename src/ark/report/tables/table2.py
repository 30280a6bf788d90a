"""Table 2: tool ablations."""
from __future__ import annotations

from ark.report.tables.cells import add_metric_rows, ark_setting
from ark.report.tables.table import Table, metric_columns


def table2(runs, graphs: dict[str, str], ark_experiment: str, split: str) -> Table:
    ark = ark_setting(ark_experiment)
    metrics = ("hit@1", "recall@20")
    query_sets = list(graphs)
    t = Table("table2", f"Table 2: tool ablations on BioKG, {split} (x100)", ["toolset"] + metric_columns(query_sets, metrics),
              note=f"ARK over {ark['backbone']} (a scripted policy); {split}: a seeded 10% of the test split.")
    add_metric_rows(t, runs, graphs, metrics)
    return t
