"""What an ARK run on STaRK takes with a hosted backbone: calls, tokens, dollars and hours, per query and for the
test splits.

    LITELLM_LOCAL_MODEL_COST_MAP=True .venv/bin/python benchmarks/stark_cost.py RUN [RUN ...] \
        [--model gpt-4.1] [--agents 3] [--steps 20] [--concurrency 8] [--latency 1.5 3] [--rpm N] [--tpm N] \
        [--cpu-ms 10]

RUN is a run directory (holding records.jsonl and config.yaml) or a records.jsonl file. For each run it reads
every agent trajectory of the complete queries and takes per-step [prompt, completion] tokens:
- as the backbone reported them, when the run's backbone model is the priced model (a hosted run);
- otherwise recounted from the stored messages with ``litellm.token_counter(model)``: step k's prompt = the
  messages before the k-th assistant reply plus the tool schemas (rebuilt with ``ark.tools.Toolbox.schemas`` from
  the graph's schema in data/graph/<dataset>/; none for ``tool_mode: text``, whose system prompt holds them),
  its completion = that reply's text and tool calls.
Prices come from litellm's offline price map (LITELLM_LOCAL_MODEL_COST_MAP=True). Two estimates per query:
- observed: the mean agent of the run (its steps, as the records hold them) times ``--agents``;
- at N steps (``--steps``, default the paper's T_max 20): every agent takes N steps; step k's prompt =
  p1 + (k - 1) * d, where p1 is the mean first-step prompt and d the mean growth of the prompt per step in the
  records, and every reply costs the mean completion per step. An upper bound for a run whose agents use their
  whole budget (the conversation cap only lowers it).
Dollars are given without and with prompt caching (OpenAI caches a repeated prefix of >= 1024 tokens: step k
re-sends all of step k-1's prompt and reply, billed at the cached input price).
Hours (``hours``): ``--concurrency`` queries in flight (``eval.concurrency``), each running its agents at once, so
``concurrency x agents`` calls are in flight; an agent's step takes the model's latency (``--latency``, a range in
seconds; a hosted run of the priced model uses its own measured mean) plus the run's mean tool time per step. A
query takes its steps one after another, so a split takes queries x steps x step time / concurrency, unless a limit
allows fewer steps a minute: the provider's requests or tokens per minute (``--rpm``, ``--tpm``: your
organisation's limits), or the evaluation process itself, one event loop spending ``--cpu-ms`` of CPU a step. The
requests and tokens per minute of the run at that pace are printed beside the hours.
"""
from __future__ import annotations

import argparse
import glob
import json
import math
import os
from importlib.metadata import version
from pathlib import Path
from types import SimpleNamespace

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import litellm  # noqa: E402
from omegaconf import OmegaConf  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
STARK_TEST = {"AMAZON": 1642, "MAG": 2665, "PRIME": 2801}  # test queries (notes/stark-format.md §3.2)
CACHE_MIN_PREFIX = 1024  # OpenAI's prompt caching applies to prefixes of at least this many tokens


def tool_schemas(config) -> list[dict] | None:
    """The tool schemas the run's agents were sent, from the graph's schema; None if the graph is not here."""
    from ark.tools.toolbox import Toolbox, ToolConfig

    graph_dir = ROOT / "data" / "graph" / str(config.dataset.name)
    if not (graph_dir / "schema.json").exists():
        return None
    schema = json.loads((graph_dir / "schema.json").read_text())
    summary = json.loads((graph_dir / "summary.json").read_text())
    graph = SimpleNamespace(num_nodes=summary["num_nodes"], node_type_names=schema["node_types"],
                            relation_names=schema["relations"])
    relevance = SimpleNamespace(name=str(config.retriever.name))  # the schemas name the relevance function only
    return Toolbox(graph, relevance, ToolConfig.from_cfg(config.ablation, config.agent)).schemas()


