"""A table as plain data (title, columns, rows, a note, the runs behind each row), written as Markdown and CSV by the
report stage. Metrics are shown x100, each with its 95 % interval (``ark.report.intervals``: an ``Estimate`` cell; the
CSV and ``numbers.json`` carry its bounds as ``<column> lo`` and ``<column> hi``). Markdown stays within ``WIDTH``
columns: a wider table is split into blocks of columns, each repeating the first."""
from __future__ import annotations

from typing import TYPE_CHECKING

import csv
import io
import textwrap
from dataclasses import dataclass, field

from ark.report.intervals import Estimate
from ark.runs.identity import portable

if TYPE_CHECKING:
    from ark.report.runs import RunData

METRICS = ("hit@1", "hit@5", "recall@20", "mrr")


LABEL = {"hit@1": "Hit@1", "hit@5": "Hit@5", "recall@20": "R@20", "mrr": "MRR"}


WIDTH = 200  # the widest Markdown line of a table


@dataclass
class Table:
    name: str  # file stem, e.g. table1
    title: str
    columns: list[str]
    rows: list[list] = field(default_factory=list)  # cells: numbers (already x100 where metrics) or text
    note: str = ""
    runs: dict[str, list[str]] = field(default_factory=dict)  # row label -> run directories behind it
    labels: list[str] = field(default_factory=list)  # one per row: its first cell unless given
    keys: int = 1  # the leading columns that say what a row is: repeated in each Markdown block
    machine_dependent: list[str] = field(default_factory=list)  # rows whose runs depend on the CPU (ark.report.check)

    def add(self, cells: list, runs: list[RunData] = (), label: str | None = None) -> None:
        label = str(cells[0]) if label is None else label
        if label in self.labels:
            raise ValueError(f"{self.name}: two rows labelled {label!r}")
        self.rows.append(cells)
        self.labels.append(label)
        if runs:
            self.runs[label] = [str(r.dir) for r in runs]
        if any(portable(r.config) != r.config for r in runs):  # a value this machine resolved: dtype, bf16, threads
            self.machine_dependent.append(label)

    def markdown(self) -> str:
        lines = textwrap.wrap(f"**{self.title}**", WIDTH) + [""]
        for block in self.blocks():
            shown = [[row[i] for i in block] for row in self.rows]
            lines += ["| " + " | ".join(self.columns[i] for i in block) + " |", "|" + "---|" * len(block)]
            lines += ["| " + " | ".join(cell_text(c) for c in row) + " |" for row in shown] + [""]
        if self.note:
            lines += textwrap.wrap(self.note, WIDTH)
        if self.runs:
            lines += ["", "Runs (`ark show <dir>` prints their trajectories):"]
            # a run behind every row (a paired table's reference method) is listed once, before the rows' own
            shared = [d for d in next(iter(self.runs.values()))
                      if len(self.runs) > 1 and all(d in dirs for dirs in self.runs.values())]
            if shared:
                lines += ["- every row:"] + [f"  `{d}`" for d in shared]
            for label, dirs in self.runs.items():
                own = [d for d in dirs if d not in shared]
                if own:
                    lines += [f"- {label}:"] + [f"  `{d}`" for d in own]
        return "\n".join(lines).rstrip("\n") + "\n"

    def blocks(self) -> list[list[int]]:
        """Column indices of each Markdown block: all columns where they fit in ``WIDTH``, else the ``keys`` columns
        with as many of the next ones (kept together by the query set that starts their name, unless that alone is
        too wide) as fit."""
        def width(block: list[int]) -> int:
            return 1 + sum(3 + max([len(self.columns[i])] + [len(cell_text(row[i])) for row in self.rows]) for i in block)

        everything = list(range(len(self.columns)))
        keys = everything[:self.keys]
        if width(everything) <= WIDTH or len(self.columns) <= self.keys + 1:
            return [everything]
        groups: list[list[int]] = []
        for i in everything[self.keys:]:
            prefix = self.columns[i].split(" ")[0]
            if groups and self.columns[groups[-1][-1]].split(" ")[0] == prefix:
                groups[-1].append(i)
            else:
                groups.append([i])
        blocks = [list(keys)]
        for group in groups:
            for part in [group] if width(keys + group) <= WIDTH else [[i] for i in group]:  # a group too wide: split
                if len(blocks[-1]) > len(keys) and width(blocks[-1] + part) > WIDTH:
                    blocks.append(list(keys))
                blocks[-1] += part
        return blocks

    def flat(self) -> tuple[list[str], list[list]]:
        """(columns, rows) with each column that holds an ``Estimate`` as its value and bounds (and p where it has
        one): ``<column>``, ``<column> lo``, ``<column> hi`` [, ``<column> p``]."""
        extra = [("lo", "hi", "p", "better", "worse") if any(isinstance(r[i], Estimate) and r[i].better is not None
                                                            for r in self.rows)
                 else ("lo", "hi", "p") if any(isinstance(r[i], Estimate) and r[i].p is not None for r in self.rows)
                 else ("lo", "hi") if any(isinstance(r[i], Estimate) for r in self.rows) else ()
                 for i in range(len(self.columns))]
        columns = [name for c, more in zip(self.columns, extra) for name in (c, *(f"{c} {m}" for m in more))]
        rows = []
        for row in self.rows:
            cells = []
            for cell, more in zip(row, extra):
                if isinstance(cell, Estimate):
                    cells += [cell.value, *(getattr(cell, m) for m in more)]
                else:
                    cells += [cell, *(None for _ in more)]
            rows.append(cells)
        return columns, rows

    def csv(self) -> str:
        columns, rows = self.flat()
        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(columns)
        writer.writerows([["" if c is None else c for c in row] for row in rows])
        return out.getvalue()

    def numbers(self) -> dict:
        """{row label: {column: value}} of the numeric cells (``tables/numbers.json``), interval bounds included."""
        columns, rows = self.flat()
        return {label: {c: v for c, v in zip(columns, row) if isinstance(v, (int, float))}
                for label, row in zip(self.labels, rows)}


def cell_text(value) -> str:
    if value is None:
        return ""
    if isinstance(value, Estimate):
        shown = f"{value.value:.2f} [{bound_text(value.lo)}, {bound_text(value.hi)}]"
        if value.p is not None:
            shown += f" p={value.p:.3f}"
        return shown if value.better is None else f"{shown} +{value.better}/-{value.worse}"
    if isinstance(value, float):
        return f"{value:.2f}"
    return str(value)


def bound_text(x: float) -> str:
    """An interval bound to one decimal, or to the first digit that is not 0 where one decimal would print a bound
    that excludes 0 as 0.0 (beside a p below 0.05 it would look as if the two disagree)."""
    shown = f"{x:.1f}"
    return shown if float(shown) != 0 or x == 0 else f"{x:.1g}"


def pct(value) -> float | None:
    return None if value is None else round(100 * float(value), 2)


def metric_columns(query_sets: list[str], metrics, average: bool = False) -> list[str]:
    cols = [f"{q} {LABEL[m]}" for q in query_sets for m in metrics]
    return cols + ([f"average {LABEL[m]}" for m in metrics] if average else [])
