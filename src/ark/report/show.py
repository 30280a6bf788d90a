"""``ark show <run> [query]``: one query's trajectories as plain text, to see why a number is what it is.

``<run>``: a run directory, a published entry directory ``results/<stage>/<entry>/`` or ``<stage>@<entry>``.
Without a query, the run's queries are listed. Gold ids come from the query file that the run's stored config
names (records hold no gold); a ✓ marks a gold node wherever one is shown, observations included.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import json
import re
import shutil
import sys
import textwrap
from pathlib import Path

import yaml

from ark.build import results_dir
from ark.errors import UserError
from ark.eval.trajectories import steps
from ark.report.runs import queries_of_run, run_graph
from ark.runs.identity import run_name
from ark.runs.store import load_run, read_scores

if TYPE_CHECKING:
    from ark.agent.records import QueryRecord, Trajectory


# longer lines are cut (observation lines run to ~300 characters); wrapped lines would break the columns
WIDTH = max(100, shutil.get_terminal_size((160, 24)).columns)
TOP = 20  # ranking positions shown (a fused ranking has at most 20; a baseline's runs to its depth)
ARG_CHARS = 70  # a string argument is cut to this many characters
GOLD = "✓"
TWIN = "≈"  # a node named as a gold node is, not it (an OMIM disease and its Orphanet twin): scored a miss
STAGE_ENTRY = re.compile(r"(\w+)@([\w.-]+)")  # <stage>@<entry>, as dvc.yaml names a foreach entry
NODE_LINE = re.compile(r"\[(\d+)\]")  # an observation line that lists a node starts with its id
# what a terminal would act on: C0/C1 controls (ANSI escapes), bidirectional overrides and isolates, zero-width marks
UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200b-\u200f\u2028-\u202e\u2066-\u2069\ufeff]")


def printable(text: str, newlines: bool = True) -> str:
    """Text from a graph, a model or a record, safe for a terminal: what ``UNSAFE`` matches is shown escaped
    (``\\x1b``, ``\\u202e``), and in a one-line field (``newlines=False``) so are line breaks and tabs, so that a node
    name cannot clear the screen, reorder a line or forge one."""
    unsafe = UNSAFE if newlines else re.compile(UNSAFE.pattern[:-1] + "\n\t]")
    return unsafe.sub(lambda m: json.dumps(m[0])[1:-1] if ord(m[0]) < 0x80 or m[0] in "\n\t"
                      else f"\\u{ord(m[0]):04x}", text)


def show(run: str, query: str | None = None, max_lines: int = 8, overrides: list[str] = (), out=None) -> None:
    """Print the run's query list (``query`` None) or one query (an id, or a 0-based position) to ``out``
    (default: stdout)."""
    out = out or sys.stdout
    run_dir = find_run(run, results_dir(overrides))
    config, records = load_run(run_dir)
    scores = read_scores(run_dir)
    if query is None:
        print(printable(list_queries(run, run_dir, config, records, scores)), file=out)
        return
    position, record = pick(records, query, run)
    graph = gold = None
    try:  # a clone without the data (not pulled, not rebuilt) still shows the trajectories
        graph = run_graph(config, tuple(overrides))
        gold = next((set(q["answer_ids"]) for q in queries_of_run(config, tuple(overrides), limit=False)
                     if q["id"] == record.id), None)
    except UserError as e:
        lost = "gold marks" if graph is not None else "node names and gold marks"
        print(f"(without {lost}: {e}; `make pull` or `dvc repro` brings the data)", file=out)
    print(printable(query_text(run_dir, config, position, record, scores.get(record.id), gold, graph, max_lines)),
          file=out)


# ------------------------------------------------------------------ finding the run and the query
def find_run(spec: str, results: Path) -> Path:
    """The run directory ``spec`` names (see the module docstring); ``results``: where ``<stage>@<entry>`` lives."""
    path = Path(spec)
    stage_entry = STAGE_ENTRY.fullmatch(spec)
    if not path.exists() and stage_entry:
        path = results / stage_entry[1] / stage_entry[2]
        if not path.exists():
            raise UserError(f"no run at {spec}: no {path} (run from the project root or set paths.results)")
    if (path / "records.jsonl").exists():
        return path
    if (path / "config.yaml").exists():  # a published entry results/<...>/<stage>/<entry>: its run is the one its
        # stored config identifies, under results/runs/<...>/<stage>/<entry>/
        name = run_name(yaml.safe_load((path / "config.yaml").read_text()))
        try:
            run_dir = results / "runs" / path.resolve().relative_to(results.resolve()) / name
        except ValueError:  # published outside the results root
            run_dir = path.parent.parent / "runs" / path.parent.name / path.name / name
        if (run_dir / "records.jsonl").exists():
            return run_dir
        raise UserError(f"{spec}: its run directory {run_dir} is not here (no records.jsonl); `dvc repro "
                        f"{path.resolve().parent.name}@{path.resolve().name}` regenerates it")
    raise UserError(f"no run at {spec}: expected a run directory (with records.jsonl), a published entry "
                    f"results/<stage>/<entry>/ or <stage>@<entry>")


def pick(records: list[QueryRecord], query: str, run: str) -> tuple[int, QueryRecord]:
    """(position, record) of ``#N`` (a 0-based position), else of a query id, else of a bare number as a position
    (where no query has that id: on a graph whose ids are numbers, ``1`` is the id and ``#1`` the position)."""
    position = query[1:] if query.startswith("#") else None
    if position is None:
        for i, record in enumerate(records):
            if record.id == query:
                return i, record
        position = query
    if position.isdigit() and int(position) < len(records):
        return int(position), records[int(position)]
    raise UserError(f"no query {query!r} in {run}: give a query id, or #N for the N-th query (0..{len(records) - 1}) "
                    f"(`ark show {run}` lists them)")


# ------------------------------------------------------------------ text
def run_header(run_dir: Path, config: dict) -> str:
    parts = [config["stage"], f"{config['dataset']['name']}/{config['queries']['name']}/{config['split']}"]
    if "agent" in config:
        a = config["agent"]
        parts += [f"backbone {config['backbone']['name']}", f"ablation {config['ablation']['name']}",
                  f"{count(a['n_agents'], 'agent')}, T_max {a['T_max']}, {a['aggregation']}"]
    else:
        parts.append(f"retriever {config['retriever']['name']}")
    return f"run    {run_dir}\n       {' | '.join(parts)}"


def list_queries(run: str, run_dir: Path, config: dict, records: list[QueryRecord], scores: dict[str, dict]) -> str:
    id_width = max([len(r.id) for r in records] + [2])
    lines = [run_header(run_dir, config), "",
             f"{'#':>4}  {'id':<{id_width}}  hit@1  steps  calls  query"]
    for i, r in enumerate(records):
        hit = scores.get(r.id, {}).get("hit@1")
        steps = "/".join(str(a.steps) for a in r.agents) or "-"
        calls = sum(sum(a.tool_calls.values()) for a in r.agents) if r.agents else "-"
        hit = "-" if hit is None else f"{hit:.0f}"
        lines.append(cut(f"{i:>4}  {r.id:<{id_width}}  {hit:>5}  {steps:>5}  {calls:>5}  {r.query}"))
    hits = [scores[r.id]["hit@1"] for r in records if "hit@1" in scores.get(r.id, {})]
    mean = f", hit@1 {sum(hits) / len(hits):.3f} over {len(hits)} scored" if hits else " (no scores)"
    lines += ["", f"{len(records)} queries{mean}. One query: ark show {run} <id>, or #N for the one in row N"]
    return "\n".join(lines)


def query_text(run_dir: Path, config: dict, position: int, record: QueryRecord, scores: dict | None,
               gold: set[int] | None, graph, max_lines: int) -> str:
    gold_set = gold or set()
    twins = gold_twins(graph, gold_set)
    lines = [run_header(run_dir, config),
             f"query  #{position} {record.id}",
             *textwrap.wrap(record.query, WIDTH - 7, initial_indent="       ", subsequent_indent="       "),
             "gold   " + (count(len(gold), "node") if gold is not None else "unknown"),
             "scores " + ("  ".join(f"{k} {v:.3f}" for k, v in scores.items() if k != "complete")
                          if scores else "none (no scores.jsonl)")
             + (f"   wall time {record.wall_time:.2f} s" if record.wall_time is not None else "")]
    for agent in record.agents:
        lines += ["", *agent_text(agent, config["agent"]["T_max"], gold_set, max_lines, twins)]
    lines += ["", *ranking_text(record, config, gold_set, graph, twins)]
    if twins:
        lines += ["", f"{TWIN} a gold node's twin: another node of the same name, scored a miss"]
    return "\n".join(lines)


def gold_twins(graph, gold: set[int]) -> dict[int, int]:
    """{node: the gold node it is named as} for the same-named twins of the gold (``ark.report.twins``)."""
    if graph is None or not gold:
        return {}
    from ark.report.twins import twins_of

    twins = twins_of(graph)
    return {t: g for g in sorted(gold) for t in twins.get(g, ()) if t not in gold}


def stop_reason(agent: Trajectory, t_max: int) -> str:
    """Why an agent's run ended, from its record."""
    if agent.finished:
        return "finished"
    if agent.context_full:
        return "stopped: the context window was full"
    if agent.idle_stop:
        return "stopped: replies in a row without a valid tool call (agent.idle_limit)"
    if agent.errors:
        return "stopped: a model call failed"
    if agent.steps >= t_max:
        return "stopped at T_max"
    return "not finished"


def agent_text(agent: Trajectory, t_max: int, gold: set[int], max_lines: int,
               twins: dict[int, int] | None = None) -> list[str]:
    twins = twins or {}
    facts = [f"{agent.steps}/{t_max} steps", stop_reason(agent, t_max),
             count(len(agent.answer), "answer node"), f"model {sum(agent.model_time):.2f} s",
             f"tools {sum(agent.tool_time):.3f} s"]
    if agent.prompt_tokens:
        facts.append(f"{agent.prompt_tokens}+{agent.completion_tokens} tokens")
    if agent.invalid_calls:
        facts.append(count(agent.invalid_calls, "invalid call"))
    lines = [f"── agent {agent.agent}: {', '.join(facts)}"]
    for n, (reply, calls, observations) in enumerate(steps(agent.messages), 1):
        tag = f"step {n}"
        said = " ".join((reply.get("content") or "").split())
        if said and (reply.get("tool_calls") or not calls):  # text-protocol calls are the content itself
            wrapped = textwrap.wrap(said, WIDTH - 14)
            lines += [f"{tag:<8}says: {wrapped[0]}", *(" " * 14 + w for w in wrapped[1:max_lines])]
            if len(wrapped) > max_lines:
                lines.append(f"{'':14}… {count(len(wrapped) - max_lines, 'more line')}")
            tag = ""
        for i, observation in enumerate(observations):
            if i < len(calls):
                lines.append(cut(f"{tag:<8}{call_text(calls[i])}"))
                tag = ""
            lines += observation_lines(observation, gold, max_lines, twins)
        for call in calls[len(observations):]:  # after finish: not executed
            lines.append(cut(f"{tag:<8}{call_text(call)}   (not executed)"))
            tag = ""
    lines += [f"        model call failed: {e}" for e in agent.errors]
    answer = " ".join(f"[{v}]{GOLD if v in gold else TWIN if v in twins else ''}" for v in agent.answer) or "(empty)"
    lines += textwrap.wrap(answer, WIDTH - 8, initial_indent="answer  ", subsequent_indent=" " * 8)
    return lines


def call_text(call: dict) -> str:
    """``name(key=value, ...)``, long strings cut and answer lists shown as their node ids."""
    name, arguments = call["function"]["name"], call["function"]["arguments"]
    try:
        arguments = json.loads(arguments) if isinstance(arguments, str) else arguments
    except json.JSONDecodeError:
        return f"{name}({short(arguments)})   (arguments are not JSON)"
    if not isinstance(arguments, dict):
        return f"{name}({short(json.dumps(arguments))})"
    return f"{name}({', '.join(f'{k}={value_text(v)}' for k, v in arguments.items())})"


def value_text(value) -> str:
    if isinstance(value, str):
        return json.dumps(short(value), ensure_ascii=False)
    if isinstance(value, list) and value and all(isinstance(v, dict) and "node_index" in v for v in value):
        return "[" + ", ".join(str(v["node_index"]) for v in value) + "]"
    return json.dumps(value, ensure_ascii=False)


def observation_lines(text: str, gold: set[int], max_lines: int, twins: dict[int, int] | None = None) -> list[str]:
    twins = twins or {}
    lines = text.splitlines() or ["(empty)"]
    shown = [f"{'':8}{GOLD if lists(line, gold) else TWIN if lists(line, set(twins)) else ' '} {line}"
             for line in lines[:max_lines]]
    hidden = lines[max_lines:]
    if hidden:
        gold_hidden = sum(lists(line, gold) for line in hidden)
        shown.append(f"{'':10}… {count(len(hidden), 'more line')}"
                     + (f", {gold_hidden} of them gold {GOLD}" if gold_hidden else ""))
    return [cut(line) for line in shown]


def lists(line: str, nodes: set[int]) -> bool:
    """Whether an observation line lists one of ``nodes`` (a search result or a neighbor)."""
    m = NODE_LINE.match(line)
    return m is not None and int(m[1]) in nodes


def ranking_text(record: QueryRecord, config: dict, gold: set[int], graph,
                 twins: dict[int, int] | None = None) -> list[str]:
    twins = twins or {}
    if record.agents:
        a = config["agent"]
        title = f"── fused ranking ({a['aggregation']} over {count(len(record.agents), 'agent')})"
    else:
        title = f"── ranking ({config.get('retriever', {}).get('name', 'baseline')})"
    found = [v for v in record.ranking if v in gold]
    lines = [f"{title}: {count(len(record.ranking), 'node')}, {len(found)} of {len(gold)} gold"]
    scores = record.ranking_scores or []
    top = record.ranking[:TOP]
    rows = [(f"{rank:>4}", v, f"{scores[rank - 1]:>7.2f}" if rank <= len(scores) else "")
            for rank, v in enumerate(top, 1)]
    missed = [v for v in sorted(gold) if v not in top]
    type_name = graph.type_name if graph is not None else lambda v: ""
    type_width = max([len(type_name(v)) for v in top + missed] + [1])
    id_width = max([len(str(v)) for v in top + missed] + [1])

    def named(v: int) -> str:  # name and source id: same-named nodes (an OMIM disease, its Orphanet twin) differ
        if graph is None:
            return ""
        return f"{printable(graph.name[v], newlines=False)} ({printable(graph.source_id(v), newlines=False)})"

    def node(rank: str, v: int, score: str = "", note: str = "") -> str:
        mark = GOLD if v in gold else TWIN if v in twins else " "
        if v in twins and not note:
            note = f"twin of gold [{twins[v]}]"
        return cut(f"{rank} {mark} {f'[{v}]':<{id_width + 2}}  {type_name(v):<{type_width}}  {score}"
                   f"{'  ' * bool(score)}{named(v)}"
                   + (f"   {note}" if note else ""))

    lines += [node(rank, v, score) for rank, v, score in rows] or ["     (empty)"]
    if len(record.ranking) > TOP:
        lines.append(f"     … {len(record.ranking) - TOP} more")
    if missed:
        lines += ["", f"gold not in the top {TOP} ({len(missed)}):" if len(record.ranking) > TOP
                  else f"gold not in the ranking ({len(missed)}):"]
        lines += [node("    ", v, note=f"rank {record.ranking.index(v) + 1}" if v in record.ranking
                       else first_seen(record, v)) for v in missed]
    return lines


def first_seen(record: QueryRecord, v: int) -> str:
    """Where an agent first saw node ``v`` listed in an observation: missed while shown, or never reached."""
    for agent in record.agents:
        for n, (_, _, observations) in enumerate(steps(agent.messages), 1):
            if any(lists(line, {v}) for text in observations for line in text.splitlines()):
                return f"shown to agent {agent.agent} at step {n}"
    return "never shown to an agent" if record.agents else "not in the ranking"


def count(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def prose(text: str, indent: str = "") -> str:
    """A sentence or paragraph wrapped to the terminal (``WIDTH``), later lines indented by ``indent``."""
    return "\n".join(textwrap.wrap(text, WIDTH, subsequent_indent=indent, break_long_words=False,
                                   break_on_hyphens=False)) or text  # paths and ids stay whole


def cut(line: str) -> str:
    return line if len(line) <= WIDTH else line[: WIDTH - 1] + "…"


def short(text: str) -> str:
    return text if len(text) <= ARG_CHARS else text[: ARG_CHARS - 1] + "…"
