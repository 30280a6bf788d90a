"""The paper's tables from runs (``ark.report.runs``): each row is recognised by its runs' stored configs.

A ``Table`` is plain data (title, columns, rows, a note, the runs behind each row) written as Markdown and CSV by the
report stage. Metrics are shown x100, each with its 95 % interval (``ark.report.intervals``: an ``Estimate`` cell; the
CSV and ``numbers.json`` carry its bounds as ``<column> lo`` and ``<column> hi``). Markdown stays within
``WIDTH`` columns: a wider table is split into blocks of columns, each repeating the first. Table numbers follow the paper (arXiv 2601.13969, camera-ready numbering):
1 main results, 2 tool ablations, 3 aggregation, 4 BM25 vs dense inside ARK, 5 backbones and distillation,
6 split sizes, 7 graph statistics, 8 cost-controlled budgets, 9 tool use, 10 re-anchoring.
"""
from __future__ import annotations

import csv
import io
import json
import textwrap
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from ark.agent.aggregate import AGGREGATIONS, aggregate
from ark.eval.metrics import score_query
from ark.eval.score import score_records
from ark.eval.trajectories import run_statistics, steps
from ark.io import read_jsonl
from ark.report.intervals import METHOD, Estimate, bootstrap, bootstrap_average, paired
from ark.report.runs import RunData, experiment_config, experiment_runs, row_settings, table_rows
from ark.runs.identity import portable

METRICS = ("hit@1", "hit@5", "recall@20", "mrr")
LABEL = {"hit@1": "Hit@1", "hit@5": "Hit@5", "recall@20": "R@20", "mrr": "MRR"}
WIDTH = 200  # the widest Markdown line of a table


@dataclass
class Table:
    name: str  # file stem, e.g. table1
    title: str
    columns: list[str]
    rows: list[list] = field(default_factory=list)  # cells: numbers (already x100 where metrics) or text
    note: str = ""
    runs: dict[str, list[str]] = field(default_factory=dict)  # row label -> run directories behind it
    labels: list[str] = field(default_factory=list)  # one per row: its first cell unless given
    keys: int = 1  # the leading columns that say what a row is: repeated in each Markdown block
    machine_dependent: list[str] = field(default_factory=list)  # rows whose runs depend on the CPU (ark.report.check)

    def add(self, cells: list, runs: list[RunData] = (), label: str | None = None) -> None:
        label = str(cells[0]) if label is None else label
        if label in self.labels:
            raise ValueError(f"{self.name}: two rows labelled {label!r}")
        self.rows.append(cells)
        self.labels.append(label)
        if runs:
            self.runs[label] = [str(r.dir) for r in runs]
        if any(portable(r.config) != r.config for r in runs):  # a value this machine resolved: dtype, bf16, threads
            self.machine_dependent.append(label)

    def markdown(self) -> str:
        lines = textwrap.wrap(f"**{self.title}**", WIDTH) + [""]
        for block in self.blocks():
            shown = [[row[i] for i in block] for row in self.rows]
            lines += ["| " + " | ".join(self.columns[i] for i in block) + " |", "|" + "---|" * len(block)]
            lines += ["| " + " | ".join(cell_text(c) for c in row) + " |" for row in shown] + [""]
        if self.note:
            lines += textwrap.wrap(self.note, WIDTH)
        if self.runs:
            lines += ["", "Runs (`ark show <dir>` prints their trajectories):"]
            for label, dirs in self.runs.items():
                lines += [f"- {label}:"] + [f"  `{d}`" for d in dirs]
        return "\n".join(lines).rstrip("\n") + "\n"

    def blocks(self) -> list[list[int]]:
        """Column indices of each Markdown block: all columns where they fit in ``WIDTH``, else the ``keys`` columns
        with as many of the next ones (kept together by the query set that starts their name) as fit."""
        def width(block: list[int]) -> int:
            return 1 + sum(3 + max([len(self.columns[i])] + [len(cell_text(row[i])) for row in self.rows]) for i in block)

        everything = list(range(len(self.columns)))
        keys = everything[:self.keys]
        if width(everything) <= WIDTH or len(self.columns) <= self.keys + 1:
            return [everything]
        groups: list[list[int]] = []
        for i in everything[self.keys:]:
            prefix = self.columns[i].split(" ")[0]
            if groups and self.columns[groups[-1][-1]].split(" ")[0] == prefix:
                groups[-1].append(i)
            else:
                groups.append([i])
        blocks = [list(keys)]
        for group in groups:
            if len(blocks[-1]) > len(keys) and width(blocks[-1] + group) > WIDTH:
                blocks.append(list(keys))
            blocks[-1] += group
        return blocks

    def flat(self) -> tuple[list[str], list[list]]:
        """(columns, rows) with each column that holds an ``Estimate`` as its value and bounds (and p where it has
        one): ``<column>``, ``<column> lo``, ``<column> hi`` [, ``<column> p``]."""
        extra = [("lo", "hi", "p") if any(isinstance(r[i], Estimate) and r[i].p is not None for r in self.rows)
                 else ("lo", "hi") if any(isinstance(r[i], Estimate) for r in self.rows) else ()
                 for i in range(len(self.columns))]
        columns = [name for c, more in zip(self.columns, extra) for name in (c, *(f"{c} {m}" for m in more))]
        rows = []
        for row in self.rows:
            cells = []
            for cell, more in zip(row, extra):
                if isinstance(cell, Estimate):
                    cells += [cell.value, *(getattr(cell, m) for m in more)]
                else:
                    cells += [cell, *(None for _ in more)]
            rows.append(cells)
        return columns, rows

    def csv(self) -> str:
        columns, rows = self.flat()
        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(columns)
        writer.writerows([["" if c is None else c for c in row] for row in rows])
        return out.getvalue()

    def numbers(self) -> dict:
        """{row label: {column: value}} of the numeric cells (``tables/numbers.json``), interval bounds included."""
        columns, rows = self.flat()
        return {label: {c: v for c, v in zip(columns, row) if isinstance(v, (int, float))}
                for label, row in zip(self.labels, rows)}


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


