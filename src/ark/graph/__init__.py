"""Typed graphs (``Graph``), their documents and loaders."""
from ark.graph.graph import IN, OUT, Graph


def load_graph(dataset) -> Graph:
    """The built graph of a dataset's settings (written by the build_graph stage to its ``graph_dir``)."""
    return Graph.load(dataset["graph_dir"])


__all__ = ["Graph", "IN", "OUT", "load_graph"]
