"""Stage make_queries: a query set -> ``dataset.queries_dir``/{train,val,test}.jsonl + stats.json."""
import hydra
from omegaconf import DictConfig, OmegaConf

from ark.config import make
from ark.data.queries import write_query_splits
from ark.tracking import stage_run
from ark.stages import clear_errors, launch

GROUPS = ("queries",)  # config groups its results depend on (the graph is a file dependency)


def run(cfg: DictConfig) -> dict:
    splits, stats = make(cfg.queries, "queries").make(cfg.dataset)
    stats["config"] = {k: v for k, v in OmegaConf.to_container(cfg.queries, resolve=True).items()
                       if k != "_target_"}  # the settings, not the class reading them
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
    launch(main)
