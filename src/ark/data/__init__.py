"""Where graphs and query sets come from. A ``conf/dataset/<name>.yaml`` names its ``Dataset`` class in
``_target_`` (BioKG, phenopacket-store, STaRK), a ``conf/queries/<name>.yaml`` its ``QuerySet`` class; the stages
call ``download``, ``build_graph`` and ``make`` and never ask which kind they have. Adding a graph: one YAML and
one ``Dataset`` subclass beside its loader. A key a class does not have is an error (``ark.build.make``)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from ark.errors import UserError

HERE = {"identity": False}  # field metadata: where this checkout keeps a file, not part of a run's identity
FILE = {"file": True}  # field metadata: an input file, part of a run's identity by its name (not its directory)


@dataclass(kw_only=True)
class Dataset:
    """What every dataset config holds: its name, and where the stages keep its files."""

    name: str
    kind: ClassVar[str]  # a label stored in each run's identity (ark.runs.identity.plain)
    raw_dir: str = field(metadata=HERE)
    graph_dir: str | None = field(default=None, metadata=HERE)
    index_dir: str | None = field(default=None, metadata=HERE)
    queries_dir: str | None = field(default=None, metadata=HERE)
    candidate_types: list | None = None  # node types a ranking is restricted to (null: every node)

    def download(self, mirror: str | None = None) -> dict[str, str]:
        """Fetch the pinned source files into ``raw_dir``: {name: path}."""
        raise NotImplementedError

    def build_graph(self):
        """The ``ark.graph.Graph`` built from the downloaded files."""
        raise UserError(f"dataset {self.name} is a source of other datasets' inputs, not a graph")


@dataclass(kw_only=True)
class QuerySet:
    """A set of questions with gold node ids, split into train/val/test."""

    name: str
    kind: ClassVar[str]  # a label stored in each run's identity (ark.runs.identity.plain)

    def make(self, dataset) -> tuple[dict[str, list[dict]], dict]:
        """({split: rows}, statistics) for ``dataset`` (its config: the built graph is at ``dataset.graph_dir``)."""
        raise NotImplementedError

    def answerable(self, graph, answer_ids: list[int]) -> bool | None:
        """Whether a query's gold can be reached in ``graph`` at all (None: the query set has no such notion). Used
        in scoring only, never shown to an agent."""
        return None
