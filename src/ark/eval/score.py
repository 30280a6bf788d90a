"""Scoring a run's records against gold: per-query rows (``scores.jsonl``) and their means (``metrics.json``).

Where the query set says whether each query's gold is reachable in the graph at all (``QuerySet.answerable``), each
row says so too, and the means are given again over the answerable rows (``answerable/<metric>``, ``n_answerable``).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from ark.eval.metrics import mean_scores, score_query

if TYPE_CHECKING:
    from ark.agent.records import QueryRecord

ANSWERABLE = "answerable"


def score_row(record: QueryRecord, gold: list[int], metrics: list[str], candidates=None,
              answerable: bool | None = None) -> dict:
    """``{id, complete, <metric>: value}`` of one record (and ``answerable`` where it is known)."""
    row = {"id": record.id, "complete": record.complete, **score_query(record.ranking, gold, metrics, candidates)}
    if answerable is not None:
        row[ANSWERABLE] = answerable
    return row


def summarize(rows: list[dict], metrics: list[str]) -> dict:
    """Means over the complete rows. ``n_queries`` is how many queries the means cover; ``n_incomplete`` how many
    were left out because a model call failed after its retries."""
    covered = [row for row in rows if row["complete"]]
    means = _means(covered, metrics)
    if rows and all(ANSWERABLE in row for row in rows):
        subset = _means([row for row in covered if row[ANSWERABLE]], metrics)
        means.update({f"{ANSWERABLE}/{m}": subset[m] for m in metrics}, n_answerable=subset["n_queries"])
    return {**means, "n_incomplete": len(rows) - len(covered)}


def _means(rows: list[dict], metrics: list[str]) -> dict:
    return mean_scores([{m: row[m] for m in metrics} for row in rows]) if rows else \
        {**{m: 0.0 for m in metrics}, "n_queries": 0}


def score_records(records: list[QueryRecord], gold: dict[str, list[int]], metrics: list[str],
                  candidates=None, answerable: dict[str, bool] | None = None) -> tuple[list[dict], dict]:
    """Rows for every record, and their means."""
    rows = [score_row(r, gold[r.id], metrics, candidates, (answerable or {}).get(r.id)) for r in records]
    return rows, summarize(rows, metrics)
