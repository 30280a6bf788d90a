"""Stage baseline: one global search per query ranks the nodes (BM25 or dense); scored with STaRK's metrics.

Writes a run directory (``ark.runs``): records.jsonl (per query: id, query, ranking and its retrieval scores;
no gold), scores.jsonl, metrics.json, config.yaml, provenance.json.
"""
import hydra
import numpy as np
from omegaconf import DictConfig

from ark import build
from ark.runs.rank import execute_ranking
from ark.runs.identity import config_groups
from ark.runs.store import Run, query_rows
from ark.stages import clear_errors, launch
from ark.tracking import log_queries, log_summary, stage_run

GROUPS = config_groups("baseline")  # config groups its results depend on


def rank(relevance, query: str, depth: int, candidates: np.ndarray | None) -> tuple[list[int], list[float]]:
    """Top ``depth`` candidates for the query; non-candidates are dropped (over-fetching to keep the depth)."""
    fetch = depth
    while True:
        ids, scores = relevance.search(query, fetch)
        if candidates is not None:
            keep = np.isin(ids, candidates)
            ids, scores = ids[keep], scores[keep]
        if len(ids) >= depth or fetch >= len(candidates if candidates is not None else ids) or fetch > 64 * depth:
            return ids[:depth].tolist(), [round(float(s), 4) for s in scores[:depth]]
        fetch *= 4


def run(cfg: DictConfig) -> dict:
    spec = build.spec(cfg, "baseline")
    graph = build.graph(spec)
    relevance = build.relevance(spec)
    queries = build.queries(spec, graph)
    candidate_array = graph.candidates()
    return execute_ranking(spec, "baseline", graph, queries,
                           lambda q: rank(relevance, q["query"], spec.baseline_depth, candidate_array),
                           f"baseline {cfg.queries.name}/{cfg.retriever.name}")


@hydra.main(version_base="1.3", config_path="../../../conf", config_name="config")
@clear_errors
def main(cfg: DictConfig) -> None:
    with stage_run(cfg, "baseline", Run(build.spec(cfg, "baseline"), "baseline")) as log:  # named like its run directory
        metrics = run(cfg)
        log_summary(log, metrics)
        log_queries(log, lambda: query_rows(metrics["run_dir"]))
    shown = " ".join(f"{k}={metrics[k]:.4f}" for k in cfg.metrics)
    print(f"baseline {cfg.dataset.name}/{cfg.queries.name}/{cfg.retriever.name} "
          f"({metrics['n_queries']} queries, {cfg.split}): {shown} -> {metrics['run_dir']}")


if __name__ == "__main__":
    launch(main)
