"""Table 5: backbones and the distilled student."""
from __future__ import annotations

from typing import TYPE_CHECKING

import json
from pathlib import Path

import numpy as np

from ark.eval.trajectories import run_statistics
from ark.report.intervals import METHOD
from ark.report.runs import experiment_spec, experiment_runs, row_settings, run_graph, table_rows
from ark.report.tables.cells import estimate, paired_difference, where
from ark.report.tables.table import LABEL, METRICS, Table, pct
from ark.report.tables.tool_use import behaviour_rows, trajectory_share

if TYPE_CHECKING:
    from ark.report.runs import RunData


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
                    units = run.units()
                    block[label] = {"order": order, "method": label, "queries": q, "n_queries": n, "run_data": run,
                                    "teacher": teacher, "ids": first,
                                    "publications": len({units[i] for i in first}), **metrics_on(run, first)}
            teacher = next((r["hit@1"] for r in block.values() if r["teacher"]), None)
            teacher_order = next((r["order"] for r in block.values() if r["teacher"]), None)
            for r in block.values():
                if teacher and r["order"] > teacher_order:
                    r["teacher_hit1_share"] = round(r["hit@1"] / teacher, 3)
            rows += sorted(block.values(), key=lambda r: (r["order"], r["method"]))
    return rows


def caption_setting() -> str:
    t_max = experiment_spec(table_rows("table5")[0], "biokg", "synthetic", ()).agent.T_max
    return f"first test queries, 1 agent, T_max {t_max} (x100)"


# Table 5 at a glance: the student trained on the most trajectories first, then each method it is compared with
MAIN = ("table5/student", "table5/teacher", "table5/base", "table5/bm25")


def table5(runs, distill_dir: Path, on: dict[str, str]) -> Table:
    """Table 5 at a glance: per query set the student trained on the most trajectories, its teacher, its base model
    and BM25, each with its Hit@1 and MRR and the student's paired difference from it on the queries both ran.
    ``on``: {query set: the graph it is scored on}, as in Table 1 (the case reports: leave-publication-out)."""
    metrics = ("hit@1", "mrr")
    graphs = ", ".join(f"{q} on {g}" for q, g in on.items())
    t = Table("table5", f"Table 5: the distilled student against its teacher, its base model and BM25 on BioKG "
                        f"({graphs}), {caption_setting()}",
              ["query set", "method", "n", *(LABEL[m] for m in metrics),
               *(f"student minus it, {LABEL[m]}" for m in metrics)],
              note="Each method on the first n queries of the same publication-spread test sample; each difference "
                   "is the student's mean minus the method's on the n queries both ran, with its interval, p and "
                   "+a/-b: the queries on which the student scored higher / lower. The base model decodes "
                   "grammar-constrained; every run and every n (the smaller budgets, the free-decoding base): "
                   "table5_all.md.", keys=2)
    found = {e: experiment_runs(runs, e, list(on), on) for e in MAIN}
    used = []
    for q in on:
        student = found[MAIN[0]].get(q)
        if student is None:
            continue
        for e in MAIN:
            run = found[e].get(q)
            if run is None:
                continue
            ids = set(run.scores) & set(student.scores)
            short = row_settings(e).get("label", e).replace("{trajectories}", "").split(",")[0]
            samples = train_samples(run.config, distill_dir) if run is student else None
            label = short + ("" if samples is None else f", {samples} trajectories")
            diffs = [None, None] if run is student else [paired_difference(student, run, m)[0] for m in metrics]
            mean_on = None if ids == set(run.scores) else ids  # all its queries: its published means
            t.add([q, label, len(ids), *(estimate(run, m, mean_on) for m in metrics), *diffs], [run],
                  label=f"{q} / {label}")
            used.append((q, run))
    t.note = f"{where([('', {q: run}) for q, run in used])} {t.note} Intervals: {METHOD}."
    return t


