"""Table 8: cost-controlled budgets."""
from __future__ import annotations

import numpy as np

from ark.report.intervals import METHOD
from ark.report.tables.cells import ark_setting, metric_cells, row_runs, where
from ark.report.tables.table import Table, metric_columns


def table8(runs, graphs: dict[str, str], ark_experiment: str) -> Table:
    ark = ark_setting(ark_experiment)
    metrics = ("hit@1", "recall@20", "mrr")
    query_sets = list(graphs)
    t = Table("table8", "Table 8: cost-controlled budgets on BioKG, test split (x100)",
              ["budget"] + metric_columns(query_sets, metrics) + ["steps per query"],
              note=f"Both settings allow 30 steps per query. {ark['backbone']} is scripted: it finishes in at most "
                   "3 steps, so a larger T_max cannot help it; more agents can (voting).")
    rows = row_runs(runs, "table8", graphs)
    t.note += f" {where(rows)} Intervals: {METHOD}."
    for label, per_set in rows:
        if per_set:
            steps = [sum(a.steps for rec in r.records for a in rec.agents) / len(r.records) for r in per_set.values()]
            t.add([label] + metric_cells(per_set, query_sets, metrics)
                  + [round(float(np.mean(steps)), 2)], list(per_set.values()))
    return t