def cell_text(value) -> str:
    if value is None:
        return ""
    if isinstance(value, Estimate):
        shown = f"{value.value:.2f} [{value.lo:.1f}, {value.hi:.1f}]"
        return shown if value.p is None else f"{shown} p={value.p:.3f}"
    if isinstance(value, float):
        return f"{value:.2f}"
    return str(value)


def pct(value) -> float | None:
    return None if value is None else round(100 * float(value), 2)


def metric_columns(query_sets: list[str], metrics, average: bool = False) -> list[str]:
    cols = [f"{q} {LABEL[m]}" for q in query_sets for m in metrics]
    return cols + ([f"average {LABEL[m]}" for m in metrics] if average else [])


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
    e = bootstrap(values, units).scaled(100)
    published = run.metrics.get(metric) if ids is None else None
    return e if published is None else replace(e, value=pct(published))


def metric_cells(found: dict[str, RunData], query_sets: list[str], metrics, average: bool = False) -> list:
    """Cells of one row: each query set's metrics with their intervals, then their average over query sets when
    every one ran (each set resampled on its own)."""
    cells = [estimate(found[q], m) if q in found else None for q in query_sets for m in metrics]
    if average:
        full = all(q in found for q in query_sets)
        cells += [_average(found, query_sets, m) if full else None for m in metrics]
    return cells


def _average(found: dict[str, RunData], query_sets: list[str], metric: str) -> Estimate:
    e = bootstrap_average([per_query(found[q], metric) for q in query_sets]).scaled(100)
    return replace(e, value=round(float(np.mean([pct(found[q].metrics.get(metric)) for q in query_sets])), 2))


def ark_setting(experiment: str) -> dict:
    """Backbone, agents and T_max of the ARK row's experiment file (for titles and notes)."""
    c = experiment_config(experiment, "biokg", "synthetic", ())
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