def table5_all(runs, distill_dir: Path, on: dict[str, str]) -> Table:
    """Every run of Table 5's row files, in blocks of n (``distillation_rows``). ``on``: {query set: its graph}."""
    graphs = ", ".join(f"{q} on {g}" for q, g in on.items())
    t = Table("table5_all", f"Table 5, every run: backbones and the distilled students on BioKG ({graphs}), "
                            f"{caption_setting()}",
              ["query set", "n", "publications", "method", *[LABEL[m] for m in METRICS], "invalid calls %",
               "of teacher's Hit@1 %"],
              note="The teacher is the rules policy (label-free, scripted); the students are LoRA adapters on "
                   "SmolLM2-135M trained on its trajectories (distill stage), collected on the graph each query set "
                   "is scored on. The test queries are one seeded sample per query set, spread across publications "
                   "(split test-spread: one case of each publication before a second of any), the same for every "
                   "row; a row runs its first n. Each block of rows is one comparison: every run that covers the "
                   "first n, scored on exactly those n (a longer run appears in a block with its first n); "
                   "publications: how many distinct publications (case reports) or queries those n are.", keys=4)
    found = distillation_rows(runs, distill_dir, on)
    t.note += f" {where([('', {r['queries']: r['run_data']}) for r in found])} Intervals: {METHOD}."
    for r in found:
        share = r.get("teacher_hit1_share")
        run = r["run_data"]
        ids = None if set(r["ids"]) == set(run.scores) else set(r["ids"])  # all its queries: its published means
        t.add([r["queries"], r["n_queries"], r["publications"], r["method"], *[estimate(run, m, ids) for m in METRICS],
               pct(r["invalid_call_rate"]),
               None if share is None else round(100 * share)], [r["run_data"]],
              label=f"{r['queries']} / n={r['n_queries']} / {r['method']}")
    return t


GENE, DISEASE = "gene/protein", "disease"  # BioKG's node types that the case reports' two question types ask for


def table5_behaviour(runs, distill_dir: Path, on: dict[str, str]) -> Table:
    """Table 5's agent rows (teacher, base, students) by what they did, each on the most queries it ran: global
    searches and neighborhood calls by their ``node_type`` filter a question, the share of questions with a
    gene/protein neighborhood call, steps, and the node type of the first answer. Read from the trajectories
    alone, never the gold."""

    t = Table("table5_behaviour", "Table 5, behaviour: what the teacher, the base model and each student did on "
                                  "the same questions",
              ["query set", "method", "n", "global searches", "neighborhood calls", f"of them {GENE}",
               f"of them {DISEASE}", f"{GENE} neighborhood call %", "steps", f"first answer a {DISEASE} %",
               f"first answer a {GENE} %", "no answer %"],
              note="Means a question (one agent each) for the counts; shares of the questions (x100) with their "
                   f"intervals ({METHOD}). A neighborhood call is counted by its node_type filter (a call with "
                   "several types counts under each; without one it is in neither column). From the "
                   "trajectories alone: no gold is read.", keys=2)
    largest: dict[tuple[str, str], dict] = {}
    for r in distillation_rows(runs, distill_dir, on):
        if r["run_data"].config["stage"] != "baseline":  # BM25: one global search, no agent
            largest[r["queries"], r["method"]] = r  # rows come by n, ascending: the last is the largest
    used = []
    for (q, method), r in largest.items():
        run = r["run_data"]
        graph = run_graph(run.config, run.paths)
        ids = set(r["ids"])
        rows = [x for x in behaviour_rows(run, graph.type_name) if x["query"] in ids]
        units = run.units()
        mean = lambda key: round(sum(key(x) for x in rows) / len(rows), 2) if rows else None  # noqa: E731
        of_type = lambda x, name: sum(name in label.split("+") for label in x["neighborhood"])  # noqa: E731
        t.add([q, method, len(ids), mean(lambda x: x["global_calls"]), mean(lambda x: len(x["neighborhood"])),
               mean(lambda x: of_type(x, GENE)), mean(lambda x: of_type(x, DISEASE)),
               trajectory_share(rows, lambda x: of_type(x, GENE) > 0, units), mean(lambda x: x["steps"]),
               trajectory_share(rows, lambda x: x["first_answer"] == DISEASE, units),
               trajectory_share(rows, lambda x: x["first_answer"] == GENE, units),
               trajectory_share(rows, lambda x: x["first_answer"] is None, units)], [run], label=f"{q} / {method}")
        used.append((q, run))
    t.note = f"{where([('', {q: run}) for q, run in used])} {t.note}"
    return t
