"""How often a run ranks a same-named twin of the gold disease instead of the gold itself.

BioKG holds OMIM's and Orphanet's disease entries side by side; 1,057 of its 12,687 disease nodes share their name
(case aside) with another disease node (Achondroplasia is OMIM:100800 and ORPHA:15). Only the case's own id is gold,
so a twin ranked first is scored a miss. Per run: the queries whose top 1 is a twin of a gold node and no gold, those
whose top 20 holds a twin but no gold, and Hit@1 strict and equivalence-aware (a twin counts as the gold), each with
its interval (``ark.report.intervals``); then the first run minus each other one, strict and twin-aware (paired).

    python benchmarks/disease_twins.py results/runs/baseline/phenopackets-lpo-bm25 results/runs/evaluate/… [--json]

Each argument is a run directory or a run root holding run directories (as ``ark show`` takes them). Reads the runs,
their graph and their query split (the DVC outputs in ``data/``).
"""
import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from common import machine  # noqa: E402

from ark.report.intervals import mean_interval, paired  # noqa: E402
from ark.report.runs import load_runs, run_graph  # noqa: E402
from ark.report.twins import twin_hits, twins_of  # noqa: E402


def count(run, found: dict[str, tuple]) -> dict:
    """The counts of one run and its Hit@1 strict and twin-aware (x100) with their intervals (its units)."""
    ids = list(found)
    units = run.units()
    shown = {}
    for i, name in enumerate(("hit@1 strict", "hit@1 twin-aware")):
        e = mean_interval([found[q][i] for q in ids], [units[q] for q in ids]).scaled(100)
        shown[name] = f"{e.value:.2f} [{e.lo:.1f}, {e.hi:.1f}]"
    return {"run": run.dir.name, "n": len(ids), "top1 twin, not gold": sum(found[q][2] for q in ids),
            "top20 twin, no gold": sum(found[q][3] for q in ids), **shown}


def difference(a: dict, b: dict, units: dict, column: int) -> str:
    """Run a minus run b in Hit@1 (``column`` 0 strict, 1 twin-aware) on the queries both scored: paired bootstrap."""
    ids = sorted(set(a) & set(b))
    e = paired([a[q][column] for q in ids], [b[q][column] for q in ids], [units[q] for q in ids]).scaled(100)
    return f"{e.value:.2f} [{e.lo:.1f}, {e.hi:.1f}] p={e.p:.3f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", type=Path)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    rows, graphs, found = [], {}, []
    runs = load_runs(args.runs)
    for run in runs:
        name = run.config["dataset"]["name"]
        if name not in graphs:
            graphs[name] = twins_of(run_graph(run.config))
        found.append(twin_hits(run, graphs[name]))
        rows.append(count(run, found[-1]))
    # the first run against each other one, strict and twin-aware
    diffs = [{"first minus": run.dir.name, "strict": difference(found[0], f, runs[0].units(), 0),
              "twin-aware": difference(found[0], f, runs[0].units(), 1)} for run, f in zip(runs[1:], found[1:])]
    if args.json:
        print(json.dumps({"machine": machine(), "runs": rows, "differences": diffs}, indent=1))
        return
    for row in rows + diffs:
        print(" | ".join(f"{k} {v}" for k, v in row.items()))


if __name__ == "__main__":
    main()
