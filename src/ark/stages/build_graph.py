"""Stage build_graph: source files -> ``dataset.graph_dir`` (nodes, edges, CSR, documents, summary.json)."""
import hydra
from omegaconf import DictConfig

from ark.config import make
from ark.tracking import log_summary, stage_run
from ark.stages import clear_errors, launch

GROUPS = ("dataset",)  # config groups its results depend on


def run(cfg: DictConfig) -> dict:
    graph = make(cfg.dataset, "dataset").build_graph()
    graph.save(cfg.dataset.graph_dir)
    return graph.summary()


@hydra.main(version_base="1.3", config_path="../../../conf", config_name="config")
@clear_errors
def main(cfg: DictConfig) -> None:
    with stage_run(cfg, "build_graph") as log:
        summary = run(cfg)
        log_summary(log, summary)
    print(f"{cfg.dataset.name}: {summary['num_nodes']:,} nodes, {summary['num_edges']:,} edges")
    for t, n in summary["nodes_by_type"].items():
        print(f"  {t:<24} {n:>8,}")
    if "excluded" in summary:
        print(f"  left out (leave-publication-out): {summary['excluded']}")
    print(f"counts written to {cfg.dataset.graph_dir}/summary.json")


if __name__ == "__main__":
    launch(main)
