"""Scoring a run's records against gold: per-query rows (``scores.jsonl``) and their means (``metrics.json``)."""
from __future__ import annotations

from ark.eval.metrics import mean_scores, score_query
from ark.runs.records import QueryRecord


def score_records(records: list[QueryRecord], gold: dict[str, list[int]], metrics: list[str],
                  candidates=None) -> tuple[list[dict], dict]:
    """Rows ``{id, complete, <metric>: value}`` for every record; means over the complete ones.

    ``n_queries`` is how many queries the means cover; ``n_incomplete`` how many were left out because a
    model call failed after its retries.
    """
    rows = [{"id": r.id, "complete": r.complete, **score_query(r.ranking, gold[r.id], metrics, candidates)}
            for r in records]
    covered = [{m: row[m] for m in metrics} for row in rows if row["complete"]]
    means = mean_scores(covered) if covered else {**{m: 0.0 for m in metrics}, "n_queries": 0}
    return rows, {**means, "n_incomplete": len(rows) - len(covered)}
