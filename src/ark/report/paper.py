"""The paper's own numbers (``paper_numbers.csv``: table, caption, row, column, value, version, source) and the
STaRK tables that put ours beside them.

The tables' numbers are the camera-ready paper's (arXiv 2601.13969v2, read from its text by ``ark.report.paper_text``),
numbered as ours are; Figure 2's heatmap cells, which v2 prints only as an image, are v1's (its Figure 3, marked
``v1``). Each STaRK table cell reads ``paper / ours (ours - paper)``; "ours" stays empty until a run with the
matching stored config exists under the report's run roots (the STaRK pipeline, ``stark/dvc.yaml``).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import csv
import functools
from pathlib import Path

from ark.report.runs import experiment_runs, row_settings, table_rows
from ark.report.tables.table import Table

if TYPE_CHECKING:
    from ark.report.runs import RunData

PAPER_NUMBERS = Path(__file__).with_name("paper_numbers.csv")
DATASETS = {"AMAZON": "stark_amazon", "MAG": "stark_mag", "PRIME": "stark_prime"}
METRIC_KEYS = {"Hit@1": "hit@1", "Hit@5": "hit@5", "Recall@20": "recall@20", "MRR": "mrr"}
# our STaRK table -> (the paper's table holding its numbers, what it shows)
PAPER_TABLES = {"table1": ("Table 1", "main results"), "table2": ("Table 2", "tool ablations, 10% of test"),
                "table3": ("Table 3", "aggregation of three agents"), "table4": ("Table 4", "BM25 vs dense inside ARK"),
                "table5": ("Table 5", "backbones and distilled students"), "table6": ("Table 6", "queries per split"),
                "table7": ("Table 7", "graph statistics"), "table8": ("Table 8", "cost-controlled budgets"),
                "table9": ("Table 9", "tool use per trajectory, %"), "table10": ("Table 10", "re-anchoring, %"),
                "figure2": ("Figure 3", "budget heatmap cells")}


def paper_numbers(path: Path = PAPER_NUMBERS) -> list[dict]:
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def our_runs(runs: list[RunData], table: str, row: str, dataset: str) -> list[RunData]:
    """The runs behind one paper row on one STaRK dataset: those of the row file of our table whose ``row.paper``
    names it (``conf/experiment/stark/<table>/``), found by identity like every table's rows."""
    if not any(r.get("dataset.name") == dataset for r in runs):  # no run on this graph: no row file to compose
        return []
    for experiment in table_rows(f"stark/{table}"):
        if row_settings(experiment).get("paper") == row:
            return list(experiment_runs(runs, experiment, ["stark"], dataset).values())
    return []


def _ours(lookup, table, row, column) -> tuple[float | None, list[RunData]]:
    """Our number of one cell and its runs; ``lookup(table, row, dataset)``: ``our_runs`` on the report's runs."""
    name, _, metric = column.partition(" ")
    key = METRIC_KEYS.get(metric)
    if key is None:
        return None, []
    if name == "Average":
        parts = [_ours(lookup, table, row, f"{d} {metric}") for d in DATASETS]
        if any(v is None for v, _ in parts):
            return None, []
        return round(sum(v for v, _ in parts) / len(parts), 2), [r for _, rs in parts for r in rs]
    if name not in DATASETS:
        return None, []
    found = lookup(table, row, DATASETS[name])
    if not found or key not in found[0].metrics:
        return None, []
    return round(100 * found[0].metrics[key], 2), found[:1]


def stark_tables(runs: list[RunData], numbers: list[dict] | None = None) -> list[Table]:
    """One table per paper table: the paper's numbers, with ours beside them where a matching STaRK run exists."""
    numbers = paper_numbers() if numbers is None else numbers
    lookup = functools.cache(lambda table, row, dataset: our_runs(runs, table, row, dataset))  # once per cell group
    tables = []
    for ours, (theirs, what) in PAPER_TABLES.items():
        cells = [n for n in numbers if n["table"] == theirs]
        if not cells:
            continue
        rows = list(dict.fromkeys(n["row"] for n in cells))
        columns = list(dict.fromkeys(n["column"] for n in cells))
        value = {(n["row"], n["column"]): n["value"] for n in cells}
        version = cells[0].get("version") or "v1"
        t = Table(f"stark_{ours}", f"STaRK {ours.replace('table', 'Table ').replace('figure', 'Figure ')}: "
                                   f"{what}, paper / ours (ours - paper)",
                  ["row"] + columns,
                  note=f"Paper: {theirs} of arXiv 2601.13969{version}"
                       + (" (v2 prints this figure only as an image)" if version == "v1" else "")
                       + ". Ours: empty until the STaRK pipeline has run (`dvc repro stark/dvc.yaml`).")
        for row in rows:
            line, behind = [row], []
            for column in columns:
                paper = value.get((row, column))
                mine, rs = _ours(lookup, ours, row, column)
                behind += rs
                line.append(_paper_vs_ours(paper, mine))
            t.add(line, behind)
        tables.append(t)
    return tables


def _paper_vs_ours(paper: str | None, ours: float | None) -> str:
    if paper is None and ours is None:
        return ""
    text = paper if paper is not None else "–"
    if ours is None:
        return f"{text} / –"
    diff = f" ({ours - float(paper.replace(',', '')):+.2f})" if paper is not None else ""
    return f"{text} / {ours:.2f}{diff}"
