"""Stage build_index: node documents -> a persisted relevance index in ``dataset.index_dir``."""
import sys
import time

import hydra
from omegaconf import DictConfig

from ark.config import make, resolved
from ark.graph import load_graph
from ark.index import index_settings
from ark.io import atomic_dir, checksums, write_json
from ark.tracking import log_summary, stage_run
from ark.errors import UserError
from ark.stages import clear_errors, launch

GROUPS = ("retriever",)  # config groups its results depend on (the graph is a file dependency)


def run(cfg: DictConfig) -> dict:
    graph = load_graph(cfg.dataset)
    if graph.num_nodes == 0:
        raise UserError(f"the graph at {cfg.dataset.graph_dir} has no nodes: nothing to index")
    retriever = make(cfg.retriever, "retriever")  # its settings checked before anything is said or done
    print(f"indexing {graph.num_nodes:,} node documents ({cfg.retriever.name}) into {cfg.dataset.index_dir}",
          file=sys.stderr, flush=True)
    start = time.perf_counter()
    index = retriever.build(graph.doc)
    seconds = time.perf_counter() - start
    # no timings: a rebuild is byte-identical
    info = {"retriever": cfg.retriever.name, "num_docs": graph.num_nodes, "settings": index_settings(resolved(cfg.retriever))}
    with atomic_dir(cfg.dataset.index_dir) as tmp:
        index.save(tmp)
        info["files"] = checksums(tmp)  # checked when a run loads the index (ark.build.relevance)
        write_json(tmp / "info.json", info)
    return {**{k: v for k, v in info.items() if k != "files"}, "build_seconds": round(seconds, 2), "reused_embeddings": getattr(index, "reused", 0)}


@hydra.main(version_base="1.3", config_path="../../../conf", config_name="config")
@clear_errors
def main(cfg: DictConfig) -> None:
    with stage_run(cfg, "build_index") as log:
        info = run(cfg)
        log_summary(log, info)
    print(f"{info['retriever']} index of {info['num_docs']:,} documents built in {info['build_seconds']:g} s: "
          f"{cfg.dataset.index_dir}")


if __name__ == "__main__":
    launch(main)
