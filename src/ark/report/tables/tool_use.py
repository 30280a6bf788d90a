"""Tool use per trajectory (Table 9) and re-anchoring (Table 10), from Table 1's ARK runs."""
from __future__ import annotations

from typing import TYPE_CHECKING

import json
from dataclasses import replace

from ark.eval.metrics import score_query
from ark.eval.trajectories import steps
from ark.report.intervals import METHOD, mean_interval
from ark.report.runs import experiment_runs
from ark.report.tables.cells import ark_setting, where
from ark.report.tables.table import Table

if TYPE_CHECKING:
    from ark.report.intervals import Estimate
    from ark.report.runs import RunData


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


def neighborhood_types(arguments) -> str:
    """The ``node_type`` filter of a neighborhood call as one label: its types joined by "+", "any" without one."""
    try:
        args = json.loads(arguments) if isinstance(arguments, str) else arguments
    except ValueError:
        return "any"
    types = args.get("node_type") if isinstance(args, dict) else None
    types = [types] if isinstance(types, str) else [t for t in types if isinstance(t, str)] \
        if isinstance(types, list) else []
    return "+".join(sorted(types)) or "any"


def behaviour_rows(run: RunData, type_name) -> list[dict]:
    """Per agent trajectory of ``run``, what it did, read from its messages and answer alone (no gold): global
    searches, neighborhood calls by their ``node_type`` filter, steps, and the node type of its first answer
    (``type_name``: node index -> type; None without an answer). A call counts where it ran (an observation
    answered it): a reply's calls after the one that finished the episode did not."""
    rows = []
    for r in run.records:
        for a in r.agents:
            ran = [c for _, calls, observations in steps(a.messages) for c in calls[:len(observations)]]
            types = [neighborhood_types(c["function"].get("arguments")) for c in ran
                     if c["function"]["name"] == "search_in_neighborhood"]
            rows.append({"query": r.id, "global_calls": sum(c["function"]["name"] == "search_in_graph" for c in ran),
                         "neighborhood": types, "steps": a.steps,
                         "first_answer": type_name(a.answer[0]) if a.answer else None})
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
            t.add([which, q, len(rows), *[trajectory_share(rows, test, run.units()) for test in TOOL_USE.values()]],
                  [run], label=f"{which} / {q}")
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
        t.add([q, len(rows), trajectory_share(rows, reanchored, units), len(good),
               trajectory_share(good, reanchored, units)], [run])
    return t


def trajectory_share(rows: list[dict], test, units: dict[str, str]) -> Estimate | None:
    """The share (x100) of the trajectories ``rows`` that pass ``test``, with its interval (the trajectories of one
    query, and the queries of one unit, resampled together)."""
    if not rows:
        return None
    passed = [float(bool(test(x))) for x in rows]
    e = mean_interval(passed, [units[x["query"]] for x in rows]).scaled(100)
    return replace(e, value=round(100 * sum(passed) / len(rows), 2))  # the share as it was always computed
