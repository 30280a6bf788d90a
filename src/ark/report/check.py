"""Did a reproduction succeed? Every BioKG table cell this clone regenerated, against the expected numbers.

``results/expected.json`` holds, per table, row and column of ``results/tables/numbers.json``, the expected value
and its tolerance: 0 where the computation is the same on any CPU, and where a row's runs legitimately depend on the
CPU (the dense index and the embedded model: their identity holds values each machine resolves for itself, e.g. bf16
against float32; ``results/tables/machine_dependent.json``, written by the report) the half-width of the cell's own
95 % interval, at least 0.01.

A cell counts as regenerated in this clone only where the report stage that wrote ``numbers.json`` is up to date
here (DVC finds every run, graph and index it read, and the code and settings, as its lock records them: ``dvc status
report``) and so is every stage its row's runs come from, and every stage before those (``dvc status --with-deps``:
a run whose code changed after it ran is not what this clone would compute now, though the report read it as it
is). ``runs.json`` beside the numbers names each row's runs; a row without runs (a graph's or query set's counts)
counts only where no stage before the report is stale. In a fresh clone, or after the quick start alone, nothing is
regenerated: the numbers are the shipped ones and nothing is checked. Outputs fetched with ``make pull`` count as
present, as DVC cannot tell them from regenerated ones.

``python -m ark.report.check`` (``make check``) prints per table its cells, how many were regenerated here, and of
those how many match exactly, are within their tolerance or fall outside (naming those); "OK" only when every cell was
regenerated, has an expected value and holds. Exit status 0 then, 1 otherwise, 2 for a malformed or missing file.
``--freeze`` writes the expected file from the current results (what a reference run published).
"""
from __future__ import annotations

import math
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from ark.errors import UserError
from ark.io import read_json, write_json
from ark.report.show import prose
from ark.status import compact

ROOT = Path(__file__).resolve().parents[3]
NUMBERS = ROOT / "results" / "tables" / "numbers.json"
DEPENDENT = ROOT / "results" / "tables" / "machine_dependent.json"
RUNS = ROOT / "results" / "tables" / "runs.json"
EXPECTED = ROOT / "results" / "expected.json"
BOUNDS = (" lo", " hi", " p")
SMALLEST = 0.01  # the last digit the tables print


