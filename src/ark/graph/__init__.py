"""Typed graphs (``Graph``), their documents and loaders."""
from ark.graph.graph import IN, OUT, Graph


def load_graph(dataset_cfg) -> Graph:
    """The built graph of a dataset config (written by the build_graph stage)."""
    return Graph.load(dataset_cfg.graph_dir)


__all__ = ["Graph", "IN", "OUT", "load_graph"]
