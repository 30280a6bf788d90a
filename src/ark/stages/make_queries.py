"""Stage make_queries: a query set -> ``dataset.queries_dir``/{train,val,test}.jsonl + stats.json."""
import hydra
from omegaconf import DictConfig, OmegaConf

from ark.errors import UserError
from ark.data.queries import write_query_splits
from ark.graph import load_graph
from ark.tracking import stage_run
from ark.stages import clear_errors

GROUPS = ("queries",)  # config groups its results depend on (the graph is a file dependency)


def make(cfg: DictConfig) -> tuple[dict, dict]:
    q = cfg.queries
    if q.kind == "synthetic":
        from ark.data.synthetic import make_synthetic_queries

        return make_synthetic_queries(load_graph(cfg.dataset), q)
    if q.kind == "phenopackets":
        from ark.data.phenopackets import make_phenopacket_queries, read_phenopackets

        splits, counts = make_phenopacket_queries(
            load_graph(cfg.dataset), read_phenopackets(q.source), target=q.target,
            cap_per_disease=q.cap_per_disease, split_fractions=tuple(q.split_fractions))
        return splits, {"cases": counts}
    if q.kind == "stark":
        from ark.data.stark import load_stark_human_eval, load_stark_splits

        if cfg.dataset.get("generate") and q.name != "generated":
            raise UserError(f"dataset {cfg.dataset.name} is generated: its questions are queries=generated")
        if q.human:
            return {"test": load_stark_human_eval(q.qa_dir)}, {}
        return load_stark_splits(q.qa_dir), {}
    raise UserError(f"unknown query kind {q.kind!r}")


def run(cfg: DictConfig) -> dict:
    splits, stats = make(cfg)
    stats["config"] = OmegaConf.to_container(cfg.queries, resolve=True)
    if stats["config"].get("source"):  # which file, not where this checkout keeps it
        from ark.data.phenopackets import source_identity

        stats["config"]["source"] = source_identity(cfg.queries.source)
    counts = write_query_splits(splits, cfg.dataset.queries_dir, stats)
    return {"queries": counts, **{k: v for k, v in stats.items() if k != "config"}}


@hydra.main(version_base="1.3", config_path="../../../conf", config_name="config")
@clear_errors
def main(cfg: DictConfig) -> None:
    with stage_run(cfg, "make_queries") as log:
        result = run(cfg)
        log.log(result["queries"])
    print(f"{cfg.dataset.name}/{cfg.queries.name}: {result}")


if __name__ == "__main__":
    main()
