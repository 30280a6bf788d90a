"""Table 3: aggregation, recomputed from the per-agent answer lists of Table 1's ARK runs."""
from __future__ import annotations

from typing import TYPE_CHECKING

from dataclasses import replace

from ark.agent.aggregate import AGGREGATIONS, aggregate
from ark.eval.score import score_records
from ark.report.intervals import METHOD, mean_interval
from ark.report.runs import experiment_runs
from ark.report.tables.cells import ark_setting, where
from ark.report.tables.table import METRICS, Table, metric_columns, pct

if TYPE_CHECKING:
    from ark.report.runs import RunData


def fused_scores(run: RunData, method: str) -> dict:
    """Mean metrics (x100, with intervals) of a run re-fused from its stored per-agent answer lists with another
    aggregation."""
    gold = {q["id"]: q["answer_ids"] for q in run.queries()}
    seed = run.config.get("seed", 0)
    fused = [replace(r, ranking=aggregate([a.answer for a in r.agents], method, seed=seed)) for r in run.records]
    rows, means = score_records(fused, gold, list(METRICS), run.candidates())
    units = run.units()
    kept = [row for row in rows if row["complete"]]
    return {m: replace(mean_interval([row[m] for row in kept], [units[row["id"]] for row in kept]).scaled(100),
                       value=pct(means[m])) for m in METRICS}


def table3(runs, graphs: dict[str, str], ark_experiment: str) -> Table:
    ark = ark_setting(ark_experiment)
    metrics = ("hit@1", "recall@20", "mrr")
    query_sets = list(graphs)
    t = Table("table3", f"Table 3: aggregation of the same {ark['n_agents']}-agent runs on BioKG, test split (x100)",
              ["aggregation"] + metric_columns(query_sets, metrics),
              note="Computed from the per-agent answer lists stored in Table 1's ARK runs (not rerun): voting ranks "
                   "by agent count, ordering concatenates, random shuffles the union (seeded); each cut at 20.")
    per_set = experiment_runs(runs, ark_experiment, query_sets, graphs)
    t.note += f" {where([('ark', per_set)])} Intervals: {METHOD}."
    for method in AGGREGATIONS:
        if per_set:
            scored = {q: fused_scores(r, method) for q, r in per_set.items()}
            t.add([method] + [scored[q][m] if q in scored else None for q in query_sets for m in metrics],
                  list(per_set.values()))
    return t