def _finite(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def load_cells(path: Path, expected: bool) -> dict:
    """{table: {row: {column: value}}} of ``numbers.json``, or {table: {row: {column: [value, tolerance]}}} of the
    expected file (``expected``): any other shape, a value that is not a finite number, or a tolerance that is not a
    finite number >= 0, is one ``UserError`` naming the file and the cell."""
    name = "the expected numbers" if expected else "the tables' numbers"
    data = read_json(path, name)
    where = path.name
    if not isinstance(data, dict):
        raise UserError(f"{where}: expected an object of tables, got {type(data).__name__}")
    for table, rows in data.items():
        if not isinstance(rows, dict):
            raise UserError(f"{where}: table {table!r} is not an object of rows")
        for row, cells in rows.items():
            if not isinstance(cells, dict):
                raise UserError(f"{where}: {table} / {row} is not an object of cells")
            for column, cell in cells.items():
                at = f"{where}: {table} / {row} / {column}"
                if not expected:
                    if not _finite(cell):
                        raise UserError(f"{at}: {cell!r} is not a finite number")
                elif not (isinstance(cell, list) and len(cell) == 2 and _finite(cell[0])):
                    raise UserError(f"{at}: expected [value, tolerance] with a finite value, got {cell!r}")
                elif not (_finite(cell[1]) and cell[1] >= 0):
                    raise UserError(f"{at}: the tolerance {cell[1]!r} is not a finite number >= 0")
    return data


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
    """({table: (exact, within tolerance, outside, without an expected value)}, the cells outside, missing or
    without an expected value, named)."""
    counts, named = {}, []
    for table in list(expected) + [t for t in numbers if t not in expected]:
        exact = within = out = unexpected = 0
        for row, cells in expected.get(table, {}).items():
            for column, (value, tolerance) in cells.items():
                got = numbers.get(table, {}).get(row, {}).get(column)
                if got is None:
                    out += 1
                    named.append(f"outside: {table} / {row} / {column}: expected {value}, missing")
                elif got == value:
                    exact += 1
                elif abs(got - value) <= tolerance + 1e-9:
                    within += 1
                else:
                    out += 1
                    named.append(f"outside: {table} / {row} / {column}: expected {value} ± {tolerance}, got {got}")
        for row, cells in numbers.get(table, {}).items():
            for column in cells:
                if column not in expected.get(table, {}).get(row, {}):
                    unexpected += 1
                    named.append(f"not in {EXPECTED.name}: {table} / {row} / {column}")
        counts[table] = (exact, within, out, unexpected)
    return counts, named


@dataclass
class Freshness:
    """What DVC says of the report stage and the stages before it in this clone."""
    report: str | None = None  # why the report stage itself is not up to date (None: it is)
    stale: list[str] = field(default_factory=list)  # the stages before it that are not
    outputs: list[str] = field(default_factory=list)  # what they and every stage after them write (relative paths)


def freshness(root: Path = ROOT) -> Freshness:
    """The report stage's freshness in the clone at ``root``, and the stale stages before it with what they and the
    stages after them write (their outputs are not what this clone would compute now)."""
    from dvc.exceptions import DvcException
    from dvc.repo import Repo

    try:
        with Repo(str(root)) as repo:
            status = repo.status(targets=["report"], with_deps=True)
            graph = repo.index.graph  # an edge from each stage to the stages whose outputs it reads
            stale = [s for s in graph.nodes if s.addressing in status and s.addressing != "report"]
            after, todo = set(stale), list(stale)
            while todo:  # every stage that reads, directly or not, what a stale one writes
                for later in graph.predecessors(todo.pop()):
                    if later not in after:
                        after.add(later)
                        todo.append(later)
            outputs = sorted({PurePosixPath(os.path.relpath(out.fs_path, root)).as_posix()
                              for s in after if s.addressing != "report" for out in s.outs})
    except DvcException as e:
        return Freshness(f"DVC cannot tell ({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''})")
    return Freshness(_why_changed(status.get("report")), sorted(s.addressing for s in stale), outputs)


def _why_changed(entries: list | None) -> str | None:
    """The report stage's ``dvc status`` entries in a few words; None where it has none."""
    if not entries:
        return None
    deps = {path: state for c in entries if isinstance(c, dict) for path, state in c.get("changed deps", {}).items()}
    missing = sum(state == "deleted" for state in deps.values())
    if deps:
        return (f"{len(deps)} of its inputs differ from dvc.lock ({missing} missing here, e.g. "
                f"{sorted(deps)[0]})")
    return "dvc status lists it as changed"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    try:
        return _main(argv)
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


def regenerated_rows(numbers: dict, runs: dict, fresh: Freshness) -> dict[str, set[str]]:
    """{table: its rows regenerated in this clone}: none where the report stage is not up to date; else each row whose
    runs (``runs``: {table: {row: [run directory]}}) all lie outside what the stale stages and those after them write,
    and a row without runs only where no stage before the report is stale."""
    if fresh.report:
        return {table: set() for table in numbers}
    outputs = [PurePosixPath(o) for o in fresh.outputs]

    def current(run: str) -> bool:
        path = PurePosixPath(os.path.relpath(run, ROOT) if os.path.isabs(run) else run)
        return not any(path == o or o in path.parents for o in outputs)

    return {table: {row for row in rows if (all(map(current, runs[table][row])) if runs.get(table, {}).get(row)
                                             else not fresh.stale)}
            for table, rows in numbers.items()}


def _main(argv: list[str]) -> int:
    if not NUMBERS.is_file():
        raise UserError(f"no {NUMBERS.relative_to(ROOT)}: run `make repro` (its report stage writes it) first")
    numbers = load_cells(NUMBERS, expected=False)
    if "--freeze" in argv:
        dependent = read_json(DEPENDENT, "the machine-dependent rows") if DEPENDENT.is_file() else {}
        write_json(EXPECTED, expected_numbers(numbers, dependent))
        print(f"wrote {EXPECTED.relative_to(ROOT)} from {NUMBERS.relative_to(ROOT)}")
        return 0
    if not EXPECTED.is_file():
        raise UserError(f"no {EXPECTED.relative_to(ROOT)}; `python -m ark.report.check --freeze` writes it from a "
                        "reference run")
    expected = load_cells(EXPECTED, expected=True)
    runs = read_json(RUNS, "the runs behind the tables' rows") if RUNS.is_file() else {}
    fresh = freshness()
    done = regenerated_rows(numbers, runs, fresh)
    # the rows not regenerated are left out of the comparison; a row expected but absent from the numbers stays in
    left_out = lambda data: {table: {row: cells for row, cells in rows.items()  # noqa: E731
                                     if row not in numbers.get(table, {}) or row in done.get(table, ())}
                             for table, rows in data.items()}
    counts, named = compare(left_out(numbers), left_out(expected))
    cells = {t: sum(len(c) for c in numbers.get(t, {}).values()) for t in counts}
    regenerated = {t: sum(len(c) for row, c in numbers.get(t, {}).items() if row in done.get(t, ())) for t in counts}
    total, fresh_total = sum(cells.values()), sum(regenerated.values())
    width = max(map(len, counts), default=5)
    print(f"{'table':<{width}}  {'cells':>6} {'regenerated':>11} {'exact':>6} {'within':>6} {'outside':>7}")
    for table, (exact, within, out, unexpected) in counts.items():
        if not regenerated[table] and cells[table]:
            print(f"{table:<{width}}  {cells[table]:>6} {0:>11} {'-':>6} {'-':>6} {'-':>7}  not regenerated")
            continue
        verdict = ("FAIL" if out else "partly regenerated" if regenerated[table] < cells[table]
                   else "NOT CHECKED" if unexpected else "OK")
        print(f"{table:<{width}}  {cells[table]:>6} {regenerated[table]:>11} {exact:>6} {within:>6} {out:>7}  "
              f"{verdict}")
    if fresh.report:
        print(prose(f"NOT CHECKED: 0 of {total:,} cells regenerated in this clone (0 of {len(counts)} tables): the "
                    f"report stage is not up to date here ({fresh.report}), so {NUMBERS.relative_to(ROOT)} holds the "
                    "shipped numbers; `make repro` regenerates them"))
        return 1
    for line in named:
        print(prose(line, "    "))
    outside = sum(c[2] for c in counts.values())
    unexpected = sum(c[3] for c in counts.values())
    if outside:
        print(f"FAIL: {outside:,} of {fresh_total:,} regenerated cells outside their tolerance")
        return 1
    if fresh_total < total:
        print(prose(f"NOT CHECKED: {total - fresh_total:,} of {total:,} cells not counted as regenerated in this "
                    "clone: their runs come from stages stale here or after them, or their rows read no runs while a "
                    f"stage before the report is stale ({', '.join(compact(fresh.stale))}); `make repro` regenerates "
                    "them (the rest hold)"))
        return 1
    if unexpected:
        print(prose(f"NOT CHECKED: {unexpected:,} of {total:,} regenerated cells have no expected value in "
                    f"{EXPECTED.relative_to(ROOT)} (the rest hold); add them with --freeze from a reference run"))
        return 1
    print(f"OK: all {total:,} cells regenerated in this clone and within their tolerance")
    return 0


if __name__ == "__main__":
    sys.exit(main())
