"""Where the time of Table 5's embedded-model rows goes, per query, from their stored runs (no model is run).

For each `evaluate@<row>-<query set>` entry of the embedded model (base, base_free and the three students) it reads
the run's records, config and `results/evaluate/<entry>/timing.json` and prints, per query: the stage's seconds, the
model calls, the prompt tokens sent (before the prefix cache), the completion tokens, the share of replies that ran
to the reply cap (`backbone.max_tokens`), the share of replies with no valid tool call, and the agents stopped for
being idle. The machine is the one named in timing.json (the run's). Needs the runs (`make repro` or `make pull`):

    python benchmarks/embedded_rows.py [--results results]
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import yaml

ROWS = ("base", "base_free", "student", "student_mid", "student_small")
QUERY_SETS = ("synthetic", "phenopackets", "phenopackets_gene")


def row_figures(results: Path, entry: str) -> dict | None:
    runs = sorted((results / "runs" / "evaluate" / entry).glob("*/records.jsonl"))
    timing = results / "evaluate" / entry / "timing.json"
    if len(runs) != 1 or not timing.exists():
        return None
    records = [json.loads(line) for line in runs[0].read_text().splitlines()]
    cap = yaml.safe_load((runs[0].parent / "config.yaml").read_text())["backbone"]["max_tokens"]
    agents = [a for r in records for a in r["agents"]]
    replies = [completion for a in agents for _, completion in a["tokens"]]
    n, seconds = len(records), json.loads(timing.read_text())
    return {"entry": entry, "queries": n, "processor": seconds.get("processor"),
            "s_per_query": round(seconds["seconds"] / n, 1),
            "model_calls_per_query": round(len(replies) / n, 2),
            "prompt_tokens_per_query": round(sum(p for a in agents for p, _ in a["tokens"]) / n),
            "completion_tokens_per_query": round(sum(replies) / n),
            "replies_at_cap": round(sum(c >= cap for c in replies) / max(len(replies), 1), 3),
            "replies_without_valid_call": round(sum(a["invalid_calls"] + a["replies_without_call"] for a in agents)
                                                / max(len(replies), 1), 3),
            "idle_stops": sum(a["idle_stop"] for a in agents)}


def main(argv: list[str] | None = None) -> list[dict]:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--results", default="results")
    args = ap.parse_args(argv)
    rows = [f for r in ROWS for q in QUERY_SETS if (f := row_figures(Path(args.results), f"{r}-{q}"))]
    if not rows:
        raise SystemExit(f"error: no embedded Table 5 runs under {args.results}/runs/evaluate: run make repro or make pull")
    columns = list(rows[0])
    print("| " + " | ".join(columns) + " |\n|" + "---|" * len(columns))
    for f in rows:
        print("| " + " | ".join(str(f[c]) for c in columns) + " |")
    return rows


if __name__ == "__main__":
    main()
