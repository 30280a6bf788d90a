"""Table 1: retrieval on BioKG (on the leave-publication-out graph for the case reports, and on the full graph), and
its paired comparisons of ARK with every other row."""
from __future__ import annotations

from typing import TYPE_CHECKING

from pathlib import Path

from ark.report.intervals import METHOD
from ark.report.runs import row_settings
from ark.report.tables.cells import (
    answerable_count,
    answerable_sets,
    ark_setting,
    estimate,
    metric_cells,
    paired_difference,
    row_runs,
    scored_on,
    where,
)
from ark.report.tables.table import LABEL, Table, metric_columns

if TYPE_CHECKING:
    from ark.report.runs import RunData


def table1(runs, query_sets, ark_experiment: str, graph_of: dict | None = None, graphs_loaded: dict | None = None,
           queries_root: Path | None = None) -> Table:
    """Each query set scored on its graph (``graph_of``, ``report.graph_of``: the case reports on the
    leave-publication-out graph); ``graph_of`` None: every set on the full graph (``table1_full``, leaky for the case
    reports)."""
    ark = ark_setting(ark_experiment)
    metrics = ("hit@1", "recall@20", "mrr")
    honest = graph_of is not None
    graphs = scored_on(graph_of or {}, query_sets)
    on = ", ".join(f"{q} on {g}" for q, g in graphs.items())
    # the case reports on the leave-publication-out graph, again on the cases it left answerable
    answerable = [q for q in query_sets if graphs[q] != "biokg"]
    subset = ("hit@1", "mrr")
    t = Table("table1" if honest else "table1_full",
              "Table 1: retrieval on BioKG, test split (x100)" if honest else
              "Table 1, full graph: retrieval on BioKG, test split (x100); leaky for the case reports",
              ["method"] + metric_columns(query_sets, metrics, average=True)
              + [f"{q} answerable {LABEL[m]}" for q in answerable for m in subset],
              note=(f"Graphs: {on}. " if honest else "Every query set on the full graph, whose disease annotations "
                    "partly come from the publications the case reports are taken from (nearly circular for them): "
                    "Table 1 scores them on the leave-publication-out graph. ")
                   + "HPO similarity: each case's HPO terms against every disease's annotations in the same graph "
                   "(Resnik, best match per case term; genes through their diseases), the case reports only. "
                   "ARK-V1 interface: the rules policy over ARK-V1's tools (an anchor by its exact name, its "
                   "relations, their triples; no text search). "
                   + ("Answerable: the cases whose gold disease (for a gene: a disease of the gold gene) keeps at "
                      "least one phenotype annotation in the graph they are scored on; the others cannot be reached "
                      "from their findings by any method. " if answerable else "")
                   + f"ARK here is the scripted rules policy sampled at its temperature ({ark['backbone']}, "
                   f"{ark['n_agents']} agents, T_max {ark['T_max']}, voting), not a language model. The STaRK "
                   "version of this table is stark_table1.md.")
    rows = table1_rows(runs, graphs)
    for label, per_set in rows:
        t.add([label] + metric_cells(per_set, query_sets, metrics, average=True)
              + metric_cells(per_set, answerable, [f"answerable/{m}" for m in subset]), list(per_set.values()))
    t.note += f" {where(rows)} Intervals: {METHOD}."
    sets = answerable_sets(answerable)
    for q in sets if graphs_loaded and queries_root else ():
        if graphs[q] in graphs_loaded:
            t.note += f" {q}: {answerable_count(sets[q], graphs_loaded[graphs[q]], queries_root / q / 'test.jsonl')} " \
                      f"test cases answerable on {graphs[q]}."
    return t


def table1_rows(runs, graphs: dict[str, str], table: str = "table1") -> list[tuple[str, dict[str, RunData]]]:
    """(label, {query set: run}) of Table 1's rows (or ``table``'s) that have runs, each query set on its graph
    (``graphs``)."""
    return [(label, per_set) for label, per_set in row_runs(runs, table, graphs) if per_set]


def table1_paired(runs, query_sets, ark_experiment: str, graph_of: dict, table: str = "table1") -> Table:
    """ARK against every other row of Table 1 (or of ``table``, the every-case table), on the queries both scored (a
    paired bootstrap of the difference)."""
    graphs = scored_on(graph_of, query_sets)
    metrics = ("hit@1", "mrr")
    ark_label = row_settings(ark_experiment).get("label", ark_experiment)
    what = "Table 1" if table == "table1" else "Table 1 on every case"
    t = Table(f"{table}_paired", f"{what}, paired: {ark_label} minus each other method on the same queries "
                                 "(difference x100, 95 % interval, p)",
              ["compared with"] + [c for q in query_sets for c in (*(f"{q} {LABEL[m]} diff" for m in metrics), f"{q} n")],
              note="Each difference is "
                   f"{ark_label}'s mean minus the other method's on the queries both scored; {METHOD}, the same draws "
                   "for both methods; p: two-sided bootstrap p of the difference. A difference whose interval "
                   "covers 0 is not established.")
    rows = dict(table1_rows(runs, graphs, table))
    t.note = f"{where(rows.items())} {t.note}"
    ark = rows.pop(ark_label, {})
    for label, per_set in rows.items():
        cells = []
        for q in query_sets:
            a, b = ark.get(q), per_set.get(q)
            found = [paired_difference(a, b, m) for m in metrics] if a is not None and b is not None else []
            cells += [e for e, _ in found] or [None] * len(metrics)
            cells.append(found[0][1] if found and found[0][1] else None)
        t.add([label] + cells, [r for q in query_sets for r in (ark.get(q), per_set.get(q)) if r])
    return t


def table1_every_case(runs, query_sets, graph: str) -> Table:
    """Table 1's case-report rows that train on nothing (``conf/experiment/table1_all/``) on every case of the
    phenopacket file (split all), on ``graph``, the graph cut for all of them: more publications than the test split,
    so narrower intervals, on a harsher graph."""
    graphs = {q: graph for q in query_sets}
    metrics = ("hit@1", "mrr")
    t = Table("table1_all", f"Table 1 on every case: the case reports' train, validation and test cases on {graph} "
                            "(x100)",
              ["method"] + [c for q in query_sets for c in (*(f"{q} {LABEL[m]}" for m in metrics), f"{q} n",
                                                             f"{q} publications")],
              note=f"A sensitivity table: every case of the phenopacket file, on the graph that leaves out the "
                   f"publications of all of them ({graph}; it empties more gold diseases than Table 1's cut, so the "
                   "numbers are lower), for the methods that train on nothing. table1_all_paired gives ARK minus "
                   "each, paired.")
    rows = table1_rows(runs, graphs, "table1_all")
    for label, per_set in rows:
        cells = []
        for q in query_sets:
            run = per_set.get(q)
            units = run.units() if run else {}
            cells += [estimate(run, m) if run else None for m in metrics]
            cells += [len(run.scores), len(set(units.values()))] if run else [None, None]
        t.add([label] + cells, list(per_set.values()))
    t.note += f" {where(rows)} Intervals: {METHOD}."
    return t