def table1_rows(runs, graphs: dict[str, str]) -> list[tuple[str, dict[str, RunData]]]:
    """(label, {query set: run}) of Table 1's rows that have runs, each query set on its graph (``graphs``)."""
    return [(label, per_set) for label, per_set in row_runs(runs, "table1", graphs) if per_set]


def table1_paired(runs, query_sets, ark_experiment: str, graph_of: dict) -> Table:
    """ARK against every other row of Table 1, on the queries both scored (a paired bootstrap of the difference)."""
    graphs = scored_on(graph_of, query_sets)
    metrics = ("hit@1", "mrr")
    ark_label = row_settings(ark_experiment).get("label", ark_experiment)
    t = Table("table1_paired", f"Table 1, paired: {ark_label} minus each other method on the same queries "
                               "(difference x100, 95 % interval, p)",
              ["compared with"] + [c for q in query_sets for c in (*(f"{q} {LABEL[m]} diff" for m in metrics), f"{q} n")],
              note="Each difference is "
                   f"{ark_label}'s mean minus the other method's on the queries both scored; {METHOD}, the same draws "
                   "for both methods; p: two-sided bootstrap p of the difference. A difference whose interval "
                   "covers 0 is not established.")
    rows = dict(table1_rows(runs, graphs))
    t.note = f"{where(rows.items())} {t.note}"
    ark = rows.pop(ark_label, {})
    for label, per_set in rows.items():
        cells = []
        for q in query_sets:
            a, b = ark.get(q), per_set.get(q)
            common = sorted(set(a.scores) & set(b.scores)) if a is not None and b is not None else []
            common = [i for i in common if a.scores[i].get("complete", True) and b.scores[i].get("complete", True)]
            units = a.units() if common else {}
            cells += [paired([a.scores[i][m] for i in common], [b.scores[i][m] for i in common],
                             [units[i] for i in common]).scaled(100) if common else None for m in metrics]
            cells.append(len(common) or None)
        t.add([label] + cells, [r for q in query_sets for r in (ark.get(q), per_set.get(q)) if r])
    return t


def answerable_sets(query_sets: list[str]) -> dict:
    """The query sets (by name) that say whether a query is answerable on a graph (``QuerySet.answerable``)."""
    from ark.config import compose, make
    from ark.data import QuerySet

    sets = {q: make(compose([f"queries={q}"]).queries, "queries") for q in query_sets}
    return {q: s for q, s in sets.items() if type(s).answerable is not QuerySet.answerable}


def answerable_count(query_set, graph, split_file: Path) -> str:
    """"n of N": how many queries of ``split_file`` are answerable on ``graph``, as the scoring computes it."""
    rows = read_jsonl(split_file)
    return f"{sum(query_set.answerable(graph, r['answer_ids']) for r in rows)} of {len(rows)}"


def table2(runs, graphs: dict[str, str], ark_experiment: str, split: str) -> Table:
    ark = ark_setting(ark_experiment)
    metrics = ("hit@1", "recall@20")
    query_sets = list(graphs)
    t = Table("table2", f"Table 2: tool ablations on BioKG, {split} (x100)", ["toolset"] + metric_columns(query_sets, metrics),
              note=f"ARK over {ark['backbone']} (a scripted policy); {split}: a seeded 10% of the test split.")
    rows = row_runs(runs, "table2", graphs)
    for label, per_set in rows:
        if per_set:
            t.add([label] + metric_cells(per_set, query_sets, metrics), list(per_set.values()))
    t.note += f" {where(rows)} Intervals: {METHOD}."
    return t


def fused_scores(run: RunData, method: str) -> dict:
    """Mean metrics (x100, with intervals) of a run re-fused from its stored per-agent answer lists with another
    aggregation."""
    gold = {q["id"]: q["answer_ids"] for q in run.queries()}
    seed = run.config.get("seed", 0)
    fused = [replace(r, ranking=aggregate([a.answer for a in r.agents], method, seed=seed)) for r in run.records]
    rows, means = score_records(fused, gold, list(METRICS), run.candidates())
    units = run.units()
    kept = [row for row in rows if row["complete"]]
    return {m: replace(bootstrap([row[m] for row in kept], [units[row["id"]] for row in kept]).scaled(100),
                       value=pct(means[m])) for m in METRICS}


