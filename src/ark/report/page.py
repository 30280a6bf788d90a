"""A run as one self-contained web page: ``ark show <run> --html <file>``.

The page needs no network and works from ``file://``: the run's data sits in the page as JSON, and a small script
renders it with ``textContent`` only, so nothing from the graph or a model is ever read as HTML (a node named
``<script>`` shows as those characters). It shows the run's settings and metrics, its queries with their scores
(paged), and for the chosen query its agents side by side, step by step: the model's reply, each tool call and its
arguments, the observation (folded), the answer list as it grew; then the fused ranking. Gold nodes come from the
query file (never from the records, which hold none) and are marked in a column of their own, apart from what the
agent saw. Failed calls, idle stops and context-full ends are flagged. ``max_queries`` and ``observation_chars``
bound the page's size.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import json
from pathlib import Path

from ark.eval.trajectories import steps
from ark.report.show import NODE_LINE

if TYPE_CHECKING:
    from ark.agent.records import QueryRecord, Trajectory

MAX_QUERIES = 500
OBSERVATION_CHARS = 4000
RANKING = 20


def agent_data(agent: Trajectory, observation_chars: int) -> dict:
    out_steps, answer = [], []
    for reply, calls, observations in steps(agent.messages):
        shown = []
        for i, call in enumerate(calls):
            observation = observations[i] if i < len(observations) else None
            if observation is not None and call["function"]["name"] == "add_to_answer" \
                    and not observation.startswith("Error"):
                answer += [v for v in answer_ids(call["function"]["arguments"]) if v not in answer]
            shown.append({"name": call["function"]["name"], "arguments": arguments_text(call["function"]["arguments"]),
                          "observation": None if observation is None else cut(observation, observation_chars),
                          "error": observation is not None and observation.startswith("Error")})
        out_steps.append({"says": reply.get("content") or "" if reply.get("tool_calls") or not calls else "",
                          "calls": shown, "answer": list(answer)})
    flags = [flag for flag, on in (("context full", agent.context_full), ("idle stop", agent.idle_stop),
                                   ("not finished", not agent.finished)) if on]
    return {"agent": agent.agent, "steps": out_steps, "answer": agent.answer, "flags": flags,
            "errors": agent.errors, "invalid_calls": agent.invalid_calls, "tool_failures": agent.tool_failures,
            "model_seconds": round(sum(agent.model_time), 3), "tokens": [agent.prompt_tokens, agent.completion_tokens]}


def answer_ids(arguments) -> list[int]:
    try:
        args = json.loads(arguments) if isinstance(arguments, str) else arguments
        return [int(n["node_index"]) for n in args["answer_nodes"]]
    except (ValueError, TypeError, KeyError):
        return []


def arguments_text(arguments) -> str:
    """``key: value`` lines (a string value without its quotes); arguments that are not a JSON object as sent."""
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except json.JSONDecodeError:
            return arguments
    if not isinstance(arguments, dict):
        return json.dumps(arguments, ensure_ascii=False)
    return "\n".join(f"{k}: {v if isinstance(v, str) else json.dumps(v, ensure_ascii=False)}"
                     for k, v in arguments.items())


def cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit] + f"\n… ({len(text) - limit:,} more characters)"


def page_data(run_name: str, config: dict, records: list[QueryRecord], scores: dict[str, dict],
              gold: dict[str, list[int]] | None, graph, metrics: dict | None = None, max_queries: int = MAX_QUERIES,
              observation_chars: int = OBSERVATION_CHARS) -> dict:
    """What the page shows, as plain data (``gold``: query id -> gold ids, None where the query set is not here)."""
    shown = records[:max_queries]
    nodes: set[int] = set()
    queries = []
    for r in shown:
        agents = [agent_data(a, observation_chars) for a in r.agents]
        query_gold = gold.get(r.id) if gold is not None else None
        nodes.update(r.ranking[:RANKING], query_gold or (), *(a.answer for a in r.agents))
        queries.append({"id": r.id, "query": r.query, "scores": scores.get(r.id), "gold": query_gold,
                        "ranking": r.ranking[:RANKING], "ranking_scores": (r.ranking_scores or [])[:RANKING],
                        "ranked": len(r.ranking), "agents": agents})
    names = {}
    if graph is not None:
        names = {str(v): [graph.type_name(v), graph.name[v], graph.source_id(v)] for v in sorted(nodes)
                 if 0 <= v < graph.num_nodes}
    summary = {k: config[k] for k in ("stage", "split") if k in config}
    for group in ("dataset", "queries", "backbone", "ablation", "retriever", "prompt"):
        if isinstance(config.get(group), dict):
            summary[group] = config[group].get("name")
    if isinstance(config.get("agent"), dict):
        summary.update({f"agent.{k}": config["agent"][k] for k in ("n_agents", "T_max", "aggregation")
                        if k in config["agent"]})
    return {"run": run_name, "settings": summary, "metrics": metrics or {}, "queries": queries,
            "total_queries": len(records), "names": names, "gold_known": gold is not None,
            "t_max": (config.get("agent") or {}).get("T_max")}


def script_json(data: dict) -> str:
    """JSON that cannot end its <script> element or open another: every <, > and & as a \\u escape."""
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def html(data: dict) -> str:
    return TEMPLATE.replace("/*DATA*/", script_json(data)).replace("/*NODE_LINE*/", json.dumps(NODE_LINE.pattern))


def write_page(path: str | Path, data: dict) -> Path:
    from ark.io import write_text_atomic

    path = Path(path)
    write_text_atomic(path, html(data))
    return path


TEMPLATE = r"""<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src data:">
<title>ARK run</title>
<style>
body{font:14px/1.4 system-ui,sans-serif;margin:0;color:#1d1d1f;background:#fafafa}
header{padding:12px 20px;background:#20324a;color:#fff}
header h1{font-size:17px;margin:0 0 4px}
header .settings span{display:inline-block;margin-right:14px;opacity:.9}
main{display:grid;grid-template-columns:minmax(300px,28%) 1fr;gap:0;height:calc(100vh - 70px)}
#list{overflow:auto;border-right:1px solid #ddd;background:#fff}
#list table{border-collapse:collapse;width:100%;table-layout:fixed}
#list td,#list th{padding:4px 6px;border-bottom:1px solid #eee;text-align:left;vertical-align:top;overflow-wrap:anywhere}
#list th:nth-child(1){width:2.6em} #list th:nth-child(2){width:34%} #list th:nth-child(3){width:3.6em}
#list .clip{display:-webkit-box;-webkit-line-clamp:2;-webkit-box-orient:vertical;overflow:hidden;color:#444}
#list tr.q{cursor:pointer} #list tr.q:hover{background:#eef4ff} #list tr.sel{background:#dbe8ff}
#pager{padding:6px;display:flex;gap:6px;align-items:center}
#detail{overflow:auto;padding:12px 18px}
.agents{display:grid;gap:10px;align-items:start}
.agent{background:#fff;border:1px solid #ddd;border-radius:6px;padding:8px;min-width:0}
.agent h3{font-size:14px;margin:0 0 6px}
.step{border-top:1px solid #eee;padding:6px 0}
.step .n{font-weight:600;color:#555}
.says{white-space:pre-wrap;color:#333;background:#f6f6f6;padding:4px;border-radius:4px;margin:3px 0}
.call{font-family:ui-monospace,monospace;font-size:12px;margin:3px 0}
.call .name{font-weight:600;color:#0b5394}
pre{white-space:pre-wrap;word-break:break-word;margin:2px 0;font-size:12px}
details>summary{cursor:pointer;color:#555}
.err{color:#b00020;font-weight:600}
.flag{display:inline-block;background:#ffe4b5;color:#6b4000;border-radius:3px;padding:0 5px;margin-left:4px;font-size:12px}
.answer{font-size:12px;color:#333}
.gold{color:#1b7f3b;font-weight:700}
.goldcol{width:1.4em;text-align:center}
.goldnote{font-size:12px;color:#1b7f3b;border-left:3px solid #1b7f3b;padding-left:6px;margin:6px 0}
.obsline.gold{background:#e7f6ec}
table.rank td{padding:2px 8px;border-bottom:1px solid #eee}
</style></head>
<body>
<header><h1 id="title"></h1><div class="settings" id="settings"></div></header>
<main><section id="list"><div id="pager"></div><table><thead><tr><th>#</th><th>id</th><th>hit@1</th><th>query</th></tr></thead><tbody id="rows"></tbody></table></section>
<section id="detail"></section></main>
<script type="application/json" id="data">/*DATA*/</script>
<script>
"use strict";
const D = JSON.parse(document.getElementById("data").textContent);
const NODE_LINE = new RegExp("^" + /*NODE_LINE*/);
const PAGE = 100;
function el(tag, attrs, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  for (const k of kids) e.append(k instanceof Node ? k : document.createTextNode(String(k)));
  return e;
}
function nodeLabel(v) {
  const n = D.names[String(v)];
  return n ? `[${v}] ${n[0]} | ${n[1]}` + (n[2] ? ` (${n[2]})` : "") : `[${v}]`;
}
function fmt(x) { return typeof x === "number" ? (Number.isInteger(x) ? String(x) : x.toFixed(3)) : String(x); }
document.getElementById("title").textContent = "ARK run " + D.run;
const st = document.getElementById("settings");
for (const [k, v] of Object.entries(D.settings)) st.append(el("span", {}, `${k}: ${v}`));
for (const [k, v] of Object.entries(D.metrics)) st.append(el("span", {}, `${k} ${fmt(v)}`));
if (D.total_queries > D.queries.length) st.append(el("span", {}, `first ${D.queries.length} of ${D.total_queries} queries`));
if (!D.gold_known) st.append(el("span", {}, "gold unknown (the query set is not here)"));
let page = 0, selected = -1;
function drawList() {
  const rows = document.getElementById("rows"); rows.replaceChildren();
  const start = page * PAGE;
  D.queries.slice(start, start + PAGE).forEach((q, j) => {
    const i = start + j;
    const hit = q.scores && q.scores["hit@1"] !== undefined ? fmt(q.scores["hit@1"]) : "-";
    const tr = el("tr", {class: "q" + (i === selected ? " sel" : ""), "data-i": i}, el("td", {}, i), el("td", {}, q.id), el("td", {}, hit), el("td", {}, el("div", {class: "clip"}, q.query.length > 160 ? q.query.slice(0, 159) + "…" : q.query)));
    tr.addEventListener("click", () => { selected = i; drawList(); drawQuery(i); location.hash = "q" + i; });
    rows.append(tr);
  });
  const pager = document.getElementById("pager"); pager.replaceChildren();
  const pages = Math.max(1, Math.ceil(D.queries.length / PAGE));
  const prev = el("button", {}, "‹"), next = el("button", {}, "›");
  prev.disabled = page === 0; next.disabled = page >= pages - 1;
  prev.onclick = () => { page--; drawList(); }; next.onclick = () => { page++; drawList(); };
  pager.append(prev, el("span", {}, `page ${page + 1} of ${pages} · ${D.queries.length} queries`), next);
}
function observation(text, gold) {
  const box = el("div", {});
  for (const line of text.split("\n")) {
    const m = NODE_LINE.exec(line);
    const isGold = m && gold.has(Number(m[1]));
    box.append(el("pre", {class: "obsline" + (isGold ? " gold" : "")}, (isGold ? "✓ " : "") + line));
  }
  return box;
}
function drawAgent(a, gold) {
  const head = el("h3", {}, `agent ${a.agent}: ${a.steps.length} steps` + (D.t_max ? ` of ${D.t_max}` : ""));
  for (const f of a.flags) head.append(el("span", {class: "flag"}, f));
  if (a.invalid_calls) head.append(el("span", {class: "flag"}, `${a.invalid_calls} invalid calls`));
  if (a.tool_failures) head.append(el("span", {class: "flag"}, `${a.tool_failures} tool failures`));
  const box = el("div", {class: "agent"}, head);
  a.steps.forEach((s, n) => {
    const step = el("div", {class: "step"}, el("span", {class: "n"}, `step ${n + 1}`));
    if (s.says) step.append(el("div", {class: "says"}, s.says));
    for (const c of s.calls) {
      const call = el("div", {class: "call"}, el("span", {class: "name"}, c.name), el("pre", {}, c.arguments));
      if (c.observation === null) call.append(el("div", {}, "(not executed)"));
      else {
        const d = el("details", {}, el("summary", {class: c.error ? "err" : ""}, c.error ? "error: " + c.observation.split("\n")[0] : `observation (${c.observation.split("\n").length} lines)`));
        d.addEventListener("toggle", () => { if (d.open && d.children.length === 1) d.append(observation(c.observation, gold)); });
        call.append(d);
      }
      step.append(call);
    }
    step.append(el("div", {class: "answer"}, "answer so far: " + (s.answer.map(v => `[${v}]` + (gold.has(v) ? "✓" : "")).join(" ") || "(empty)")));
    box.append(step);
  });
  for (const e of a.errors) box.append(el("div", {class: "err"}, "model call failed: " + e));
  return box;
}
function drawQuery(i) {
  const q = D.queries[i], gold = new Set(q.gold || []);
  const detail = document.getElementById("detail"); detail.replaceChildren();
  detail.append(el("h2", {}, `#${i} ${q.id}`), el("p", {}, q.query));
  if (q.scores) detail.append(el("p", {}, Object.entries(q.scores).filter(([k]) => k !== "complete").map(([k, v]) => `${k} ${fmt(v)}`).join(" · ")));
  detail.append(el("div", {class: "goldnote"}, q.gold ? `gold (from the query file; never shown to an agent): ${q.gold.map(nodeLabel).join("; ")}` : "gold unknown"));
  if (q.agents.length) {
    const grid = el("div", {class: "agents"}); grid.style.gridTemplateColumns = `repeat(${q.agents.length}, minmax(260px, 1fr))`;
    for (const a of q.agents) grid.append(drawAgent(a, gold));
    detail.append(el("h3", {}, "agents"), grid);
  }
  const t = el("table", {class: "rank"});
  q.ranking.forEach((v, r) => t.append(el("tr", {}, el("td", {}, r + 1), el("td", {class: "goldcol" + (gold.has(v) ? " gold" : "")}, gold.has(v) ? "✓" : ""), el("td", {}, nodeLabel(v)), el("td", {}, q.ranking_scores[r] !== undefined ? q.ranking_scores[r].toFixed(2) : ""))));
  detail.append(el("h3", {}, q.agents.length ? `fused ranking (top ${q.ranking.length} of ${q.ranked})` : `ranking (top ${q.ranking.length} of ${q.ranked})`), t);
}
const start = /^#q(\d+)$/.exec(location.hash);
selected = start && Number(start[1]) < D.queries.length ? Number(start[1]) : (D.queries.length ? 0 : -1);
page = selected > 0 ? Math.floor(selected / PAGE) : 0;
drawList();
if (selected >= 0) drawQuery(selected);
</script></body></html>
"""


def load_for_page(run_dir: Path, overrides=()) -> tuple:
    """(config, records, scores, gold, graph, metrics) of a run directory; the graph and gold where this checkout
    has the run's data (``overrides``: where it keeps it), else None."""
    from ark.errors import UserError
    from ark.report.runs import queries_of_run, run_graph
    from ark.runs.store import load_run, read_scores

    config, records = load_run(run_dir)
    graph = gold = None
    try:
        graph = run_graph(config, tuple(overrides))
        gold = {q["id"]: q["answer_ids"] for q in queries_of_run(config, tuple(overrides), limit=False)}
    except UserError:
        pass
    metrics_file = Path(run_dir) / "metrics.json"
    metrics = json.loads(metrics_file.read_text()) if metrics_file.is_file() else None
    return config, records, read_scores(run_dir), gold, graph, metrics


def run_page(run: str, out: str | Path, overrides: list[str] = (), max_queries: int = MAX_QUERIES) -> Path:
    """Write the page of ``run`` (as ``ark show`` names runs) to ``out``."""
    from ark.build import results_dir
    from ark.report.show import find_run

    run_dir = find_run(run, results_dir(overrides))
    config, records, scores, gold, graph, metrics = load_for_page(run_dir, overrides)
    return write_page(out, page_data(run_dir.name, config, records, scores, gold, graph, metrics, max_queries))
