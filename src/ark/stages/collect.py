"""Stage collect: teacher trajectories on the training split, label-free (the distillation data, DESIGN §4.8).

``python -m ark.stages.collect backbone=<teacher> [collect.budget=N] [collect.trajectories=k]
[collect.temperature=t]`` runs ``collect.trajectories`` independent agents of the backbone per query on the first
``collect.budget`` queries of ``collect.split`` at ``collect.temperature``, and writes a run directory like
``evaluate`` does (``ark.runs``): config.yaml, records.jsonl (each agent's trajectory is one training sample),
stats.json, provenance.json; no scores and no metrics: gold ids are dropped as the queries are read. The same
settings resume the run from its records; ``ark.stages.distill distill.teacher=<run dir>`` reads it.
"""
from __future__ import annotations

import time

import hydra
from omegaconf import DictConfig, OmegaConf

from ark import build
from ark.errors import IncompleteRun
from ark.eval.trajectories import run_statistics, timing_statistics
from ark.runs.identity import config_groups
from ark.runs.store import Run, data_inputs
from ark.stages import clear_errors
from ark.stages.evaluate import first_error, run_agents
from ark.tracking import log_summary, stage_run

GROUPS = config_groups("collect")  # config groups its results depend on


def collect_cfg(cfg: DictConfig) -> DictConfig:
    """``cfg`` with the split, query limit, agent count and temperature that ``cfg.collect`` sets."""
    c = cfg.collect
    cfg = cfg.copy()
    cfg.split, cfg.eval.limit, cfg.agent.n_agents = c.split, c.budget, c.trajectories
    if c.temperature is not None:
        cfg.backbone.temperature = c.temperature
    return cfg


def run(cfg: DictConfig) -> dict:
    cfg = collect_cfg(cfg)
    build.validate(cfg)
    tools = build.toolbox(cfg)
    queries = build.queries(cfg, tools.graph, labels=False)
    run_ = Run(cfg, "collect")
    start = time.perf_counter()
    records, model_calls = run_agents(cfg, tools, queries, run_, "collect")
    stats = run_statistics(records)
    timing = {"seconds": round(time.perf_counter() - start, 2), "model_calls": model_calls,
              **timing_statistics(records)}
    incomplete = sum(not r.complete for r in records)
    if incomplete and not cfg.eval.allow_incomplete:
        raise IncompleteRun(f"{incomplete} of {len(queries)} queries are incomplete (model calls failed after "
                            f"{cfg.llm.retry.max_attempts} attempts, e.g. {first_error(records)}); rerun to resume "
                            f"them, or set eval.allow_incomplete=true to keep them as they are. Records: {run_.dir}")
    run_.finish(None, None, stats, data_inputs(cfg))
    run_.write_timing(timing)
    return {"n_queries": len(records), "n_trajectories": sum(len(r.agents) for r in records),
            "n_incomplete": incomplete, "model_calls": model_calls, "run_dir": str(run_.dir), **stats, **timing}


@hydra.main(version_base="1.3", config_path="../../../conf", config_name="config")
@clear_errors
def main(cfg: DictConfig) -> None:
    with stage_run(cfg, "collect", identity_cfg=collect_cfg(cfg)) as log:  # named like its run directory
        result = run(cfg)
        log_summary(log, result)
    c = cfg.collect
    temperature = c.temperature if c.temperature is not None else OmegaConf.select(cfg, "backbone.temperature")
    print(f"collect {cfg.dataset.name}/{cfg.queries.name}/{c.split}/{cfg.backbone.name} at temperature "
          f"{temperature}: {result['n_trajectories']} trajectories of {result['n_queries']} queries "
          f"({result['n_incomplete']} incomplete) invalid_call_rate={result.get('invalid_call_rate')} "
          f"model calls this run={result['model_calls']} -> {result['run_dir']}")


if __name__ == "__main__":
    main()