def table3(runs, graphs: dict[str, str], ark_experiment: str) -> Table:
    ark = ark_setting(ark_experiment)
    metrics = ("hit@1", "recall@20", "mrr")
    query_sets = list(graphs)
    t = Table("table3", f"Table 3: aggregation of the same {ark['n_agents']}-agent runs on BioKG, test split (x100)",
              ["aggregation"] + metric_columns(query_sets, metrics),
              note="Computed from the per-agent answer lists stored in Table 1's ARK runs (not rerun): voting ranks "
                   "by agent count, ordering concatenates, random shuffles the union (seeded); each cut at 20.")
    per_set = experiment_runs(runs, ark_experiment, query_sets, graphs)
    t.note += f" {where([('ark', per_set)])} Intervals: {METHOD}."
    for method in AGGREGATIONS:
        if per_set:
            scored = {q: fused_scores(r, method) for q, r in per_set.items()}
            t.add([method] + [scored[q][m] if q in scored else None for q in query_sets for m in metrics],
                  list(per_set.values()))
    return t


def table4(runs, graphs: dict[str, str]) -> Table:
    metrics = ("hit@1", "recall@20", "mrr")
    split = experiment_config(table_rows("table4")[0], "biokg", "synthetic", ()).split
    query_sets = list(graphs)
    t = Table("table4", f"Table 4: BM25 vs dense relevance inside ARK on BioKG, {split} split (x100)",
              ["relevance"] + metric_columns(query_sets, metrics),
              note="The relevance function ranks both global search and the neighborhood (rel(q, d_V(u))); "
                   "dense: cosine of all-MiniLM-L6-v2 embeddings. The whole test split, as the paper's Table 4.")
    rows = row_runs(runs, "table4", graphs)
    for label, per_set in rows:
        if per_set:
            t.add([label] + metric_cells(per_set, query_sets, metrics), list(per_set.values()))
    t.note += f" {where(rows)} Intervals: {METHOD}."
    return t


def table8(runs, graphs: dict[str, str], ark_experiment: str) -> Table:
    ark = ark_setting(ark_experiment)
    metrics = ("hit@1", "recall@20", "mrr")
    query_sets = list(graphs)
    t = Table("table8", "Table 8: cost-controlled budgets on BioKG, test split (x100)",
              ["budget"] + metric_columns(query_sets, metrics) + ["steps per query"],
              note=f"Both settings allow 30 steps per query. {ark['backbone']} is scripted: it finishes in at most "
                   "3 steps, so a larger T_max cannot help it; more agents can (voting).")
    rows = row_runs(runs, "table8", graphs)
    t.note += f" {where(rows)} Intervals: {METHOD}."
    for label, per_set in rows:
        if per_set:
            steps = [sum(a.steps for rec in r.records for a in rec.agents) / len(r.records) for r in per_set.values()]
            t.add([label] + metric_cells(per_set, query_sets, metrics)
                  + [round(float(np.mean(steps)), 2)], list(per_set.values()))
    return t


# ------------------------------------------------------------------------------------- tool use (Tables 9, 10)
def trajectory_rows(run: RunData) -> list[dict]:
    """Per agent trajectory: tools used, neighborhood calls, a global search after step 1, its own Hit@5."""
    gold = {q["id"]: q["answer_ids"] for q in run.queries()}
    meta = {q["id"]: q.get("meta") or {} for q in run.queries()}
    candidates = run.candidates()
    rows = []
    for r in run.records:
        for a in r.agents:
            step_calls = [[c["function"]["name"] for c in calls] for _, calls, _ in steps(a.messages)]
            rows.append({"query": r.id, "template": meta[r.id].get("template", "all"),
                         "neighborhood_calls": a.tool_calls.get("search_in_neighborhood", 0),
                         "global_calls": a.tool_calls.get("search_in_graph", 0),
                         "reanchored": any("search_in_graph" in names for names in step_calls[1:]),
                         "hit@5": score_query(a.answer, gold[r.id], ["hit@5"], candidates)["hit@5"]})
    return rows


