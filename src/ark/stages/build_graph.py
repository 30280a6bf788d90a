"""Stage build_graph: source files -> ``dataset.graph_dir`` (nodes, edges, CSR, documents, summary.json)."""
import hydra
from omegaconf import DictConfig

from ark.errors import UserError
from ark.graph import Graph
from ark.tracking import log_summary, stage_run
from ark.stages import clear_errors

GROUPS = ("dataset",)  # config groups its results depend on


def build(cfg: DictConfig) -> Graph:
    ds = cfg.dataset
    if ds.kind == "biokg":
        from ark.data.biokg import build_from_raw
        from omegaconf import OmegaConf

        excluded, source = None, None
        if ds.get("exclude_publications_of"):
            from ark.data.phenopackets import case_publications, read_phenopackets, source_identity

            excluded = case_publications(read_phenopackets(ds.exclude_publications_of))
            source = source_identity(ds.exclude_publications_of)
        return build_from_raw(ds.raw_dir, OmegaConf.to_container(ds.artefacts, resolve=True),
                              list(ds.documents.relation_types), ds.documents.max_per_relation, excluded, source)
    if ds.kind == "stark":
        from ark.graph.stark import load_stark_skb

        graph = load_stark_skb(ds.skb, ds.raw_dir, online=ds.online, relations=ds.documents.relations)
        if ds.get("generate"):
            from omegaconf import OmegaConf

            graph.meta.update(dataset=ds.name, source="ark.data.synthetic_skb",
                              generate=OmegaConf.to_container(ds.generate, resolve=True))
        return graph
    raise UserError(f"unknown dataset kind {ds.kind!r}")


def run(cfg: DictConfig) -> dict:
    graph = build(cfg)
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
    main()
