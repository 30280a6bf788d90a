"""The ranking engine: a baseline's run (one ranking per query, no agents), resumable and scored like an agent run.

Beside the agent engine (``ark.runs.execute``) and sharing nothing with it but the run store and the scoring, so a
baseline's fingerprint carries no agent code.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import time

from tqdm import tqdm

from ark.agent.records import QueryRecord
from ark.eval.metrics import as_candidates
from ark.eval.score import score_records
from ark.runs.store import Run, open_store

if TYPE_CHECKING:
    from ark.build import RunSpec


def execute_ranking(spec: RunSpec, stage: str, graph, queries: list[dict], rank, desc: str) -> dict:
    """A baseline's run: ``rank(query) -> (node ids, scores)`` for each query not done yet, stored as it goes
    (resumable like an agent run), then scored; its metrics and directory."""
    run = Run(spec, stage)
    store = open_store(run, queries)
    start = time.perf_counter()
    for q in tqdm(queries, desc=desc, mininterval=2, disable=not spec.eval.progress):
        if not store.done(q["id"]):
            ranking, scores = rank(q)
            store.add(QueryRecord(id=q["id"], query=q["query"], ranking=ranking, ranking_scores=scores))
    records = store.finalize([q["id"] for q in queries])
    candidates = as_candidates(graph.candidates())
    scores, metrics = score_records(records, {q["id"]: q["answer_ids"] for q in queries}, list(spec.metrics),
                                    candidates, answerable(spec, graph, queries))
    run.finish(scores, metrics, {})
    run.write_timing({"seconds": round(time.perf_counter() - start, 2)})
    return {**metrics, "run_dir": str(run.dir)}


def answerable(spec: RunSpec, graph, queries: list[dict]) -> dict[str, bool]:
    """Whether each query's gold is reachable in ``graph`` (the query set's ``answerable``; empty where it has no
    such notion): scored beside the whole split, never shown to an agent."""
    query_set = spec.queries
    known = {q["id"]: query_set.answerable(graph, q["answer_ids"]) for q in queries}
    return {k: v for k, v in known.items() if v is not None}
