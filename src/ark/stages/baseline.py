"""Stage baseline: one global search per query ranks the nodes (BM25 or dense); scored with STaRK's metrics.

Writes ``records.jsonl`` (one line per query: id, ranking, scores, per-query metrics) and
``metrics.json`` (means, config, package versions, data hashes) under
``results/runs/baseline/<dataset>/<queries>/<retriever>/``.
"""
from pathlib import Path

import hydra
import numpy as np
from omegaconf import DictConfig
from tqdm import tqdm

from ark.data.queries import load_queries
from ark.eval.metrics import as_candidates, mean_scores, score_query
from ark.graph import load_graph
from ark.index import load_relevance
from ark.io import write_jsonl, write_run_metrics
from ark.tracking import stage_run
from ark.stages import clear_errors

GROUPS = ("paths", "dataset", "queries", "retriever", "logger")


def out_dir(cfg: DictConfig) -> Path:
    return Path(cfg.paths.results) / "runs" / "baseline" / cfg.dataset.name / cfg.queries.name / cfg.retriever.name


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
    graph = load_graph(cfg.dataset)
    relevance = load_relevance(cfg.retriever.name, cfg.dataset.index_dir)
    queries = load_queries(cfg.dataset.queries_dir, cfg.split)
    if not queries:
        raise ValueError(f"no queries in {cfg.dataset.queries_dir}/{cfg.split}.jsonl")
    restricted = graph.meta.get("candidate_types") is not None
    candidate_array = graph.candidate_ids() if restricted else None
    candidates = as_candidates(candidate_array) if restricted else None
    records, per_query = [], []
    for q in tqdm(queries, desc=f"baseline {cfg.queries.name}/{cfg.retriever.name}", mininterval=2):
        ranking, scores = rank(relevance, q["query"], cfg.baseline.depth, candidate_array)
        m = score_query(ranking, q["answer_ids"], list(cfg.metrics), candidates)
        per_query.append(m)
        records.append({"id": q["id"], "query": q["query"], "ranking": ranking, "scores": scores, "metrics": m})
    out = out_dir(cfg)
    write_jsonl(out / "records.jsonl", records)
    metrics = {**mean_scores(per_query), "split": cfg.split}
    write_run_metrics(out, metrics, cfg)
    return metrics


@hydra.main(version_base="1.3", config_path="../../../conf", config_name="config")
@clear_errors
def main(cfg: DictConfig) -> None:
    with stage_run(cfg, "baseline") as log:
        metrics = run(cfg)
        log.log(metrics)
    shown = " ".join(f"{k}={v:.4f}" for k, v in metrics.items() if isinstance(v, float))
    print(f"baseline {cfg.dataset.name}/{cfg.queries.name}/{cfg.retriever.name} "
          f"({metrics['n_queries']} queries, {cfg.split}): {shown}")


if __name__ == "__main__":
    main()