def recount(messages: list[dict], model: str, tools: list[dict] | None) -> list[list[int]]:
    """[prompt, completion] tokens per assistant reply of one trajectory."""
    steps = []
    for i, m in enumerate(messages):
        if m["role"] != "assistant":
            continue
        prompt = litellm.token_counter(model=model, messages=messages[:i], tools=tools)
        reply = (m.get("content") or "") + "".join(
            c["function"]["name"] + (c["function"].get("arguments") or "") for c in m.get("tool_calls") or [])
        steps.append([prompt, litellm.token_counter(model=model, text=reply) if reply else 0])
    return steps


def cached_tokens(tokens: list[list[int]]) -> int:
    """Prompt tokens of a trajectory that repeat the previous request (its prompt + reply) and may be cached."""
    total = 0
    for (p0, c0), (p1, _) in zip(tokens, tokens[1:]):
        prefix = min(p0 + c0, p1)
        total += prefix if prefix >= CACHE_MIN_PREFIX else 0
    return total


def dollars(prompt: float, completion: float, cached: float, price: dict) -> tuple[float, float]:
    """(without caching, with caching)."""
    full = prompt * price["input_cost_per_token"] + completion * price["output_cost_per_token"]
    cache_price = price.get("cache_read_input_token_cost") or price["input_cost_per_token"]
    return full, full - cached * (price["input_cost_per_token"] - cache_price)


def hours(queries: int, steps: float, tokens_per_query: float, agents: int, concurrency: int, step_seconds: float,
          rpm: float | None = None, tpm: float | None = None,
          cpu_ms: float | None = None) -> tuple[float, float, float]:
    """(hours, requests per minute, tokens per minute) for ``queries`` queries of ``agents`` agents taking ``steps``
    steps each, ``concurrency`` queries in flight, stretched where a limit allows fewer calls than that concurrency
    asks for: the provider's (``rpm``, ``tpm``) or the evaluation process's own, whose one event loop spends
    ``cpu_ms`` of CPU on each step. The rates are those of the run at that pace."""
    calls_per_query = agents * steps
    asked_rpm = concurrency * agents * 60 / step_seconds
    asked_tpm = asked_rpm * tokens_per_query / calls_per_query
    allowed_rpm = [limit for limit in (rpm, 60_000 / cpu_ms if cpu_ms else None) if limit]
    slowdown = max([1.0, asked_tpm / tpm if tpm else 1.0] + [asked_rpm / limit for limit in allowed_rpm])
    return queries * steps * step_seconds / concurrency / 3600 * slowdown, asked_rpm / slowdown, asked_tpm / slowdown


def read_run(path: Path, model: str) -> dict:
    records_file = path if path.name == "records.jsonl" else path / "records.jsonl"
    config = OmegaConf.load(records_file.parent / "config.yaml")
    backbone_model = config.backbone.get("model")
    reported = backbone_model == model
    text_protocol = config.backbone.get("tool_mode") == "text"  # tools rendered inside the system prompt
    tools = None if reported or text_protocol else tool_schemas(config)
    trajectories, queries, incomplete, tool_time, model_time = [], 0, 0, [], []
    for line in open(records_file, encoding="utf-8"):
        record = json.loads(line)
        if not record.get("agents"):
            continue
        if any(a["errors"] for a in record["agents"]):
            incomplete += 1
            continue
        queries += 1
        for a in record["agents"]:
            tokens = a["tokens"] if reported else recount(a["messages"], model, tools)
            trajectories.append({"tokens": tokens, "cost": a.get("cost", 0.0)})
            tool_time += a.get("tool_time") or []
            model_time += a.get("model_time") or []
    if not trajectories:
        raise SystemExit(f"{records_file}: no agent trajectories (a baseline run?)")
    schemas = "in the system prompt" if text_protocol else "included" if tools else "NOT included (no graph here)"
    source = (f"reported by the backbone ({model})" if reported else
              f"recounted with litellm.token_counter({model!r}) from the stored messages (the run's backbone: "
              f"{config.backbone.name}); tool schemas {schemas}")
    return {"file": records_file, "config": config, "queries": queries, "incomplete": incomplete,
            "trajectories": trajectories, "source": source,
            "tool_seconds": sum(tool_time) / len(tool_time) if tool_time else 0.0,
            "model_seconds": sum(model_time) / len(model_time) if reported and model_time else None}


