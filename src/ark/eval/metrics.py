"""Retrieval metrics with STaRK semantics (DESIGN §4.5, notes/stark-format.md §4).

For one query with a ranked list ``R`` (best first) and gold ids ``G``:

- ``gold' = set(G) ∩ candidates`` (``candidates=None`` means every id is a candidate);
- ``R`` keeps the first occurrence of each id; an id that is not a candidate (an author on MAG, a brand on
  AMAZON in an agent's fused list) keeps its rank as a miss, as the paper evaluates. STaRK's own outputs rank
  candidates only, so on those this is exactly STaRK's scoring (the parity test);
- ``hit@k = 1`` if any of ``R[:k]`` is in gold';
- ``recall@k = |R[:k] ∩ gold'| / |gold'|`` (the denominator is not capped at k);
- ``mrr = 1 / rank`` of the first gold' item in ``R`` (no cut-off; 0 if none);
- empty gold' gives 0 for every metric.

Means over queries are unweighted.
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

from ark.errors import UserError

DEFAULT_METRICS = ("hit@1", "hit@5", "recall@20", "mrr")
STARK_METRICS = (
    "hit@1", "hit@3", "hit@5", "hit@10", "hit@20", "hit@50",
    "recall@5", "recall@10", "recall@20", "recall@50", "recall@100",
    "mrr",
)  # fmt: skip
_KINDS_WITH_K = ("hit", "recall", "precision")


def parse_metric(name: str) -> tuple[str, int | None]:
    """Split a metric name like ``"hit@5"`` into ``("hit", 5)``; ``"mrr"`` gives ``("mrr", None)``."""
    kind, _, k = name.partition("@")
    if kind == "mrr" and not k:
        return "mrr", None
    if kind in _KINDS_WITH_K and k.isdigit() and int(k) > 0:
        return kind, int(k)
    raise UserError(f"unknown metric {name!r}; use mrr or hit@k, recall@k, precision@k with k >= 1")


def as_candidates(candidates):
    """Return candidates ready for fast ``in`` tests: None stays None, lists/arrays become a set.

    Any other object with ``__contains__`` (a set, a range, a custom "all but" container) is used as is.
    Convert once and reuse it across queries.
    """
    if candidates is None:
        return None
    if isinstance(candidates, (list, tuple, np.ndarray)):
        return set(np.asarray(candidates).tolist())
    if not hasattr(candidates, "__contains__"):
        return set(candidates)
    return candidates


def score_query(
    ranked: Iterable,
    answer_ids: Iterable,
    metrics: Sequence[str] = DEFAULT_METRICS,
    candidates=None,
) -> dict[str, float]:
    """Score one ranked list (best first) against its gold ids; returns ``{metric name: value}``."""
    parsed = [parse_metric(m) for m in metrics]
    candidates = as_candidates(candidates)
    answers = answer_ids.tolist() if isinstance(answer_ids, np.ndarray) else answer_ids
    gold = {a for a in answers if candidates is None or a in candidates}
    if not gold:
        return {m: 0.0 for m in metrics}

    if isinstance(ranked, np.ndarray):
        ranked = ranked.tolist()
    # 0-based positions of gold items in the deduplicated ranking; a non-candidate keeps its rank as a miss
    gold_ranks = []
    seen = set()
    position = 0
    for item in ranked:
        if item in seen:
            continue
        seen.add(item)
        if item in gold:
            gold_ranks.append(position)
            if len(gold_ranks) == len(gold):
                break
        position += 1

    scores = {}
    for name, (kind, k) in zip(metrics, parsed):
        if kind == "mrr":
            scores[name] = 1.0 / (gold_ranks[0] + 1) if gold_ranks else 0.0
            continue
        found = sum(1 for r in gold_ranks if r < k)
        if kind == "hit":
            scores[name] = float(found > 0)
        elif kind == "recall":
            scores[name] = found / len(gold)
        else:  # precision
            scores[name] = found / k
    return scores


def mean_scores(per_query: Sequence[dict]) -> dict[str, float]:
    """Unweighted mean of per-query score dicts (numeric values of the first dict's keys), plus ``n_queries``."""
    per_query = list(per_query)
    if not per_query:
        return {"n_queries": 0}
    names = [k for k, v in per_query[0].items() if isinstance(v, (int, float, np.number)) and not isinstance(v, bool)]
    means = {name: float(np.mean([q[name] for q in per_query])) for name in names}
    means["n_queries"] = len(per_query)
    return means


def evaluate_rankings(
    rankings: Iterable[Iterable],
    answers: Iterable[Iterable],
    metrics: Sequence[str] = DEFAULT_METRICS,
    candidates=None,
) -> dict[str, float]:
    """Score paired ranked lists and gold lists and return their means (with ``n_queries``)."""
    candidates = as_candidates(candidates)
    per_query = [score_query(r, a, metrics, candidates) for r, a in zip(rankings, answers, strict=True)]
    if not per_query:
        return {**{m: 0.0 for m in metrics}, "n_queries": 0}
    return mean_scores(per_query)
