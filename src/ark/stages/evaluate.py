"""Stage evaluate: run the ARK agents on a query split and score their fused rankings.

``python -m ark.stages.evaluate dataset=… queries=… backbone=… agent=… ablation=…`` writes a run directory
``<run.root>/<readable name>-<hash of the result-affecting settings>/`` (``ark.runs``): config.yaml,
records.jsonl, scores.jsonl, metrics.json, stats.json, provenance.json. The same settings resume the run
from its records; rerun with a warm LLM cache it makes no model call.
"""
from __future__ import annotations

import asyncio
import time

import hydra
from omegaconf import DictConfig
from tqdm import tqdm

from ark import build
from ark.agent.runner import run_queries
from ark.agent.workers import run_in_workers
from ark.errors import IncompleteRun
from ark.eval.metrics import as_candidates, score_query
from ark.eval.score import score_records
from ark.eval.trajectories import run_statistics, timing_statistics
from ark.runs.identity import config_groups
from ark.runs.store import Run, data_inputs
from ark.stages import clear_errors
from ark.tracking import log_queries, log_summary, stage_run

GROUPS = config_groups("evaluate")  # config groups its results depend on


def run(cfg: DictConfig) -> dict:
    build.validate(cfg)
    tools = build.toolbox(cfg)
    graph = tools.graph
    queries = build.queries(cfg, graph)
    gold = {q["id"]: q["answer_ids"] for q in queries}
    candidates = as_candidates(graph.candidate_ids()) if graph.meta.get("candidate_types") else None
    run_ = Run(cfg, "evaluate")
    running = {"hit@1": 0.0, "n": 0, "cost": 0.0}

    def postfix(query: dict, record) -> dict:
        running["n"] += 1
        running["hit@1"] += score_query(record.ranking, gold[query["id"]], ["hit@1"], candidates)["hit@1"]
        running["cost"] += sum(a.cost for a in record.agents)
        return {"hit1": f"{running['hit@1'] / running['n']:.3f}", "cost": f"${running['cost']:.4f}"}

    start = time.perf_counter()
    records, model_calls = run_agents(cfg, tools, queries, run_, "evaluate", postfix)
    scores, metrics = score_records(records, gold, list(cfg.metrics), candidates)
    stats = run_statistics(records)
    timing = {"seconds": round(time.perf_counter() - start, 2), "model_calls": model_calls,
              **timing_statistics(records)}
    summary = {**metrics, "model_calls": model_calls, "run_dir": str(run_.dir)}
    if metrics["n_incomplete"] and not cfg.eval.allow_incomplete:
        raise IncompleteRun(f"{metrics['n_incomplete']} of {len(queries)} queries are incomplete (model calls "
                            f"failed after {cfg.llm.retry.max_attempts} attempts, e.g. "
                            f"{first_error(records)}); rerun to resume them, or set eval.allow_incomplete=true "
                            f"to score the {metrics['n_queries']} complete ones. Records: {run_.dir}")
    run_.finish(scores, metrics, stats, data_inputs(cfg))
    run_.write_timing(timing)
    return {**summary, **stats, **timing, "n_agents": cfg.agent.n_agents}


def run_agents(cfg: DictConfig, tools, queries: list[dict], run_: Run, label: str, postfix=None):
    """Open (or resume) ``run_``, run the backbone's agents on its queries not done yet, appending each record
    as it finishes; (records of all queries in their order, model calls made). ``postfix(query, record)``:
    what the progress bar shows beside the count."""
    store = run_.open()
    todo = [q for q in queries if not store.done(q["id"])]
    progress = tqdm(total=len(queries), initial=len(queries) - len(todo), desc=f"{label} {cfg.backbone.name}",
                    mininterval=1, disable=not cfg.eval.progress)

    def on_record(query: dict, record) -> None:
        store.add(record)
        progress.update(1)
        if postfix is not None:
            progress.set_postfix(postfix(query, record), refresh=False)

    a = cfg.agent
    model_calls = 0
    try:
        if cfg.eval.workers > 1:
            model_calls, _ = run_in_workers(cfg, todo, cfg.eval.workers, on_record)
        else:
            with build.policy(cfg, tools) as policy:
                asyncio.run(run_queries(policy, tools, todo, a.n_agents, a.T_max, a.aggregation,
                                        cfg.eval.concurrency, cfg.seed, on_record, cfg.prompt.name))
                model_calls = policy.client.calls if policy.client is not None else 0
    finally:
        progress.close()
        records = store.finalize([q["id"] for q in queries])
    return records, model_calls


def first_error(records) -> str:
    return next((e for r in records for ag in r.agents for e in ag.errors), "none")


@hydra.main(version_base="1.3", config_path="../../../conf", config_name="config")
@clear_errors
def main(cfg: DictConfig) -> None:
    with stage_run(cfg, "evaluate") as log:
        result = run(cfg)
        log_summary(log, result)
        log_queries(log, result["run_dir"])
    shown = " ".join(f"{k}={result[k]:.4f}" for k in cfg.metrics)
    print(f"evaluate {cfg.dataset.name}/{cfg.queries.name}/{cfg.split}/{cfg.backbone.name}/{cfg.ablation.name} "
          f"({result['n_queries']} queries scored, {result['n_incomplete']} incomplete): {shown} "
          f"invalid_call_rate={result.get('invalid_call_rate')} model calls this run={result['model_calls']} "
          f"-> {result['run_dir']}")


if __name__ == "__main__":
    main()
