"""What a refreeze of ``results/expected.json`` changes: per table, the cells whose value moved, split into interval
bounds, p values and point values (those listed with old and new value), and the cells and tables that are new.

    git show HEAD~1:results/expected.json > /tmp/old.json
    python benchmarks/expected_diff.py /tmp/old.json results/expected.json [--points 20]
"""
import argparse
import collections
import json
from pathlib import Path


def value(cell):
    """An expected cell is [value, tolerance]; a numbers.json cell is the value itself."""
    return cell[0] if isinstance(cell, list) else cell


def kind(column: str) -> str:
    return "bound" if column.endswith((" lo", " hi")) else "p" if column.endswith(" p") else "point"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("old", type=Path)
    parser.add_argument("new", type=Path)
    parser.add_argument("--points", type=int, default=20, help="point values listed per table (old -> new)")
    args = parser.parse_args()
    old, new = json.loads(args.old.read_text()), json.loads(args.new.read_text())
    for table, rows in new.items():
        cells = sum(len(columns) for columns in rows.values())
        if table not in old:
            print(f"{table}: new table, {cells} cells")
            continue
        moved, points = collections.Counter(), []
        for row, columns in rows.items():
            for column, cell in columns.items():
                before = old[table].get(row, {}).get(column)
                if before is None:
                    moved[f"new {kind(column)}"] += 1
                elif value(before) != value(cell):
                    moved[kind(column)] += 1
                    if kind(column) == "point":
                        points.append(f"    {row} / {column}: {value(before)} -> {value(cell)}")
        gone = sum(column not in rows.get(row, {}) for row, columns in old[table].items() for column in columns)
        print(f"{table}: {cells} cells; changed {dict(moved) or 'none'}; gone {gone}")
        print("\n".join(points[:args.points]) + (f"\n    ... {len(points) - args.points} more" if len(points) >
                                                   args.points else ""), end="\n" if points else "")
    for table in sorted(set(old) - set(new)):
        print(f"{table}: gone")


if __name__ == "__main__":
    main()
