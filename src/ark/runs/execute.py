"""The run engine: running the agents on a query set, in one place.

``execute(spec, stage)`` takes a run spec (``ark.build.spec``: the config, checked), reads the queries, names the run once (``Run``: its identity), opens
it (the lock; records already complete are kept: resume), runs the rest in this process or in worker processes
(``eval.workers``), appends each record as it finishes, scores each record once (``evaluate``; ``collect`` is
label-free and has no gold), and finishes the run (scores, metrics, stats, provenance, timing). An incomplete query
(a model call that failed after its retries) stops it with ``IncompleteRun`` unless ``eval.allow_incomplete``.
``agents(spec)`` is the same agents for one question at a time (``ark ask``).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import asyncio
import contextlib
import functools
import time
from dataclasses import dataclass
from pathlib import Path

from tqdm import tqdm

from ark import build
from ark.agent.runner import run_queries, run_query
from ark.errors import IncompleteRun, RunFailed, UserError
from ark.eval.metrics import as_candidates
from ark.eval.score import score_row, summarize
from ark.eval.trajectories import run_statistics, timing_statistics
from ark.runs.rank import answerable
from ark.runs.store import Run, open_store
from ark.runs.workers import run_in_workers
from ark.llm.spending import CAP_REACHED

if TYPE_CHECKING:
    from ark.build import RunSpec
    from ark.agent.records import QueryRecord
    from ark.settings import AgentSettings


@dataclass
class Agents:
    """A policy over a toolbox with its agent settings: what answers queries."""

    policy: object
    tools: object
    settings: AgentSettings
    how: dict  # run_query's keywords: seed, prompt, text_protocol (ark.build.agent_run)

    def one(self, query: dict, on_event=None) -> QueryRecord:
        return asyncio.run(run_query(self.policy, self.tools, query, self.settings, on_event=on_event, **self.how))

    def many(self, queries: list[dict], concurrency: int, on_record=None, on_event=None) -> None:
        asyncio.run(run_queries(self.policy, self.tools, queries, self.settings, concurrency, on_record, on_event,
                                **self.how))

    @property
    def model_calls(self) -> int:
        client = getattr(self.policy, "client", None)
        return client.calls if client is not None else 0


@contextlib.contextmanager
def agents(spec: RunSpec, tools=None, run_name: str = "", run_ledger: str | None = None):
    """The agents of ``spec`` (its backbone's policy is open for the block: an embedded model is served);
    ``run_name``, ``run_ledger``: the run their calls are for and its spend ledger (``ark.build.serving``)."""
    tools = tools if tools is not None else build.toolbox(spec)
    with build.policy(spec, tools, run_name, run_ledger) as policy:
        yield Agents(policy, tools, spec.agent, build.agent_run(spec))


def execute(spec: RunSpec, stage: str) -> dict:
    """Run (or resume) the ``stage`` run (``evaluate`` or ``collect``) that ``spec`` identifies; its summary."""
    labels = stage != "collect"
    build.check_files(spec)
    if spec.eval.workers > 1 and spec.backbone.one_process:
        raise UserError("eval.workers > 1 needs a hosted or rules backbone: the embedded model computes in one "
                        "process, and every worker would load and run its own copy")
    tools = build.toolbox(spec)
    queries = build.queries(spec, tools.graph, labels=labels)
    run = Run(spec, stage)
    score = Scoring(spec, tools.graph, queries) if labels else None
    start = time.perf_counter()
    records, model_calls = _run_agents(spec, tools, queries, run, stage, score)
    stats = run_statistics(records)
    timing = {"seconds": round(time.perf_counter() - start, 2), "model_calls": model_calls,
              **timing_statistics(records)}
    incomplete = sum(not r.complete for r in records)
    capped = next((e for r in records for ag in r.agents for e in ag.errors if e.startswith(CAP_REACHED)), None)
    if capped and not spec.eval.allow_incomplete:
        raise IncompleteRun(f"{CAP_REACHED}: {spent(spec, run)}; {len(records) - incomplete} of {len(queries)} "
                            f"queries done, {incomplete} left to resume (rerun with a higher cap). Records: {run.dir}")
    if incomplete and not spec.eval.allow_incomplete:
        error = next((e for r in records for ag in r.agents for e in ag.errors), "none")
        instead = (f"score the {len(records) - incomplete} complete ones" if labels else "keep them as they are")
        raise IncompleteRun(f"{incomplete} of {len(queries)} queries are incomplete (model calls: "
                            f"{spec.llm.retry.failure(error)}); rerun to resume them, or set "
                            f"eval.allow_incomplete=true to {instead}. Records: {run.dir}")
    broken = sum(any(a.tool_failures for a in r.agents) for r in records)
    if broken > len(records) / 2:  # a damaged index or a bug, not the agents: no metrics may say otherwise
        raise RunFailed(f"a tool failed (raised) in {broken} of {len(records)} queries; no metrics were written. "
                        f"Fix its cause (rebuild the index, or report the bug), then move {run.dir} away and rerun")
    scores, metrics = score.finish(records) if labels else (None, None)
    run.finish(scores, metrics, stats)
    run.write_timing(timing)
    return {"n_queries": len(records), "n_trajectories": sum(len(r.agents) for r in records),
            "n_incomplete": incomplete, **(metrics or {}), "model_calls": model_calls, "run_dir": str(run.dir),
            "n_agents": spec.agent.n_agents, **stats, **timing}


def spent(spec: RunSpec, run: Run) -> str:
    """What the run's ledgers hold against their caps, read after the run (calls in flight when it stopped are
    counted at their worst case)."""
    from ark.llm.spending import Ledger

    shown = []
    for path, cap, name in build.spending_caps(spec, str(run.dir / "spend.sqlite")):
        if Path(path).exists() and cap != float("inf"):
            ledger = Ledger(path)
            shown.append(f"${ledger.totals()[0]:.4f} spent of {name}=${cap:g}")
            ledger.close()
    return ", ".join(shown) or "no spend recorded"


class Scoring:
    """Each record scored once against gold, as it arrives (a running mean for the progress bar) or, for records a
    resumed run already had, at the end."""

    def __init__(self, spec: RunSpec, graph, queries: list[dict]):
        self.metrics = list(spec.metrics)
        self.gold = {q["id"]: q["answer_ids"] for q in queries}
        self.candidates = as_candidates(graph.candidates())
        self.answerable = answerable(spec, graph, queries)
        self.rows: dict[str, tuple[QueryRecord, dict]] = {}

    def row(self, record: QueryRecord) -> dict:
        seen = self.rows.get(record.id)
        if seen is None or seen[0] is not record:
            seen = self.rows[record.id] = (record, score_row(record, self.gold[record.id], self.metrics,
                                                             self.candidates, self.answerable.get(record.id)))
        return seen[1]

    def running(self, record: QueryRecord) -> dict:
        self.row(record)
        first = self.metrics[0]
        mean = sum(row[first] for _, row in self.rows.values()) / len(self.rows)
        return {first.replace("@", ""): f"{mean:.3f}"}

    def finish(self, records: list[QueryRecord]) -> tuple[list[dict], dict]:
        rows = [self.row(r) for r in records]
        return rows, summarize(rows, self.metrics)


def _run_agents(spec: RunSpec, tools, queries: list[dict], run: Run, label: str, score: Scoring | None):
    """Open (or resume) ``run``, run the agents on its queries not done yet, appending each record as it
    finishes; (records of all queries in their order, model calls made)."""
    store = open_store(run, queries)
    todo = [q for q in queries if not store.done(q["id"])]
    # the run's own spend ledger, for its cap eval.max_cost_usd (ark.build.spending_caps)
    ledger = str(run.dir / "spend.sqlite") if spec.eval.max_cost_usd is not None else None
    open_agents = functools.partial(agents, run_name=run.name, run_ledger=ledger)
    progress = tqdm(total=len(queries), initial=len(queries) - len(todo), desc=f"{label} {spec.backbone.name}",
                    mininterval=1, disable=not spec.eval.progress)
    cost, shown = [0.0], {}
    # a query of many slow steps is not a wait in the dark (worker processes report finished queries only)
    live = {"steps": 0, "calls in flight": 0} if spec.eval.workers == 1 else {}
    drawn = [time.monotonic()]

    def show(refresh: bool) -> None:
        progress.set_postfix({**shown, **live, "cost": f"${cost[0]:.4f}"}, refresh=False)
        if refresh and time.monotonic() - drawn[0] >= 1:
            drawn[0] = time.monotonic()
            progress.refresh()

    def on_record(query: dict, record: QueryRecord) -> None:
        store.add(record)
        cost[0] += sum(a.cost for a in record.agents)
        shown.update(score.running(record) if score is not None else {})
        show(False)
        progress.update(1)

    def on_event(kind: str, payload: dict) -> None:
        if kind == "call":
            live["calls in flight"] += 1
        elif kind in ("reply", "error", "context_full"):  # the call came back (or was not sent: context full)
            live["calls in flight"] -= 1
            live["steps"] += kind != "context_full"  # a step whose call failed is a step (Trajectory.steps)
        show(True)

    model_calls = 0
    try:
        if spec.eval.workers > 1:
            model_calls, _ = run_in_workers(spec, todo, on_record, open_agents)
        else:
            with open_agents(spec, tools) as a:
                a.many(todo, spec.eval.concurrency, on_record, on_event if spec.eval.progress else None)
                model_calls = a.model_calls
    finally:
        progress.close()
        records = store.finalize([q["id"] for q in queries])
    return records, model_calls
