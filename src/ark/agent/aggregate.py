"""Fusing the n agents' ordered answer lists into one ranking (DESIGN §4.3)."""
from __future__ import annotations

import random

from ark.errors import UserError
from ark.settings import AGGREGATIONS as AGGREGATION_NAMES

MAX_RANKING = 20


def voting(lists: list[list[int]], seed: int = 0) -> list[int]:
    """Most agents first; ties by the smallest position in any list, then by the first agent listing it."""
    votes, best_pos, first_agent = {}, {}, {}
    for a, answer in enumerate(lists):
        for pos, v in enumerate(dict.fromkeys(answer)):
            votes[v] = votes.get(v, 0) + 1
            best_pos[v] = min(best_pos.get(v, pos), pos)
            first_agent.setdefault(v, a)
    return sorted(votes, key=lambda v: (-votes[v], best_pos[v], first_agent[v]))


def ordering(lists: list[list[int]], seed: int = 0) -> list[int]:
    """Concatenate in agent order, keeping each node's first appearance."""
    return list(dict.fromkeys(v for answer in lists for v in answer))


def shuffled(lists: list[list[int]], seed: int = 0) -> list[int]:
    """The union in a seeded random order."""
    union = sorted(set(v for answer in lists for v in answer))
    random.Random(seed).shuffle(union)
    return union


AGGREGATIONS = dict(zip(AGGREGATION_NAMES, (voting, ordering, shuffled)))  # agent.aggregation -> its function


def aggregate(lists: list[list[int]], method: str, seed: int = 0, cut: int = MAX_RANKING) -> list[int]:
    if method not in AGGREGATIONS:
        raise UserError(f"unknown aggregation {method!r} (expected {', '.join(AGGREGATIONS)})")
    return AGGREGATIONS[method](lists, seed)[:cut]
