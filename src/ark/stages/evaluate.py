"""Stage evaluate: run the ARK agents on a query split and score their fused rankings.

``python -m ark.stages.evaluate dataset=… queries=… backbone=… agent=… ablation=…`` writes a run directory
``<run.root>/<readable name>-<hash of the result-affecting settings>/`` (``ark.runs``): config.yaml,
records.jsonl, scores.jsonl, metrics.json, stats.json, provenance.json. The same settings resume the run
from its records; rerun with a warm LLM cache it makes no model call.
"""
from __future__ import annotations

import hydra
from omegaconf import DictConfig

from ark import build
from ark.runs.execute import execute
from ark.runs.identity import config_groups
from ark.runs.store import Run, query_rows
from ark.stages import clear_errors, launch
from ark.tracking import log_queries, log_summary, stage_run

GROUPS = config_groups("evaluate")  # config groups its results depend on


def run(cfg: DictConfig) -> dict:
    return execute(build.spec(cfg), "evaluate")


@hydra.main(version_base="1.3", config_path="../../../conf", config_name="config")
@clear_errors
def main(cfg: DictConfig) -> None:
    with stage_run(cfg, "evaluate", Run(build.spec(cfg), "evaluate")) as log:  # named like its run directory
        result = run(cfg)
        log_summary(log, result)
        log_queries(log, lambda: query_rows(result["run_dir"]))
    shown = " ".join(f"{k}={result[k]:.4f}" for k in cfg.metrics)
    print(f"evaluate {cfg.dataset.name}/{cfg.queries.name}/{cfg.split}/{cfg.backbone.name}/{cfg.ablation.name} "
          f"({result['n_queries']} queries scored, {result['n_incomplete']} incomplete): {shown} "
          f"invalid_call_rate={result.get('invalid_call_rate')} model calls this run={result['model_calls']} "
          f"-> {result['run_dir']}")


if __name__ == "__main__":
    launch(main)
