"""``ark ask "question" [hydra overrides]``: run the agents on one question and show the trajectory live.
``ark show <run> [query]``: print one query's stored trajectories (``ark.report.show``); no query: list them.
``ark estimate [overrides]``: run the first few queries of an evaluation and price the whole of it.
``ark mcp [overrides]``: serve the graph's read-only tools over the Model Context Protocol (stdio).
``ark serve [overrides]``: the embedded model or a student as an OpenAI-compatible server (``ark.serve``).
``ark compare A B [C …]``: each later run minus the first, per metric, with paired intervals (``ark.report.compare``).
``ark status [targets]``: the pipeline's stale stages, grouped by cause: code, params/config, data (``ark.status``).

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


class Printer:
    """``ark ask``'s live trace: the first agent's steps as they happen; each other agent's after the run, or one
    line where they are the first agent's steps again (a deterministic policy's agents all take the same path)."""

    def __init__(self, max_lines: int, out=None):
        self.max_lines, self.out = max_lines, out or sys.stdout
        self.steps: dict[int, list[str]] = {}  # agent -> its lines, without the tag
        self.counts: dict[int, set[int]] = {}  # agent -> its steps

    def __call__(self, kind: str, e: dict) -> None:
        from ark.report.show import printable  # what the graph or the model says, escaped for a terminal

        lines = []
        if kind == "reply":
            for tc in e["message"].get("tool_calls") or []:
                lines.append(printable(f"-> {tc['function']['name']}({tc['function']['arguments']})", False))
            if e["message"].get("content"):
                lines.append(f"says: {printable(e['message']['content'][:300])}")
        elif kind == "observation":
            text = e["observation"].text.splitlines()
            shown = text[:self.max_lines] + ([f"... ({len(text) - self.max_lines} more lines)"]
                                             if len(text) > self.max_lines else [])
            lines += [printable(f"   {line}") for line in shown]
        elif kind == "error":
            lines.append(f"model call failed: {printable(e['error'], False)}")
        lines = [f"step {e['step'] + 1}] {line}" for line in lines]
        self.steps.setdefault(e["agent"], []).extend(lines)
        self.counts.setdefault(e["agent"], set()).add(e["step"])
        if e["agent"] == 0:
            self.emit(0, lines)

    def emit(self, agent: int, lines: list[str]) -> None:
        for line in lines:
            print(f"[agent {agent} {line}", file=self.out)
        self.out.flush()

    def finish(self) -> None:
        """The other agents' steps (or that they repeat the first agent's)."""
        others = sorted(a for a in self.steps if a != 0)
        same = [a for a in others if self.steps[a] == self.steps.get(0)]
        for agent in others:
            if agent not in same:
                self.emit(agent, self.steps[agent])
        if same:
            agents = "agent" if len(same) == 1 else "agents"
            n = len(self.counts[0])
            print(f"[{agents} {', '.join(map(str, same))}: the same {n} step{'s' * (n != 1)} as agent 0]",
                  file=self.out)


def ask(question: str, overrides: list[str], max_lines: int = 8, out=None):
    out = out or sys.stdout  # looked up now: a test or a caller may have replaced it since import
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
    model = cfg.backbone.get("model")
    print(f"{cfg.dataset.name} | backbone {cfg.backbone.name}{f' ({model})' if model else ''} | "
          f"{cfg.agent.n_agents} agents, T_max {cfg.agent.T_max}", file=out)
    if spec.backbone.caveat:
        print(f"note: {spec.backbone.caveat}", file=out)
    trace = Printer(max_lines, out)
    with agents(spec) as a:
        g = a.tools.graph
        record = a.one({"id": "ask", "query": question}, trace)
    trace.finish()
    failed = [t for t in record.agents if t.errors]
    if failed and len(failed) == len(record.agents):  # nothing was answered: not a result, whatever the list holds
        last = " ".join(str(failed[-1].errors[-1]).split())
        raise IncompleteRun(f"every agent's model calls failed ({len(failed)} of {len(record.agents)} agents; the "
                            f"last: {spec.llm.retry.failure(last)[:300]}); nothing was answered. Check the backbone's "
                            "server and key")
    print(f"\nAnswer ({cfg.agent.aggregation} over {cfg.agent.n_agents} agents):", file=out)
    for rank, v in enumerate(record.ranking, 1):
        print(f"{rank:>3}. [{v}] {printable(g.type_name(v), False)} | {printable(g.name[v], False)} | "
              f"{printable(g.source_id(v), False)}", file=out)
    if not record.ranking:
        print("  (empty)", file=out)
    return record


def serve_tools(overrides: list[str]) -> None:
    """``ark mcp``: the configured graph's read-only tools over MCP's stdio transport (``ark.tools.mcp``)."""
    from ark import build
    from ark.tools.mcp import serve, served_schemas

    spec = build.spec(compose(overrides))
    tools = build.toolbox(spec)
    print(f"ark mcp: {spec.dataset.name} ({tools.graph.num_nodes:,} nodes), tools "
          f"{', '.join(s['name'] for s in served_schemas(tools))} on stdio", file=sys.stderr)
    serve(tools, f"ark-{spec.dataset.name}")


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
        try:
            result = execute(build.spec(trial), "evaluate")
        except (IncompleteRun, RunFailed, UserError) as e:  # its paths name the trial run, removed on the way out
            raise type(e)(f"the estimate's trial run on the first {min(first, total)} queries: "
                          + str(e).replace(tmp, "<trial run>")) from None
    n, cost = result["n_queries"], result.get("cost_usd", 0.0)
    per_query = cost / n
    whole = per_query * total
    print(f"{cfg.backbone.name} on {cfg.dataset.name}/{cfg.queries.name}/{cfg.split}: the first {n} queries cost "
          f"${cost:.4f} ({result['model_calls']} model calls made now, the rest replayed), ${per_query:.4f} a query; "
          f"all {total} queries: about " + (f"${whole:,.2f}" if whole >= 1 else f"${whole:.4f}"), file=out)
    return {"queries": n, "cost_usd": cost, "total_queries": total, "estimate_usd": per_query * total}


def port_number(text: str) -> int:
    """A TCP port for argparse: checked before the model loads."""
    if not text.isdigit() or int(text) > 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not a TCP port (0-65535)")
    return int(text)


def at_least_one(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def check_output_file(path: Path, flag: str) -> None:
    """A file the CLI writes on the user's say (``--json``, ``--html``): a regular file or nothing yet, in an existing
    directory. Never a device, FIFO, socket or directory, which a write (or the atomic rename over it) would replace."""
    try:
        exists, regular = path.exists(), path.is_file()
    except OSError as e:  # a name too long for the file system
        raise UserError(f"{flag} {path}: {e.strerror or e}") from None
    if exists and not regular:
        raise UserError(f"{flag} {path}: exists and is not a regular file (a device, FIFO, socket or directory)")
    if not path.parent.is_dir():
        raise UserError(f"{flag} {path}: no directory {path.parent}")


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
    p.add_argument("query", nargs="?", help="a query id, or #N for the N-th (0-based) query of the run; a bare number "
                                                 "is a position where no query has it as id")
    p.add_argument("overrides", nargs="*", help="Hydra overrides saying where data lives, e.g. paths.data=/data")
    p.add_argument("--max-lines", type=int, default=8, help="observation lines shown per tool call")
    p.add_argument("--html", type=Path, help="write the run as one self-contained web page to this file instead")
    p.add_argument("--max-queries", type=at_least_one, default=500, help="with --html: the queries the page holds")
    p = sub.add_parser("mcp", help="serve the graph's read-only tools over MCP (stdio), for any MCP client")
    p.add_argument("overrides", nargs="*", help="Hydra overrides choosing the graph and tools, e.g. dataset=biokg "
                                                "retriever=bm25 agent=ark_v1")
    p = sub.add_parser("serve", help="serve the embedded model or a student (backbone=student) over an "
                                     "OpenAI-compatible API until Ctrl-C",
                       description="Serve the embedded SmolLM2, or a distilled student (backbone=student, or "
                                   "backbone.local.adapter=<dir>), at http://HOST:PORT/v1 (GET /v1/models, POST "
                                   "/v1/chat/completions with tools). Once it listens it prints how to point a run, "
                                   "curl, the openai client or litellm at it.")
    p.add_argument("overrides", nargs="*", help="Hydra overrides, e.g. backbone=student backbone.local.dtype=float32")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default: loopback only)")
    p.add_argument("--port", type=port_number, default=8000, help="TCP port, 0-65535 (0: any free one)")
    p = sub.add_parser("compare", help="each later run minus the first on the queries both scored, with intervals")
    p.add_argument("runs", nargs="+", help="runs as `ark show` takes them: a run directory, a published entry "
                                           "results/<stage>/<entry>/ or <stage>@<entry>; the first is the reference")
    p.add_argument("--any-queries", action="store_true",
                   help="compare runs scored on different query sets, splits or graphs (on the ids both scored)")
    p.add_argument("--json", type=Path, help="also write the comparison to this file")
    p.add_argument("--paths", nargs="*", default=[], metavar="OVERRIDE",
                   help="Hydra overrides saying where data lives, e.g. paths.data=/data")
    p = sub.add_parser("estimate", help="price an evaluation from its first queries")
    p.add_argument("overrides", nargs="*", help="Hydra overrides of the evaluation, e.g. dataset=stark_prime "
                                                "queries=stark backbone=gpt-4.1")
    p.add_argument("--queries", type=at_least_one, default=3, help="how many first queries to run (at least 1)")
    p = sub.add_parser("status", help="the pipeline's stale stages, grouped by cause (exit 1 when one is stale)",
                       description="Summarise `dvc status`: the stale stages grouped by their most upstream cause "
                                   "(code, params/config, data, outputs only) and the count up to date. Exit 0 when "
                                   "every stage is up to date, 1 when one is stale, 2 when dvc is missing or fails.")
    p.add_argument("targets", nargs="*", default=["dvc.yaml"], help="dvc.yaml files or stages (default: dvc.yaml)")
    p.add_argument("--json", action="store_true", help="print the grouped summary as JSON")
    args = parser.parse_args(argv)
    if args.command == "status":
        from ark.status import main as status

        return status(args.targets, args.json)
    try:
        if args.command in ("ask", "compare") and args.json is not None:  # before the work whose result it keeps
            check_output_file(args.json, "--json")
        if args.command in ("ask", "estimate", "mcp", "serve"):
            check_overrides(args.overrides)
        if args.command == "serve":
            from ark.serve import serve

            try:
                serve(args.overrides, args.host, args.port)
            except KeyboardInterrupt:
                print("stopped", file=sys.stderr)
            return 0
        if args.command == "mcp":
            serve_tools(args.overrides)
            return 0
        if args.command == "estimate":
            estimate(args.overrides, args.queries)
            return 0
        if args.command == "compare":
            from ark.report.compare import compare, text

            result = compare(args.runs, tuple(args.paths), args.any_queries)
            print(text(result))
            if args.json is not None:
                try:
                    args.json.write_text(json.dumps(result, indent=1))
                except OSError as e:
                    raise UserError(f"--json {args.json}: {e.strerror or e}") from None
            return 0
        if args.command == "show":
            from ark.report.show import show

            if args.query and "=" in args.query:  # an override, not a query id
                args.overrides.insert(0, args.query)
                args.query = None
            if args.html is not None:
                from ark.report.page import run_page

                check_output_file(args.html, "--html")
                try:
                    print(run_page(args.run, args.html, args.overrides, args.max_queries))
                except OSError as e:  # a name too long, a directory that takes no files (/proc), a full disk
                    raise UserError(f"--html {args.html}: {e.strerror or e}") from None
                return 0
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
        try:
            args.json.write_text(json.dumps(record.to_dict(), indent=1))
        except OSError as e:
            print(f"error: --json {args.json}: {e.strerror or e}", file=sys.stderr)
            return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
