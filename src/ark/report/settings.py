"""What the report reads and writes (``report`` in conf/config.yaml) as typed settings that check themselves."""
from __future__ import annotations

from dataclasses import dataclass

from ark.errors import UserError
from ark.settings import check_bool, from_mapping


def _names(key: str, value, mapping: bool = False) -> None:
    """A list of names (a mapping of name to name with ``mapping``), or one error line naming ``key``."""
    items = list(value.items()) if mapping and isinstance(value, dict) else value
    ok = isinstance(items, list) and all(
        isinstance(x, str) and x if not mapping else isinstance(x, tuple) and all(isinstance(y, str) and y for y in x)
        for x in items)
    if not ok:
        raise UserError(f"report.{key} must be {'a mapping of names' if mapping else 'a list of names'}, got {value!r}")


@dataclass(frozen=True)
class EveryCase:
    """table1_all: the graph cut for every case of the file, and its ARK row's experiment file."""

    graph: str
    ark: str


@dataclass(frozen=True)
class ReportSettings:
    """The runs the report reads, where it writes, and the BioKG tables' columns and rows."""

    runs: list[str]            # run directories read (recursively); a run is recognised by its stored config
    tables: str
    figures: str
    metrics: str
    distill: str               # the students' training reports
    notebooks: str
    executed: str
    site: str | None
    scores: str                # every run's per-query scores, shipped (ark.report.shipped.write_shipped)
    biokg: bool                # false: the STaRK tables only
    graphs: list[str]
    query_sets: list[str]
    graph_of: dict[str, str]   # the graph each query set is scored on in Table 1
    twin_query_sets: list[str]
    every_case: EveryCase
    ark: str                   # the experiment file of "ARK" in the BioKG tables
    ablation_split: str

    def __post_init__(self):
        for key in ("runs", "graphs", "query_sets", "twin_query_sets"):
            _names(key, getattr(self, key))
        _names("graph_of", self.graph_of, mapping=True)
        for key in ("tables", "figures", "metrics", "distill", "notebooks", "executed", "ark", "ablation_split"):
            if not isinstance(getattr(self, key), str) or not getattr(self, key):
                raise UserError(f"report.{key} must be a path or name, got {getattr(self, key)!r}")
        if self.site is not None and not isinstance(self.site, str):
            raise UserError(f"report.site must be a directory or null, got {self.site!r}")
        check_bool("report.biokg", self.biokg)


def report_settings(config: dict) -> ReportSettings:
    """The typed settings of a resolved ``report`` group (plain data)."""
    return from_mapping(ReportSettings, "report", {
        **config, "every_case": from_mapping(EveryCase, "report.every_case", config.get("every_case") or {})})
