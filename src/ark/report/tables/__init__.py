"""The paper's tables from runs (``ark.report.runs``): each row is recognised by its runs' stored configs; one module a
table (``table.Table`` is what each returns). Table numbers follow the paper (arXiv 2601.13969, camera-ready
numbering): 1 main results, 2 tool ablations, 3 aggregation, 4 BM25 vs dense inside ARK, 5 backbones and distillation,
6 split sizes, 7 graph statistics, 8 cost-controlled budgets, 9 tool use, 10 re-anchoring.

Adding a table: its row files ``conf/experiment/<table>/<row>.yaml``, a module here with a function that builds it from
``cells.row_runs(runs, "<table>", graphs)``, listed in ``biokg_tables``.
"""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from ark.report.tables.cells import scored_on
from ark.report.tables.data_tables import table6, table7, table_lpo
from ark.report.tables.table import Table
from ark.report.tables.table1 import table1, table1_every_case, table1_paired
from ark.report.tables.table2 import table2
from ark.report.tables.table3 import table3
from ark.report.tables.table4 import table4
from ark.report.tables.table5 import table5, table5_all, table5_behaviour
from ark.report.tables.table8 import table8
from ark.report.tables.tool_use import table9, table10
from ark.report.tables.twins import table1_twins

if TYPE_CHECKING:
    from ark.report.settings import ReportSettings


def biokg_tables(runs, report: ReportSettings, queries_root: Path, distill_dir: Path, graphs: dict) -> list[Table]:
    qs, ark = list(report.query_sets), report.ark
    split = report.ablation_split
    graph_of = dict(report.graph_of)
    on = scored_on(graph_of, qs)
    every_case, all_graph = [q for q in qs if q in graph_of], report.every_case.graph
    return [table1(runs, qs, ark, graph_of, graphs, queries_root), table1_paired(runs, qs, ark, graph_of),
            table1_twins(runs, report.twin_query_sets, ark, graph_of),
            table1_every_case(runs, every_case, all_graph),
            table1_paired(runs, every_case, report.every_case.ark, {q: all_graph for q in every_case},
                          "table1_all"),
            table1(runs, qs, ark), table2(runs, on, ark, split), table3(runs, on, ark), table4(runs, on),
            table5(runs, distill_dir, on), table5_all(runs, distill_dir, on),
            table5_behaviour(runs, distill_dir, on), table6(queries_root, qs, split), table7(graphs),
            table_lpo(graphs, queries_root, qs),
            table8(runs, on, ark), table9(runs, on, ark), table10(runs, on, ark)]