def estimate(run: dict, price: dict, agents: int, steps_list: list[int]) -> tuple[list[tuple], dict]:
    """Rows (label, steps per agent, prompt, completion, $ without caching, $ with caching) per query, and the
    per-agent figures they rest on."""
    trajs = [t["tokens"] for t in run["trajectories"] if t["tokens"]]
    n = len(trajs)
    prompt = sum(p for t in trajs for p, _ in t) / n
    completion = sum(c for t in trajs for _, c in t) / n
    cached = sum(cached_tokens(t) for t in trajs) / n
    steps = sum(len(t) for t in trajs) / n
    rows = [("observed", steps, agents * prompt, agents * completion,
             *(agents * d for d in dollars(prompt, completion, cached, price)))]
    p1 = sum(t[0][0] for t in trajs) / n
    growth = [b[0] - a[0] for t in trajs for a, b in zip(t, t[1:])]
    d = sum(growth) / len(growth) if growth else 0.0
    c = sum(c for t in trajs for _, c in t) / sum(len(t) for t in trajs)
    for T in steps_list:
        step_prompts = [p1 + k * d for k in range(T)]
        p_total, c_total = sum(step_prompts), T * c
        cached_T = sum(min(step_prompts[k - 1] + c, step_prompts[k]) for k in range(1, T)
                       if step_prompts[k - 1] + c >= CACHE_MIN_PREFIX)
        rows.append((f"{T} steps", T, agents * p_total, agents * c_total,
                     *(agents * x for x in dollars(p_total, c_total, cached_T, price))))
    return rows, {"p1": p1, "growth": d, "completion_per_step": c, "steps": steps}


