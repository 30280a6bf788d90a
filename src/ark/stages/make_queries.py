"""Stage make_queries: a query set -> ``dataset.queries_dir``/{train,val,test}.jsonl + stats.json."""
import re
import sys
from pathlib import Path

import hydra
import yaml
from omegaconf import DictConfig, OmegaConf

from ark.config import CONF, make
from ark.data.queries import write_query_splits
from ark.errors import UserError
from ark.tracking import stage_run
from ark.stages import clear_errors, launch

GROUPS = ("queries",)  # config groups its results depend on (the graph is a file dependency)


def run(cfg: DictConfig) -> dict:
    splits, stats = make(cfg.queries, "queries").make(cfg.dataset)
    check_own_name(cfg)
    stats["config"] = {k: v for k, v in OmegaConf.to_container(cfg.queries, resolve=True).items()
                       if k != "_target_"}  # the settings, not the class reading them
    if stats["config"].get("source"):  # which file, not where this checkout keeps it
        from ark.data.phenopackets import source_identity

        stats["config"]["source"] = source_identity(cfg.queries.source)
    counts = write_query_splits(splits, cfg.dataset.queries_dir, stats)
    if counts["test"] == 0 and "split_fractions" in cfg.queries:
        print(f"warning: {cfg.queries.name}: no query fell in the test split ({counts['train']} train, {counts['val']} "
              f"val; queries.split_fractions {list(cfg.queries.split_fractions)}), so there is nothing to evaluate: "
              "queries.split_fractions=[0,0,1] puts every query in test", file=sys.stderr)
    return {"queries": counts, **{k: v for k, v in stats.items() if k != "config"}}


def check_own_name(cfg: DictConfig) -> None:
    """A query set named as a file of conf/queries/ is that file's (a pipeline output): made from another source
    (``queries.source``), it needs a name of its own, so that it never overwrites another query set's files."""
    name, source = cfg.queries.name, cfg.queries.get("source")
    conf_file = CONF / "queries" / f"{name}.yaml"
    if not source or not conf_file.is_file():
        return
    own = yaml.safe_load(conf_file.read_text()).get("source")
    if own is not None and OmegaConf.merge(cfg, {"queries": {"source": own}}).queries.source == source:
        return
    stem = re.sub(r"[^\w.-]", "_", re.sub(r"(\.jsonl?)?(\.gz)?$", "", Path(str(source).rstrip("/")).name)) or "cases"
    if (CONF / "queries" / f"{stem}.yaml").is_file():
        stem = f"my_{stem}"
    raise UserError(f"queries.source={source} is not the source of the query set {name!r} (conf/queries/{name}.yaml), "
                    f"whose files are {cfg.dataset.queries_dir}: give yours a name of its own, e.g. "
                    f"queries.name={stem}")


@hydra.main(version_base="1.3", config_path="../../../conf", config_name="config")
@clear_errors
def main(cfg: DictConfig) -> None:
    with stage_run(cfg, "make_queries") as log:
        result = run(cfg)
        log.log(result["queries"])
    print(f"{cfg.dataset.name}/{cfg.queries.name}: {result}")


if __name__ == "__main__":
    launch(main)
