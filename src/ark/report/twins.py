"""Same-named twins: BioKG holds OMIM's and Orphanet's disease entries side by side, and some share their name
(Achondroplasia is OMIM:100800 and ORPHA:15). Only a case's own id is gold, so a twin ranked first is scored a miss.
Here: which nodes are twins, and per query of a run whether its top 1 is the gold (strict), the gold or a twin of it
(twin-aware), a twin and not the gold, and whether its top 20 holds a twin but no gold."""
from __future__ import annotations

from typing import TYPE_CHECKING

import collections

from ark.report.runs import queries_of_run

if TYPE_CHECKING:
    from ark.report.runs import RunData

TWIN_TYPES = ("disease",)


def twins_of(graph, types=TWIN_TYPES) -> dict[int, frozenset]:
    """{node: the other nodes of its type with the same name (case aside)} for the nodes that have any."""
    by_name = collections.defaultdict(list)
    for v in range(graph.num_nodes):
        if graph.type_name(v) in types:
            by_name[str(graph.name[v]).strip().lower()].append(v)
    return {v: frozenset(set(group) - {v}) for group in by_name.values() if len(group) > 1 for v in group}


def twin_hits(run: RunData, twins: dict[int, frozenset]) -> dict[str, tuple[int, int, int, int]]:
    """{query id: (top 1 is gold, top 1 is gold or a twin of it, top 1 is a twin and no gold, top 20 holds a twin and
    no gold)} over the run's records."""
    gold = {q["id"]: set(q["answer_ids"]) for q in queries_of_run(run.config, run.paths, limit=False)}
    out = {}
    for record in run.records:
        g = gold.get(record.id)
        if g is None:
            continue
        equivalent = g | {t for v in g for t in twins.get(v, ())}
        first, top20 = set(record.ranking[:1]), set(record.ranking[:20])
        out[record.id] = (int(bool(first & g)), int(bool(first & equivalent)), int(bool(first & (equivalent - g))),
                          int(bool(top20 & (equivalent - g)) and not top20 & g))
    return out
