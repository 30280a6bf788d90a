"""Table 1's twin sensitivity table: Hit@1 strict and twin-aware (a same-named twin of the gold disease ranked first
counts as the gold; ``ark.report.twins``), and ARK minus each row both ways, paired."""
from __future__ import annotations

from ark.report.intervals import METHOD, mean_interval, paired
from ark.report.runs import row_settings, run_graph
from ark.report.tables.cells import scored_on, where
from ark.report.tables.table import Table
from ark.report.tables.table1 import table1_rows
from ark.report.twins import twin_hits, twins_of


def table1_twins(runs, query_sets, ark_experiment: str, graph_of: dict) -> Table:
    """``query_sets``: those whose gold are diseases (``report.twin_query_sets``), each on its graph (``graph_of``)."""
    graphs = scored_on(graph_of, query_sets)
    ark_label = row_settings(ark_experiment).get("label", ark_experiment)
    t = Table("table1_twins", "Table 1 with same-named twins: Hit@1 strict and twin-aware (x100), and ARK minus each "
                              "method both ways (paired)",
              ["method"] + [c for q in query_sets for c in (
                  f"{q} Hit@1 strict", f"{q} Hit@1 twin-aware", f"{q} top 1 a twin", f"{q} top 20 a twin, no gold",
                  f"{q} ARK diff strict", f"{q} ARK diff twin-aware")],
              note="Twin-aware: a disease node with the same name as the gold (OMIM's and Orphanet's entries of one "
                   "disease) ranked first counts as a hit; strict, as in Table 1, only the case's own id does. Top 1 "
                   "a twin: queries whose first answer is such a twin and not the gold; top 20 a twin: queries whose "
                   f"first 20 hold a twin and no gold. ARK diff: {ark_label} minus the row on the queries both "
                   f"scored, paired. The graph keeps both entries: the table shows what counting them as one would "
                   f"change (docs/data.md).")
    rows = dict(table1_rows(runs, graphs))
    twins = {g: twins_of(run_graph(r.config, r.paths)) for per_set in rows.values() for r in per_set.values()
             for g in [r.config["dataset"]["name"]] if g in graphs.values()}
    found = {label: {q: twin_hits(r, twins[r.config["dataset"]["name"]]) for q, r in per_set.items() if q in graphs}
             for label, per_set in rows.items()}
    ark = found.get(ark_label, {})
    for label, per_set in rows.items():
        cells = []
        for q in query_sets:
            hits, run = found[label].get(q), per_set.get(q)
            if not hits:
                cells += [None] * 6
                continue
            ids, units = list(hits), run.units()
            cells += [mean_interval([hits[i][c] for i in ids], [units[i] for i in ids]).scaled(100) for c in (0, 1)]
            cells += [sum(hits[i][2] for i in ids), sum(hits[i][3] for i in ids)]
            mine = ark.get(q)
            common = sorted(set(mine) & set(hits)) if mine and label != ark_label else []
            cells += [paired([mine[i][c] for i in common], [hits[i][c] for i in common],
                             [units[i] for i in common]).scaled(100) if common else None for c in (0, 1)]
        t.add([label] + cells, list(per_set.values()))
    t.note += f" {where(rows.items())} Intervals: {METHOD}."
    return t
