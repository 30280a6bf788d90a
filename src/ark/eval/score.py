"""Scoring a run's records against gold: per-query rows (``scores.jsonl``) and their means (``metrics.json``)."""
from __future__ import annotations

from ark.eval.metrics import mean_scores, score_query
from ark.agent.records import QueryRecord


def score_row(record: QueryRecord, gold: list[int], metrics: list[str], candidates=None) -> dict:
    """``{id, complete, <metric>: value}`` of one record."""
    return {"id": record.id, "complete": record.complete, **score_query(record.ranking, gold, metrics, candidates)}


def summarize(rows: list[dict], metrics: list[str]) -> dict:
    """Means over the complete rows. ``n_queries`` is how many queries the means cover; ``n_incomplete`` how many
    were left out because a model call failed after its retries."""
    covered = [{m: row[m] for m in metrics} for row in rows if row["complete"]]
    means = mean_scores(covered) if covered else {**{m: 0.0 for m in metrics}, "n_queries": 0}
    return {**means, "n_incomplete": len(rows) - len(covered)}


def score_records(records: list[QueryRecord], gold: dict[str, list[int]], metrics: list[str],
                  candidates=None) -> tuple[list[dict], dict]:
    """Rows for every record, and their means."""
    rows = [score_row(r, gold[r.id], metrics, candidates) for r in records]
    return rows, summarize(rows, metrics)
