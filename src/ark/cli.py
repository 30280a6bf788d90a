"""``ark ask "question" [hydra overrides]``: run the agents on one question and show the trajectory live.
``ark show <run> [query]``: print one query's stored trajectories (``ark.report.show``); no query: list them.
``ark estimate [overrides]``: run the first few queries of an evaluation and price the whole of it.

Examples: ``ark ask "Which genes linked to Marfan syndrome enable calcium ion binding?" backbone=rules``,
``ark show evaluate@rules-synthetic 0``
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from ark.config import check_overrides, compose
from ark.errors import IncompleteRun, RunFailed, UserError


def printer(graph, max_lines: int, out=sys.stdout):
    from ark.report.show import printable  # what the graph or the model says, escaped for a terminal

    def on_event(kind: str, e: dict) -> None:
        tag = f"[agent {e['agent']} step {e['step'] + 1}]"
        if kind == "reply":
            for tc in e["message"].get("tool_calls") or []:
                print(printable(f"{tag} -> {tc['function']['name']}({tc['function']['arguments']})", False), file=out)
            if e["message"].get("content"):
                print(f"{tag} says: {printable(e['message']['content'][:300])}", file=out)
        elif kind == "observation":
            lines = e["observation"].text.splitlines()
            shown = lines[:max_lines] + ([f"... ({len(lines) - max_lines} more lines)"] if len(lines) > max_lines else [])
            print(printable("\n".join(f"{tag}    {line}" for line in shown)), file=out)
        elif kind == "error":
            print(f"{tag} model call failed: {printable(e['error'], False)}", file=out)
        out.flush()

    return on_event


def ask(question: str, overrides: list[str], max_lines: int = 8, out=sys.stdout):
    from ark import build
    from ark.report.show import printable
    from ark.runs.execute import agents

    cfg = compose(overrides)
    spec = build.spec(cfg)
    build.check_files(spec)
    if not question.strip():
        raise UserError("the question is empty")
    if len(question) > spec.limits.query_chars:
        raise UserError(f"the question has {len(question):,} characters, over limits.query_chars="
                        f"{spec.limits.query_chars:,}")
    print(f"{cfg.dataset.name} | backbone {cfg.backbone.name} | {cfg.agent.n_agents} agents, T_max {cfg.agent.T_max}",
          file=out)
    with agents(spec) as a:
        g = a.tools.graph
        record = a.one({"id": "ask", "query": question}, printer(g, max_lines, out))
    print(f"\nAnswer ({cfg.agent.aggregation} over {cfg.agent.n_agents} agents):", file=out)
    for rank, v in enumerate(record.ranking, 1):
        print(f"{rank:>3}. [{v}] {printable(g.type_name(v), False)} | {printable(g.name[v], False)}", file=out)
    if not record.ranking:
        print("  (empty)", file=out)
    return record


def estimate(overrides: list[str], first: int = 3, out=None) -> dict:
    """Run the evaluation ``overrides`` describe on its first ``first`` queries (real calls, kept in the LLM cache,
    so the run itself replays them) and extrapolate its cost to the whole split."""
    import tempfile

    from ark import build
    from ark.runs.execute import execute

    out = out or sys.stdout
    cfg = compose(overrides)
    spec = build.spec(cfg)
    total = len(build.queries(spec, build.graph(spec)))
    with tempfile.TemporaryDirectory(prefix="ark-estimate-") as tmp:
        trial = compose([*overrides, f"eval.limit={min(first, total)}", f"run.root={tmp}/runs", "run.publish=null",
                         "logger=none", f"paths.logs={tmp}/logs"])
        result = execute(build.spec(trial), "evaluate")
    n, cost = result["n_queries"], result.get("cost_usd", 0.0)
    per_query = cost / n
    whole = per_query * total
    print(f"{cfg.backbone.name} on {cfg.dataset.name}/{cfg.queries.name}/{cfg.split}: the first {n} queries cost "
          f"${cost:.4f} ({result['model_calls']} model calls made now, the rest replayed), ${per_query:.4f} a query; "
          f"all {total} queries: about " + (f"${whole:,.2f}" if whole >= 1 else f"${whole:.4f}"), file=out)
    return {"queries": n, "cost_usd": cost, "total_queries": total, "estimate_usd": per_query * total}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="ark", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("ask", help="run the agents on one question")
    p.add_argument("question")
    p.add_argument("overrides", nargs="*", help="Hydra overrides, e.g. dataset=biokg backbone=rules agent.n_agents=1")
    p.add_argument("--lines", type=int, default=8, help="observation lines shown per tool call")
    p.add_argument("--json", type=Path, help="also write the full record (all messages) to this file")
    p = sub.add_parser("show", help="print one query's trajectories of a run (no query: list its queries)")
    p.add_argument("run", help="a run directory, a published entry results/<stage>/<entry>/, or <stage>@<entry>")
    p.add_argument("query", nargs="?", help="a query id or a 0-based position in the run's records")
    p.add_argument("overrides", nargs="*", help="Hydra overrides saying where data lives, e.g. paths.data=/data")
    p.add_argument("--max-lines", type=int, default=8, help="observation lines shown per tool call")
    p = sub.add_parser("estimate", help="price an evaluation from its first queries")
    p.add_argument("overrides", nargs="*", help="Hydra overrides of the evaluation, e.g. dataset=stark_prime "
                                                "queries=stark backbone=gpt-4.1")
    p.add_argument("--queries", type=int, default=3, help="how many first queries to run")
    args = parser.parse_args(argv)
    try:
        if args.command == "ask" and args.json is not None:  # before the run, whose result it is to keep
            if args.json.is_dir() or not args.json.parent.is_dir():
                raise UserError(f"--json {args.json}: not a file in an existing directory")
        if args.command in ("ask", "estimate"):
            check_overrides(args.overrides)
        if args.command == "estimate":
            estimate(args.overrides, args.queries)
            return 0
        if args.command == "show":
            from ark.report.show import show

            if args.query and "=" in args.query:  # an override, not a query id
                args.overrides.insert(0, args.query)
                args.query = None
            try:
                show(args.run, args.query, args.max_lines, args.overrides)
            except BrokenPipeError:  # piped into head or less that stopped reading
                sys.stdout = open(os.devnull, "w")
            return 0
        record = ask(args.question, args.overrides, args.lines)
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except (IncompleteRun, RunFailed) as e:
        print(f"{'incomplete' if isinstance(e, IncompleteRun) else 'failed'}: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("interrupted: what was done is kept; the same command resumes a run", file=sys.stderr)
        return 130
    if args.json:
        args.json.write_text(json.dumps(record.to_dict(), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
