"""The paper's numbers, read from its text: every table of the camera-ready paper (arXiv 2601.13969v2) as
``paper_numbers.csv`` rows (table, caption, row, column, value, version, source).

``python -m ark.report.paper_text <paper.md>`` rewrites the v2 rows of ``paper_numbers.csv`` from the paper's
Markdown text (its tables are tab-separated blocks, each followed by its ``Table N:`` caption); rows of other
versions (v1's figure values, which v2 prints only as images) are kept. The paper text itself is not part of this
repository: the team keeps a copy; the arXiv source is public.
"""
from __future__ import annotations

import argparse
import csv
import re
import sys
from pathlib import Path

from ark.report.paper import PAPER_NUMBERS

FIELDS = ("table", "caption", "row", "column", "value", "version", "source")
SOURCE = "arXiv 2601.13969v2 (camera-ready text)"
NUMBER = re.compile(r"^-?\d[\d,]*(\.\d+)?$")
METRICS = {"R@20": "Recall@20"}  # the paper's short column names -> the ones the report uses


def clean(cell: str) -> str:
    """A cell without markup: HTML emphasis, LaTeX dollars, ``T_{\\max}``."""
    cell = re.sub(r"</?(b|u|i)>", "", cell).replace("$", "").replace("T_{\\max}", "T_max")
    return " ".join(cell.split())


def _column_names(header: list[list[str]]) -> list[str]:
    """One name per column: a group row (datasets, forward-filled over its empty cells) joined with the row under it."""
    if len(header) == 1:
        return [METRICS.get(c, c) for c in header[0]]
    groups, names, last = header[0], header[1], ""
    out = []
    for i in range(max(len(groups), len(names))):
        group = groups[i] if i < len(groups) and groups[i] else last
        last = group
        name = names[i] if i < len(names) else ""
        out.append(f"{group} {METRICS.get(name, name)}".strip() if name else group)
    return out


def read_tables(text: str) -> list[dict]:
    """Every cell of every captioned table: {table, caption, row, column, value} (values as printed)."""
    lines = text.splitlines()
    cells = []
    for i, line in enumerate(lines):
        caption = re.match(r"^Table (\d+): (.*)", line)
        if not caption:
            continue
        end = i - 1
        while end >= 0 and not lines[end].strip():
            end -= 1
        start = end
        while start >= 0 and "\t" in lines[start]:
            start -= 1
        block = [[clean(c) for c in row.split("\t")] for row in lines[start + 1:end + 1]]
        header = []
        while block and not any(NUMBER.match(c) for c in block[0]):
            header.append(block.pop(0))
            if len(header) == 2:
                break
        columns = _column_names(header)
        first = ""
        for row in block:
            while row and not row[-1]:
                row = row[:-1]
            values = [c for c in row if NUMBER.match(c)]
            if not values:
                continue  # a group heading (Table 1's categories)
            labels = row[: len(row) - len(values)]
            if labels and labels[0] and len(labels) > 1:
                first = labels[0]  # a group label that the rows under it leave empty (Table 9's splits)
            label = [c for c in labels if c]
            if len(labels) > 1 and not labels[0] and first:
                label = [first] + label
            short = label[-1] if label and len(label) == 1 else " / ".join(label)
            for column, value in zip(columns[-len(values):], values):
                cells.append({"table": f"Table {caption.group(1)}", "caption": caption.group(2).split(". ")[0],
                              "row": short, "column": column, "value": value})
    return cells


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m ark.report.paper_text", description=__doc__.splitlines()[0])
    p.add_argument("paper", type=Path, help="the v2 paper's Markdown text")
    p.add_argument("--out", type=Path, default=PAPER_NUMBERS)
    args = p.parse_args(argv)
    if not args.paper.is_file():
        print(f"error: no paper text at {args.paper}", file=sys.stderr)
        return 2
    cells = [{**c, "version": "v2", "source": SOURCE} for c in read_tables(args.paper.read_text(encoding="utf-8"))]
    with open(args.out, newline="", encoding="utf-8") as f:
        kept = [r for r in csv.DictReader(f) if r.get("version") not in ("v2", None, "")]
    with open(args.out, "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, FIELDS)
        writer.writeheader()
        writer.writerows(cells + kept)
    print(f"{len(cells)} v2 cells of {len({c['table'] for c in cells})} tables, {len(kept)} rows of earlier "
          f"versions kept -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