def print_splits(run: dict, rows: list[tuple], args) -> None:
    """Calls, tokens, dollars and hours of each test split and all three, per estimate row and concurrency."""
    latencies = [run["model_seconds"]] if run["model_seconds"] else [min(args.latency), max(args.latency)]
    step_seconds = [latency + run["tool_seconds"] for latency in latencies]
    limits = ", ".join(f"{k} {v:,.0f}" for k, v in (("RPM", args.rpm), ("TPM", args.tpm)) if v) or "no provider limit"
    limits += f"; one process at {args.cpu_ms:g} ms of CPU a step: at most {1000 / args.cpu_ms:,.0f} steps/s"
    seconds = "-".join(f"{s:.2f}" for s in sorted(set(step_seconds)))
    latency = (f"{latencies[0]:.2f} s measured" if run["model_seconds"] else
               "-".join(f"{s:g}" for s in sorted(set(latencies))) + " s assumed")
    print(f"  the test splits, {args.agents} agents per query: {seconds} s per step ({latency} per model call + "
          f"{run['tool_seconds'] * 1000:.1f} ms of tools as measured), {limits}:")
    print(f"    {'estimate':<10} {'split':<7} {'queries':>7} {'calls':>9} {'tokens (M)':>10} {'$':>8} {'$ cached':>9}"
          f" {'in flight':>9} {'hours':>11} {'RPM':>7} {'TPM (M)':>7}")
    splits = {**STARK_TEST, "all": sum(STARK_TEST.values())}  # all: the three one after another
    for label, steps, p, c, usd, usd_cached in rows:
        for split, n in splits.items():
            for concurrency in args.concurrency:
                spans = [hours(n, steps, p + c, args.agents, concurrency, t, args.rpm, args.tpm, args.cpu_ms)
                         for t in step_seconds]
                span = "-".join(f"{h:.2f}" for h in sorted({round(h, 2) for h, _, _ in spans}))
                rpm, tpm = max(r for _, r, _ in spans), max(t for _, _, t in spans)
                print(f"    {label:<10} {split:<7} {n:>7,} {n * args.agents * steps:>9,.0f} {n * (p + c) / 1e6:>10,.1f}"
                      f" {f'${usd * n:,.0f}':>8} {f'${usd_cached * n:,.0f}':>9} {concurrency * args.agents:>9,}"
                      f" {span:>11} {rpm:>7,.0f} {tpm / 1e6:>7.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("runs", nargs="+", help="run directories or records.jsonl files (globs allowed)")
    parser.add_argument("--model", default="gpt-4.1", help="litellm model whose tokenizer and price apply")
    parser.add_argument("--agents", type=int, default=3, help="agents per query (paper: 3)")
    parser.add_argument("--steps", type=int, nargs="*", default=[20], help="steps per agent for the bound rows")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[8],
                        help="queries in flight (eval.concurrency; default 8)")
    parser.add_argument("--latency", type=float, nargs="+", default=[1.5, 3.0],
                        help="seconds per model call, one value or a range (an assumption: none was measured here)")
    parser.add_argument("--rpm", type=float, help="the provider's requests-per-minute limit (default: none)")
    parser.add_argument("--tpm", type=float, help="the provider's tokens-per-minute limit (default: none)")
    parser.add_argument("--cpu-ms", type=float, default=10.0,
                        help="CPU per step on the evaluation's one event loop (benchmarks/agent_overhead.py: ~10 ms)")
    args = parser.parse_args()
    price = litellm.model_cost[args.model]
    paths = [Path(p) for pattern in args.runs for p in sorted(glob.glob(pattern)) or [pattern]]
    print(f"prices ({args.model}, litellm {version('litellm')} offline price map):"
          f" input ${price['input_cost_per_token'] * 1e6:.2f}/M, cached input "
          f"${(price.get('cache_read_input_token_cost') or price['input_cost_per_token']) * 1e6:.2f}/M, "
          f"output ${price['output_cost_per_token'] * 1e6:.2f}/M tokens")
    for path in paths:
        run = read_run(path, args.model)
        cfg = run["config"]
        rows, fit = estimate(run, price, args.agents, args.steps)
        print(f"\n{run['file'].parent}")
        print(f"  {run['queries']} complete queries ({run['incomplete']} incomplete left out), "
              f"{len(run['trajectories'])} agent trajectories; run: {cfg.dataset.name}/{cfg.queries.name}/{cfg.split}, "
              f"backbone {cfg.backbone.name}, {cfg.agent.n_agents} agent(s), T_max {cfg.agent.T_max}")
        print(f"  tokens: {run['source']}")
        print(f"  per agent: {fit['steps']:.2f} steps, first prompt {fit['p1']:,.0f} tokens, prompt grows "
              f"{fit['growth']:,.0f} tokens/step, {fit['completion_per_step']:,.0f} completion tokens/step")
        if run["source"].startswith("reported"):
            recorded = sum(t["cost"] for t in run["trajectories"]) / run["queries"]
            print(f"  cost the run recorded (litellm, per query, its {cfg.agent.n_agents} agent(s)): ${recorded:.4f}")
        print(f"  per query, {args.agents} agents:")
        header = (f"    {'estimate':<10} {'steps/agent':>11} {'prompt tok':>11} {'compl. tok':>10} {'$':>8} "
                  f"{'$ cached':>9}")
        splits = "".join(f" {f'{s} test':>13} {'(cached)':>10}" for s in STARK_TEST)
        print(header + "   |" + splits)
        for label, steps, p, c, usd, usd_cached in rows:
            extrapolated = "".join(f" {f'${usd * n:,.0f}':>13} {f'${usd_cached * n:,.0f}':>10}"
                                   for n in STARK_TEST.values())
            print(f"    {label:<10} {steps:>11.2f} {p:>11,.0f} {c:>10,.0f} {usd:>8.4f} {usd_cached:>9.4f}   |"
                  + extrapolated)
        tenth = ", ".join(f"{s} {math.ceil(0.1 * n)}" for s, n in STARK_TEST.items())
        print(f"  test-0.1 (a seeded 10%: {tenth} queries): a tenth of the figures above")
        print_splits(run, rows, args)
    print("\nAssumptions: per-query tokens of the runs above stand in for a STaRK query (same prompt, tools and "
          "observation format; STaRK's node texts, hence observations, differ in length); steps per agent as the "
          "records hold them ('observed') or every agent using N steps with the prompt growing linearly; no "
          "retries billed; litellm counts GPT-4.1 with cl100k_base (the model uses o200k_base); hours: every call "
          "takes the given latency whatever its prompt length, and a provider limit slows every call alike.")


if __name__ == "__main__":
    main()
