"""Stage hpo_baseline: the standard non-agent method for phenotype-driven diagnosis on a phenopacket query split:
rank diseases (or, for ``queries=phenopackets_gene``, genes through their diseases) by HPO semantic similarity to
the case's terms (``ark.graph.phenotype_similarity``), on the graph the agents use, scored like every other run.

``python -m ark.stages.hpo_baseline dataset=biokg_lpo queries=phenopackets`` writes a run directory as ``baseline``
does (``ark.runs``). A case's terms are the present phenotypes of its phenopacket in ``queries.source`` (found by the
case id, as the query text lists them); its diagnosis and genes are never read there, only the split's gold ids
score the ranking.
"""
from __future__ import annotations

import hydra
from omegaconf import DictConfig

from ark import build
from ark.data.phenopackets import phenotype_ids, read_phenopackets
from ark.errors import UserError
from ark.graph.phenotype_similarity import PhenotypeSimilarity
from ark.runs.rank import execute_ranking
from ark.runs.identity import config_groups
from ark.runs.store import Run, query_rows
from ark.stages import clear_errors, launch
from ark.tracking import log_queries, log_summary, stage_run

GROUPS = config_groups("hpo_baseline")  # config groups its results depend on


def checked_spec(cfg: DictConfig):
    """The run spec of a phenopacket query set's run (the only kind with case files to read terms from)."""
    spec = build.spec(cfg, "hpo_baseline")
    if not getattr(spec.queries, "source", None) or getattr(spec.queries, "target", None) not in ("disease", "gene"):
        raise UserError(f"hpo_baseline ranks the cases of a phenopacket query set (queries=phenopackets or "
                        f"phenopackets_gene), not queries={spec.queries.name}")
    return spec


def run(cfg: DictConfig) -> dict:
    spec = checked_spec(cfg)
    graph = build.graph(spec)
    queries = build.queries(spec, graph)
    terms = {str(p.get("id", "")): phenotype_ids(p)[0] for p in read_phenopackets(cfg.queries.source)}
    missing = [q["id"] for q in queries if q["id"] not in terms]
    if missing:
        raise UserError(f"{len(missing)} queries have no case in {cfg.queries.source} (e.g. {missing[0]}): make the "
                        "query set again from this file (make_queries)")
    ranker = PhenotypeSimilarity(graph)
    return execute_ranking(spec, "hpo_baseline", graph, queries,
                           lambda q: ranker.rank(terms[q["id"]], cfg.queries.target, spec.baseline_depth),
                           f"hpo_baseline {cfg.queries.name}")


@hydra.main(version_base="1.3", config_path="../../../conf", config_name="config")
@clear_errors
def main(cfg: DictConfig) -> None:
    with stage_run(cfg, "hpo_baseline", Run(checked_spec(cfg), "hpo_baseline")) as log:  # named like its run directory
        metrics = run(cfg)
        log_summary(log, metrics)
        log_queries(log, lambda: query_rows(metrics["run_dir"]))
    shown = " ".join(f"{k}={metrics[k]:.4f}" for k in cfg.metrics)
    print(f"hpo_baseline {cfg.dataset.name}/{cfg.queries.name} ({metrics['n_queries']} queries, {cfg.split}): "
          f"{shown} -> {metrics['run_dir']}")


if __name__ == "__main__":
    launch(main)
