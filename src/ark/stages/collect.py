"""Stage collect: teacher trajectories on the training split, label-free (the distillation data, DESIGN §4.8).

``python -m ark.stages.collect backbone=<teacher> [collect.budget=N] [collect.trajectories=k]
[collect.temperature=t]`` runs ``collect.trajectories`` independent agents of the backbone per query on the first
``collect.budget`` queries of ``collect.split`` at ``collect.temperature``, and writes a run directory like
``evaluate`` does (``ark.runs``): config.yaml, records.jsonl (each agent's trajectory is one training sample),
stats.json, provenance.json; no scores and no metrics: gold ids are dropped as the queries are read. The same
settings resume the run from its records; ``ark.stages.distill distill.teacher=<run dir>`` reads it.
"""
from __future__ import annotations

import hydra
from omegaconf import DictConfig, OmegaConf

from ark import build
from ark.runs.execute import execute
from ark.runs.identity import config_groups
from ark.runs.store import Run
from ark.stages import clear_errors, launch
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
    return execute(build.spec(collect_cfg(cfg)), "collect")


@hydra.main(version_base="1.3", config_path="../../../conf", config_name="config")
@clear_errors
def main(cfg: DictConfig) -> None:
    with stage_run(cfg, "collect", Run(build.spec(collect_cfg(cfg)), "collect")) as log:  # named like its run directory
        result = run(cfg)
        log_summary(log, result)
    c = cfg.collect
    temperature = c.temperature if c.temperature is not None else OmegaConf.select(cfg, "backbone.temperature")
    print(f"collect {cfg.dataset.name}/{cfg.queries.name}/{c.split}/{cfg.backbone.name} at temperature "
          f"{temperature}: {result['n_trajectories']} trajectories of {result['n_queries']} queries "
          f"({result['n_incomplete']} incomplete) invalid_call_rate={result.get('invalid_call_rate')} "
          f"model calls this run={result['model_calls']} -> {result['run_dir']}")


if __name__ == "__main__":
    launch(main)
