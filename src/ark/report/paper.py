"""The paper's own numbers (``paper_numbers.csv``: table, caption, row, column, value, version, source) and the
STaRK tables that put ours beside them.

The tables' numbers are the camera-ready paper's (arXiv 2601.13969v2, read from its text by ``ark.report.paper_text``),
numbered as ours are; Figure 2's heatmap cells, which v2 prints only as an image, are v1's (its Figure 3, marked
``v1``). Each STaRK table cell reads ``paper / ours (ours - paper)``; "ours" stays empty until a run with the
matching stored config exists under the report's run roots (the STaRK pipeline, ``stark/dvc.yaml``).
"""
from __future__ import annotations

import csv
from pathlib import Path

from ark.report.runs import RunData
from ark.report.tables import Table, ark_runs, baseline_runs

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
BACKBONES = {"GPT-4o": "gpt-4o", "GPT-4.1": "gpt-4.1", "GPT-5.2": "gpt-5.2", "Qwen3-4B": "qwen3-4b",
             "Qwen3-8B": "qwen3-8b", "Qwen3-8B-6000": "qwen3-8b-student"}  # Table 5 rows we have a backbone for


def paper_numbers(path: Path = PAPER_NUMBERS) -> list[dict]:
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def our_runs(runs: list[RunData], table: str, row: str, dataset: str, ark: dict) -> list[RunData]:
    """The runs behind one paper row on one STaRK dataset, recognised by their stored configs."""
    on = dict(dataset__name=dataset)
    if row == "BM25" and table == "table1":
        return baseline_runs(runs, "bm25", dataset)
    if table == "table1" and row == "ARK":
        return ark_runs(runs, ark, ablation__name="none", retriever__name="bm25", **on)
    if table == "table1" and row == "ARK distilled":
        return ark_runs(runs, {**ark, "backbone": "qwen3-8b-student"}, ablation__name="none", retriever__name="bm25",
                        **on)
    if table == "table4" and row in ("BM25", "Dense"):
        return ark_runs(runs, ark, ablation__name="none", retriever__name=row.lower(), **on)
    if table == "table8":
        budget = {"1 agent, T_max = 30": (1, 30), "3 agents, T_max = 10": (3, 10)}.get(row)
        return ark_runs(runs, {**ark, "n_agents": budget[0], "T_max": budget[1]}, ablation__name="none",
                        retriever__name="bm25", **on) if budget else []
    if table == "table2":
        ablation = {"Full": "none", "w/o Neighbors": "no_neighbors", "Neighbors w/o q": "no_q",
                    "Neighbors w/o F": "no_f"}.get(row)
        return ark_runs(runs, ark, "test-0.1", ablation__name=ablation, retriever__name="bm25", **on) if ablation \
            else []
    if table == "table5":
        backbone = BACKBONES.get(row)
        return ark_runs(runs, {**ark, "backbone": backbone}, ablation__name="none", retriever__name="bm25", **on) \
            if backbone else []
    return []


def _ours(runs, table, row, column, ark) -> tuple[float | None, list[RunData]]:
    name, _, metric = column.partition(" ")
    key = METRIC_KEYS.get(metric)
    if key is None:
        return None, []
    if name == "Average":
        parts = [_ours(runs, table, row, f"{d} {metric}", ark) for d in DATASETS]
        if any(v is None for v, _ in parts):
            return None, []
        return round(sum(v for v, _ in parts) / len(parts), 2), [r for _, rs in parts for r in rs]
    if name not in DATASETS:
        return None, []
    found = our_runs(runs, table, row, DATASETS[name], ark)
    if not found or key not in found[0].metrics:
        return None, []
    return round(100 * found[0].metrics[key], 2), found[:1]


def stark_tables(runs: list[RunData], ark: dict, numbers: list[dict] | None = None) -> list[Table]:
    """One table per paper table: the paper's numbers, with ours beside them where a matching STaRK run exists."""
    numbers = paper_numbers() if numbers is None else numbers
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
                mine, rs = _ours(runs, ours, row, column, ark)
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
