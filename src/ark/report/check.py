"""Did a reproduction succeed? Every BioKG table cell against the expected numbers, with a tolerance per cell.

``results/expected.json`` holds, per table, row and column of ``results/tables/numbers.json``, the expected value
and its tolerance: 0 where the computation is the same on any CPU, and where a row's runs legitimately depend on the
CPU (the dense index and the embedded model: their identity holds values each machine resolves for itself, e.g. bf16
against float32; ``results/tables/machine_dependent.json``, written by the report) the half-width of the cell's own
95 % interval, at least 0.01.

``python -m ark.report.check`` (``make check``) prints per table how many cells match exactly, are within their
tolerance, or fall outside (naming those), and exits 1 if any falls outside or is missing. ``--freeze`` writes the
expected file from the current results (what a reference run published).
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

from ark.io import write_json

ROOT = Path(__file__).resolve().parents[3]
NUMBERS = ROOT / "results" / "tables" / "numbers.json"
DEPENDENT = ROOT / "results" / "tables" / "machine_dependent.json"
EXPECTED = ROOT / "results" / "expected.json"
BOUNDS = (" lo", " hi", " p")
SMALLEST = 0.01  # the last digit the tables print


def _base(column: str) -> str:
    for end in BOUNDS:
        if column.endswith(end):
            return column[: -len(end)]
    return column


def expected_numbers(numbers: dict, dependent: dict) -> dict:
    """{table: {row: {column: [value, tolerance]}}}: exact cells, and the cells of machine-dependent rows with the
    half-width of their interval as tolerance."""
    out = {}
    for table, rows in numbers.items():
        out[table] = {}
        for row, cells in rows.items():
            loose = row in dependent.get(table, ())
            out[table][row] = {}
            for column, value in cells.items():
                base = _base(column)
                lo, hi = cells.get(f"{base} lo"), cells.get(f"{base} hi")
                tolerance = 0.0
                if loose:
                    tolerance = max(SMALLEST, round((hi - lo) / 2, 2)) if lo is not None and hi is not None \
                        else max(SMALLEST, round(abs(value) * 0.05, 2))
                out[table][row][column] = [value, tolerance]
    return out


def compare(numbers: dict, expected: dict) -> tuple[dict, list[str]]:
    """({table: (exact, within tolerance, outside)}, the cells outside or missing, named)."""
    counts, outside = {}, []
    for table, rows in expected.items():
        exact = within = out = 0
        for row, cells in rows.items():
            for column, (value, tolerance) in cells.items():
                got = numbers.get(table, {}).get(row, {}).get(column)
                if got is None:
                    out += 1
                    outside.append(f"{table} / {row} / {column}: expected {value}, missing")
                elif got == value:
                    exact += 1
                elif abs(got - value) <= tolerance + 1e-9:
                    within += 1
                else:
                    out += 1
                    outside.append(f"{table} / {row} / {column}: expected {value} ± {tolerance}, got {got}")
        counts[table] = (exact, within, out)
    return counts, outside


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not NUMBERS.is_file():
        print(f"error: no {NUMBERS.relative_to(ROOT)}: run `make repro` (its report stage writes it) first",
              file=sys.stderr)
        return 2
    numbers = json.loads(NUMBERS.read_text())
    if "--freeze" in argv:
        dependent = json.loads(DEPENDENT.read_text()) if DEPENDENT.is_file() else {}
        write_json(EXPECTED, expected_numbers(numbers, dependent))
        print(f"wrote {EXPECTED.relative_to(ROOT)} from {NUMBERS.relative_to(ROOT)}")
        return 0
    if not EXPECTED.is_file():
        print(f"error: no {EXPECTED.relative_to(ROOT)}; `python -m ark.report.check --freeze` writes it from a "
              "reference run", file=sys.stderr)
        return 2
    counts, outside = compare(numbers, json.loads(EXPECTED.read_text()))
    width = max(map(len, counts), default=5)
    print(f"{'table':<{width}}  {'exact':>6} {'within':>6} {'outside':>7}")
    for table, (exact, within, out) in counts.items():
        print(f"{table:<{width}}  {exact:>6} {within:>6} {out:>7}{'  FAIL' if out else '  OK'}")
    for line in outside:
        print(f"outside: {line}")
    total = sum(c[2] for c in counts.values())
    print(f"{'FAIL' if total else 'OK'}: {total} of {sum(map(sum, counts.values()))} cells outside their tolerance")
    return 1 if total else 0


if __name__ == "__main__":
    sys.exit(main())