TOOL_USE = {"only global search %": lambda x: x["global_calls"] and not x["neighborhood_calls"],
            "both tools %": lambda x: x["global_calls"] and x["neighborhood_calls"],
            "neither or neighborhood only %": lambda x: not x["global_calls"]}


def table9(runs, graphs: dict[str, str], ark_experiment: str) -> Table:
    t = Table("table9", "Table 9: tool use per trajectory on BioKG, test split (% of the trajectories)",
              ["trajectories", "query set", "n", *TOOL_USE],
              note="As the paper's Table 9: each group's share among all trajectories, and among the successful "
                   "ones (the trajectory's own answer list has a gold node in its top 5, Hit@5). Computed from "
                   "Table 1's ARK runs.", keys=2)
    found = experiment_runs(runs, ark_experiment, list(graphs), graphs)
    t.note += f" {where([('ark', found)])} Intervals: {METHOD} (a query's trajectories move together)."
    for which, keep in (("all", lambda x: True), ("successful", lambda x: x["hit@5"] > 0)):
        for q, run in found.items():
            rows = [x for x in trajectory_rows(run) if keep(x)]
            t.add([which, q, len(rows), *[_share(rows, test, run.units()) for test in TOOL_USE.values()]], [run],
                  label=f"{which} / {q}")
    return t


def table10(runs, graphs: dict[str, str], ark_experiment: str) -> Table:
    t = Table("table10", "Table 10: re-anchoring (a global search after the first step) on BioKG, test split (%)",
              ["query set", "all trajectories", "all: re-anchoring %", "successful trajectories",
               "successful: re-anchoring %"],
              note="As the paper's Table 10: the share of trajectories that search the whole graph again after step "
                   f"1, among all and among the successful ones (Hit@5, as in Table 9). "
                   f"{ark_setting(ark_experiment)['backbone']} searches once, at its first step, by construction: "
                   "its share is 0 and says nothing about a language model's.")
    found = experiment_runs(runs, ark_experiment, list(graphs), graphs)
    t.note += f" {where([('ark', found)])} Intervals: {METHOD} (a query's trajectories move together)."
    for q, run in found.items():
        rows = trajectory_rows(run)
        good = [x for x in rows if x["hit@5"] > 0]
        reanchored = lambda x: x["reanchored"]  # noqa: E731
        units = run.units()
        t.add([q, len(rows), _share(rows, reanchored, units), len(good), _share(good, reanchored, units)], [run])
    return t


def _share(rows: list[dict], test, units: dict[str, str]) -> Estimate | None:
    """The share (x100) of the trajectories ``rows`` that pass ``test``, with its interval (the trajectories of one
    query, and the queries of one unit, resampled together)."""
    if not rows:
        return None
    passed = [float(bool(test(x))) for x in rows]
    e = bootstrap(passed, [units[x["query"]] for x in rows]).scaled(100)
    return replace(e, value=round(100 * sum(passed) / len(rows), 2))  # the share as it was always computed


# --------------------------------------------------------------------------------- data tables (Tables 6, 7)
def table6(queries_root: Path, query_sets, subset_split: str) -> Table:
    from ark.data.queries import load_queries
    from ark.errors import UserError

    def count(q: str, split: str) -> int | None:
        try:
            return len(load_queries(Path(queries_root) / q, split))
        except UserError:  # no such split file
            return None

    splits = ("train", "val", "test", subset_split)
    t = Table("table6", "Table 6: queries per split on BioKG", ["query set", *splits])
    for q in query_sets:
        if (Path(queries_root) / q / "test.jsonl").exists():
            t.add([q, *(count(q, s) for s in splits)])
    return t


