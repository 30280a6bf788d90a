"""What the tables share: a row's runs (by its row files), each cell's estimate with its interval, where the runs were
scored, and which cases are answerable on a graph."""
from __future__ import annotations

from typing import TYPE_CHECKING

from dataclasses import replace
from pathlib import Path

import numpy as np

from ark.io import read_jsonl
from ark.report.intervals import METHOD, average_interval, mean_interval, paired
from ark.report.runs import experiment_spec, experiment_runs, row_settings, table_rows
from ark.report.tables.table import pct

if TYPE_CHECKING:
    from ark.report.intervals import Estimate
    from ark.report.runs import RunData
    from ark.report.tables.table import Table


def scored_on(graph_of: dict, query_sets) -> dict[str, str]:
    """The graph each query set is scored on, as Table 1 scores it (``report.graph_of``; BioKG's full graph else)."""
    return {q: graph_of.get(q, "biokg") for q in query_sets}


def headline(table1: dict, query_sets: list[str], ark_label: str, graph_of: dict) -> dict[str, dict]:
    """The numbers ``dvc metrics show`` prints, one file a query set: the graph it is scored on and Hit@1 (x100) of
    BM25 and of ARK with their 95 % interval, from Table 1's numbers (``Table.numbers``); ARK is the row labelled
    ``ark_label``, its row file's label (``report.ark``: ``row_settings``). Every table's numbers are in
    ``tables/numbers.json``."""
    rows = {"ark": table1.get(ark_label, {}), "bm25": table1.get("BM25", {})}
    out = {}
    for q, graph in scored_on(graph_of, query_sets).items():
        hit1 = {f"{method}{end.replace(' ', '_')}": row[f"{q} Hit@1{end}"] for method, row in rows.items()
                for end in ("", " lo", " hi") if f"{q} Hit@1{end}" in row}
        if hit1:
            out[q] = {"graph": graph, "hit@1": hit1}
    return out


def per_query(run: RunData, metric: str, ids=None) -> tuple[list[float], list[str]]:
    """(scores, resampling units) of a run's complete queries (only ``ids`` where given) for ``metric``;
    ``answerable/<metric>``: its queries that are answerable on its graph."""
    name = metric.removeprefix("answerable/")
    units = run.units()
    keep = [(i, row) for i, row in run.scores.items() if (ids is None or i in ids) and row.get("complete", True)
            and name in row and (name == metric or row.get("answerable"))]
    return [float(row[name]) for _, row in keep], [units[i] for i, _ in keep]


def estimate(run: RunData, metric: str, ids=None) -> Estimate | None:
    """A run's mean ``metric`` (x100) with its interval; without ``ids`` the mean is the run's published one."""
    values, units = per_query(run, metric, ids)
    if not values:
        return None
    e = mean_interval(values, units).scaled(100)
    published = run.metrics.get(metric) if ids is None else None
    return e if published is None else replace(e, value=pct(published))


def paired_difference(a: RunData, b: RunData, metric: str, ids=None) -> tuple[Estimate | None, int]:
    """``a``'s mean ``metric`` minus ``b``'s (x100) on the complete queries both scored (of ``ids`` where given),
    with its paired interval (the same publications drawn for both), and how many queries that is."""
    both = set(a.scores) & set(b.scores)
    common = [i for i in sorted(both if ids is None else both & set(ids))
              if a.scores[i].get("complete", True) and b.scores[i].get("complete", True)]
    if not common:
        return None, 0
    units = a.units()
    return paired([a.scores[i][metric] for i in common], [b.scores[i][metric] for i in common],
                  [units[i] for i in common]).scaled(100), len(common)


def metric_cells(found: dict[str, RunData], query_sets: list[str], metrics, average: bool = False) -> list:
    """Cells of one row: each query set's metrics with their intervals, then their average over query sets when
    every one ran (each set resampled on its own)."""
    cells = [estimate(found[q], m) if q in found else None for q in query_sets for m in metrics]
    if average:
        full = all(q in found for q in query_sets)
        cells += [_average(found, query_sets, m) if full else None for m in metrics]
    return cells


def _average(found: dict[str, RunData], query_sets: list[str], metric: str) -> Estimate:
    e = average_interval([per_query(found[q], metric) for q in query_sets]).scaled(100)
    return replace(e, value=round(float(np.mean([pct(found[q].metrics.get(metric)) for q in query_sets])), 2))


def ark_setting(experiment: str) -> dict:
    """Backbone, agents and T_max of the ARK row's experiment file (for titles and notes)."""
    c = experiment_spec(experiment, "biokg", "synthetic", ())
    return {"backbone": c.backbone.name, "n_agents": c.agent.n_agents, "T_max": c.agent.T_max}


def row_runs(runs, table: str, graphs: dict[str, str]) -> list[tuple[str, dict[str, RunData]]]:
    """(label, {query set: run}) of each row of a table, from its experiment files (``conf/experiment/<table>/``),
    each query set on its graph (``graphs``)."""
    return [(row_settings(e).get("label", e), experiment_runs(runs, e, list(graphs), graphs)) for e in table_rows(table)]


def where(rows) -> str:
    """What a table's runs were scored on, from the runs themselves: each query set's graph, split and number of
    queries (``rows``: (label, {query set: run}) pairs; a set's first run speaks for it)."""
    seen = {}
    for _, per_set in rows:
        for q, r in per_set.items():
            seen.setdefault(q, f"{q} on {r.config['dataset']['name']}, {r.config['split']}, "
                               f"n={r.metrics.get('n_queries')}")
    return "Scored on: " + "; ".join(seen.values()) + "." if seen else ""


def answerable_sets(query_sets: list[str]) -> dict:
    """The query sets (by name) that say whether a query is answerable on a graph (``QuerySet.answerable``)."""
    from ark.build import spec_of
    from ark.data import QuerySet

    sets = {q: spec_of([f"queries={q}"], "baseline").queries for q in query_sets}
    return {q: s for q, s in sets.items() if type(s).answerable is not QuerySet.answerable}


def answerable_count(query_set, graph, split_file: Path) -> str:
    """"n of N": how many queries of ``split_file`` are answerable on ``graph``, as the scoring computes it."""
    rows = read_jsonl(split_file)
    return f"{sum(query_set.answerable(graph, r['answer_ids']) for r in rows)} of {len(rows)}"


def add_metric_rows(t: Table, runs, graphs: dict[str, str], metrics) -> None:
    """A row of ``t`` for each of its row files that has runs (``conf/experiment/<t.name>/``): each query set's
    ``metrics`` with their intervals; the note says where the runs were scored and how the intervals are made."""
    rows = row_runs(runs, t.name, graphs)
    for label, per_set in rows:
        if per_set:
            t.add([label] + metric_cells(per_set, list(graphs), metrics), list(per_set.values()))
    t.note += f" {where(rows)} Intervals: {METHOD}."
