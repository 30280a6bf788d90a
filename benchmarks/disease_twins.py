"""How often a run ranks a same-named twin of the gold disease instead of the gold itself.

BioKG holds OMIM's and Orphanet's disease entries side by side; 1,057 of its 12,687 disease nodes share their name
(case aside) with another disease node (Achondroplasia is OMIM:100800 and ORPHA:15). Only the case's own id is gold,
so a twin ranked first is scored a miss. Per run: the queries whose top 1 is a twin of a gold node and no gold, those
whose top 20 holds a twin but no gold, and Hit@1 strict and equivalence-aware (a twin counts as the gold).

    python benchmarks/disease_twins.py results/runs/baseline/phenopackets-lpo-bm25 results/runs/evaluate/… [--json]

Each argument is a run directory or a run root holding run directories (as ``ark show`` takes them). Reads the runs,
their graph and their query split (the DVC outputs in ``data/``).
"""
import argparse
import collections
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from common import machine  # noqa: E402

from ark.report.runs import load_runs, queries_of_run, run_graph  # noqa: E402


def twins_of(graph, types=("disease",)) -> dict[int, frozenset]:
    """{node: the other nodes of its type with the same name (case aside)} for the nodes that have any."""
    by_name = collections.defaultdict(list)
    for v in range(graph.num_nodes):
        if graph.type_name(v) in types:
            by_name[str(graph.name[v]).strip().lower()].append(v)
    return {v: frozenset(set(group) - {v}) for group in by_name.values() if len(group) > 1 for v in group}


def count(run, twins: dict[int, frozenset]) -> dict:
    gold = {q["id"]: set(q["answer_ids"]) for q in queries_of_run(run.config, limit=False)}
    top1_twin = top20_twin = strict = aware = n = 0
    for record in run.records:
        g = gold.get(record.id)
        if g is None:
            continue
        n += 1
        equivalent = g | {t for v in g for t in twins.get(v, ())}
        first, top20 = record.ranking[:1], record.ranking[:20]
        strict += bool(first) and first[0] in g
        aware += bool(first) and first[0] in equivalent
        top1_twin += bool(first) and first[0] in equivalent - g
        top20_twin += bool(set(top20) & (equivalent - g)) and not set(top20) & g
    return {"run": run.dir.name, "n": n, "top1 twin, not gold": top1_twin, "top20 twin, no gold": top20_twin,
            "hit@1 strict %": round(100 * strict / n, 2), "hit@1 twin-aware %": round(100 * aware / n, 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", type=Path)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    rows, graphs = [], {}
    for run in load_runs(args.runs):
        name = run.config["dataset"]["name"]
        if name not in graphs:
            graphs[name] = twins_of(run_graph(run.config))
        rows.append(count(run, graphs[name]))
    if args.json:
        print(json.dumps({"machine": machine(), "runs": rows}, indent=1))
        return
    for row in rows:
        print(" | ".join(f"{k} {v}" for k, v in row.items()))


if __name__ == "__main__":
    main()