def table7(graphs: dict) -> Table:
    """``graphs``: {name: Graph}."""
    t = Table("table7", "Table 7: graph statistics", ["graph", "node types", "relation types", "nodes", "edges",
                                                      "mean degree", "max degree", "document tokens (mean)",
                                                      "document tokens (total, M)"],
              note="Degrees count both directions of each edge; tokens are whitespace-separated words of d_V(v).")
    for name, g in graphs.items():
        degree = np.diff(np.asarray(g.indptr))
        tokens = np.array([len(str(d).split()) for d in g.doc])
        t.add([name, len(g.node_type_names), len(g.relation_names), g.num_nodes, g.num_edges,
               round(float(degree.mean()), 2), int(degree.max()), round(float(tokens.mean()), 1),
               round(float(tokens.sum()) / 1e6, 2)])
    return t


def table_lpo(graphs: dict, queries_root: Path, query_sets: list[str]) -> Table:
    """What each leave-publication-out graph (a graph whose summary has ``excluded``) left out, and how many of the
    cases of the split it was cut for stay answerable there (``QuerySet.answerable``, as the scoring computes it)."""
    sets = answerable_sets(query_sets)
    t = Table("lpo", "Leave-publication-out graphs: what each left out, and the cases left answerable",
              ["graph", "cut for", "publications", "annotations removed", "diseases emptied",
               *[f"{q} answerable" for q in sets]],
              note="Cut for: the query split whose cases' publications were left out (every case: the whole file). "
                   "Answerable: the cases of that split (test where the whole file was cut) whose gold disease (for "
                   "a gene: a disease of the gold gene) keeps at least one phenotype annotation in the graph, of all "
                   "of them.")
    for name, g in graphs.items():
        cut = g.meta.get("excluded")
        if not cut:
            continue
        splits = cut["source"].get("splits")
        split = (splits or ["test"])[0]
        cells = [name, "/".join(splits) if splits else "every case", cut["publications"], cut["annotations_removed"],
                 cut["diseases_left_without_phenotypes"]]
        cells += [f"{answerable_count(query_set, g, queries_root / q / f'{split}.jsonl')} ({split})"
                  for q, query_set in sets.items()]
        t.add(cells)
    return t


# ------------------------------------------------------------------------ backbones and distillation (Table 5)
def train_samples(config: dict, distill_dir: Path) -> int | None:
    """How many teacher trajectories the student a run evaluates was trained on (its distill report), if known."""
    report = Path(distill_dir) / Path(config["backbone"]["local"]["adapter"]).name / "report.json"
    return json.loads(report.read_text())["report"]["train_samples"] if report.exists() else None


def row_label(row: dict, config: dict, distill_dir: Path) -> str:
    """A Table 5 row file's label; ``{trajectories}`` in it: how many the run's adapter was trained on, where
    known."""
    adapter = ((config.get("backbone") or {}).get("local") or {}).get("adapter")
    samples = train_samples(config, distill_dir) if adapter else None
    return row["label"].replace("{trajectories}", "" if samples is None else f", {samples} trajectories")


def metrics_on(run: RunData, ids: list[str]) -> dict:
    """A run's metrics (and an agent run's invalid-call rate) on the queries ``ids``: its published ones when ``ids``
    are all its queries, else from its per-query scores and records."""
    scores = run.scores
    if set(ids) == set(scores):
        return {**{m: run.metrics.get(m) for m in METRICS}, "invalid_call_rate": run.stats.get("invalid_call_rate")}
    out = {m: float(np.mean([scores[i][m] for i in ids])) if all(m in scores[i] for i in ids) else None
           for m in METRICS}  # a run scored with fewer metrics (cfg.metrics) leaves the others empty
    records = {r.id: r for r in run.records} if run.config["stage"] != "baseline" else None
    out["invalid_call_rate"] = None if records is None else \
        run_statistics([records[i] for i in ids]).get("invalid_call_rate")
    return out


def distillation_rows(runs: list[RunData], distill_dir: Path, on: dict[str, str]) -> list[dict]:
    """Table 5's comparisons: the runs of its row files (``conf/experiment/table5/``: one agent, a few steps, the first
    test queries; BM25 on the same), each query set on its graph in ``on``. Per query set, one comparison per run
    length n: every run that covers the first n queries, each scored on exactly those n; each model's Hit@1 as a share
    of the teacher's (the row file with ``teacher: true``) on them."""
    found = []
    for experiment in table_rows("table5"):
        row = row_settings(experiment)
        for run in experiment_runs(runs, experiment, list(on), on).values():
            found.append((row.get("order", 0), row_label(row, run.config, distill_dir), run, bool(row.get("teacher"))))
    rows = []
    for q in [q for q in on if any(run.config["queries"]["name"] == q for _, _, run, _ in found)]:  # Table 1's order
        of_set = [(order, label, run, teacher, list(run.scores)) for order, label, run, teacher in found
                  if run.config["queries"]["name"] == q]
        for n in sorted({len(ids) for *_, ids in of_set}):
            first = next(ids for *_, ids in of_set if len(ids) == n)  # the first n queries of the split
            block = {}
            for order, label, run, teacher, ids in sorted(of_set, key=lambda x: (x[0], x[1], len(x[4]))):
                if label not in block and len(ids) >= n and set(first) <= set(ids):
                    block[label] = {"order": order, "method": label, "queries": q, "n_queries": n, "run_data": run,
                                    "teacher": teacher, "ids": first, **metrics_on(run, first)}
            teacher = next((r["hit@1"] for r in block.values() if r["teacher"]), None)
            teacher_order = next((r["order"] for r in block.values() if r["teacher"]), None)
            for r in block.values():
                if teacher and r["order"] > teacher_order:
                    r["teacher_hit1_share"] = round(r["hit@1"] / teacher, 3)
            rows += sorted(block.values(), key=lambda r: (r["order"], r["method"]))
    return rows


def table5(runs, distill_dir: Path, on: dict[str, str]) -> Table:
    """``on``: {query set: the graph it is scored on}, as in Table 1 (the case reports: leave-publication-out)."""
    t_max = experiment_config(table_rows("table5")[0], "biokg", "synthetic", ()).agent.T_max
    graphs = ", ".join(f"{q} on {g}" for q, g in on.items())
    t = Table("table5", f"Table 5: backbones and the distilled student on BioKG ({graphs}), first test queries, "
                        f"1 agent, T_max {t_max} (x100)",
              ["query set", "n", "method", *[LABEL[m] for m in METRICS], "invalid calls %", "of teacher's Hit@1 %"],
              note="The teacher is the rules policy (label-free, scripted); the students are LoRA adapters on "
                   "SmolLM2-135M trained on its trajectories (distill stage), collected on the graph each query set "
                   "is scored on. Each block of rows is one comparison: every run that covers the first n test "
                   "queries, scored on exactly those n (a longer run appears in a block with its first n).", keys=3)
    found = distillation_rows(runs, distill_dir, on)
    t.note += f" {where([('', {r['queries']: r['run_data']}) for r in found])} Intervals: {METHOD}."
    for r in found:
        share = r.get("teacher_hit1_share")
        run = r["run_data"]
        ids = None if set(r["ids"]) == set(run.scores) else set(r["ids"])  # all its queries: its published means
        t.add([r["queries"], r["n_queries"], r["method"], *[estimate(run, m, ids) for m in METRICS],
               pct(r["invalid_call_rate"]),
               None if share is None else round(100 * share)], [r["run_data"]],
              label=f"{r['queries']} / n={r['n_queries']} / {r['method']}")
    return t


def biokg_tables(runs, cfg_report, queries_root: Path, distill_dir: Path, graphs: dict) -> list[Table]:
    qs, ark = list(cfg_report["query_sets"]), cfg_report["ark"]
    split = cfg_report["ablation_split"]
    graph_of = dict(cfg_report["graph_of"])
    on = scored_on(graph_of, qs)
    return [table1(runs, qs, ark, graph_of, graphs, queries_root), table1_paired(runs, qs, ark, graph_of),
            table1(runs, qs, ark), table2(runs, on, ark, split), table3(runs, on, ark), table4(runs, on),
            table5(runs, distill_dir, on), table6(queries_root, qs, split), table7(graphs),
            table_lpo(graphs, queries_root, qs),
            table8(runs, on, ark), table9(runs, on, ark), table10(runs, on, ark)]
